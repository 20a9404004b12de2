/* The contract runner's own small JSON reader and writer, and base64 (not part of the library).
 * The reader keeps no tree: a value is the span of its text, read again when asked for. */
#ifndef RUNNER_JSON_H
#define RUNNER_JSON_H

#include <stddef.h>

typedef struct jv {
    const char *p; /* NULL: absent */
    size_t n;
} jv;

/* The one value that is the whole text; 0 on success. */
int jparse(const char *text, size_t len, jv *out);
/* '{', '[', '"', 'n' (null), 't', 'f', '0' (a number), or 0 when absent. */
char jv_kind(jv v);
/* The member key of an object (the last one of that name); 1 when found. */
int jv_get(jv obj, const char *key, jv *out);
/* Iterates an object or array from *pos (start at 0): 1 with the next member (*key: its quoted name, arrays: none). */
int jv_next(jv v, size_t *pos, jv *key, jv *val);
/* A string value decoded (malloc), or NULL when v is not a string. */
char *jv_str(jv v);
double jv_num(jv v);
long long jv_int(jv v);

/* A growing output text. */
typedef struct jout {
    char *p;
    size_t n, cap;
} jout;

void jo_raw(jout *o, const char *s, size_t n);
void jo_cat(jout *o, const char *s);
void jo_fmt(jout *o, const char *fmt, ...);
void jo_str(jout *o, const char *s); /* a JSON string */
void jo_b64(jout *o, const void *data, size_t n); /* a JSON string of base64 */

/* base64 text -> bytes (malloc, one spare byte so it is never NULL); -1 when it is not base64. */
int b64_decode(const char *s, size_t n, unsigned char **out, size_t *len);

#endif
