/* ek_client_create_local: the agent serving a device root on this machine. */
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ek_internal.h"

#define MAX_FILE 65536

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    char *buf;
    if (!f) return NULL;
    buf = (char *)malloc(MAX_FILE + 1);
    if (buf) {
        *len = fread(buf, 1, MAX_FILE, f);
        buf[*len] = '\0';
    }
    fclose(f);
    return buf;
}

ek_status ek_client_create_local(const char *root, int timeout_ms, ek_client **out) {
    char path[4096], base[3072];
    const char *home = getenv("HOME");
    char *state, *token;
    size_t len, tlen;
    long long port = 0;
    ek_cur v;
    ek_status st;
    if (!out) return EK_ERR_ARG;
    *out = NULL;
    if (!root || !*root) root = getenv("EDGEKIT_AGENT_ROOT");
    if (!root || !*root) root = "~/.cache/edgekit/device";
    if (root[0] == '~' && (root[1] == '/' || !root[1])) {
        if (!home) return EK_ERR_FILE;
        if ((size_t)snprintf(base, sizeof base, "%s%s", home, root + 1) >= sizeof base) return EK_ERR_ARG;
    } else if ((size_t)snprintf(base, sizeof base, "%s", root) >= sizeof base) {
        return EK_ERR_ARG;
    }
    sprintf(path, "%s/agent/state.json", base);
    if (!(state = read_file(path, &len))) return EK_ERR_FILE;
    if (ek__top_find(state, len, "port", &v) > 0) {
        const char *s;
        size_t n;
        int is_int;
        if (ek__number(&v, &s, &n, &is_int) || !is_int || ek__int(s, n, &port)) port = 0;
    }
    free(state);
    if (port <= 0 || port > 65535) return EK_ERR_FILE;
    sprintf(path, "%s/agent/token", base);
    token = read_file(path, &tlen); /* none readable: reads and inference still work on loopback */
    if (token) {
        char *start = token;
        while (tlen && strchr(" \t\r\n", token[tlen - 1])) token[--tlen] = '\0';
        while (*start && strchr(" \t\r\n", *start)) start++;
        st = ek_client_create("127.0.0.1", (int)port, start, timeout_ms, out);
        free(token);
    } else {
        st = ek_client_create("127.0.0.1", (int)port, NULL, timeout_ms, out);
    }
    return st;
}
