/* Decoding a tensor message: the header is checked as the agent's own decoder checks it, in two passes over
 * the JSON (count, then fill one allocation), so a response can make the library allocate only what its
 * checked sizes say. */
#define _POSIX_C_SOURCE 200809L

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ek_internal.h"

typedef struct fill {
    size_t n_tensors, n_dims;
    ek_result *res; /* NULL in the counting pass */
    ek_tensor *t;
    int64_t *dims;
    char *strs; /* room for the decoded strings */
    const char *payload;
} fill;

static ek_status bad(char *err, size_t errlen, const char *fmt, ...) {
    va_list ap;
    if (err && errlen) {
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return EK_ERR_DECODE;
}

static int expect(ek_cur *c, char ch) {
    ek__ws(c);
    if (c->p >= c->end || *c->p != ch) return -1;
    c->p++;
    return 0;
}

/* Reads a string value into f's string area (filling) or a scratch buffer (counting); *out = its text. */
static int read_string(ek_cur *c, fill *f, char *scratch, size_t cap, const char **out, size_t *len) {
    char *dst = f->res ? f->strs : scratch;
    size_t n;
    if (ek__string(c, dst, f->res ? (size_t)-1 : cap, &n)) return -1;
    if (f->res) f->strs += n + 1;
    *out = dst;
    *len = n;
    return 0;
}

static int read_int(ek_cur *c, long long *v) {
    const char *s;
    size_t n;
    int is_int;
    ek__ws(c);
    if (ek__number(c, &s, &n, &is_int) || !is_int) return -1;
    return ek__int(s, n, v);
}

#define ENTRY_ERR "tensor entry needs name, dtype, shape, offset, nbytes"

static ek_status entry(ek_cur *c, fill *f, size_t payload_len, unsigned long long *total, char *err, size_t errlen) {
    char scratch[EK_MAX_NAME + 2], key[16], dtype_s[16];
    const char *name = NULL;
    size_t nlen = 0, klen, dlen = 0;
    long long dims[EK_MAX_DIMS], offset = 0, nbytes = 0, v;
    int ndim = -1, have_dtype = 0, have_offset = 0, have_nbytes = 0, neg = 0, i;
    unsigned long long count = 1;
    ek_dtype dtype = EK_FLOAT32;
    if (expect(c, '{')) return bad(err, errlen, ENTRY_ERR);
    ek__ws(c);
    if (c->p < c->end && *c->p == '}') c->p++;
    else
        for (;;) {
            ek__ws(c);
            if (ek__string(c, key, sizeof key, &klen) || expect(c, ':')) return bad(err, errlen, ENTRY_ERR);
            ek__ws(c);
            if (klen < sizeof key && strcmp(key, "name") == 0 && c->p < c->end && *c->p == '"') {
                if (read_string(c, f, scratch, sizeof scratch, &name, &nlen)) return bad(err, errlen, ENTRY_ERR);
                if (memchr(name, '\0', nlen < sizeof scratch - 1 ? nlen : sizeof scratch - 1)) nlen = 0;
            } else if (klen < sizeof key && strcmp(key, "dtype") == 0 && c->p < c->end && *c->p == '"') {
                if (ek__string(c, dtype_s, sizeof dtype_s, &dlen)) return bad(err, errlen, ENTRY_ERR);
                have_dtype = 1;
            } else if (klen < sizeof key && strcmp(key, "shape") == 0 && c->p < c->end && *c->p == '[') {
                c->p++;
                ndim = 0;
                ek__ws(c);
                if (c->p < c->end && *c->p == ']') c->p++;
                else
                    for (;;) {
                        if (read_int(c, &v)) return bad(err, errlen, ENTRY_ERR);
                        if (ndim < EK_MAX_DIMS) dims[ndim] = v;
                        if (v < 0) neg = 1;
                        ndim++;
                        ek__ws(c);
                        if (c->p < c->end && *c->p == ',') c->p++;
                        else if (expect(c, ']')) return bad(err, errlen, ENTRY_ERR);
                        else break;
                    }
            } else if (klen < sizeof key && strcmp(key, "offset") == 0) {
                if (read_int(c, &offset)) return bad(err, errlen, ENTRY_ERR);
                have_offset = 1;
            } else if (klen < sizeof key && strcmp(key, "nbytes") == 0) {
                if (read_int(c, &nbytes)) return bad(err, errlen, ENTRY_ERR);
                have_nbytes = 1;
            } else if (ek__skip(c)) {
                return bad(err, errlen, "tensor header is not valid JSON with a 'tensors' list");
            }
            ek__ws(c);
            if (c->p < c->end && *c->p == ',') c->p++;
            else if (expect(c, '}')) return bad(err, errlen, ENTRY_ERR);
            else break;
        }
    if (!name || !have_dtype || ndim < 0 || !have_offset || !have_nbytes) return bad(err, errlen, ENTRY_ERR);
    if (nlen == 0 || nlen > EK_MAX_NAME) return bad(err, errlen, "tensor names are strings of 1 to 256 characters");
    if (f->res)
        for (i = 0; (size_t)i < f->n_tensors; i++)
            if (strcmp(f->t[i].name, name) == 0) return bad(err, errlen, "tensor '%s' is listed twice", name);
    if (dlen >= sizeof dtype_s || ek__dtype_parse(dtype_s, &dtype))
        return bad(err, errlen, "tensor '%.256s': unsupported dtype", name);
    if (ndim > EK_MAX_DIMS) return bad(err, errlen, "tensor '%.256s': more than 32 dimensions", name);
    if (neg) return bad(err, errlen, "tensor '%.256s': negative dimension", name);
    for (i = 0; i < ndim; i++) {
        if (dims[i] == 0) count = 0;
        else if (count && count > (unsigned long long)payload_len / (unsigned long long)dims[i]) count = ~0ULL;
        else if (count != ~0ULL) count *= (unsigned long long)dims[i];
    }
    if (count == ~0ULL || nbytes < 0 || count * ek_dtype_size(dtype) != (unsigned long long)nbytes || offset < 0 ||
        (unsigned long long)offset > payload_len || (unsigned long long)nbytes > payload_len - (size_t)offset)
        return bad(err, errlen, "tensor '%.256s': shape, dtype and offset do not match its %lld bytes", name, nbytes);
    *total += (unsigned long long)nbytes;
    if (*total > payload_len)
        return bad(err, errlen, "the tensors' sizes add up to more than the %lu bytes of payload",
                   (unsigned long)payload_len);
    if (f->res) {
        ek_tensor *t = &f->t[f->n_tensors];
        t->name = name;
        t->dtype = dtype;
        t->ndim = ndim;
        t->shape = f->dims;
        for (i = 0; i < ndim; i++) *f->dims++ = dims[i];
        t->data = f->payload + offset;
        t->nbytes = (size_t)nbytes;
    }
    f->n_tensors++;
    f->n_dims += (size_t)ndim;
    return EK_OK;
}

static ek_status parse(const char *h, size_t hlen, size_t payload_len, fill *f, char *err, size_t errlen) {
    ek_cur c;
    int seen = 0;
    unsigned long long total = 0;
    ek_status st;
    const char *notjson = "tensor header is not valid JSON with a 'tensors' list";
    c.p = h;
    c.end = h + hlen;
    if (expect(&c, '{')) return bad(err, errlen, notjson);
    ek__ws(&c);
    if (c.p < c.end && *c.p == '}') c.p++;
    else
        for (;;) {
            char key[16];
            size_t klen;
            ek__ws(&c);
            if (ek__string(&c, key, sizeof key, &klen) || expect(&c, ':')) return bad(err, errlen, notjson);
            ek__ws(&c);
            if (klen >= sizeof key) key[0] = '\0';
            if (strcmp(key, "tensors") == 0) {
                if (seen++ || expect(&c, '[')) return bad(err, errlen, notjson);
                ek__ws(&c);
                if (c.p < c.end && *c.p == ']') c.p++;
                else
                    for (;;) {
                        if (f->n_tensors >= EK_MAX_TENSORS)
                            return bad(err, errlen, "more than %d tensors in one message", EK_MAX_TENSORS);
                        if ((st = entry(&c, f, payload_len, &total, err, errlen)) != EK_OK) return st;
                        ek__ws(&c);
                        if (c.p < c.end && *c.p == ',') c.p++;
                        else if (expect(&c, ']')) return bad(err, errlen, notjson);
                        else break;
                    }
            } else if (f->res && (strcmp(key, "model") == 0 || strcmp(key, "version") == 0) && c.p < c.end &&
                       *c.p == '"') {
                const char *s;
                size_t n;
                if (read_string(&c, f, NULL, 0, &s, &n)) return bad(err, errlen, notjson);
                *(key[0] == 'm' ? &f->res->model : &f->res->version) = s;
            } else if (f->res && (strcmp(key, "inference_ms") == 0 || strcmp(key, "queue_ms") == 0 ||
                                  strcmp(key, "batch") == 0 || strcmp(key, "request_id") == 0) &&
                       c.p < c.end && (*c.p == '-' || (*c.p >= '0' && *c.p <= '9'))) {
                const char *s;
                size_t n;
                int is_int;
                long long v;
                if (ek__number(&c, &s, &n, &is_int)) return bad(err, errlen, notjson);
                if (key[0] == 'i') f->res->inference_ms = ek__double(s, n);
                else if (key[0] == 'q') f->res->queue_ms = ek__double(s, n);
                else if (is_int && ek__int(s, n, &v) == 0) *(key[0] == 'b' ? &f->res->batch : &f->res->request_id) = v;
            } else if (ek__skip(&c)) {
                return bad(err, errlen, notjson);
            }
            ek__ws(&c);
            if (c.p < c.end && *c.p == ',') c.p++;
            else if (expect(&c, '}')) return bad(err, errlen, notjson);
            else break;
        }
    ek__ws(&c);
    if (c.p != c.end || !seen) return bad(err, errlen, notjson);
    return EK_OK;
}

#define ALIGN16(n) (((n) + 15) & ~(size_t)15)

ek_status ek__result_alloc(const char *header, size_t hlen, size_t payload_len, ek_result **out, char **payload,
                           char *err, size_t errlen) {
    fill f;
    size_t at, size;
    char *block, *pl;
    ek_status st;
    memset(&f, 0, sizeof f);
    if ((st = parse(header, hlen, payload_len, &f, err, errlen)) != EK_OK) return st;
    at = ALIGN16(sizeof(ek_result));
    at = ALIGN16(at + f.n_tensors * sizeof(ek_tensor));
    at = ALIGN16(at + f.n_dims * sizeof(int64_t));
    size = at + 2 * (hlen + 1) + 64;
    if (payload_len > SIZE_MAX - size || !(block = (char *)calloc(1, size + payload_len)))
        return bad(err, errlen, "out of memory for a response of %lu bytes", (unsigned long)payload_len),
               EK_ERR_NOMEM;
    f.res = (ek_result *)block;
    f.t = (ek_tensor *)(block + ALIGN16(sizeof(ek_result)));
    f.dims = (int64_t *)(block + ALIGN16(ALIGN16(sizeof(ek_result)) + f.n_tensors * sizeof(ek_tensor)));
    memcpy(block + at, header, hlen);
    f.strs = block + at + hlen + 1;
    pl = block + at + 2 * (hlen + 1);
    pl += (64 - ((uintptr_t)pl & 63)) & 63;
    f.payload = pl;
    f.n_tensors = f.n_dims = 0;
    f.res->outputs = f.t;
    f.res->header_json = block + at;
    f.res->header_len = hlen;
    f.res->inference_ms = f.res->queue_ms = -1;
    f.res->batch = f.res->request_id = -1;
    if ((st = parse(header, hlen, payload_len, &f, err, errlen)) != EK_OK) {
        free(block);
        return st;
    }
    f.res->count = f.n_tensors;
    *out = f.res;
    *payload = pl;
    return EK_OK;
}

ek_status ek_decode_tensors(const void *buf, size_t len, ek_result **out, char *err, size_t errlen) {
    const unsigned char *b = (const unsigned char *)buf;
    size_t hlen;
    char *payload;
    ek_status st;
    if (!out || (len && !buf)) return EK_ERR_ARG;
    if (len < 8 || memcmp(b, "EKT1", 4) != 0) return bad(err, errlen, "body is not edgekit tensors (missing EKT1 magic)");
    hlen = (size_t)b[4] | (size_t)b[5] << 8 | (size_t)b[6] << 16 | (size_t)b[7] << 24;
    if (hlen > EK_MAX_HEADER)
        return bad(err, errlen, "tensor header of %lu bytes is larger than %u", (unsigned long)hlen, EK_MAX_HEADER);
    if (hlen > len - 8) return bad(err, errlen, "header length exceeds the body");
    if ((st = ek__result_alloc((const char *)b + 8, hlen, len - 8 - hlen, out, &payload, err, errlen)) != EK_OK)
        return st;
    memcpy(payload, b + 8 + hlen, len - 8 - hlen);
    return EK_OK;
}

const ek_tensor *ek_result_find(const ek_result *r, const char *name) {
    size_t i;
    if (!r || !name) return NULL;
    for (i = 0; i < r->count; i++)
        if (strcmp(r->outputs[i].name, name) == 0) return &r->outputs[i];
    return NULL;
}

void ek_result_free(ek_result *r) { free(r); }
