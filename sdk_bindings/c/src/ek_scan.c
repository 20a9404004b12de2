/* A minimal, targeted JSON scanner: enough to walk a tensor header, find one top-level key and skip the rest.
 * It validates what it walks (strings, numbers, nesting) but builds no tree: callers pick the values they know. */
#define _POSIX_C_SOURCE 200809L

#include <locale.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ek_internal.h"

#define MAX_DEPTH 64

void ek__ws(ek_cur *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r')) c->p++;
}

static int hex4(const char *p, unsigned *out) {
    unsigned v = 0;
    int i;
    for (i = 0; i < 4; i++) {
        char ch = p[i];
        v <<= 4;
        if (ch >= '0' && ch <= '9') v |= (unsigned)(ch - '0');
        else if (ch >= 'a' && ch <= 'f') v |= (unsigned)(ch - 'a' + 10);
        else if (ch >= 'A' && ch <= 'F') v |= (unsigned)(ch - 'A' + 10);
        else return -1;
    }
    *out = v;
    return 0;
}

static void put(char *dst, size_t cap, size_t *n, unsigned char ch) {
    if (dst && *n + 1 < cap) dst[*n] = (char)ch;
    (*n)++;
}

static void put_utf8(char *dst, size_t cap, size_t *n, unsigned cp) {
    if (cp < 0x80) {
        put(dst, cap, n, (unsigned char)cp);
    } else if (cp < 0x800) {
        put(dst, cap, n, (unsigned char)(0xC0 | (cp >> 6)));
        put(dst, cap, n, (unsigned char)(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
        put(dst, cap, n, (unsigned char)(0xE0 | (cp >> 12)));
        put(dst, cap, n, (unsigned char)(0x80 | ((cp >> 6) & 0x3F)));
        put(dst, cap, n, (unsigned char)(0x80 | (cp & 0x3F)));
    } else {
        put(dst, cap, n, (unsigned char)(0xF0 | (cp >> 18)));
        put(dst, cap, n, (unsigned char)(0x80 | ((cp >> 12) & 0x3F)));
        put(dst, cap, n, (unsigned char)(0x80 | ((cp >> 6) & 0x3F)));
        put(dst, cap, n, (unsigned char)(0x80 | (cp & 0x3F)));
    }
}

int ek__string(ek_cur *c, char *dst, size_t cap, size_t *len) {
    size_t n = 0;
    if (c->p >= c->end || *c->p != '"') return -1;
    c->p++;
    for (;;) {
        unsigned char ch;
        if (c->p >= c->end) return -1;
        ch = (unsigned char)*c->p++;
        if (ch == '"') break;
        if (ch < 0x20) return -1;
        if (ch != '\\') {
            put(dst, cap, &n, ch);
            continue;
        }
        if (c->p >= c->end) return -1;
        ch = (unsigned char)*c->p++;
        switch (ch) {
        case '"': case '\\': case '/': put(dst, cap, &n, ch); break;
        case 'b': put(dst, cap, &n, '\b'); break;
        case 'f': put(dst, cap, &n, '\f'); break;
        case 'n': put(dst, cap, &n, '\n'); break;
        case 'r': put(dst, cap, &n, '\r'); break;
        case 't': put(dst, cap, &n, '\t'); break;
        case 'u': {
            unsigned cp, lo;
            if (c->end - c->p < 4 || hex4(c->p, &cp)) return -1;
            c->p += 4;
            if (cp >= 0xD800 && cp < 0xDC00 && c->end - c->p >= 6 && c->p[0] == '\\' && c->p[1] == 'u' &&
                hex4(c->p + 2, &lo) == 0 && lo >= 0xDC00 && lo < 0xE000) {
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                c->p += 6;
            }
            put_utf8(dst, cap, &n, cp);
            break;
        }
        default: return -1;
        }
    }
    if (dst && cap) dst[n < cap ? n : cap - 1] = '\0';
    if (len) *len = n;
    return 0;
}

static int digits(ek_cur *c) {
    const char *s = c->p;
    while (c->p < c->end && *c->p >= '0' && *c->p <= '9') c->p++;
    return c->p > s ? 0 : -1;
}

int ek__number(ek_cur *c, const char **s, size_t *n, int *is_int) {
    const char *start = c->p;
    *is_int = 1;
    if (c->p < c->end && *c->p == '-') c->p++;
    if (c->p < c->end && *c->p == '0') c->p++;
    else if (digits(c)) return -1;
    if (c->p < c->end && *c->p == '.') {
        c->p++;
        *is_int = 0;
        if (digits(c)) return -1;
    }
    if (c->p < c->end && (*c->p == 'e' || *c->p == 'E')) {
        c->p++;
        *is_int = 0;
        if (c->p < c->end && (*c->p == '+' || *c->p == '-')) c->p++;
        if (digits(c)) return -1;
    }
    *s = start;
    *n = (size_t)(c->p - start);
    return 0;
}

int ek__word(ek_cur *c, const char *word) {
    size_t n = strlen(word);
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, word, n) != 0) return 0;
    c->p += n;
    return 1;
}

