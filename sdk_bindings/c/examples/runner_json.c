#define _POSIX_C_SOURCE 200809L

#include "runner_json.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *ws(const char *p, const char *e) {
    while (p < e && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
    return p;
}

static const char *skip_string(const char *p, const char *e) {
    for (p++; p < e; p++) {
        if (*p == '\\') p++;
        else if (*p == '"') return p + 1;
    }
    return NULL;
}

/* Past the value at p, or NULL when malformed. */
static const char *skip(const char *p, const char *e, int depth) {
    p = ws(p, e);
    if (p >= e || depth > 200) return NULL;
    if (*p == '"') return skip_string(p, e);
    if (*p == '{' || *p == '[') {
        char close = *p == '{' ? '}' : ']';
        int object = *p == '{';
        p = ws(p + 1, e);
        if (p < e && *p == close) return p + 1;
        for (;;) {
            if (object) {
                p = ws(p, e);
                if (p >= e || *p != '"' || !(p = skip_string(p, e))) return NULL;
                p = ws(p, e);
                if (p >= e || *p++ != ':') return NULL;
            }
            if (!(p = skip(p, e, depth + 1))) return NULL;
            p = ws(p, e);
            if (p >= e) return NULL;
            if (*p == ',') p++;
            else if (*p == close) return p + 1;
            else return NULL;
        }
    }
    if (strchr("-0123456789", *p)) {
        while (p < e && strchr("-+.eE0123456789", *p)) p++;
        return p;
    }
    if (e - p >= 4 && (!memcmp(p, "true", 4) || !memcmp(p, "null", 4))) return p + 4;
    if (e - p >= 5 && !memcmp(p, "false", 5)) return p + 5;
    return NULL;
}

int jparse(const char *text, size_t len, jv *out) {
    const char *e = text + len, *s = ws(text, e), *end = skip(s, e, 0);
    if (!end || ws(end, e) != e) return -1;
    out->p = s;
    out->n = (size_t)(end - s);
    return 0;
}

char jv_kind(jv v) {
    if (!v.p || !v.n) return 0;
    if (strchr("{[\"ntf", v.p[0])) return v.p[0];
    return '0';
}

int jv_next(jv v, size_t *pos, jv *key, jv *val) {
    const char *e = v.p + v.n, *p = v.p + (*pos ? *pos : 1), *q;
    p = ws(p, e);
    if (p < e && *p == ',') p = ws(p + 1, e);
    if (p >= e || *p == '}' || *p == ']') return 0;
    if (v.p[0] == '{') {
        q = skip_string(p, e);
        if (key) {
            key->p = p;
            key->n = (size_t)(q - p);
        }
        p = ws(ws(q, e) + 1, e); /* past ':' */
    }
    q = skip(p, e, 0);
    val->p = p;
    val->n = (size_t)(q - p);
    *pos = (size_t)(q - v.p);
    return 1;
}

int jv_get(jv obj, const char *key, jv *out) {
    size_t pos = 0, n = strlen(key);
    jv k, v;
    int found = 0;
    if (jv_kind(obj) != '{') return 0;
    while (jv_next(obj, &pos, &k, &v))
        if (k.n == n + 2 && memcmp(k.p + 1, key, n) == 0) {
            *out = v;
            found = 1;
        }
    return found;
}

char *jv_str(jv v) {
    char *out, *o;
    const char *p, *e;
    if (jv_kind(v) != '"' || !(out = malloc(v.n * 2 + 1))) return NULL;
    for (o = out, p = v.p + 1, e = v.p + v.n - 1; p < e; p++) {
        if (*p != '\\') {
            *o++ = *p;
            continue;
        }
        switch (*++p) {
        case 'b': *o++ = '\b'; break;
        case 'f': *o++ = '\f'; break;
        case 'n': *o++ = '\n'; break;
        case 'r': *o++ = '\r'; break;
        case 't': *o++ = '\t'; break;
        case 'u': {
            unsigned cp = (unsigned)strtoul((char[]){p[1], p[2], p[3], p[4], 0}, NULL, 16), lo;
            p += 4;
            if (cp >= 0xD800 && cp < 0xDC00 && p + 6 < e + 1 && p[1] == '\\' && p[2] == 'u') {
                lo = (unsigned)strtoul((char[]){p[3], p[4], p[5], p[6], 0}, NULL, 16);
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                p += 6;
            }
            if (cp < 0x80) *o++ = (char)cp;
            else if (cp < 0x800) *o++ = (char)(0xC0 | (cp >> 6)), *o++ = (char)(0x80 | (cp & 0x3F));
            else if (cp < 0x10000)
                *o++ = (char)(0xE0 | (cp >> 12)), *o++ = (char)(0x80 | ((cp >> 6) & 0x3F)),
                *o++ = (char)(0x80 | (cp & 0x3F));
            else
                *o++ = (char)(0xF0 | (cp >> 18)), *o++ = (char)(0x80 | ((cp >> 12) & 0x3F)),
                *o++ = (char)(0x80 | ((cp >> 6) & 0x3F)), *o++ = (char)(0x80 | (cp & 0x3F));
            break;
        }
        default: *o++ = *p;
        }
    }
    *o = '\0';
    return out;
}

