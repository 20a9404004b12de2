/* The binary tensor encoding: "EKT1" | uint32 LE header length | JSON header | payload. */
#define _POSIX_C_SOURCE 200809L

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ek_internal.h"

static const char *const NAMES[] = {"float32", "float16", "float64", "int8",  "uint8",
                                    "int16",   "uint16",  "int32",   "int64", "bool"};
static const size_t SIZES[] = {4, 2, 8, 1, 1, 2, 2, 4, 8, 1};
#define N_DTYPES (sizeof SIZES / sizeof SIZES[0])

size_t ek_dtype_size(ek_dtype d) { return (unsigned)d < N_DTYPES ? SIZES[d] : 0; }
const char *ek_dtype_name(ek_dtype d) { return (unsigned)d < N_DTYPES ? NAMES[d] : NULL; }

int ek__dtype_parse(const char *s, ek_dtype *out) {
    unsigned i;
    for (i = 0; i < N_DTYPES; i++)
        if (strcmp(s, NAMES[i]) == 0) {
            *out = (ek_dtype)i;
            return 0;
        }
    return -1;
}

static ek_status fail(char *err, size_t errlen, ek_status st, const char *fmt, ...) {
    va_list ap;
    if (err && errlen) {
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return st;
}

/* -- encoding ------------------------------------------------------------------------------------------------ */

typedef struct sbuf {
    char *p;
    size_t n, cap;
    int oom;
} sbuf;

static void sb_add(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        char *p;
        while (cap < b->n + n + 1) cap *= 2;
        p = (char *)realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
}

static void sb_str(sbuf *b, const char *s) { sb_add(b, s, strlen(s)); }

static void sb_json_string(sbuf *b, const char *s) {
    sb_add(b, "\"", 1);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        char esc[8];
        if (ch == '"' || ch == '\\') {
            esc[0] = '\\';
            esc[1] = (char)ch;
            sb_add(b, esc, 2);
        } else if (ch < 0x20) {
            const char *shorts = "\b\f\n\r\t", *letters = "bfnrt", *hit = strchr(shorts, ch);
            if (hit) {
                esc[0] = '\\';
                esc[1] = letters[hit - shorts];
                sb_add(b, esc, 2);
            } else {
                sprintf(esc, "\\u%04x", ch);
                sb_add(b, esc, 6);
            }
        } else {
            sb_add(b, s, 1);
        }
    }
    sb_add(b, "\"", 1);
}

static ek_status check_input(const ek_tensor *t, size_t i, size_t *nbytes, char *err, size_t errlen) {
    size_t len, item = ek_dtype_size(t->dtype), count = 1;
    int d;
    if (!t->name || (len = strlen(t->name)) == 0 || len > EK_MAX_NAME)
        return fail(err, errlen, EK_ERR_ARG, "input %lu: a tensor name is a string of 1 to %d bytes",
                    (unsigned long)i, EK_MAX_NAME);
    if (!item) return fail(err, errlen, EK_ERR_ARG, "input %s: unknown dtype %d", t->name, (int)t->dtype);
    if (t->ndim < 0 || t->ndim > EK_MAX_DIMS)
        return fail(err, errlen, EK_ERR_ARG, "input %s: ndim %d is not 0 to %d", t->name, t->ndim, EK_MAX_DIMS);
    if (t->ndim > 0 && !t->shape) return fail(err, errlen, EK_ERR_ARG, "input %s: shape is NULL", t->name);
    for (d = 0; d < t->ndim; d++) {
        if (t->shape[d] < 0) return fail(err, errlen, EK_ERR_ARG, "input %s: negative dimension", t->name);
        if (t->shape[d] > 0 && count > SIZE_MAX / (size_t)t->shape[d] / item)
            return fail(err, errlen, EK_ERR_ARG, "input %s: too many elements", t->name);
        count *= (size_t)t->shape[d];
    }
    count *= item;
    if (t->nbytes != 0 && t->nbytes != count)
        return fail(err, errlen, EK_ERR_ARG, "input %s: nbytes %lu, but its shape and dtype make %lu", t->name,
                    (unsigned long)t->nbytes, (unsigned long)count);
    if (count && !t->data) return fail(err, errlen, EK_ERR_ARG, "input %s: data is NULL", t->name);
    *nbytes = count;
    return EK_OK;
}

