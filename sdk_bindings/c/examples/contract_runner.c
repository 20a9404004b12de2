/* The C SDK's contract runner: `contract_runner SCENARIO.json` runs the scenario's steps with the SDK and
 * prints one JSON document {"results": [...]} (the protocol of tests/harness/sdk_contract.py). */
#define _POSIX_C_SOURCE 200809L

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "edgekit.h"
#include "runner_json.h"

#define MAX_CLIENTS 16
#define TIMEOUT_MS 120000

typedef struct clients {
    char *host;
    int port;
    int n;
    char *tokens[MAX_CLIENTS]; /* NULL: no token */
    ek_client *c[MAX_CLIENTS];
} clients;

static ek_client *client_for(clients *cs, const char *token) {
    int i;
    for (i = 0; i < cs->n; i++)
        if ((!token && !cs->tokens[i]) || (token && cs->tokens[i] && strcmp(token, cs->tokens[i]) == 0))
            return cs->c[i];
    if (cs->n == MAX_CLIENTS || ek_client_create(cs->host, cs->port, token, TIMEOUT_MS, &cs->c[cs->n]) != EK_OK)
        return NULL;
    cs->tokens[cs->n] = token ? strcpy(malloc(strlen(token) + 1), token) : NULL;
    return cs->c[cs->n++];
}

/* The inputs of a step: {NAME: {"dtype", "shape", "b64"}} -> tensors (free_inputs frees them). */
typedef struct inputs {
    size_t n;
    ek_tensor t[64];
    int64_t shapes[64][EK_MAX_DIMS];
} inputs;

static void free_inputs(inputs *in) {
    size_t i;
    for (i = 0; i < in->n; i++) {
        free((void *)in->t[i].name);
        free((void *)in->t[i].data);
    }
    in->n = 0;
}

static int read_inputs(jv obj, inputs *in, char *err, size_t errlen) {
    size_t pos = 0;
    jv key, val, x;
    in->n = 0;
    while (jv_next(obj, &pos, &key, &val)) {
        ek_tensor *t = &in->t[in->n];
        char *dtype;
        unsigned char *data = NULL;
        size_t len = 0, spos = 0;
        int d;
        if (in->n == 64) return snprintf(err, errlen, "more than 64 inputs"), -1;
        memset(t, 0, sizeof *t);
        t->name = jv_str(key);
        t->shape = in->shapes[in->n];
        in->n++;
        dtype = jv_get(val, "dtype", &x) ? jv_str(x) : NULL;
        for (d = 0; dtype && ek_dtype_name((ek_dtype)d); d++)
            if (strcmp(ek_dtype_name((ek_dtype)d), dtype) == 0) break;
        if (!dtype || !ek_dtype_name((ek_dtype)d)) {
            snprintf(err, errlen, "input %s: unknown dtype %s", t->name, dtype ? dtype : "(none)");
            free(dtype);
            return -1;
        }
        free(dtype);
        t->dtype = (ek_dtype)d;
        if (jv_get(val, "shape", &x))
            while (t->ndim < EK_MAX_DIMS && jv_next(x, &spos, NULL, &key)) in->shapes[in->n - 1][t->ndim++] = jv_int(key);
        if (!jv_get(val, "b64", &x) || jv_kind(x) != '"' || b64_decode(x.p + 1, x.n - 2, &data, &len))
            return snprintf(err, errlen, "input %s: b64 is not base64", t->name), -1;
        t->data = data;
        t->nbytes = len;
    }
    return 0;
}

static void emit_error(jout *o, ek_client *c, ek_status st) {
    jo_fmt(o, "{\"ok\": false, \"status\": %d, \"message\": ", st == EK_ERR_HTTP ? ek_last_status(c) : 0);
    jo_str(o, ek_last_error(c)[0] ? ek_last_error(c) : ek_strerror(st));
    jo_cat(o, "}");
}

