/* The HTTP/1.1 transport: one TCP connection, requests as one scatter write, Content-Length answers. */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "ek_http.h"

#ifndef MSG_NOSIGNAL
#define MSG_NOSIGNAL 0 /* where it is missing, SO_NOSIGPIPE is set on the socket instead */
#endif
#define IOV_CHUNK 64

void ek__conn_close(ek_conn *c) {
    if (c->fd >= 0) close(c->fd);
    c->fd = -1;
    c->reused = 0;
    c->start = c->end = 0;
}

static void set_timeouts(int fd, int timeout_ms) {
    struct timeval tv;
    tv.tv_sec = timeout_ms / 1000;
    tv.tv_usec = (timeout_ms % 1000) * 1000;
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

static const char *errtext(int e, char *buf, size_t n) {
    if (strerror_r(e, buf, n) != 0) snprintf(buf, n, "error %d", e);
    return buf;
}

/* A connect() a signal interrupted: wait for it to finish. 0, or -1 with errno. */
static int finish_connect(int fd, int timeout_ms) {
    struct pollfd p;
    int rc, e = 0;
    socklen_t len = sizeof e;
    p.fd = fd;
    p.events = POLLOUT;
    while ((rc = poll(&p, 1, timeout_ms > 0 ? timeout_ms : -1)) < 0 && errno == EINTR) {
    }
    if (rc == 0) errno = ETIMEDOUT;
    if (rc <= 0) return -1;
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &len) != 0) return -1;
    errno = e;
    return e ? -1 : 0;
}

