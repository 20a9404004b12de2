/* The HTTP/1.1 transport of ek_http.c (internal). */
#ifndef EK_HTTP_H
#define EK_HTTP_H

#include <stddef.h>
#include <sys/uio.h>

#include "ek_internal.h"

typedef struct ek_conn {
    int fd;     /* -1 when not connected */
    int reused; /* has carried a request already */
    size_t start, end; /* unread bytes of buf */
    char buf[16384];   /* bounds an answer's head */
} ek_conn;

typedef struct ek_response {
    int status;
    int close;     /* Connection: close (or no Content-Length) */
    int tensors;   /* Content-Type application/x-edgekit-tensors */
    size_t length; /* Content-Length */
} ek_response;

void ek__conn_close(ek_conn *c);
ek_status ek__connect(ek_conn *c, const char *host, int port, int timeout_ms, char *err, size_t errlen);
/* Sends every byte of iov[0..n) (the array is consumed). */
ek_status ek__send(ek_conn *c, struct iovec *iov, int n, char *err, size_t errlen);
/* Reads the status line and headers; *got: how many bytes of the answer arrived (0: none at all). */
ek_status ek__read_head(ek_conn *c, ek_response *r, size_t *got, char *err, size_t errlen);
/* Reads n body bytes into dst. */
ek_status ek__read_body(ek_conn *c, char *dst, size_t n, char *err, size_t errlen);

#endif