double jv_num(jv v) { return jv_kind(v) == '0' ? strtod(v.p, NULL) : 0.0; }
long long jv_int(jv v) { return jv_kind(v) == '0' ? strtoll(v.p, NULL, 10) : 0; }

void jo_raw(jout *o, const char *s, size_t n) {
    if (o->n + n + 1 > o->cap) {
        size_t cap = o->cap ? o->cap : 1024;
        while (cap < o->n + n + 1) cap *= 2;
        if (!(o->p = realloc(o->p, cap))) {
            fputs("contract_runner: out of memory\n", stderr);
            exit(2);
        }
        o->cap = cap;
    }
    memcpy(o->p + o->n, s, n);
    o->n += n;
    o->p[o->n] = '\0';
}

void jo_cat(jout *o, const char *s) { jo_raw(o, s, strlen(s)); }

void jo_fmt(jout *o, const char *fmt, ...) {
    char buf[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    jo_cat(o, buf);
}

void jo_str(jout *o, const char *s) {
    jo_raw(o, "\"", 1);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') {
            jo_raw(o, "\\", 1);
            jo_raw(o, s, 1);
        } else if (ch < 0x20) {
            jo_fmt(o, "\\u%04x", ch);
        } else {
            jo_raw(o, s, 1);
        }
    }
    jo_raw(o, "\"", 1);
}

static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

void jo_b64(jout *o, const void *data, size_t n) {
    const unsigned char *d = data;
    size_t i;
    char q[4];
    jo_raw(o, "\"", 1);
    for (i = 0; i + 2 < n; i += 3) {
        q[0] = B64[d[i] >> 2];
        q[1] = B64[((d[i] & 3) << 4) | (d[i + 1] >> 4)];
        q[2] = B64[((d[i + 1] & 15) << 2) | (d[i + 2] >> 6)];
        q[3] = B64[d[i + 2] & 63];
        jo_raw(o, q, 4);
    }
    if (n - i == 1) {
        q[0] = B64[d[i] >> 2];
        q[1] = B64[(d[i] & 3) << 4];
        q[2] = q[3] = '=';
        jo_raw(o, q, 4);
    } else if (n - i == 2) {
        q[0] = B64[d[i] >> 2];
        q[1] = B64[((d[i] & 3) << 4) | (d[i + 1] >> 4)];
        q[2] = B64[(d[i + 1] & 15) << 2];
        q[3] = '=';
        jo_raw(o, q, 4);
    }
    jo_raw(o, "\"", 1);
}

int b64_decode(const char *s, size_t n, unsigned char **out, size_t *len) {
    unsigned char *d = malloc(n / 4 * 3 + 3);
    signed char value[256];
    unsigned acc = 0;
    int bits = 0, i;
    size_t j, k = 0;
    if (!d) return -1;
    memset(value, -1, sizeof value);
    for (i = 0; i < 64; i++) value[(unsigned char)B64[i]] = (signed char)i;
    for (j = 0; j < n && s[j] != '='; j++) {
        int v = value[(unsigned char)s[j]];
        if (v < 0) {
            free(d);
            return -1;
        }
        acc = ((acc << 6) | (unsigned)v) & 0xFFFFFF;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            d[k++] = (unsigned char)(acc >> bits);
        }
    }
    *out = d;
    *len = k;
    return 0;
}
