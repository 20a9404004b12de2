#define _POSIX_C_SOURCE 200809L

#include "fake_agent.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static int listen_loopback(int *port) {
    struct sockaddr_in a;
    socklen_t len = sizeof a;
    int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    if (fd < 0) return -1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(fd, (struct sockaddr *)&a, sizeof a) || listen(fd, 8) || getsockname(fd, (struct sockaddr *)&a, &len)) {
        close(fd);
        return -1;
    }
    *port = ntohs(a.sin_port);
    return fd;
}

int fake_free_port(void) {
    int port = 0, fd = listen_loopback(&port);
    if (fd >= 0) close(fd);
    return port;
}

static void record(int pipe_fd, char kind, const char *data, uint32_t n) {
    if (write(pipe_fd, &kind, 1) != 1) _exit(3);
    if (kind == 'R' && (write(pipe_fd, &n, 4) != 4 || (n && write(pipe_fd, data, n) != (ssize_t)n))) _exit(3);
}

/* One request (head and Content-Length body) into buf; its length, or 0 when the client closed. */
static size_t read_request(int fd, char *buf, size_t cap) {
    size_t have = 0, need = 0;
    for (;;) {
        ssize_t got;
        if (!need) {
            char *end;
            buf[have] = '\0';
            end = strstr(buf, "\r\n\r\n");
            if (end) {
                const char *cl = strstr(buf, "Content-Length: ");
                need = (size_t)(end + 4 - buf) + (cl ? (size_t)strtoul(cl + 16, NULL, 10) : 0);
            }
        }
        if (need && have >= need) return need;
        if (have + 1 >= cap) _exit(4);
        got = recv(fd, buf + have, cap - 1 - have, 0);
        if (got <= 0) return 0;
        have += (size_t)got;
    }
}

static void serve(int lfd, int pipe_fd, const fake_step *steps, int n) {
    size_t cap = 1 << 20;
    char *buf = malloc(cap);
    int i, conn = -1;
    if (!buf) _exit(2);
    for (i = 0; i < n; i++) {
        size_t len = 0;
        while (!len) {
            if (conn < 0) {
                conn = accept(lfd, NULL, NULL);
                if (conn < 0) _exit(2);
                record(pipe_fd, 'C', NULL, 0);
            }
            len = read_request(conn, buf, cap);
            if (!len) {
                close(conn);
                conn = -1;
            }
        }
        record(pipe_fd, 'R', buf, (uint32_t)len);
        if (steps[i].hang) {
            for (;;) pause();
        }
        if (!steps[i].resp) {
            close(conn);
            conn = -1;
            continue;
        }
        len = steps[i].len ? steps[i].len : strlen(steps[i].resp);
        if (send(conn, steps[i].resp, len, 0) != (ssize_t)len) _exit(5);
        if (steps[i].close_after) {
            close(conn);
            conn = -1;
        }
    }
    for (;;) pause();
}

int fake_start(fake_agent *f, const fake_step *steps, int n) {
    int fds[2], lfd = listen_loopback(&f->port);
    if (lfd < 0 || pipe(fds)) return -1;
    f->pid = fork();
    if (f->pid < 0) return -1;
    if (f->pid == 0) {
        close(fds[0]);
        signal(SIGPIPE, SIG_IGN);
        serve(lfd, fds[1], steps, n);
    }
    close(lfd);
    close(fds[1]);
    f->pipe_fd = fds[0];
    return 0;
}

size_t fake_stop(fake_agent *f, char **requests, int *connections) {
    size_t total = 0, cap = 4096;
    char *out = malloc(cap), kind;
    int status;
    kill(f->pid, SIGKILL);
    waitpid(f->pid, &status, 0);
    *connections = 0;
    while (out && read(f->pipe_fd, &kind, 1) == 1) {
        uint32_t n = 0;
        if (kind == 'C') {
            (*connections)++;
            continue;
        }
        if (read(f->pipe_fd, &n, 4) != 4) break;
        while (total + n + 1 > cap) {
            char *p = realloc(out, cap *= 2);
            if (!p) break;
            out = p;
        }
        if (n && read(f->pipe_fd, out + total, n) != (ssize_t)n) break;
        total += n;
    }
    close(f->pipe_fd);
    if (out) out[total] = '\0';
    *requests = out;
    return total;
}
