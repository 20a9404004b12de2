/* Unit tests of the C SDK that need no agent: the tensor encoding, the checks on a decoded message, and the
 * client's error paths against a scripted stand-in (tests/fake_agent.c). `make test` runs them. */
#define _POSIX_C_SOURCE 200809L

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "edgekit.h"
#include "check.h"
#include "fake_agent.h"

int failures, checks;

/* A message from a header text and payload, as the agent would send it. */
static size_t message(char *out, const char *header, const void *payload, size_t plen) {
    size_t h = strlen(header);
    memcpy(out, "EKT1", 4);
    out[4] = (char)(h & 0xFF);
    out[5] = (char)((h >> 8) & 0xFF);
    out[6] = (char)((h >> 16) & 0xFF);
    out[7] = (char)((h >> 24) & 0xFF);
    memcpy(out + 8, header, h);
    if (plen) memcpy(out + 8 + h, payload, plen);
    return 8 + h + plen;
}

static ek_status decode_header(const char *header, size_t plen, char *err, size_t errlen) {
    static char buf[1 << 18];
    static const char zeros[4096];
    ek_result *r = NULL;
    ek_status st = ek_decode_tensors(buf, message(buf, header, zeros, plen), &r, err, errlen);
    ek_result_free(r);
    return st;
}

static void test_dtypes(void) {
    CHECK(ek_dtype_size(EK_FLOAT32) == 4 && ek_dtype_size(EK_INT64) == 8 && ek_dtype_size(EK_BOOL) == 1);
    CHECK(ek_dtype_size(EK_FLOAT16) == 2 && ek_dtype_size(EK_UINT16) == 2 && ek_dtype_size((ek_dtype)99) == 0);
    CHECK(strcmp(ek_dtype_name(EK_UINT8), "uint8") == 0 && ek_dtype_name((ek_dtype)-1) == NULL);
    CHECK(strcmp(ek_strerror(EK_ERR_TIMEOUT), "timed out") == 0);
    CHECK(strcmp(ek_strerror((ek_status)1000), "unknown error") == 0);
    CHECK(strcmp(ek_strerror(EK_ERR_FILE), "cannot read a local file") == 0);
}

static void test_encode(void) {
    float x[3] = {1.0f, -2.5f, 3.25f};
    int64_t ids[2] = {7, -1};
    unsigned char flag = 1;
    int64_t sx[2] = {1, 3}, sids[1] = {2};
    ek_tensor in[3] = {{"x", EK_FLOAT32, 2, NULL, NULL, 0}, {"ids \"q\"", EK_INT64, 1, NULL, NULL, 16},
                       {"flag", EK_BOOL, 0, NULL, NULL, 0}};
    const char *want = "{\"tensors\": [{\"name\": \"x\", \"dtype\": \"float32\", \"shape\": [1, 3], \"offset\": 0, "
                       "\"nbytes\": 12}, {\"name\": \"ids \\\"q\\\"\", \"dtype\": \"int64\", \"shape\": [2], "
                       "\"offset\": 12, \"nbytes\": 16}, {\"name\": \"flag\", \"dtype\": \"bool\", \"shape\": [], "
                       "\"offset\": 28, \"nbytes\": 1}]}";
    void *buf = NULL;
    size_t len = 0, h = strlen(want);
    ek_result *r = NULL;
    const ek_tensor *t;
    char err[256];
    in[0].shape = sx;
    in[0].data = x;
    in[1].shape = sids;
    in[1].data = ids;
    in[2].data = &flag;
    CHECK(ek_encode_tensors(in, 3, &buf, &len) == EK_OK);
    CHECK(len == 8 + h + 29);
    CHECK(buf && memcmp(buf, "EKT1", 4) == 0 && ((unsigned char *)buf)[4] == (h & 0xFF));
    CHECK(buf && memcmp((char *)buf + 8, want, h) == 0);
    CHECK(buf && memcmp((char *)buf + 8 + h, x, 12) == 0 && memcmp((char *)buf + 8 + h + 12, ids, 16) == 0);
    CHECK(ek_decode_tensors(buf, len, &r, err, sizeof err) == EK_OK);
    if (r) {
        CHECK(r->count == 3 && r->model == NULL && r->request_id == -1 && r->inference_ms == -1);
        CHECK(((uintptr_t)r->outputs[0].data & 63) == 0); /* the payload is 64-byte aligned */
        t = ek_result_find(r, "ids \"q\"");
        CHECK(t && t->dtype == EK_INT64 && t->ndim == 1 && t->shape[0] == 2 && t->nbytes == 16);
        CHECK(t && memcmp(t->data, ids, 16) == 0);
        t = ek_result_find(r, "flag");
        CHECK(t && t->ndim == 0 && t->nbytes == 1 && *(const unsigned char *)t->data == 1);
        CHECK(ek_result_find(r, "nope") == NULL);
        CHECK(strncmp(r->header_json, want, h) == 0 && r->header_len == h && r->header_json[h] == '\0');
    }
    ek_result_free(r);
    ek_free(buf);
}

