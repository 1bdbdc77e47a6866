/* etkit.pytorch._kineto: a Kineto trace's traceEvents straight to the reader's columns, in C.
 *
 * events(buf, start, stop, names) reads the JSON array body buf[start:stop] (the elements of "traceEvents",
 * without the brackets) in one pass and returns the columns etkit.pytorch.kineto's readers would build (see
 * kineto._kernel_trace, which turns them into a KinetoTrace), or None when it does not vouch for the whole body;
 * the caller then reads the document with its Python readers, which give the same columns or report the fault.
 *
 * It declines, never guesses: the body is taken only when all of it is strict JSON that every reader reads the
 * same way, and every event is one the Python readers would take without complaint:
 *   - elements are objects, separated by commas (no trailing comma); after the last one, whitespace up to stop
 *     or a ']' (the array ends before the document's last ']': the caller checks the rest of the document);
 *   - text is printable ASCII (no byte >= 0x80 or below 0x20 inside a string); escapes are the JSON ones, no
 *     \u escape of a surrogate; no object key read here has an escape, and no key read here occurs twice in
 *     its object (an event's "ph", "cat", "name", "pid", "tid", "ts", "dur", "args"; the args' ids, "stream",
 *     "bytes", "Collective name", "Process Group Name");
 *   - numbers follow JSON's grammar and are finite as doubles; nesting is at most MAX_DEPTH deep;
 *   - the fields an event of a kept category uses have their usual types: "cat" and "name" strings without
 *     escapes, ids plain integers of at most 64 bits (-(2**63 - 1) .. 2**63 - 1), "ts" and "dur" numbers within
 *     +-2**53 µs ("dur" not negative), "args" an object, absent or null; an event on a GPU stream without a
 *     "stream" arg is on its "tid" (an integer, a string of digits, else -1), as the readers read it.
 * Names are interned in `names` (a dict str -> index, in first-use order), as the readers do. The args of the
 * events whose args the readers keep (communication host ops, NCCL kernels) and thread-name events are
 * returned as spans of buf, which the caller parses with orjson (as the dict path does).
 *
 * Returned columns (bytearrays of native int64 / float64 / int8 items, one item per event of the kind):
 *   cpu:    name, ts, dur, tid, rf, ext, pid (int64/float64), cat (int8: 0 cpu_op, 1 user_annotation),
 *           coll (int8: args hold "Collective name"), span (int64 pairs: the args object, 0 0 when none)
 *   gpu:    name, ts, dur, stream, correlation, ext, bytes, kind (int8: 2 kernel, 3 memcpy, 4 memset),
 *           special (int8: args hold "Collective name" or "Process Group Name"), span
 *   launch: ts, tid, correlation, ext, name, dur, driver (int8)
 *   ann:    name, ts, dur, stream
 *   sync:   name, ts, dur, stream, wait_on_stream, wait_corr, correlation
 *   threads: span (int64 pairs: the whole thread_name metadata event)
 * as a tuple (cpu tuple, gpu tuple, launch tuple, ann tuple, sync tuple, threads, end).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../_buffers.h"
#include "../_jsonbytes.h"
#include "../_vec.h"

#define MAX_DEPTH 64
#define LIM_US 9007199254740992.0 /* 2**53 */
#define NO_ID (-1)

/* ---- growable columns (_vec.h) ------------------------------------------------------------------------------- */

static inline int put_i64(Vec *v, int64_t x) { return vec_put(v, &x, 8); }
static inline int put_f64(Vec *v, double x) { return vec_put(v, &x, 8); }
static inline int put_i8(Vec *v, int8_t x) { return vec_put(v, &x, 1); }

/* ---- the scanner ----------------------------------------------------------------------------------------- */

typedef struct {
    const uint8_t *p, *e, *base;
} Cur;

enum { V_ABSENT = 0, V_STR, V_ESC, V_INT, V_NUM, V_NULL, V_OBJ, V_OTHER };

typedef struct {
    int t;
    const uint8_t *s; /* a string's content, a number's text, an object's text */
    Py_ssize_t n;
} Val;

