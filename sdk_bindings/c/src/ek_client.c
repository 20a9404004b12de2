/* The client: requests with keep-alive and one retry, errors, and the agent's calls. */
#define _POSIX_C_SOURCE 200809L

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ek_http.h"

struct ek_client {
    char *host;
    char *token;
    int port;
    int timeout_ms;
    size_t max_response;
    int last_status;
    char *last_error; /* heap, never NULL after create */
    char err[512];    /* the library's own description of a failure */
    ek_conn conn;
};

static const char *const STATUS_TEXT[] = {
    "ok", "bad argument", "out of memory", "host name did not resolve", "cannot connect", "timed out",
    "the agent closed the connection", "socket error", "not the agent's HTTP", "response too large",
    "malformed tensor message", "the agent answered an error", "cannot read a local file"};

const char *ek_strerror(ek_status st) {
    return (unsigned)st < sizeof STATUS_TEXT / sizeof STATUS_TEXT[0] ? STATUS_TEXT[st] : "unknown error";
}

void ek_free(void *p) { free(p); }

static char *dup_str(const char *s) {
    char *p = (char *)malloc(strlen(s) + 1);
    if (p) strcpy(p, s);
    return p;
}

static void set_error(ek_client *c, int status, const char *msg, size_t len) {
    char *p = (char *)malloc(len + 1);
    if (!p) return; /* keeps the previous text */
    memcpy(p, msg, len);
    p[len] = '\0';
    free(c->last_error);
    c->last_error = p;
    c->last_status = status;
}

static ek_status own_error(ek_client *c, ek_status st, int status) {
    if (!c->err[0]) snprintf(c->err, sizeof c->err, "%s", ek_strerror(st));
    set_error(c, status, c->err, strlen(c->err));
    return st;
}

static int has_line_break(const char *s) { return s && strpbrk(s, "\r\n") != NULL; }

ek_status ek_client_create(const char *host, int port, const char *token, int timeout_ms, ek_client **out) {
    ek_client *c;
    if (!out) return EK_ERR_ARG;
    *out = NULL;
    if (!host || !*host || strlen(host) > 255 || port <= 0 || port > 65535 || timeout_ms < 0 ||
        has_line_break(host) || has_line_break(token) || strchr(host, ' '))
        return EK_ERR_ARG;
    if (!(c = (ek_client *)calloc(1, sizeof *c))) return EK_ERR_NOMEM;
    c->host = dup_str(host);
    c->token = token && *token ? dup_str(token) : NULL;
    c->last_error = dup_str("");
    if (!c->host || !c->last_error || (token && *token && !c->token)) {
        ek_client_destroy(c);
        return EK_ERR_NOMEM;
    }
    c->port = port;
    c->timeout_ms = timeout_ms;
    c->max_response = EK_DEFAULT_MAX_RESPONSE;
    c->conn.fd = -1;
    *out = c;
    return EK_OK;
}

void ek_client_destroy(ek_client *c) {
    if (!c) return;
    ek__conn_close(&c->conn);
    free(c->host);
    free(c->token);
    free(c->last_error);
    free(c);
}

void ek_client_set_max_response(ek_client *c, size_t max_bytes) {
    if (c) c->max_response = max_bytes;
}
int ek_last_status(const ek_client *c) { return c ? c->last_status : 0; }
const char *ek_last_error(const ek_client *c) { return c && c->last_error ? c->last_error : ""; }

/* The agent's {"error": message} (or the start of a body that is not JSON). */
static void agent_error(ek_client *c, int status, const char *body, size_t len) {
    ek_cur v;
    int found = ek__top_find(body, len, "error", &v);
    if (found > 0 && v.p < v.end && *v.p == '"') {
        size_t n;
        ek_cur probe = v;
        char *msg;
        if (ek__string(&probe, NULL, 0, &n) == 0 && (msg = (char *)malloc(n + 1)) != NULL) {
            ek__string(&v, msg, n + 1, NULL);
            set_error(c, status, msg, strlen(msg));
            free(msg);
            return;
        }
    }
    if (found < 0) set_error(c, status, body, len < 200 ? len : 200);
    else set_error(c, status, "", 0);
}

/* The tensor answer's body, read straight into the result's one allocation. */
static ek_status read_tensors(ek_client *c, size_t length, ek_result **res) {
    unsigned char pre[8];
    char *header = NULL, *payload;
    size_t hlen;
    ek_status st;
    if (length < 8) return snprintf(c->err, sizeof c->err, "body is not edgekit tensors (missing EKT1 magic)"),
                           EK_ERR_DECODE;
    if ((st = ek__read_body(&c->conn, (char *)pre, 8, c->err, sizeof c->err)) != EK_OK) return st;
    hlen = (size_t)pre[4] | (size_t)pre[5] << 8 | (size_t)pre[6] << 16 | (size_t)pre[7] << 24;
    if (memcmp(pre, "EKT1", 4) != 0)
        st = (snprintf(c->err, sizeof c->err, "body is not edgekit tensors (missing EKT1 magic)"), EK_ERR_DECODE);
    else if (hlen > EK_MAX_HEADER)
        st = (snprintf(c->err, sizeof c->err, "tensor header of %lu bytes is larger than %u", (unsigned long)hlen,
                       EK_MAX_HEADER), EK_ERR_DECODE);
    else if (hlen > length - 8)
        st = (snprintf(c->err, sizeof c->err, "header length exceeds the body"), EK_ERR_DECODE);
    else if (!(header = (char *)malloc(hlen + 1)))
        st = EK_ERR_NOMEM;
    if (st != EK_OK) return st;
    st = ek__read_body(&c->conn, header, hlen, c->err, sizeof c->err);
    if (st == EK_OK)
        st = ek__result_alloc(header, hlen, length - 8 - hlen, res, &payload, c->err, sizeof c->err);
    free(header);
    if (st != EK_OK) return st;
    if ((st = ek__read_body(&c->conn, payload, length - 8 - hlen, c->err, sizeof c->err)) != EK_OK) {
        ek_result_free(*res);
        *res = NULL;
    }
    return st;
}