static void test_encode_errors(void) {
    float x[2] = {0, 0};
    int64_t s2[1] = {2}, sneg[1] = {-1}, big[EK_MAX_DIMS + 1];
    ek_tensor t = {"x", EK_FLOAT32, 1, NULL, NULL, 0}, two[2];
    void *buf = NULL;
    size_t len, i;
    for (i = 0; i < EK_MAX_DIMS + 1; i++) big[i] = 1;
    t.shape = s2;
    t.data = x;
    CHECK(ek_encode_tensors(&t, 1, &buf, &len) == EK_OK);
    ek_free(buf);
    t.nbytes = 4; /* shape and dtype make 8 */
    CHECK(ek_encode_tensors(&t, 1, &buf, &len) == EK_ERR_ARG);
    t.nbytes = 0;
    t.name = "";
    CHECK(ek_encode_tensors(&t, 1, &buf, &len) == EK_ERR_ARG);
    t.name = NULL;
    CHECK(ek_encode_tensors(&t, 1, &buf, &len) == EK_ERR_ARG);
    t.name = "x";
    t.dtype = (ek_dtype)42;
    CHECK(ek_encode_tensors(&t, 1, &buf, &len) == EK_ERR_ARG);
    t.dtype = EK_FLOAT32;
    t.shape = sneg;
    CHECK(ek_encode_tensors(&t, 1, &buf, &len) == EK_ERR_ARG);
    t.shape = big;
    t.ndim = EK_MAX_DIMS + 1;
    CHECK(ek_encode_tensors(&t, 1, &buf, &len) == EK_ERR_ARG);
    t.ndim = 1;
    t.shape = NULL;
    CHECK(ek_encode_tensors(&t, 1, &buf, &len) == EK_ERR_ARG);
    t.shape = s2;
    t.data = NULL;
    CHECK(ek_encode_tensors(&t, 1, &buf, &len) == EK_ERR_ARG);
    t.data = x;
    two[0] = two[1] = t;
    CHECK(ek_encode_tensors(two, 2, &buf, &len) == EK_ERR_ARG); /* the same name twice */
    CHECK(ek_encode_tensors(NULL, 1, &buf, &len) == EK_ERR_ARG);
    CHECK(ek_encode_tensors(NULL, 0, &buf, &len) == EK_OK && len == 8 + strlen("{\"tensors\": []}"));
    ek_free(buf);
}

static void test_decode_meta(void) {
    static char buf[4096];
    const char *h = "{\"tensors\": [{\"name\": \"y\", \"dtype\": \"uint8\", \"shape\": [2, 0], \"offset\": 0, "
                    "\"nbytes\": 0}, {\"nbytes\": 3, \"offset\": 0, \"shape\": [3], \"dtype\": \"int8\", \"name\": "
                    "\"z\\u00e9\", \"extra\": [1, {\"a\": null}]}], \"model\": \"m\", \"version\": \"v\\\"2\", "
                    "\"inference_ms\": 1.25e0, \"queue_ms\": 0.5, \"batch\": 4, \"request_id\": 123456789012, "
                    "\"session\": {\"id\": \"s\", \"steps\": [1, 2]}}";
    ek_result *r = NULL;
    char err[256] = "";
    size_t n = message(buf, h, "abc", 3);
    CHECK(ek_decode_tensors(buf, n, &r, err, sizeof err) == EK_OK);
    if (!r) {
        fprintf(stderr, "decode: %s\n", err);
        return;
    }
    CHECK(r->count == 2 && strcmp(r->outputs[1].name, "z\xc3\xa9") == 0);
    CHECK(r->outputs[0].ndim == 2 && r->outputs[0].shape[1] == 0 && r->outputs[0].nbytes == 0);
    CHECK(memcmp(r->outputs[1].data, "abc", 3) == 0);
    CHECK(r->model && strcmp(r->model, "m") == 0 && r->version && strcmp(r->version, "v\"2") == 0);
    CHECK(r->inference_ms == 1.25 && r->queue_ms == 0.5 && r->batch == 4 && r->request_id == 123456789012LL);
    ek_result_free(r);
    n = message(buf, "{\"request_id\": null, \"tensors\": [], \"version\": 3}", NULL, 0);
    r = NULL;
    CHECK(ek_decode_tensors(buf, n, &r, err, sizeof err) == EK_OK);
    CHECK(r && r->count == 0 && r->request_id == -1 && r->version == NULL);
    ek_result_free(r);
}