/* Byte classes: JSON whitespace (a string's plain bytes are found by jb_plain_run, eight at a time). */
enum { B_WS = 1 };
static uint8_t byte_class[256];

static void init_classes(void) {
    byte_class[' '] = byte_class['\n'] = byte_class['\t'] = byte_class['\r'] = B_WS;
}

static inline void ws(Cur *c) {
    const uint8_t *p = c->p, *e = c->e;  /* (locals: the class table's reads may not alias them) */
    while (p < e && (byte_class[*p] & B_WS)) p++;
    c->p = p;
}

static inline int hexval(uint8_t ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

/* scan_string of a string with an escape, or declined (c->p at its '"'). */
static int scan_string_rest(Cur *c, Val *v) {
    const uint8_t *p = c->p + 1, *e = c->e;
    int esc = 0;
    v->s = p;
    for (;;) {
        p = jb_plain_run(p, e, NULL);
        if (p >= e || *p >= 0x80 || *p < 0x20) return 0;
        if (*p == '"') break;
        esc = 1; /* a backslash */
        if (p + 1 >= e) return 0;
        switch (p[1]) {
        case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
            p += 2;
            break;
        case 'u': {
            if (p + 6 > e) return 0;
            int code = 0;
            for (int k = 2; k < 6; k++) {
                int h = hexval(p[k]);
                if (h < 0) return 0;
                code = code * 16 + h;
            }
            if (code >= 0xD800 && code <= 0xDFFF) return 0; /* surrogates: left to the Python readers */
            p += 6;
            break;
        }
        default:
            return 0;
        }
    }
    v->t = esc ? V_ESC : V_STR;
    v->n = p - v->s;
    c->p = p + 1;
    return 1;
}

/* A string at c->p (its '"'): its content in *v (V_STR, or V_ESC when it has an escape); 0 when declined. The
 * common one (plain bytes, then the quote) here, any other by scan_string_rest. */
static inline int scan_string(Cur *c, Val *v) {
    const uint8_t *p = jb_plain_run(c->p + 1, c->e, NULL);
    if (p < c->e && *p == '"') {
        v->s = c->p + 1;
        v->n = p - v->s;
        v->t = V_STR;
        c->p = p + 1;
        return 1;
    }
    return scan_string_rest(c, v);
}

/* A number at c->p, by JSON's grammar: V_INT (no fraction or exponent) or V_NUM; 0 when declined (not a number,
 * or one that is infinite as a double, which the JSON readers refuse). */
static int scan_number(Cur *c, Val *v) {
    const uint8_t *p = c->p, *e = c->e;
    int is_int = 1;
    v->s = p;
    if (p < e && *p == '-') p++;
    if (p >= e) return 0;
    if (*p == '0') p++;
    else if (*p >= '1' && *p <= '9') p = jb_digit_run(p, e);
    else return 0;
    if (p < e && *p == '.') {
        is_int = 0;
        p++;
        if (p >= e || *p < '0' || *p > '9') return 0;
        p = jb_digit_run(p, e);
    }
    int has_exp = 0;
    if (p < e && (*p == 'e' || *p == 'E')) {
        is_int = 0;
        has_exp = 1;
        p++;
        if (p < e && (*p == '+' || *p == '-')) p++;
        if (p >= e || *p < '0' || *p > '9') return 0;
        while (p < e && *p >= '0' && *p <= '9') p++;
    }
    v->n = p - v->s;
    v->t = is_int ? V_INT : V_NUM;
    if (has_exp || v->n > 300) { /* could overflow a double */
        char *text = PyMem_Malloc(v->n + 1);
        if (text == NULL) return 0;
        memcpy(text, v->s, v->n);
        text[v->n] = 0;
        double d = strtod(text, NULL);
        PyMem_Free(text);
        if (!isfinite(d)) return 0;
    }
    c->p = p;
    return 1;
}

static int skip_value(Cur *c, int depth);

/* After an item of an object or array: ',' (1: another item follows) or `close` (0: the container ends), with
 * the whitespace around; -1 when neither. */
static inline int after_item(Cur *c, uint8_t close) {
    ws(c);
    if (c->p >= c->e) return -1;
    if (*c->p == close) {
        c->p++;
        return 0;
    }
    if (*c->p != ',') return -1;
    c->p++;
    ws(c);
    return 1;
}

/* Past the opening bracket at c->p and the whitespace after it: 1 when the container is empty (`close` taken). */
static inline int opens_empty(Cur *c, uint8_t close) {
    c->p++;
    ws(c);
    if (c->p < c->e && *c->p == close) {
        c->p++;
        return 1;
    }
    return 0;
}

/* What an object's walk does with a member: its key (the value at c->p), the walk's context and the value's
 * depth; 1 when taken, 0 declined. */
typedef int (*OnMember)(Cur *c, const Val *key, void *ctx, int depth);

/* The object at c->p ('{'), each member handed to `on`; 0 when declined. Inline, so that where `on` is known
 * (an event's members, its args') it is called directly. */
static inline int object(Cur *c, int depth, OnMember on, void *ctx) {
    if (depth > MAX_DEPTH) return 0;
    if (opens_empty(c, '}')) return 1;
    for (;;) {
        Val k;
        if (c->p >= c->e || *c->p != '"' || !scan_string(c, &k)) return 0;
        ws(c);
        if (c->p >= c->e || *c->p != ':') return 0;
        c->p++;
        ws(c);
        if (!on(c, &k, ctx, depth + 1)) return 0;
        int more = after_item(c, '}');
        if (more <= 0) return more == 0;
    }
}

static int skip_member(Cur *c, const Val *Py_UNUSED(key), void *Py_UNUSED(ctx), int depth) {
    return skip_value(c, depth);
}

static int skip_array(Cur *c, int depth) {
    if (depth > MAX_DEPTH) return 0;
    if (opens_empty(c, ']')) return 1;
    for (;;) {
        if (!skip_value(c, depth + 1)) return 0;
        int more = after_item(c, ']');
        if (more <= 0) return more == 0;
    }
}

static inline int literal(Cur *c, const char *s, size_t n) {
    if ((size_t)(c->e - c->p) < n || memcmp(c->p, s, n) != 0) return 0;
    c->p += n;
    return 1;
}

/* Any value at c->p, its kind and text in *v. */
static int scan_value(Cur *c, Val *v, int depth) {
    if (c->p >= c->e) return 0;
    const uint8_t *at = c->p;
    switch (*c->p) {
    case '"':
        return scan_string(c, v);
    case '{':
        if (!object(c, depth, skip_member, NULL)) return 0;
        v->t = V_OBJ;
        break;
    case '[':
        if (!skip_array(c, depth)) return 0;
        v->t = V_OTHER;
        break;
    case 't':
        if (!literal(c, "true", 4)) return 0;
        v->t = V_OTHER;
        break;
    case 'f':
        if (!literal(c, "false", 5)) return 0;
        v->t = V_OTHER;
        break;
    case 'n':
        if (!literal(c, "null", 4)) return 0;
        v->t = V_NULL;
        break;
    default:
        return scan_number(c, v);
    }
    v->s = at;
    v->n = c->p - at;
    return 1;
}

static int skip_value(Cur *c, int depth) {
    Val v;
    return scan_value(c, &v, depth);
}

/* ---- events ---------------------------------------------------------------------------------------------- */

enum { K_PH, K_CAT, K_NAME, K_PID, K_TID, K_TS, K_DUR, K_ARGS, N_KEYS };
enum { A_EXT, A_RF, A_CORR, A_STREAM, A_BYTES, A_WAIT_STREAM, A_WAIT_CORR, A_COLL, A_PG, N_ARGS };

typedef struct {
    const char *s;
    Py_ssize_t n;
} Key;

#define KEY(s) {s, sizeof(s) - 1}
static const Key KEYS[N_KEYS] = {KEY("ph"), KEY("cat"), KEY("name"), KEY("pid"), KEY("tid"), KEY("ts"), KEY("dur"),
                                 KEY("args")};
static const Key ARG_KEYS[N_ARGS] = {KEY("External id"), KEY("Record function id"), KEY("correlation"),
                                     KEY("stream"), KEY("bytes"), KEY("wait_on_stream"),
                                     KEY("wait_on_cuda_event_record_corr_id"), KEY("Collective name"),
                                     KEY("Process Group Name")};
/* Categories kept, in etkit.pytorch.kineto._KIND_OF's order (their kind is their index). */
static const Key CATS[] = {KEY("cpu_op"), KEY("user_annotation"), KEY("kernel"), KEY("gpu_memcpy"),
                           KEY("gpu_memset"), KEY("cuda_runtime"), KEY("cuda_driver"), KEY("gpu_user_annotation"),
                           KEY("cuda_sync")};
#define N_CATS ((int)(sizeof(CATS) / sizeof(CATS[0])))

/* A list of keys, hashed by their length and first byte (KEY_BUCKET) into chains, so that a lookup compares the
 * few keys of its bucket (mostly one, or none). */
#define KEY_BUCKETS 64
#define KEY_BUCKET(len, first) ((size_t)((len) * 7 + (first)) & (KEY_BUCKETS - 1))
typedef struct {
    const Key *keys;
    int n;
    int8_t head[KEY_BUCKETS]; /* the first key of each bucket (-1: none) */
    int8_t next[32];          /* the next key of the same bucket (-1: none) */
} KeySet;

static KeySet KEY_SET = {KEYS, N_KEYS, {0}, {0}}, ARG_SET = {ARG_KEYS, N_ARGS, {0}, {0}},
              CAT_SET = {CATS, N_CATS, {0}, {0}};

static void init_keys(KeySet *k) {
    memset(k->head, -1, sizeof k->head);
    for (int i = k->n - 1; i >= 0; i--) { /* (each chain in index order) */
        size_t b = KEY_BUCKET(k->keys[i].n, (uint8_t)k->keys[i].s[0]);
        k->next[i] = k->head[b];
        k->head[b] = (int8_t)i;
    }
}

/* Whether the n bytes at a and b are the same. */
static inline int same_bytes(const char *a, const uint8_t *b, Py_ssize_t n) {
    for (Py_ssize_t j = 0; j < n; j++)
        if ((uint8_t)a[j] != b[j]) return 0;
    return 1;
}

/* The index of the key s (len bytes) in k, or -1. */
static inline int which(const KeySet *k, const uint8_t *s, Py_ssize_t len) {
    if (len <= 0) return -1; /* (no key is empty) */
    for (int i = k->head[KEY_BUCKET(len, s[0])]; i >= 0; i = k->next[i]) {
        const Key *key = &k->keys[i];
        if (key->n == len && same_bytes(key->s, s, len)) return i;
    }
    return -1;
}

static inline int is(const Val *v, const char *s) {
    return v->t == V_STR && v->n == (Py_ssize_t)strlen(s) && memcmp(v->s, s, v->n) == 0;
}

/* The members of an object read into vals[] by their keys[] (the others skipped): a keyed walk's context. */
typedef struct {
    const KeySet *keys;
    Val *vals;
} Keyed;

/* The value of the member of key i (-1: a key not read here, skipped) read into vals[i]. */
static inline int keyed_value(Cur *c, Val *vals, int i, int depth) {
    if (i < 0) return skip_value(c, depth);
    if (vals[i].t != V_ABSENT) return 0; /* twice */
    return scan_value(c, &vals[i], depth);
}

static int keyed_member(Cur *c, const Val *key, void *ctx, int depth) {
    Keyed *k = ctx;
    if (key->t == V_ESC) return 0; /* (it might spell a key read here) */
    return keyed_value(c, k->vals, which(k->keys, key->s, key->n), depth);
}

/* An event's members: its own by KEYS, its args' (an object) by ARG_KEYS, in place. */
typedef struct {
    Val *top, *arg;
} Fields;

static int event_member(Cur *c, const Val *key, void *ctx, int depth) {
    Fields *f = ctx;
    if (key->t == V_ESC) return 0;
    int i = which(&KEY_SET, key->s, key->n);
    if (i != K_ARGS || c->p >= c->e || *c->p != '{') return keyed_value(c, f->top, i, depth);
    if (f->top[i].t != V_ABSENT) return 0;
    const uint8_t *at = c->p;
    Keyed args = {&ARG_SET, f->arg};
    if (!object(c, depth, keyed_member, &args)) return 0;
    f->top[i].t = V_OBJ;
    f->top[i].s = at;
    f->top[i].n = c->p - at;
    return 1;
}

/* An id: absent -> -1, a plain integer within +-(2**63 - 1); 0 when declined. */
static int id_of(const Val *v, int64_t *out) {
    if (v->t == V_ABSENT) {
        *out = NO_ID;
        return 1;
    }
    if (v->t != V_INT) return 0;
    const uint8_t *p = v->s, *e = v->s + v->n;
    int neg = *p == '-';
    p += neg;
    uint64_t mag = 0;
    if (e - p <= 18) { /* (below 10**18: no overflow to check) */
        for (; p < e; p++) mag = mag * 10 + (uint64_t)(*p - '0');
    }
    for (; p < e; p++) {
        uint64_t d = (uint64_t)(*p - '0');
        if (mag > (UINT64_C(0x7FFFFFFFFFFFFFFF) - d) / 10) return 0;
        mag = mag * 10 + d;
    }
    *out = neg ? -(int64_t)mag : (int64_t)mag;
    return 1;
}

/* A time in µs: absent -> 0, a number within +-2**53 (a duration not negative); 0 when declined. */
static int time_of(const Val *v, int is_dur, double *out) {
    double d;
    if (v->t == V_ABSENT) {
        d = 0.0;
    } else if (v->t == V_INT) {
        int64_t i;
        if (!id_of(v, &i) || i > (INT64_C(1) << 53) || i < -(INT64_C(1) << 53)) return 0;
        d = (double)i;
    } else if (v->t == V_NUM) {
        char text[64];
        if (v->n >= (Py_ssize_t)sizeof(text)) return 0;
        memcpy(text, v->s, v->n);
        text[v->n] = 0;
        d = strtod(text, NULL);
    } else {
        return 0;
    }
    if (!(d >= -LIM_US && d <= LIM_US) || (is_dur && !(d >= 0.0))) return 0;
    *out = d;
    return 1;
}

/* The stream of an event on a GPU stream: its args' "stream" (an id), else (absent or null) its "tid" as
 * kineto._num reads it (an integer, a string of digits, else -1); 0 when declined. */
static int stream_of(const Val *stream, const Val *tid, int64_t *out) {
    if (stream->t != V_ABSENT && stream->t != V_NULL) return id_of(stream, out);
    if (tid->t == V_INT) return id_of(tid, out);
    if (tid->t == V_NUM || tid->t == V_ESC) return 0; /* (an integral float is read as its integer) */
    *out = NO_ID;
    if (tid->t != V_STR) return 1;
    const uint8_t *p = tid->s, *e = tid->s + tid->n;
    while (p < e && *p == '-') p++;
    if (p == e) return 1;
    for (const uint8_t *q = p; q < e; q++)
        if (*q < '0' || *q > '9') return 1; /* not an integer: -1 */
    if (p - tid->s > 1 || e - p > 18) return 0; /* ("--5": the dict path fails on it; long: left to it) */
    Val v = {V_INT, tid->s, tid->n};
    return id_of(&v, out);
}

enum {
    C_NAME, C_TS, C_DUR, C_TID, C_RF, C_EXT, C_PID, C_CAT, C_COLL, C_SPAN, N_CPU
};
enum {
    G_NAME, G_TS, G_DUR, G_STREAM, G_CORR, G_EXT, G_BYTES, G_KIND, G_SPECIAL, G_SPAN, N_GPU
};
enum { L_TS, L_TID, L_CORR, L_EXT, L_NAME, L_DUR, L_DRIVER, N_LAUNCH };
enum { N_ANN = 4 };
enum { S_NAME, S_TS, S_DUR, S_STREAM, S_WAIT_STREAM, S_WAIT_CORR, S_CORR, N_SYNC };

typedef struct {
    Vec cpu[N_CPU], gpu[N_GPU], launch[N_LAUNCH], ann[N_ANN], sync[N_SYNC], threads;
    PyObject *names;
    JbSeen seen_names; /* a name's text -> its index in names (only this call changes names) */
} Out;

/* The index of the name v (absent: "") in out->names, added when new; -1 with an exception set on failure, -2
 * when declined (not a string without escapes). */
static int64_t name_index(Out *out, const Val *v) {
    if (v->t != V_ABSENT && v->t != V_STR) return -2;
    const uint8_t *text = v->t == V_STR ? v->s : (const uint8_t *)"";
    Py_ssize_t n = v->t == V_STR ? v->n : 0;
    PyObject *kept = jb_seen_get(&out->seen_names, text, n);
    if (kept != NULL) return PyLong_AsLongLong(kept);
    PyObject *s = PyUnicode_DecodeASCII((const char *)text, n, NULL);
    if (s == NULL) return -1;
    PyObject *found = PyDict_GetItemWithError(out->names, s), *i = NULL;
    int64_t index;
    if (found != NULL) {
        index = PyLong_AsLongLong(found);
        Py_INCREF(found);
        i = found;
    } else if (PyErr_Occurred()) {
        index = -1;
    } else {
        index = PyDict_GET_SIZE(out->names);
        i = PyLong_FromLongLong(index);
        if (i == NULL || PyDict_SetItem(out->names, s, i) < 0) index = -1;
    }
    if (index >= 0 && jb_seen_put(&out->seen_names, text, n, i) < 0) index = -1;
    Py_XDECREF(i);
    Py_DECREF(s);
    return index;
}

#define TRY(x) do { if (!(x)) return 0; } while (0)
#define PUT(x) do { if ((x) < 0) return -1; } while (0)
#define NAME(out, v, dst) do { (dst) = name_index(out, v); if ((dst) == -2) return 0; if ((dst) < 0) return -1; } while (0)

/* One event at c->p ('{'): 1 taken (or skipped, as the readers skip it), 0 declined, -1 an error (exception set). */
static int event(Cur *c, Out *out) {
    const uint8_t *at = c->p;
    Val top[N_KEYS] = {{0}}, arg[N_ARGS] = {{0}};
    Fields fields = {top, arg};
    TRY(object(c, 0, event_member, &fields));
    int has_args = top[K_ARGS].t == V_OBJ;
    const Val *cat = &top[K_CAT], *ph = &top[K_PH], *name = &top[K_NAME], *args = &top[K_ARGS];
    if (cat->t == V_ESC || ph->t == V_ESC || name->t == V_ESC) return 0;
    int kind = -1;
    if (cat->t == V_STR) kind = which(&CAT_SET, cat->s, cat->n);
    else if (cat->t != V_ABSENT && cat->t != V_NULL) return 0; /* the readers refuse it */
    if (kind < 0) {
        if (is(ph, "M") && is(name, "thread_name")) {
            PUT(put_i64(&out->threads, at - c->base));
            PUT(put_i64(&out->threads, c->p - c->base));
        }
        return 1;
    }
    if (args->t != V_ABSENT && args->t != V_NULL && !has_args) return 0; /* args not an object */
    double ts, dur;
    int64_t ix, a, b, d;
    if (kind <= 1) {
        if (!is(ph, "X")) return 1; /* (not one op) */
        int64_t tid, pid;
        TRY(id_of(&top[K_TID], &tid) && id_of(&top[K_PID], &pid) && time_of(&top[K_TS], 0, &ts) &&
            time_of(&top[K_DUR], 1, &dur) && id_of(&arg[A_RF], &a) && id_of(&arg[A_EXT], &b));
        NAME(out, name, ix);
        Vec *v = out->cpu;
        PUT(put_i64(&v[C_NAME], ix));
        PUT(put_f64(&v[C_TS], ts));
        PUT(put_f64(&v[C_DUR], dur));
        PUT(put_i64(&v[C_TID], tid));
        PUT(put_i64(&v[C_RF], a));
        PUT(put_i64(&v[C_EXT], b));
        PUT(put_i64(&v[C_PID], pid));
        PUT(put_i8(&v[C_CAT], (int8_t)kind));
        PUT(put_i8(&v[C_COLL], arg[A_COLL].t != V_ABSENT));
        PUT(put_i64(&v[C_SPAN], has_args ? args->s - c->base : 0));
        PUT(put_i64(&v[C_SPAN], has_args ? args->s + args->n - c->base : 0));
        return 1;
    }
    if (kind <= 4) {
        int64_t stream, nbytes = NO_ID;
        TRY(stream_of(&arg[A_STREAM], &top[K_TID], &stream) && id_of(&arg[A_CORR], &a) &&
            id_of(&arg[A_EXT], &b) && (kind == 2 || id_of(&arg[A_BYTES], &nbytes)) &&
            time_of(&top[K_TS], 0, &ts) && time_of(&top[K_DUR], 1, &dur));
        NAME(out, name, ix);
        Vec *v = out->gpu;
        PUT(put_i64(&v[G_NAME], ix));
        PUT(put_f64(&v[G_TS], ts));
        PUT(put_f64(&v[G_DUR], dur));
        PUT(put_i64(&v[G_STREAM], stream));
        PUT(put_i64(&v[G_CORR], a));
        PUT(put_i64(&v[G_EXT], b));
        PUT(put_i64(&v[G_BYTES], nbytes));
        PUT(put_i8(&v[G_KIND], (int8_t)kind));
        PUT(put_i8(&v[G_SPECIAL], arg[A_COLL].t != V_ABSENT || arg[A_PG].t != V_ABSENT));
        PUT(put_i64(&v[G_SPAN], has_args ? args->s - c->base : 0));
        PUT(put_i64(&v[G_SPAN], has_args ? args->s + args->n - c->base : 0));
        return 1;
    }
    if (kind <= 6) {
        int64_t tid;
        TRY(id_of(&top[K_TID], &tid) && id_of(&arg[A_CORR], &a) && id_of(&arg[A_EXT], &b) &&
            time_of(&top[K_TS], 0, &ts) && time_of(&top[K_DUR], 1, &dur));
        NAME(out, name, ix);
        Vec *v = out->launch;
        PUT(put_f64(&v[L_TS], ts));
        PUT(put_i64(&v[L_TID], tid));
        PUT(put_i64(&v[L_CORR], a));
        PUT(put_i64(&v[L_EXT], b));
        PUT(put_i64(&v[L_NAME], ix));
        PUT(put_f64(&v[L_DUR], dur));
        PUT(put_i8(&v[L_DRIVER], kind == 6));
        return 1;
    }
    int64_t stream;
    TRY(stream_of(&arg[A_STREAM], &top[K_TID], &stream) && time_of(&top[K_TS], 0, &ts) &&
        time_of(&top[K_DUR], 1, &dur));
    if (kind == 8) TRY(id_of(&arg[A_WAIT_STREAM], &a) && id_of(&arg[A_WAIT_CORR], &b) && id_of(&arg[A_CORR], &d));
    NAME(out, name, ix);
    Vec *v = kind == 7 ? out->ann : out->sync;
    PUT(put_i64(&v[0], ix));
    PUT(put_f64(&v[1], ts));
    PUT(put_f64(&v[2], dur));
    PUT(put_i64(&v[3], stream));
    if (kind == 8) {
        PUT(put_i64(&v[S_WAIT_STREAM], a));
        PUT(put_i64(&v[S_WAIT_CORR], b));
        PUT(put_i64(&v[S_CORR], d));
    }
    return 1;
}

static PyObject *columns(Vec *vecs, int n) {
    PyObject *t = PyTuple_New(n);
    if (t == NULL) return NULL;
    for (int i = 0; i < n; i++) {
        PyObject *b = PyByteArray_FromStringAndSize(vecs[i].data ? vecs[i].data : "", vecs[i].size);
        if (b == NULL) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, i, b);
    }
    return t;
}

