/* The client's HTTP paths against the scripted stand-in: errors, keep-alive and its retry, timeouts, bounds,
 * and the bytes it puts on the wire. */
#define _POSIX_C_SOURCE 200809L

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "edgekit.h"
#include "fake_agent.h"

#define OK_JSON "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 16\r\n\r\n{\"status\": \"ok\"}"
#define BYE_JSON                                                                                   \
    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: 16\r\n\r\n" \
    "{\"status\": \"ok\"}"

static size_t req_len;

/* Whether the requests (binary bodies included) contain s. */
static int contains(const char *req, const char *s) {
    size_t i, n = strlen(s);
    for (i = 0; req && i + n <= req_len; i++)
        if (memcmp(req + i, s, n) == 0) return 1;
    return 0;
}

/* Runs the steps; `calls` drives the client; returns the requests the stand-in read (free them). */
static char *play(const fake_step *steps, int n, int timeout_ms, const char *token, int *connections,
                  void (*calls)(ek_client *)) {
    fake_agent f;
    ek_client *c = NULL;
    char *req = NULL;
    if (fake_start(&f, steps, n) != 0) {
        CHECK(!"the stand-in agent did not start");
        return NULL;
    }
    CHECK(ek_client_create("127.0.0.1", f.port, token, timeout_ms, &c) == EK_OK);
    if (c) calls(c);
    ek_client_destroy(c);
    req_len = fake_stop(&f, &req, connections);
    return req;
}

static void http_error_then_reuse(ek_client *c) {
    char *json = NULL;
    CHECK(ek_health(c, &json) == EK_ERR_HTTP && json == NULL);
    CHECK(ek_last_status(c) == 400 && strcmp(ek_last_error(c), "wrong shape \xc3\xa9 [1, 3]") == 0);
    CHECK(ek_health(c, &json) == EK_ERR_HTTP && ek_last_status(c) == 502);
    CHECK(strcmp(ek_last_error(c), "<html>bad gateway</html>") == 0);
    CHECK(ek_health(c, &json) == EK_OK && json && strcmp(json, "{\"status\": \"ok\"}") == 0);
    CHECK(ek_last_status(c) == 200 && strcmp(ek_last_error(c), "") == 0);
    ek_free(json);
}

static void twice(ek_client *c) {
    char *json = NULL;
    CHECK(ek_health(c, &json) == EK_OK);
    ek_free(json);
    json = NULL;
    CHECK(ek_health(c, &json) == EK_OK && json != NULL);
    ek_free(json);
}

static void first_fails_closed(ek_client *c) {
    char *json = NULL;
    CHECK(ek_health(c, &json) == EK_ERR_CLOSED && ek_last_status(c) == 0 && json == NULL);
}

static void ok_then_closed(ek_client *c) {
    char *json = NULL;
    CHECK(ek_models(c, NULL) == EK_OK);
    CHECK(ek_health(c, &json) == EK_ERR_CLOSED && json == NULL);
}

static void times_out(ek_client *c) {
    char *json = NULL;
    CHECK(ek_health(c, &json) == EK_ERR_TIMEOUT && ek_last_status(c) == 0);
    CHECK(strstr(ek_last_error(c), "timed out") != NULL);
}

static void too_large(ek_client *c) {
    char *json = NULL;
    ek_client_set_max_response(c, 100);
    CHECK(ek_health(c, &json) == EK_ERR_TOO_LARGE && json == NULL && ek_last_status(c) == 200);
    ek_client_set_max_response(c, EK_DEFAULT_MAX_RESPONSE);
    CHECK(ek_health(c, &json) == EK_OK); /* on a new connection */
    ek_free(json);
}

static const float X[3] = {1.5f, 2.5f, -3.0f};
static const int64_t SX[2] = {1, 3};

static void infers(ek_client *c) {
    ek_tensor in = {"x", EK_FLOAT32, 2, SX, X, 0};
    ek_result *r = NULL;
    const ek_tensor *y;
    double pre = 1.5;
    CHECK(ek_infer(c, "mlp", &in, 1, &r) == EK_OK && r);
    if (r) {
        y = ek_result_find(r, "y");
        CHECK(y && y->dtype == EK_FLOAT32 && y->ndim == 2 && y->shape[0] == 1 && y->shape[1] == 3);
        CHECK(y && memcmp(y->data, X, 12) == 0);
        CHECK(r->version && strcmp(r->version, "v1") == 0 && r->request_id == 9 && r->inference_ms == 0.25);
    }
    ek_result_free(r);
    r = NULL;
    CHECK(ek_infer(c, "mlp", &in, 1, &r) == EK_ERR_DECODE && r == NULL && strstr(ek_last_error(c), "do not match"));
    CHECK(ek_infer(c, "mlp", &in, 1, &r) == EK_ERR_PROTOCOL && r == NULL);
    CHECK(ek_annotate(c, 9, &pre, NULL, NULL) == EK_OK);
    CHECK(ek_load(c, "mlp", 2, -1, NULL) == EK_OK);
    CHECK(ek_unload(c, "mlp", NULL) == EK_OK);
}

static void garbage(ek_client *c) {
    char *json = NULL;
    CHECK(ek_health(c, &json) == EK_ERR_PROTOCOL && json == NULL && strstr(ek_last_error(c), "not an HTTP"));
}

static char *tensor_answer(const char *header, const void *payload, size_t plen, size_t *len) {
    size_t h = strlen(header);
    char *out = malloc(200 + h + plen);
    int n = sprintf(out, "HTTP/1.1 200 OK\r\nContent-Type: application/x-edgekit-tensors\r\nContent-Length: %lu\r\n\r\n",
                    (unsigned long)(8 + h + plen));
    memcpy(out + n, "EKT1", 4);
    out[n + 4] = (char)h;
    out[n + 5] = (char)(h >> 8);
    out[n + 6] = out[n + 7] = 0;
    memcpy(out + n + 8, header, h);
    memcpy(out + n + 8 + h, payload, plen);
    *len = (size_t)n + 8 + h + plen;
    return out;
}

void test_client_paths(void) {
    int conns = 0;
    char *req, *good, *bad_offsets, *enc = NULL;
    size_t good_len, bad_len, enc_len = 0;
    ek_tensor in = {"x", EK_FLOAT32, 2, SX, X, 0};
    fake_step errors[3] = {
        {"HTTP/1.1 400 Bad Request\r\nContent-Length: 53\r\n\r\n{\"error\": \"wrong shape \\u00e9 [1, 3]\", \"status\": 400}",
         0, 0, 0},
        {"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 24\r\n\r\n<html>bad gateway</html>", 0, 0, 0},
        {OK_JSON, 0, 0, 0}};
    fake_step retry[2] = {{OK_JSON, 0, 1, 0}, {OK_JSON, 0, 0, 0}};
    fake_step told_close[2] = {{BYE_JSON, 0, 1, 0}, {OK_JSON, 0, 0, 0}};
    fake_step closed[1] = {{NULL, 0, 0, 0}};
    fake_step closed_twice[3] = {{OK_JSON, 0, 0, 0}, {NULL, 0, 0, 0}, {NULL, 0, 0, 0}};
    fake_step hang[1] = {{NULL, 0, 0, 1}};
    fake_step large[2] = {{"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n", 0, 0, 0}, {OK_JSON, 0, 0, 0}};
    fake_step junk[1] = {{"hello\r\n\r\n", 0, 0, 0}};
    fake_step infer[6];

    req = play(errors, 3, 2000, NULL, &conns, http_error_then_reuse);
    CHECK(conns == 1 && contains(req, "GET /v1/health HTTP/1.1\r\n") && !strstr(req, "Authorization"));
    free(req);
    req = play(retry, 2, 2000, NULL, &conns, twice); /* the agent closed the kept-alive connection: one retry */
    CHECK(conns == 2);
    free(req);
    req = play(told_close, 2, 2000, NULL, &conns, twice); /* Connection: close is honoured */
    CHECK(conns == 2);
    free(req);
    req = play(closed, 1, 2000, NULL, &conns, first_fails_closed); /* a fresh connection is not retried */
    CHECK(conns == 1);
    free(req);
    req = play(closed_twice, 3, 2000, NULL, &conns, ok_then_closed); /* one retry only */
    CHECK(conns == 2);
    free(req);
    req = play(hang, 1, 300, NULL, &conns, times_out);
    free(req);
    req = play(large, 2, 2000, NULL, &conns, too_large);
    CHECK(conns == 2);
    free(req);
    req = play(junk, 1, 2000, NULL, &conns, garbage);
    free(req);

    good = tensor_answer("{\"tensors\": [{\"name\": \"y\", \"dtype\": \"float32\", \"shape\": [1, 3], \"offset\": 0, "
                         "\"nbytes\": 12}], \"model\": \"mlp\", \"version\": \"v1\", \"inference_ms\": 0.25, "
                         "\"request_id\": 9}", X, 12, &good_len);
    bad_offsets = tensor_answer("{\"tensors\": [{\"name\": \"y\", \"dtype\": \"float32\", \"shape\": [1, 3], "
                                "\"offset\": 4, \"nbytes\": 12}]}", X, 12, &bad_len);
    infer[0].resp = good;
    infer[0].len = good_len;
    infer[1].resp = bad_offsets;
    infer[1].len = bad_len;
    infer[0].close_after = infer[1].close_after = infer[0].hang = infer[1].hang = 0;
    infer[2] = errors[2]; /* JSON where tensors were asked for */
    infer[3] = infer[4] = infer[5] = errors[2];
    req = play(infer, 6, 2000, "sekrit", &conns, infers);
    CHECK(conns == 3); /* the malformed answers closed the connection */
    CHECK(ek_encode_tensors(&in, 1, (void **)&enc, &enc_len) == EK_OK);
    CHECK(contains(req, "POST /v1/models/mlp/infer HTTP/1.1\r\n"));
    CHECK(contains(req, "Content-Type: application/x-edgekit-tensors\r\n"));
    CHECK(contains(req, "Authorization: Bearer sekrit\r\n"));
    CHECK(req && enc && memcmp(strstr(req, "\r\n\r\n") + 4, enc, enc_len) == 0); /* the bytes of the encoding */
    CHECK(contains(req, "{\"request_id\": 9, \"pre_ms\": 1.5, \"post_ms\": null}"));
    CHECK(contains(req, "POST /v1/models/mlp/load HTTP/1.1\r\n"));
    CHECK(contains(req, "{\"threads\": 2, \"providers\": null, \"warmup\": null}"));
    CHECK(contains(req, "POST /v1/models/mlp/unload HTTP/1.1\r\n"));
    free(req);
    ek_free(enc);
    free(good);
    free(bad_offsets);
}

void test_client_local(const char *scratch) {
    char root[1024], path[1100], *req = NULL;
    fake_step ok[1] = {{OK_JSON, 0, 0, 0}};
    fake_agent f;
    ek_client *c = NULL;
    FILE *fp;
    int conns = 0;
    snprintf(root, sizeof root, "%s/local-root", scratch);
    CHECK(ek_client_create_local(root, 1000, &c) == EK_ERR_FILE && c == NULL); /* no state yet */
    snprintf(path, sizeof path, "%s/agent", root);
    CHECK(mkdir(root, 0700) == 0 && mkdir(path, 0700) == 0);
    if (fake_start(&f, ok, 1) != 0) return;
    snprintf(path, sizeof path, "%s/agent/state.json", root);
    fp = fopen(path, "w");
    CHECK(fp != NULL);
    if (fp) fprintf(fp, "{\"pid\": 1, \"host\": \"127.0.0.1\", \"port\": %d, \"auth\": false}", f.port), fclose(fp);
    snprintf(path, sizeof path, "%s/agent/token", root);
    fp = fopen(path, "w");
    if (fp) fputs("tok-123\n", fp), fclose(fp);
    CHECK(ek_client_create_local(root, 1000, &c) == EK_OK && c);
    CHECK(c && ek_health(c, NULL) == EK_OK);
    ek_client_destroy(c);
    req_len = fake_stop(&f, &req, &conns);
    CHECK(contains(req, "Authorization: Bearer tok-123\r\n") && !contains(req, "tok-123\n\r"));
    free(req);
    CHECK(unlink(path) == 0); /* the token */
    snprintf(path, sizeof path, "%s/agent/state.json", root);
    CHECK(unlink(path) == 0);
    snprintf(path, sizeof path, "%s/agent", root);
    CHECK(rmdir(path) == 0 && rmdir(root) == 0);
}