static void test_decode_errors(void) {
    static char many[1 << 18];
    char err[256], *p;
    ek_result *r = NULL;
    int i;
    const char *e = "{\"name\": \"a\", \"dtype\": \"float32\", \"shape\": [2], \"offset\": 0, \"nbytes\": 8}";
#define EXPECT_BAD(header, plen, text)                                                   \
    do {                                                                                 \
        err[0] = '\0';                                                                   \
        CHECK(decode_header(header, plen, err, sizeof err) == EK_ERR_DECODE);            \
        CHECK(strstr(err, text) != NULL);                                                \
        if (!strstr(err, text)) fprintf(stderr, "  got: %s\n", err);                     \
    } while (0)
    CHECK(ek_decode_tensors("EKT", 3, &r, err, sizeof err) == EK_ERR_DECODE && strstr(err, "magic"));
    CHECK(ek_decode_tensors("XKT1\0\0\0\0", 8, &r, err, sizeof err) == EK_ERR_DECODE && strstr(err, "magic"));
    CHECK(ek_decode_tensors("EKT1\x10\0\0\0{}", 10, &r, err, sizeof err) == EK_ERR_DECODE &&
          strstr(err, "exceeds the body"));
    CHECK(ek_decode_tensors("EKT1\0\0\x20\0", 8, &r, err, sizeof err) == EK_ERR_DECODE && strstr(err, "larger than"));
    CHECK(r == NULL);
    EXPECT_BAD("[]", 0, "not valid JSON");
    EXPECT_BAD("{\"tensors\": {}}", 0, "not valid JSON");
    EXPECT_BAD("{\"meta\": 1}", 0, "not valid JSON");
    EXPECT_BAD("{\"tensors\": []} x", 0, "not valid JSON");
    EXPECT_BAD("{\"tensors\": [], \"a\": [1,}", 0, "not valid JSON");
    EXPECT_BAD("{\"tensors\": [], \"a\": \"\x01\"}", 0, "not valid JSON");
    EXPECT_BAD("{\"tensors\": [], \"tensors\": []}", 0, "not valid JSON");
    EXPECT_BAD("{\"tensors\": [{\"name\": \"a\", \"dtype\": \"float32\", \"shape\": [2], \"offset\": 0}]}", 8,
               "needs name, dtype");
    EXPECT_BAD("{\"tensors\": [{\"name\": \"a\", \"dtype\": \"float32\", \"shape\": [2.0], \"offset\": 0, "
               "\"nbytes\": 8}]}", 8, "needs name, dtype");
    EXPECT_BAD("{\"tensors\": [{\"name\": \"\", \"dtype\": \"float32\", \"shape\": [2], \"offset\": 0, "
               "\"nbytes\": 8}]}", 8, "1 to 256");
    EXPECT_BAD("{\"tensors\": [{\"name\": \"a\", \"dtype\": \"complex64\", \"shape\": [2], \"offset\": 0, "
               "\"nbytes\": 8}]}", 8, "unsupported dtype");
    EXPECT_BAD("{\"tensors\": [{\"name\": \"a\", \"dtype\": \"float32\", \"shape\": [-2], \"offset\": 0, "
               "\"nbytes\": 8}]}", 8, "negative dimension");
    EXPECT_BAD("{\"tensors\": [{\"name\": \"a\", \"dtype\": \"float32\", \"shape\": [3], \"offset\": 0, "
               "\"nbytes\": 8}]}", 12, "do not match");
    EXPECT_BAD("{\"tensors\": [{\"name\": \"a\", \"dtype\": \"float32\", \"shape\": [2], \"offset\": 4, "
               "\"nbytes\": 8}]}", 8, "do not match");
    EXPECT_BAD("{\"tensors\": [{\"name\": \"a\", \"dtype\": \"float32\", \"shape\": [2], \"offset\": -1, "
               "\"nbytes\": 8}]}", 8, "do not match");
    EXPECT_BAD("{\"tensors\": [{\"name\": \"a\", \"dtype\": \"float32\", \"shape\": [4611686018427387904, 4], "
               "\"offset\": 0, \"nbytes\": 0}]}", 8, "do not match");
    EXPECT_BAD("{\"tensors\": [{\"name\": \"a\", \"dtype\": \"uint8\", \"shape\": [99999999999999999999], "
               "\"offset\": 0, \"nbytes\": 8}]}", 8, "needs name, dtype");
    sprintf(many, "{\"tensors\": [%s, {\"name\": \"b\", \"dtype\": \"float32\", \"shape\": [2], \"offset\": 0, "
                  "\"nbytes\": 8}]}", e);
    EXPECT_BAD(many, 8, "add up to more than"); /* two entries sharing the same bytes */
    sprintf(many, "{\"tensors\": [%s, %s]}", e, e);
    EXPECT_BAD(many, 16, "listed twice");
    p = many + sprintf(many, "{\"tensors\": [{\"name\": \"a\", \"dtype\": \"uint8\", \"shape\": [");
    for (i = 0; i < 33; i++) p += sprintf(p, i ? ", 1" : "1");
    sprintf(p, "], \"offset\": 0, \"nbytes\": 1}]}");
    EXPECT_BAD(many, 1, "more than 32");
    p = many + sprintf(many, "{\"tensors\": [{\"name\": \"");
    for (i = 0; i < 257; i++) *p++ = 'n';
    sprintf(p, "\", \"dtype\": \"uint8\", \"shape\": [], \"offset\": 0, \"nbytes\": 1}]}");
    EXPECT_BAD(many, 1, "1 to 256");
    p = many + sprintf(many, "{\"tensors\": [");
    for (i = 0; i < EK_MAX_TENSORS + 1; i++)
        p += sprintf(p, "%s{\"name\": \"t%d\", \"dtype\": \"uint8\", \"shape\": [0], \"offset\": 0, \"nbytes\": 0}",
                     i ? "," : "", i);
    sprintf(p, "]}");
    EXPECT_BAD(many, 0, "more than 1024");
    p = many + sprintf(many, "{\"tensors\": [], \"deep\": ");
    for (i = 0; i < 100; i++) *p++ = '[';
    for (i = 0; i < 100; i++) *p++ = ']';
    sprintf(p, "}");
    EXPECT_BAD(many, 0, "not valid JSON");
}