static void free_vecs(Vec *vecs, int n) {
    for (int i = 0; i < n; i++) PyMem_Free(vecs[i].data);
}

PyDoc_STRVAR(events_doc,
"events(buf, start, stop, names) -> (cpu, gpu, launch, ann, sync, threads, end) or None\n\n"
"The columns of the traceEvents array body buf[start:stop] (see the module docstring), and where the array\n"
"ends (stop, or the offset of a ']' closing it before stop); None when the body is not one this kernel\n"
"vouches for (the Python readers then read it).");

static PyObject *events(PyObject *Py_UNUSED(self), PyObject *argv) {
    PyObject *o_buf, *names;
    Py_ssize_t start, stop;
    if (!PyArg_ParseTuple(argv, "OnnO!", &o_buf, &start, &stop, &PyDict_Type, &names)) return NULL;
    Buf buf = {0};
    if (get_buf(o_buf, &buf, 1, "buf") < 0) {
        release(&buf);
        return NULL;
    }
    if (start < 0 || stop < start || stop > buf.view.len) {
        release(&buf);
        PyErr_SetString(PyExc_ValueError, "events: start and stop outside the buffer");
        return NULL;
    }
    Out out;
    memset(&out, 0, sizeof(out));
    out.names = names;
    const uint8_t *base = (const uint8_t *)buf.view.buf;
    Cur c = {base + start, base + stop, base};
    int ok = 1;
    ws(&c);
    if (c.p < c.e && *c.p != ']') {
        for (;;) {
            if (*c.p != '{') {
                ok = 0;
                break;
            }
            ok = event(&c, &out);
            if (ok <= 0) break;
            ws(&c);
            if (c.p >= c.e || *c.p == ']') break;
            if (*c.p != ',') {
                ok = 0;
                break;
            }
            c.p++;
            ws(&c);
            if (c.p >= c.e) { /* a trailing comma */
                ok = 0;
                break;
            }
        }
    }
    PyObject *result = NULL;
    if (ok < 0) {
        result = NULL;
    } else if (ok == 0) {
        result = Py_NewRef(Py_None);
    } else {
        PyObject *cpu = columns(out.cpu, N_CPU), *gpu = columns(out.gpu, N_GPU),
                 *launch = columns(out.launch, N_LAUNCH), *ann = columns(out.ann, N_ANN),
                 *sync = columns(out.sync, N_SYNC), *threads = columns(&out.threads, 1);
        if (cpu && gpu && launch && ann && sync && threads)
            result = Py_BuildValue("(OOOOOOn)", cpu, gpu, launch, ann, sync, PyTuple_GET_ITEM(threads, 0),
                                   (Py_ssize_t)(c.p - base));
        Py_XDECREF(cpu);
        Py_XDECREF(gpu);
        Py_XDECREF(launch);
        Py_XDECREF(ann);
        Py_XDECREF(sync);
        Py_XDECREF(threads);
    }
    free_vecs(out.cpu, N_CPU);
    free_vecs(out.gpu, N_GPU);
    free_vecs(out.launch, N_LAUNCH);
    free_vecs(out.ann, N_ANN);
    free_vecs(out.sync, N_SYNC);
    free_vecs(&out.threads, 1);
    jb_seen_clear(&out.seen_names);
    release(&buf);
    return result;
}

static PyMethodDef methods[] = {
    {"events", events, METH_VARARGS, events_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "etkit.pytorch._kineto",
    "A Kineto trace's events to the reader's columns in C (optional: etkit.pytorch.kineto's readers give the same).",
    -1, methods,
};

PyMODINIT_FUNC PyInit__kineto(void) {
    init_classes();
    init_keys(&KEY_SET);
    init_keys(&ARG_SET);
    init_keys(&CAT_SET);
    return PyModule_Create(&module);
}
