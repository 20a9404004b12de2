/* A scripted stand-in for the agent's HTTP side (a forked process on 127.0.0.1), for the error-path tests. */
#ifndef FAKE_AGENT_H
#define FAKE_AGENT_H

#include <stddef.h>
#include <sys/types.h>

typedef struct fake_step {
    const char *resp; /* the bytes of the answer to the next request; NULL: close without answering */
    size_t len;       /* 0: strlen(resp) */
    int close_after;  /* close the connection after answering (the client is not told) */
    int hang;         /* read the request, then never answer */
} fake_step;

typedef struct fake_agent {
    pid_t pid;
    int port;
    int pipe_fd;
} fake_agent;

/* Listens on a free loopback port and plays the steps, one per request, in order. -1 on failure. */
int fake_start(fake_agent *f, const fake_step *steps, int n);
/* Stops it; *requests (free it) receives every request it read, concatenated, *connections how many it accepted. */
size_t fake_stop(fake_agent *f, char **requests, int *connections);
/* A port nothing listens on. */
int fake_free_port(void);

#endif