ek_status ek__connect(ek_conn *c, const char *host, int port, int timeout_ms, char *err, size_t errlen) {
    struct addrinfo hints, *res = NULL, *ai;
    char service[16];
    int rc, fd = -1, saved = 0, one = 1;
    ek_status st = EK_ERR_CONNECT;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    sprintf(service, "%d", port);
    rc = getaddrinfo(host, service, &hints, &res);
    if (rc != 0) {
        snprintf(err, errlen, "cannot resolve %s: %s", host, gai_strerror(rc));
        return EK_ERR_RESOLVE;
    }
    for (ai = res; ai; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
        if (fd < 0) {
            saved = errno;
            continue;
        }
        if (timeout_ms > 0) set_timeouts(fd, timeout_ms); /* SO_SNDTIMEO bounds connect() too (Linux) */
#ifdef SO_NOSIGPIPE
        setsockopt(fd, SOL_SOCKET, SO_NOSIGPIPE, &one, sizeof one);
#endif
        rc = connect(fd, ai->ai_addr, ai->ai_addrlen);
        if (rc != 0 && errno == EINTR) rc = finish_connect(fd, timeout_ms); /* it goes on in the background */
        if (rc == 0) break;
        saved = errno;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0) {
        if (saved == EINPROGRESS || saved == EAGAIN || saved == EWOULDBLOCK || saved == ETIMEDOUT) st = EK_ERR_TIMEOUT;
        char text[128];
        snprintf(err, errlen, "cannot connect to %s:%d: %s", host, port, errtext(saved, text, sizeof text));
        return st;
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    c->fd = fd;
    c->reused = 0;
    c->start = c->end = 0;
    return EK_OK;
}

static ek_status io_error(int e, const char *what, char *err, size_t errlen) {
    char text[128];
    snprintf(err, errlen, "%s: %s", what, e ? errtext(e, text, sizeof text) : "the agent closed the connection");
    if (e == EAGAIN || e == EWOULDBLOCK) {
        snprintf(err, errlen, "%s: timed out", what);
        return EK_ERR_TIMEOUT;
    }
    if (e == 0 || e == EPIPE || e == ECONNRESET || e == ECONNABORTED) return EK_ERR_CLOSED;
    return EK_ERR_IO;
}

ek_status ek__send(ek_conn *c, struct iovec *iov, int n, char *err, size_t errlen) {
    while (n > 0) {
        struct msghdr msg;
        ssize_t sent;
        memset(&msg, 0, sizeof msg);
        msg.msg_iov = iov;
        msg.msg_iovlen = (size_t)(n < IOV_CHUNK ? n : IOV_CHUNK);
        sent = sendmsg(c->fd, &msg, MSG_NOSIGNAL);
        if (sent < 0) {
            if (errno == EINTR) continue;
            return io_error(errno, "sending the request", err, errlen);
        }
        while (n > 0 && (size_t)sent >= iov->iov_len) {
            sent -= (ssize_t)iov->iov_len;
            iov++;
            n--;
        }
        if (n > 0) {
            iov->iov_base = (char *)iov->iov_base + sent;
            iov->iov_len -= (size_t)sent;
        }
    }
    return EK_OK;
}

static ssize_t recv_some(ek_conn *c, void *dst, size_t n) {
    ssize_t got;
    while ((got = recv(c->fd, dst, n, 0)) < 0 && errno == EINTR) {
    }
    return got;
}

static int ieq_prefix(const char *line, size_t n, const char *name) {
    size_t i, k = strlen(name);
    if (n < k) return 0;
    for (i = 0; i < k; i++) {
        char a = line[i];
        if (a >= 'A' && a <= 'Z') a = (char)(a - 'A' + 'a');
        if (a != name[i]) return 0;
    }
    return 1;
}

static const char *value_of(const char *line, size_t n, size_t klen, size_t *vlen) {
    const char *v = line + klen, *e = line + n;
    while (v < e && (*v == ' ' || *v == '\t')) v++;
    while (e > v && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r')) e--;
    *vlen = (size_t)(e - v);
    return v;
}

static ek_status parse_head(const char *h, size_t n, ek_response *r, char *err, size_t errlen) {
    const char *p = h, *end = h + n, *nl;
    int have_length = 0;
    memset(r, 0, sizeof *r);
    nl = memchr(p, '\n', (size_t)(end - p));
    if (!nl || nl - p < 12 || memcmp(p, "HTTP/1.", 7) != 0 || p[8] != ' ' || p[9] < '1' || p[9] > '5' ||
        p[10] < '0' || p[10] > '9' || p[11] < '0' || p[11] > '9') {
        snprintf(err, errlen, "not an HTTP response: %.40s", p);
        return EK_ERR_PROTOCOL;
    }
    r->status = (p[9] - '0') * 100 + (p[10] - '0') * 10 + (p[11] - '0');
    for (p = nl + 1; p < end && (nl = memchr(p, '\n', (size_t)(end - p))) != NULL; p = nl + 1) {
        size_t len = (size_t)(nl - p), vlen;
        const char *v;
        if (ieq_prefix(p, len, "content-length:")) {
            unsigned long long x = 0;
            size_t i;
            v = value_of(p, len, 15, &vlen);
            for (i = 0; i < vlen; i++) {
                if (v[i] < '0' || v[i] > '9' || x > (~0ULL - 9) / 10) {
                    snprintf(err, errlen, "bad Content-Length in the answer");
                    return EK_ERR_PROTOCOL;
                }
                x = x * 10 + (unsigned)(v[i] - '0');
            }
            if (vlen == 0 || x > (unsigned long long)(size_t)-1) {
                snprintf(err, errlen, "bad Content-Length in the answer");
                return EK_ERR_PROTOCOL;
            }
            r->length = (size_t)x;
            have_length = 1;
        } else if (ieq_prefix(p, len, "connection:")) {
            v = value_of(p, len, 11, &vlen);
            r->close = vlen == 5 && ieq_prefix(v, 5, "close");
        } else if (ieq_prefix(p, len, "content-type:")) {
            v = value_of(p, len, 13, &vlen);
            r->tensors = ieq_prefix(v, vlen, "application/x-edgekit-tensors");
        } else if (ieq_prefix(p, len, "transfer-encoding:")) {
            snprintf(err, errlen, "the answer uses Transfer-Encoding, which this client does not read");
            return EK_ERR_PROTOCOL;
        }
    }
    if (!have_length && r->status != 204 && r->status != 304) r->close = 1; /* body runs to the end: not read */
    return EK_OK;
}

ek_status ek__read_head(ek_conn *c, ek_response *r, size_t *got, char *err, size_t errlen) {
    size_t scanned = c->start;
    *got = c->end - c->start;
    for (;;) {
        char *h = c->buf + c->start;
        size_t i, have = c->end - c->start;
        for (i = scanned > c->start + 3 ? scanned - c->start - 3 : 0; i + 3 < have; i++)
            if (h[i] == '\r' && h[i + 1] == '\n' && h[i + 2] == '\r' && h[i + 3] == '\n') {
                ek_status st = parse_head(h, i + 2, r, err, errlen);
                c->start += i + 4;
                return st;
            }
        scanned = c->end;
        if (c->end == sizeof c->buf) {
            if (c->start == 0) {
                snprintf(err, errlen, "the answer's head is larger than %lu bytes", (unsigned long)sizeof c->buf);
                return EK_ERR_PROTOCOL;
            }
            memmove(c->buf, h, have);
            scanned -= c->start;
            c->start = 0;
            c->end = have;
        }
        {
            ssize_t n = recv_some(c, c->buf + c->end, sizeof c->buf - c->end);
            if (n <= 0) return io_error(n == 0 ? 0 : errno, "reading the answer", err, errlen);
            c->end += (size_t)n;
            *got += (size_t)n;
        }
    }
}

ek_status ek__read_body(ek_conn *c, char *dst, size_t n, char *err, size_t errlen) {
    size_t have = c->end - c->start, take = have < n ? have : n;
    memcpy(dst, c->buf + c->start, take);
    c->start += take;
    dst += take;
    n -= take;
    while (n > 0) {
        ssize_t got = recv_some(c, dst, n);
        if (got <= 0) return io_error(got == 0 ? 0 : errno, "reading the answer's body", err, errlen);
        dst += got;
        n -= (size_t)got;
    }
    return EK_OK;
}