/* One request: head + body (iov, consumed per attempt from a copy) out, the answer in. A kept-alive connection
 * the agent had closed (nothing came back) is retried once on a new one. */
static ek_status request(ek_client *c, const char *method, const char *path, const char *ctype,
                         const struct iovec *body, int nbody, size_t body_len, char **text, ek_result **res) {
    char head[4096];
    struct iovec stack_iov[8], *iov = stack_iov;
    ek_response r;
    ek_status st = EK_OK;
    int n, attempt, i;
    c->err[0] = '\0';
    c->last_status = 0;
    n = snprintf(head, sizeof head,
                 "%s %s HTTP/1.1\r\nHost: %s%s%s:%d\r\nContent-Type: %s\r\nAccept: application/json\r\n"
                 "Content-Length: %lu\r\n%s%s%s\r\n",
                 method, path, strchr(c->host, ':') ? "[" : "", c->host, strchr(c->host, ':') ? "]" : "", c->port,
                 ctype, (unsigned long)body_len, c->token ? "Authorization: Bearer " : "", c->token ? c->token : "",
                 c->token ? "\r\n" : "");
    if (n < 0 || (size_t)n >= sizeof head) {
        if (c->token && strlen(c->token) > 2048) snprintf(c->err, sizeof c->err, "the token is too long");
        return own_error(c, EK_ERR_ARG, 0);
    }
    if (nbody + 1 > 8 && !(iov = (struct iovec *)malloc(sizeof *iov * (size_t)(nbody + 1))))
        return own_error(c, EK_ERR_NOMEM, 0);
    for (attempt = 0; attempt < 2; attempt++) {
        size_t got = 0;
        int fresh = c->conn.fd < 0;
        if (fresh && (st = ek__connect(&c->conn, c->host, c->port, c->timeout_ms, c->err, sizeof c->err)) != EK_OK)
            break;
        iov[0].iov_base = head;
        iov[0].iov_len = (size_t)n;
        for (i = 0; i < nbody; i++) iov[i + 1] = body[i];
        st = ek__send(&c->conn, iov, nbody + 1, c->err, sizeof c->err);
        if (st == EK_OK) st = ek__read_head(&c->conn, &r, &got, c->err, sizeof c->err);
        if (st == EK_OK) break;
        ek__conn_close(&c->conn);
        if (st != EK_ERR_CLOSED || fresh || got) break;
    }
    if (iov != stack_iov) free(iov);
    if (st != EK_OK) return own_error(c, st, 0);
    c->last_status = r.status;
    if (r.length > c->max_response) {
        ek__conn_close(&c->conn);
        snprintf(c->err, sizeof c->err, "the answer's body of %lu bytes is larger than the client's bound of %lu",
                 (unsigned long)r.length, (unsigned long)c->max_response);
        return own_error(c, EK_ERR_TOO_LARGE, r.status);
    }
    if (r.status >= 400 || !res) {
        char *data = (char *)malloc(r.length + 1);
        if (!data) {
            ek__conn_close(&c->conn);
            return own_error(c, EK_ERR_NOMEM, r.status);
        }
        if ((st = ek__read_body(&c->conn, data, r.length, c->err, sizeof c->err)) != EK_OK) {
            free(data);
            ek__conn_close(&c->conn);
            return own_error(c, st, r.status);
        }
        data[r.length] = '\0';
        if (r.status >= 400) {
            agent_error(c, r.status, data, r.length);
            free(data);
            st = EK_ERR_HTTP;
        } else if (text) {
            *text = data;
        } else {
            free(data);
        }
    } else if (!r.tensors) {
        ek__conn_close(&c->conn);
        snprintf(c->err, sizeof c->err, "the agent answered without application/x-edgekit-tensors");
        return own_error(c, EK_ERR_PROTOCOL, r.status);
    } else if ((st = read_tensors(c, r.length, res)) != EK_OK) {
        ek__conn_close(&c->conn);
        return own_error(c, st, r.status);
    }
    c->conn.reused = 1;
    if (r.close) ek__conn_close(&c->conn);
    if (st == EK_OK) set_error(c, r.status, "", 0);
    return st;
}