static void emit_outputs(jout *o, const ek_result *r) {
    size_t i, pos = 0;
    int d;
    jv header, key, val;
    jo_cat(o, "{\"outputs\": {");
    for (i = 0; i < r->count; i++) {
        const ek_tensor *t = &r->outputs[i];
        jo_cat(o, i ? ", " : "");
        jo_str(o, t->name);
        jo_fmt(o, ": {\"dtype\": \"%s\", \"shape\": [", ek_dtype_name(t->dtype));
        for (d = 0; d < t->ndim; d++) jo_fmt(o, d ? ", %lld" : "%lld", (long long)t->shape[d]);
        jo_cat(o, "], \"b64\": ");
        jo_b64(o, t->data, t->nbytes);
        jo_cat(o, "}");
    }
    jo_cat(o, "}, \"meta\": {");
    i = 0;
    if (jparse(r->header_json, r->header_len, &header) == 0)
        while (jv_next(header, &pos, &key, &val)) {
            if (key.n == 9 && memcmp(key.p, "\"tensors\"", 9) == 0) continue;
            jo_cat(o, i++ ? ", " : "");
            jo_raw(o, key.p, key.n);
            jo_cat(o, ": ");
            jo_raw(o, val.p, val.n);
        }
    jo_cat(o, "}}");
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* infer_loop and overhead: many infers on one kept-alive client. */
static void loop(jout *o, ek_client *c, const char *model, inputs *in, jv step, int overhead) {
    jv x;
    long long count = jv_get(step, overhead ? "runs" : "count", &x) ? jv_int(x) : 0, i, ok = 0, nv = 0;
    long long warmup = overhead && jv_get(step, "warmup", &x) ? jv_int(x) : 0;
    char **versions = calloc((size_t)count + 1, sizeof *versions);
    jout errors = {NULL, 0, 0}, client_ms = {NULL, 0, 0}, infer_ms = {NULL, 0, 0};
    jo_cat(&errors, "");
    jo_cat(&client_ms, "");
    jo_cat(&infer_ms, "");
    for (i = 0; i < warmup; i++) {
        ek_result *r = NULL;
        ek_infer(c, model, in->t, in->n, &r);
        ek_result_free(r);
    }
    for (i = 0; i < count; i++) {
        ek_result *r = NULL;
        double t0 = now_ms(), t1;
        ek_status st = ek_infer(c, model, in->t, in->n, &r);
        long long k;
        t1 = now_ms();
        if (st != EK_OK) {
            jo_cat(&errors, errors.n ? ", " : "");
            jo_str(&errors, ek_last_error(c)[0] ? ek_last_error(c) : ek_strerror(st));
        } else {
            ok++;
            for (k = 0; r->version && k < nv && strcmp(versions[k], r->version) != 0; k++) {
            }
            if (r->version && k == nv) versions[nv++] = strcpy(malloc(strlen(r->version) + 1), r->version);
        }
        jo_fmt(&client_ms, i ? ", %.6f" : "%.6f", t1 - t0);
        if (r && r->inference_ms >= 0) jo_fmt(&infer_ms, i ? ", %.17g" : "%.17g", r->inference_ms);
        else jo_cat(&infer_ms, i ? ", null" : "null");
        ek_result_free(r);
    }
    if (overhead) {
        jo_cat(o, "{\"ok\": true, \"result\": {\"client_ms\": [");
        jo_cat(o, client_ms.p);
        jo_cat(o, "], \"inference_ms\": [");
        jo_cat(o, infer_ms.p);
        jo_cat(o, "]}}");
    } else {
        jo_fmt(o, "{\"ok\": true, \"result\": {\"ok\": %lld, \"errors\": [", ok);
        jo_cat(o, errors.p);
        jo_cat(o, "], \"versions\": [");
        for (i = 0; i < nv; i++) {
            jo_cat(o, i ? ", " : "");
            jo_str(o, versions[i]);
        }
        jo_cat(o, "]}}");
    }
    for (i = 0; i < nv; i++) free(versions[i]);
    free(versions);
    free(errors.p);
    free(client_ms.p);
    free(infer_ms.p);
}

static void run_step(jout *o, clients *cs, jv step, jv default_token) {
    jv x, tok = default_token;
    char *token, *op, *model, *json = NULL, err[300];
    ek_client *c;
    ek_status st = EK_OK;
    inputs in;
    jv_get(step, "token", &tok);
    token = jv_str(tok); /* null or absent: no token */
    op = jv_get(step, "op", &x) ? jv_str(x) : NULL;
    model = jv_get(step, "model", &x) ? jv_str(x) : NULL;
    in.n = 0;
    if (!(c = client_for(cs, token))) {
        jo_cat(o, "{\"ok\": false, \"status\": 0, \"message\": \"cannot create a client\"}");
    } else if (!op) {
        jo_cat(o, "{\"ok\": false, \"status\": 0, \"message\": \"a step without op\"}");
    } else if (!strcmp(op, "health") || !strcmp(op, "models") || !strcmp(op, "load") || !strcmp(op, "unload") ||
               !strcmp(op, "annotate")) {
        if (!strcmp(op, "health")) st = ek_health(c, &json);
        else if (!strcmp(op, "models")) st = ek_models(c, &json);
        else if (!strcmp(op, "load")) st = ek_load(c, model, -1, -1, &json);
        else if (!strcmp(op, "unload")) st = ek_unload(c, model, &json);
        else {
            double pre = 0, post = 0;
            int has_pre = jv_get(step, "pre_ms", &x) && jv_kind(x) == '0', has_post;
            if (has_pre) pre = jv_num(x);
            has_post = jv_get(step, "post_ms", &x) && jv_kind(x) == '0';
            if (has_post) post = jv_num(x);
            st = ek_annotate(c, jv_get(step, "request_id", &x) ? jv_int(x) : -1, has_pre ? &pre : NULL,
                             has_post ? &post : NULL, &json);
        }
        if (st != EK_OK) {
            emit_error(o, c, st);
        } else {
            jv doc, models;
            jo_cat(o, "{\"ok\": true, \"result\": ");
            if (!strcmp(op, "models") && jparse(json, strlen(json), &doc) == 0 && jv_get(doc, "models", &models))
                jo_raw(o, models.p, models.n);
            else
                jo_cat(o, json);
            jo_cat(o, "}");
        }
    } else if (!strcmp(op, "infer") || !strcmp(op, "infer_loop") || !strcmp(op, "overhead")) {
        strcpy(err, "a step without inputs");
        if (!jv_get(step, "inputs", &x) || read_inputs(x, &in, err, sizeof err)) {
            jo_cat(o, "{\"ok\": false, \"status\": 0, \"message\": ");
            jo_str(o, err);
            jo_cat(o, "}");
        } else if (!strcmp(op, "infer")) {
            ek_result *r = NULL;
            if ((st = ek_infer(c, model, in.t, in.n, &r)) != EK_OK) {
                emit_error(o, c, st);
            } else {
                jo_cat(o, "{\"ok\": true, \"result\": ");
                emit_outputs(o, r);
                jo_cat(o, "}");
            }
            ek_result_free(r);
        } else {
            loop(o, c, model, &in, step, !strcmp(op, "overhead"));
        }
    } else {
        jo_cat(o, "{\"ok\": false, \"status\": 0, \"message\": ");
        jo_str(o, "unknown op");
        jo_cat(o, "}");
    }
    free_inputs(&in);
    ek_free(json);
    free(token);
    free(op);
    free(model);
}

static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    long n;
    if (!f) return NULL;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (buf = malloc((size_t)n + 1)) != NULL) {
        *len = fread(buf, 1, (size_t)n, f);
        buf[*len] = '\0';
    }
    fclose(f);
    return buf;
}

