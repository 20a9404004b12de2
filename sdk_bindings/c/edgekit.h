/*
 * edgekit.h - C client of the edgekit on-device agent's HTTP API.
 *
 * C99, libc and POSIX sockets only. One ek_client holds one kept-alive HTTP/1.1 connection to one agent;
 * a client is not thread-safe (use one per thread). Every call returns an ek_status; after a failed call
 * ek_last_status() is the agent's HTTP status (0 when no answer came: timeout, refused connection, ...)
 * and ek_last_error() the agent's error message (or the library's own description).
 *
 * JSON: the library does not parse JSON for the caller. health, models, load, unload and annotate hand back
 * the agent's JSON text (a NUL-terminated string, free it with ek_free) for the app to parse with the JSON
 * library it already uses. The only JSON the library reads itself is what it needs: the header of a binary
 * tensor response (see ek_result) and the "error" string of an error answer.
 *
 * Binary tensors (Content-Type application/x-edgekit-tensors):
 *   "EKT1" | uint32 little-endian header length | UTF-8 JSON header | payload
 * header: {"tensors": [{"name", "dtype", "shape", "offset", "nbytes"}], ...metadata}; data is C order and
 * little-endian. This library supports little-endian hosts only (ek_infer answers EK_ERR_ARG on others).
 */
#ifndef EDGEKIT_H
#define EDGEKIT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define EK_VERSION "0.1.0"
#define EK_MAX_DIMS 32                      /* most dimensions a tensor may have */
#define EK_MAX_NAME 256                     /* longest tensor name, in bytes */
#define EK_MAX_TENSORS 1024                 /* most tensors in one message */
#define EK_MAX_HEADER (1u << 20)            /* largest tensor header, in bytes */
#define EK_DEFAULT_MAX_RESPONSE (256u << 20) /* default bound on a response body (ek_client_set_max_response) */

typedef enum ek_status {
    EK_OK = 0,
    EK_ERR_ARG,       /* a bad argument (NULL, a name with a line break, an inconsistent tensor, ...) */
    EK_ERR_NOMEM,     /* out of memory */
    EK_ERR_RESOLVE,   /* the host name did not resolve */
    EK_ERR_CONNECT,   /* the connection was refused or failed */
    EK_ERR_TIMEOUT,   /* no progress sending or receiving within the client's timeout */
    EK_ERR_CLOSED,    /* the agent closed the connection before answering (after one retry) */
    EK_ERR_IO,        /* another socket error */
    EK_ERR_PROTOCOL,  /* the answer is not the HTTP the agent speaks */
    EK_ERR_TOO_LARGE, /* the answer is larger than the client's max response size */
    EK_ERR_DECODE,    /* a tensor message is malformed (bad magic, sizes, offsets, ...) */
    EK_ERR_HTTP,      /* the agent answered 4xx/5xx: see ek_last_status and ek_last_error */
    EK_ERR_FILE       /* a local file could not be read (ek_client_create_local) */
} ek_status;

typedef enum ek_dtype {
    EK_FLOAT32 = 0,
    EK_FLOAT16,
    EK_FLOAT64,
    EK_INT8,
    EK_UINT8,
    EK_INT16,
    EK_UINT16,
    EK_INT32,
    EK_INT64,
    EK_BOOL /* one byte per element, 0 or 1 */
} ek_dtype;

/*
 * A tensor. As an input the caller fills it; the data is sent from where it is, never copied.
 * As an output every pointer points into the ek_result that holds it (valid until ek_result_free).
 * nbytes: product(shape) * item size; for an input 0 lets the library compute it (any other value must match).
 * A 0-d tensor has ndim 0 (shape may be NULL). Output data starts where the agent put it in the payload
 * (the payload itself is 64-byte aligned); read a tensor whose address is not a multiple of its item size
 * with memcpy.
 */
typedef struct ek_tensor {
    const char *name;
    ek_dtype dtype;
    int ndim;
    const int64_t *shape;
    const void *data;
    size_t nbytes;
} ek_tensor;

/*
 * An infer response: output tensors and the metadata of the header, in one allocation (ek_result_free).
 * The metadata is read by a small scanner that knows only these top-level keys; anything else the agent adds
 * (a stream's "session", say) is in header_json, the header exactly as it came, for the app's JSON parser.
 * A field the header lacks (or holds as null) is NULL, or -1 for the numbers.
 */