static ek_status json_call(ek_client *c, const char *method, const char *path, const char *json, char **out) {
    struct iovec iov;
    size_t len = json ? strlen(json) : 0;
    iov.iov_base = (void *)json;
    iov.iov_len = len;
    if (out) *out = NULL;
    return request(c, method, path, "application/json", &iov, json ? 1 : 0, len, out, NULL);
}

/* "/v1/models/NAME/what" for a name that can travel in a request line unescaped. */
static ek_status model_path(ek_client *c, const char *model, const char *what, char *path, size_t cap) {
    const unsigned char *p = (const unsigned char *)model;
    c->err[0] = '\0';
    if (!model || !*model || strlen(model) > 512) goto bad;
    for (; *p; p++)
        if (*p <= 0x20 || *p == 0x7F || *p == '/' || *p == '?' || *p == '#' || *p == '%') goto bad;
    snprintf(path, cap, "/v1/models/%s/%s", model, what);
    return EK_OK;
bad:
    snprintf(c->err, sizeof c->err, "a model name is 1 to 512 bytes without spaces, controls, '/', '?', '#', '%%'");
    return own_error(c, EK_ERR_ARG, 0);
}

ek_status ek_health(ek_client *c, char **out) {
    if (!c) return EK_ERR_ARG;
    return json_call(c, "GET", "/v1/health", NULL, out);
}

ek_status ek_models(ek_client *c, char **out) {
    if (!c) return EK_ERR_ARG;
    return json_call(c, "GET", "/v1/models", NULL, out);
}

ek_status ek_load(ek_client *c, const char *model, int threads, int warmup, char **out) {
    char path[600], body[128], t[16] = "null", w[16] = "null";
    ek_status st;
    if (!c) return EK_ERR_ARG;
    if ((st = model_path(c, model, "load", path, sizeof path)) != EK_OK) return st;
    if (threads >= 0) sprintf(t, "%d", threads);
    if (warmup >= 0) sprintf(w, "%d", warmup);
    sprintf(body, "{\"threads\": %s, \"providers\": null, \"warmup\": %s}", t, w);
    return json_call(c, "POST", path, body, out);
}

ek_status ek_unload(ek_client *c, const char *model, char **out) {
    char path[600];
    ek_status st;
    if (!c) return EK_ERR_ARG;
    if ((st = model_path(c, model, "unload", path, sizeof path)) != EK_OK) return st;
    return json_call(c, "POST", path, "{}", out);
}

static int finite(double x) { return x == x && x - x == 0.0; }

ek_status ek_annotate(ek_client *c, long long request_id, const double *pre_ms, const double *post_ms, char **out) {
    char body[160], pre[40] = "null", post[40] = "null";
    if (!c) return EK_ERR_ARG;
    c->err[0] = '\0';
    if ((pre_ms && !finite(*pre_ms)) || (post_ms && !finite(*post_ms))) {
        snprintf(c->err, sizeof c->err, "pre_ms and post_ms must be finite numbers");
        return own_error(c, EK_ERR_ARG, 0);
    }
    if (pre_ms) ek__format_double(pre, *pre_ms);
    if (post_ms) ek__format_double(post, *post_ms);
    sprintf(body, "{\"request_id\": %lld, \"pre_ms\": %s, \"post_ms\": %s}", request_id, pre, post);
    return json_call(c, "POST", "/v1/telemetry/annotate", body, out);
}

ek_status ek_infer(ek_client *c, const char *model, const ek_tensor *inputs, size_t n, ek_result **out) {
    char path[600], *head;
    struct iovec stack_iov[9], *iov = stack_iov;
    size_t head_len, payload, i;
    ek_status st;
    const unsigned one = 1;
    if (!c) return EK_ERR_ARG;
    if (!out) return own_error(c, EK_ERR_ARG, 0);
    *out = NULL;
    if ((st = model_path(c, model, "infer", path, sizeof path)) != EK_OK) return st;
    if (*(const unsigned char *)&one != 1) {
        snprintf(c->err, sizeof c->err, "this client sends tensors from little-endian hosts only");
        return own_error(c, EK_ERR_ARG, 0);
    }
    if ((st = ek__encode_head(inputs, n, &head, &head_len, &payload, c->err, sizeof c->err)) != EK_OK)
        return own_error(c, st, 0);
    if (n + 1 > 9 && !(iov = (struct iovec *)malloc(sizeof *iov * (n + 1)))) {
        free(head);
        return own_error(c, EK_ERR_NOMEM, 0);
    }
    iov[0].iov_base = head;
    iov[0].iov_len = head_len;
    for (i = 0; i < n; i++) { /* the data goes out from where it is (sizes checked by ek__encode_head) */
        size_t nb = ek_dtype_size(inputs[i].dtype);
        int d;
        for (d = 0; d < inputs[i].ndim; d++) nb *= (size_t)inputs[i].shape[d];
        iov[i + 1].iov_base = (void *)inputs[i].data;
        iov[i + 1].iov_len = nb;
    }
    st = request(c, "POST", path, "application/x-edgekit-tensors", iov, (int)n + 1, head_len + payload, NULL, out);
    free(head);
    if (iov != stack_iov) free(iov);
    return st;
}