int main(int argc, char **argv) {
    size_t len = 0, pos = 0;
    char *text;
    jv doc, x, steps, step, token = {NULL, 0};
    clients cs;
    jout out = {NULL, 0, 0};
    int i, first = 1;
    if (argc != 2) {
        fputs("usage: contract_runner SCENARIO.json\n", stderr);
        return 2;
    }
    if (!(text = slurp(argv[1], &len)) || jparse(text, len, &doc) || jv_kind(doc) != '{') {
        fprintf(stderr, "contract_runner: %s is not a readable JSON object\n", argv[1]);
        return 2;
    }
    memset(&cs, 0, sizeof cs);
    cs.host = jv_get(doc, "host", &x) ? jv_str(x) : NULL;
    cs.port = jv_get(doc, "port", &x) ? (int)jv_int(x) : 0;
    if (!cs.host) cs.host = strcpy(malloc(10), "127.0.0.1");
    jv_get(doc, "token", &token);
    jo_cat(&out, "{\"results\": [");
    if (jv_get(doc, "steps", &steps))
        while (jv_next(steps, &pos, NULL, &step)) {
            jo_cat(&out, first ? "" : ", ");
            first = 0;
            run_step(&out, &cs, step, token);
        }
    jo_cat(&out, "]}\n");
    fputs(out.p, stdout);
    for (i = 0; i < cs.n; i++) {
        ek_client_destroy(cs.c[i]);
        free(cs.tokens[i]);
    }
    free(cs.host);
    free(out.p);
    free(text);
    return 0;
}