typedef struct ek_result {
    size_t count;              /* number of outputs */
    const ek_tensor *outputs;  /* in the order of the header */
    const char *header_json;   /* NUL-terminated */
    size_t header_len;
    const char *model;
    const char *version;
    double inference_ms;
    double queue_ms;
    long long batch;
    long long request_id;      /* pass it to ek_annotate */
} ek_result;

typedef struct ek_client ek_client;

/* Human-readable name of a status ("timeout", ...); never NULL. */
const char *ek_strerror(ek_status status);

/* Item size in bytes of a dtype (0 for an unknown value), and its wire name ("float32"; NULL if unknown). */
size_t ek_dtype_size(ek_dtype dtype);
const char *ek_dtype_name(ek_dtype dtype);

/*
 * A client of the agent at host:port (nothing is connected until the first call). token: the agent's token,
 * sent as "Authorization: Bearer TOKEN", or NULL for none (on loopback, reads and inference need none;
 * load/unload do). timeout_ms: the longest wait for connecting, and for each send and receive
 * (SO_SNDTIMEO/SO_RCVTIMEO); 0 waits forever. The strings are copied.
 */
ek_status ek_client_create(const char *host, int port, const char *token, int timeout_ms, ek_client **out);

/* A client of the agent serving device root `root` on this machine (NULL: $EDGEKIT_AGENT_ROOT, else
 * ~/.cache/edgekit/device): 127.0.0.1, the port of ROOT/agent/state.json and the token of ROOT/agent/token. */
ek_status ek_client_create_local(const char *root, int timeout_ms, ek_client **out);

/* Closes the connection and frees the client (NULL is ignored). */
void ek_client_destroy(ek_client *client);

/* Bound on the body of any response (default EK_DEFAULT_MAX_RESPONSE); a larger one fails with
 * EK_ERR_TOO_LARGE before anything is allocated for it. */
void ek_client_set_max_response(ek_client *client, size_t max_bytes);

/* The HTTP status of the last call (0 when none came back) and the message of its failure ("" after success).
 * The string belongs to the client and changes with the next call. */
int ek_last_status(const ek_client *client);
const char *ek_last_error(const ek_client *client);

/* Frees a string the library returned (the JSON texts). */
void ek_free(void *p);

/* GET /v1/health: *json_out is the agent's JSON object. */
ek_status ek_health(ek_client *client, char **json_out);

/* GET /v1/models: *json_out is {"models": [...], "unreadable": [...]}. */
ek_status ek_models(ek_client *client, char **json_out);

/* POST /v1/models/NAME/load: loads (or reloads) the current version. threads, warmup: < 0 for the agent's
 * default. Needs the token. json_out may be NULL when the answer is not wanted (also for the calls below). */
ek_status ek_load(ek_client *client, const char *model, int threads, int warmup, char **json_out);

/* POST /v1/models/NAME/unload. Needs the token. */
ek_status ek_unload(ek_client *client, const char *model, char **json_out);

/* POST /v1/telemetry/annotate: the pre- and post-processing time the app spent around request_id
 * (ek_result.request_id). pre_ms, post_ms: NULL sends null; the numbers must be finite. */
ek_status ek_annotate(ek_client *client, long long request_id, const double *pre_ms, const double *post_ms,
                      char **json_out);

/*
 * POST /v1/models/NAME/infer with the binary encoding: the request header and each input's data go out in
 * one scatter write (no copy of the data). *result_out holds the outputs (free it with ek_result_free).
 * The response is checked as the agent's own decoder checks a request: magic, header size and JSON, unique
 * names of 1-256 bytes, known dtypes, at most 32 non-negative dimensions, nbytes = product(shape) * item
 * size, every tensor inside the payload and their sizes together no more than the payload.
 */
ek_status ek_infer(ek_client *client, const char *model, const ek_tensor *inputs, size_t n_inputs,
                   ek_result **result_out);

/* The output called name, or NULL. */
const ek_tensor *ek_result_find(const ek_result *result, const char *name);

/* Frees a result and everything in it (NULL is ignored). */
void ek_result_free(ek_result *result);

/* Encodes tensors into one new buffer (ek_free), as ek_infer sends them. */
ek_status ek_encode_tensors(const ek_tensor *tensors, size_t n, void **buf_out, size_t *len_out);

/* Decodes a tensor message from memory (the data is copied into the result); checks as ek_infer does.
 * err (may be NULL) receives a description of what is wrong, up to errlen bytes. */
ek_status ek_decode_tensors(const void *buf, size_t len, ek_result **result_out, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif /* EDGEKIT_H */