static int skip(ek_cur *c, int depth) {
    const char *s;
    size_t n;
    int is_int;
    ek__ws(c);
    if (c->p >= c->end) return -1;
    if (*c->p == '"') return ek__string(c, NULL, 0, NULL);
    if (*c->p == '{' || *c->p == '[') {
        char close = *c->p == '{' ? '}' : ']';
        int object = *c->p == '{';
        if (depth >= MAX_DEPTH) return -1;
        c->p++;
        ek__ws(c);
        if (c->p < c->end && *c->p == close) {
            c->p++;
            return 0;
        }
        for (;;) {
            if (object) {
                ek__ws(c);
                if (ek__string(c, NULL, 0, NULL)) return -1;
                ek__ws(c);
                if (c->p >= c->end || *c->p++ != ':') return -1;
            }
            if (skip(c, depth + 1)) return -1;
            ek__ws(c);
            if (c->p >= c->end) return -1;
            if (*c->p == ',') {
                c->p++;
                continue;
            }
            if (*c->p++ == close) return 0;
            return -1;
        }
    }
    if (ek__word(c, "true") || ek__word(c, "false") || ek__word(c, "null")) return 0;
    return ek__number(c, &s, &n, &is_int);
}

int ek__skip(ek_cur *c) { return skip(c, 1); }

int ek__int(const char *s, size_t n, long long *out) {
    long long v = 0;
    int neg = 0;
    size_t i = 0;
    if (n && s[0] == '-') {
        neg = 1;
        i = 1;
    }
    if (i >= n) return -1;
    for (; i < n; i++) {
        int d;
        if (s[i] < '0' || s[i] > '9') return -1;
        d = s[i] - '0';
        if (v > (0x7FFFFFFFFFFFFFFFLL - d) / 10) return -1;
        v = v * 10 + d;
    }
    *out = neg ? -v : v;
    return 0;
}

double ek__double(const char *s, size_t n) {
    char tmp[64];
    const char *point = localeconv()->decimal_point;
    size_t i;
    if (n >= sizeof tmp) n = sizeof tmp - 1; /* 63 significant characters are more than a double holds */
    for (i = 0; i < n; i++) tmp[i] = (s[i] == '.' && point && point[0]) ? point[0] : s[i];
    tmp[n] = '\0';
    return strtod(tmp, NULL);
}

void ek__format_double(char *dst, double x) {
    const char *point = localeconv()->decimal_point;
    char *p;
    sprintf(dst, "%.17g", x);
    if (point && point[0] && point[0] != '.' && (p = strchr(dst, point[0])) != NULL) *p = '.';
}

int ek__top_find(const char *json, size_t len, const char *key, ek_cur *val) {
    ek_cur c;
    int found = 0;
    size_t klen = strlen(key);
    c.p = json;
    c.end = json + len;
    ek__ws(&c);
    if (c.p >= c.end || *c.p++ != '{') return -1;
    ek__ws(&c);
    if (c.p < c.end && *c.p == '}') return 0;
    for (;;) {
        char name[64];
        size_t nlen;
        ek__ws(&c);
        if (ek__string(&c, name, sizeof name, &nlen)) return -1;
        ek__ws(&c);
        if (c.p >= c.end || *c.p++ != ':') return -1;
        ek__ws(&c);
        if (nlen == klen && nlen < sizeof name && memcmp(name, key, klen) == 0) {
            *val = c;
            found = 1;
        }
        if (ek__skip(&c)) return -1;
        ek__ws(&c);
        if (c.p >= c.end) return -1;
        if (*c.p == ',') {
            c.p++;
            continue;
        }
        if (*c.p++ != '}') return -1;
        ek__ws(&c);
        return c.p == c.end ? found : -1;
    }
}