static void test_client_args(void) {
    ek_client *c = NULL;
    ek_result *r = NULL;
    char *json = NULL;
    double inf = 1e308 * 10;
    CHECK(ek_client_create(NULL, 80, NULL, 0, &c) == EK_ERR_ARG && c == NULL);
    CHECK(ek_client_create("127.0.0.1", 0, NULL, 0, &c) == EK_ERR_ARG);
    CHECK(ek_client_create("127.0.0.1", 70000, NULL, 0, &c) == EK_ERR_ARG);
    CHECK(ek_client_create("127.0.0.1", 80, "tok\r\nX-Evil: 1", 0, &c) == EK_ERR_ARG);
    CHECK(ek_client_create("127.0.0.1", 80, NULL, -1, &c) == EK_ERR_ARG);
    CHECK(ek_client_create("127.0.0.1", fake_free_port(), "t", 500, &c) == EK_OK && c);
    CHECK(ek_load(c, "a/b", -1, -1, &json) == EK_ERR_ARG && ek_last_status(c) == 0);
    CHECK(strstr(ek_last_error(c), "model name") != NULL);
    CHECK(ek_infer(c, "m x", NULL, 0, &r) == EK_ERR_ARG && r == NULL);
    CHECK(ek_annotate(c, 1, &inf, NULL, &json) == EK_ERR_ARG && strstr(ek_last_error(c), "finite"));
    CHECK(ek_health(c, &json) == EK_ERR_CONNECT && ek_last_status(c) == 0 && json == NULL);
    CHECK(strstr(ek_last_error(c), "cannot connect") != NULL);
    ek_client_destroy(c);
    CHECK(ek_client_create("no-such-host.invalid", 80, NULL, 500, &c) == EK_OK);
    CHECK(ek_health(c, &json) == EK_ERR_RESOLVE);
    ek_client_destroy(c);
    ek_client_destroy(NULL);
    ek_result_free(NULL);
}

int main(int argc, char **argv) {
    test_dtypes();
    test_encode();
    test_encode_errors();
    test_decode_meta();
    test_decode_errors();
    test_client_args();
    test_client_paths();
    if (argc > 1) test_client_local(argv[1]); /* a folder it may write in (make test: the build folder) */
    printf("%d checks, %d failed\n", checks, failures);
    return failures ? 1 : 0;
}