ek_status ek__encode_head(const ek_tensor *t, size_t n, char **head, size_t *head_len, size_t *payload_len,
                          char *err, size_t errlen) {
    sbuf b = {NULL, 0, 0, 0};
    size_t i, j, offset = 0, hlen;
    char num[48];
    ek_status st;
    if (n && !t) return fail(err, errlen, EK_ERR_ARG, "inputs is NULL");
    if (n > EK_MAX_TENSORS) return fail(err, errlen, EK_ERR_ARG, "%lu inputs; at most %d", (unsigned long)n, EK_MAX_TENSORS);
    sb_add(&b, "EKT1\0\0\0\0{\"tensors\": [", 21);
    for (i = 0; i < n; i++) {
        size_t nbytes = 0;
        int d;
        if ((st = check_input(&t[i], i, &nbytes, err, errlen)) != EK_OK) goto out;
        for (j = 0; j < i; j++)
            if (strcmp(t[j].name, t[i].name) == 0) {
                st = fail(err, errlen, EK_ERR_ARG, "tensor %s is listed twice", t[i].name);
                goto out;
            }
        if (offset > SIZE_MAX - nbytes) {
            st = fail(err, errlen, EK_ERR_ARG, "the inputs are too large together");
            goto out;
        }
        sb_str(&b, i ? ", {\"name\": " : "{\"name\": ");
        sb_json_string(&b, t[i].name);
        sb_str(&b, ", \"dtype\": \"");
        sb_str(&b, ek_dtype_name(t[i].dtype));
        sb_str(&b, "\", \"shape\": [");
        for (d = 0; d < t[i].ndim; d++) {
            sprintf(num, d ? ", %lld" : "%lld", (long long)t[i].shape[d]);
            sb_str(&b, num);
        }
        sprintf(num, "], \"offset\": %lu, \"nbytes\": %lu}", (unsigned long)offset, (unsigned long)nbytes);
        sb_str(&b, num);
        offset += nbytes;
    }
    sb_str(&b, "]}");
    if (b.oom) {
        st = fail(err, errlen, EK_ERR_NOMEM, "out of memory encoding the tensor header");
        goto out;
    }
    hlen = b.n - 8;
    b.p[4] = (char)(hlen & 0xFF);
    b.p[5] = (char)((hlen >> 8) & 0xFF);
    b.p[6] = (char)((hlen >> 16) & 0xFF);
    b.p[7] = (char)((hlen >> 24) & 0xFF);
    *head = b.p;
    *head_len = b.n;
    *payload_len = offset;
    return EK_OK;
out:
    free(b.p);
    return st;
}

ek_status ek_encode_tensors(const ek_tensor *t, size_t n, void **buf_out, size_t *len_out) {
    char *head, *buf;
    size_t head_len, payload, i, at;
    ek_status st;
    if (!buf_out || !len_out) return EK_ERR_ARG;
    if ((st = ek__encode_head(t, n, &head, &head_len, &payload, NULL, 0)) != EK_OK) return st;
    if (payload > SIZE_MAX - head_len || !(buf = (char *)realloc(head, head_len + payload))) {
        free(head);
        return EK_ERR_NOMEM;
    }
    for (i = 0, at = head_len; i < n; i++) {
        size_t nbytes = ek_dtype_size(t[i].dtype);
        int d;
        for (d = 0; d < t[i].ndim; d++) nbytes *= (size_t)t[i].shape[d];
        if (nbytes) memcpy(buf + at, t[i].data, nbytes);
        at += nbytes;
    }
    *buf_out = buf;
    *len_out = head_len + payload;
    return EK_OK;
}
