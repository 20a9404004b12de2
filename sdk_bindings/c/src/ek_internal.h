/* Internal declarations shared by the library's source files (not installed). */
#ifndef EK_INTERNAL_H
#define EK_INTERNAL_H

#include <stddef.h>
#include <sys/uio.h>

#include "../edgekit.h"

/* A cursor over JSON text (the targeted scanner of ek_scan.c). */
typedef struct ek_cur {
    const char *p;
    const char *end;
} ek_cur;

void ek__ws(ek_cur *c);
/* At a '"': reads the string, advancing past it; decoded into dst (cap bytes, NUL-terminated, truncated) if dst
 * is not NULL; *len (may be NULL) is the full decoded length. -1 when malformed. */
int ek__string(ek_cur *c, char *dst, size_t cap, size_t *len);
/* At a number: its text in *s and *n, and whether it is an integer (no fraction or exponent). -1 when malformed. */
int ek__number(ek_cur *c, const char **s, size_t *n, int *is_int);
/* Skips any JSON value (nesting at most 64 deep). -1 when malformed. */
int ek__skip(ek_cur *c);
/* An integer token -> *out; -1 when not an integer or out of range. */
int ek__int(const char *s, size_t n, long long *out);
/* A number token -> double, whatever LC_NUMERIC says. */
double ek__double(const char *s, size_t n);
/* Matches the literal word (true/false/null) at the cursor; 1 and advances when it is there. */
int ek__word(ek_cur *c, const char *word);
/* Finds the last top-level key of a JSON object: 1 with *val at its value, 0 when absent, -1 when malformed. */
int ek__top_find(const char *json, size_t len, const char *key, ek_cur *val);

/* A finite double as a JSON number (at least 32 bytes of dst), whatever LC_NUMERIC says. */
void ek__format_double(char *dst, double x);

/* Tensors (ek_wire.c, ek_decode.c). */
int ek__dtype_parse(const char *s, ek_dtype *out);
/* Checks the inputs and builds the message's first part: "EKT1" | length | header JSON (*head, ek_free).
 * *payload_len: the data that follows. */
ek_status ek__encode_head(const ek_tensor *t, size_t n, char **head, size_t *head_len, size_t *payload_len,
                          char *err, size_t errlen);
/* From the header JSON (hlen bytes) of a message whose payload has payload_len bytes: one allocation holding
 * the result, its tensors,, a copy of the header and room for the payload (*payload: where to put it). */
ek_status ek__result_alloc(const char *header, size_t hlen, size_t payload_len, ek_result **out, char **payload,
                           char *err, size_t errlen);

#endif
