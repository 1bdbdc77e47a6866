/* etkit.format._jsonin: the node lines of etkit's JSON twin straight to their .et records, in C.
 *
 * lines(buf, start, end, out) encodes the twin's node lines (one proto3-JSON Node object a line, as to-json writes
 * them) from buf[start] on, each into the record protobuf serializes for it (exactly the bytes of
 * etkit.format.protojson's NodeEncoder / LineEncoder), and stops at the first line it does not vouch for.
 *
 * It declines, never guesses: a line is taken only when the whole of it is in a strict, simple subset of JSON
 * that every reader reads the same way, and is a Node that the Python path would encode without complaint:
 *   - the line is `{...}\n` or `{...},\n` (no whitespace anywhere, no `\r`, no blank line, no `]}`);
 *   - the members are Node's, in field order, each at most once: "id", "name", "type", "ctrlDeps",
 *     "dataDeps", "startTimeMicros", "durationMicros", "inputs", "outputs", "attr";
 *   - strings hold printable ASCII only (0x20..0x7E, no backslash: no escape at all);
 *   - integers are plain decimals (`-` only where the type is signed; no leading zero, no `-0`, no fraction
 *     or exponent), 64-bit ones and ids quoted, within the range of their type;
 *   - "type" is a NodeType name; IOInfo is `{}` or its "values", "shapes", "types" in that order;
 *   - an attribute is `{"name":"N","KIND":V}` or `{"name":"N"}` (N not empty) with KIND an
 *     int32/int64/uint32/uint64/bool/string value or list (a list `{}` or `{"values":[...]}`);
 *   - the record is not empty (the Python path refuses an empty node with its own error).
 * Anything else (escapes, non-ASCII, floats, bytes, doc strings, _raw, snake_case, other orders, ...) is the
 * Python path's: the caller encodes that one line the old way (errors and all) and calls again after it.
 *
 * Every read is bounds-checked against its line's end. Only the buffer protocol is used (no numpy headers).
 * The Node, IOInfo and AttributeProto field keys written here are those of et_def.proto; keys() returns them
 * so that a test checks them against the schema.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#if defined(__GNUC__)
#define LIKELY(x) __builtin_expect(!!(x), 1)
#define HOT inline __attribute__((always_inline))
#else
#define LIKELY(x) (x)
#define HOT inline
#endif

/* ---- the keys of et_def.proto (field number << 3 | wire type) ------------------------------------------ */

enum {
    NODE_ID = 1 << 3, NODE_NAME = 2 << 3 | 2, NODE_TYPE = 3 << 3, NODE_CTRL = 4 << 3 | 2, NODE_DATA = 5 << 3 | 2,
    NODE_START = 6 << 3, NODE_DURATION = 7 << 3, NODE_INPUTS = 8 << 3 | 2, NODE_OUTPUTS = 9 << 3 | 2,
    NODE_ATTR = 10 << 3 | 2,
    IO_VALUES = 1 << 3 | 2, IO_SHAPES = 2 << 3 | 2, IO_TYPES = 3 << 3 | 2,
    ATTR_NAME = 1 << 3 | 2,
    LIST_VALUES = 1 << 3 | 2, /* the one field of every *List message (packed where it is a number) */
};

/* The Node members in field order: their JSON keys and field keys (node_member() finds a key's index). */
static const char *const NODE_KEYS[] = {
    "id", "name", "type", "ctrlDeps", "dataDeps", "startTimeMicros", "durationMicros", "inputs", "outputs", "attr",
};
static const uint8_t NODE_TAGS[] = {NODE_ID, NODE_NAME, NODE_TYPE, NODE_CTRL, NODE_DATA, NODE_START, NODE_DURATION,
                                    NODE_INPUTS, NODE_OUTPUTS, NODE_ATTR};
#define NODE_MEMBERS 10

/* The IOInfo members in field order (io_member() finds a key's index). */
static const char *const IO_KEYS[] = {"values", "shapes", "types"};
static const uint8_t IO_TAGS[] = {IO_VALUES, IO_SHAPES, IO_TYPES};

/* NodeType names by value (schema.NodeType). */
static const char *const NODE_TYPES[] = {
    "INVALID_NODE", "METADATA_NODE", "MEM_LOAD_NODE", "MEM_STORE_NODE", "COMP_NODE", "COMM_SEND_NODE",
    "COMM_RECV_NODE", "COMM_COLL_NODE",
};
#define NODE_TYPE_COUNT 8

/* The value kinds of AttributeProto taken here. */
enum { K_INT32, K_INT64, K_UINT32, K_UINT64, K_BOOL, K_STRING };

typedef struct {
    const char *json; /* the member's JSON key */
    int number;       /* its field number in AttributeProto's oneof */
    int kind;
    int list;
} Member;

static const Member MEMBERS[] = {
    {"int32Val", 7, K_INT32, 0}, {"int32List", 8, K_INT32, 1}, {"int64Val", 9, K_INT64, 0},
    {"int64List", 10, K_INT64, 1}, {"uint32Val", 11, K_UINT32, 0}, {"uint32List", 12, K_UINT32, 1},
    {"uint64Val", 13, K_UINT64, 0}, {"uint64List", 14, K_UINT64, 1}, {"boolVal", 27, K_BOOL, 0},
    {"boolList", 28, K_BOOL, 1}, {"stringVal", 29, K_STRING, 0}, {"stringList", 30, K_STRING, 1},
};
#define MEMBER_COUNT ((int)(sizeof(MEMBERS) / sizeof(MEMBERS[0])))

/* whether the bytes at k are those of the string literal lit */
#define IS(k, lit) (memcmp((k), (lit), sizeof(lit) - 1) == 0)

/* ---- the output: records, each framed by its varint length ---------------------------------------------- */

typedef struct {
    PyObject *array; /* the caller's bytearray, grown as it fills (its size is the capacity) */
    uint8_t *data;   /* its bytes */
    Py_ssize_t size, cap;
    int failed; /* out of memory, or the bytearray could not grow (the error set) */
} Out;

/* reserve() past the capacity: the bytearray grown (doubled) to hold n more bytes */
static int grow(Out *o, Py_ssize_t n) {
    if (o->failed) return 0;
    Py_ssize_t cap = o->cap > 4096 ? o->cap : 4096;
    while (cap < o->size + n) {
        if (cap > PY_SSIZE_T_MAX / 2) {
            PyErr_NoMemory();
            o->failed = 1;
            return 0;
        }
        cap *= 2;
    }
    if (PyByteArray_Resize(o->array, cap) < 0) {
        o->failed = 1;
        return 0;
    }
    o->data = (uint8_t *)PyByteArray_AS_STRING(o->array);
    o->cap = cap;
    return 1;
}

/* room for n more bytes: 1, or 0 (o->failed) */
static HOT int reserve(Out *o, Py_ssize_t n) { return LIKELY(o->size + n <= o->cap) ? 1 : grow(o, n); }

static inline int varint_size(uint64_t v) {
    int n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

/* v's varint at o->data[at] (the caller reserved its bytes) */
static inline void put_varint_at(Out *o, Py_ssize_t at, uint64_t v) {
    while (v >= 0x80) {
        o->data[at++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    o->data[at] = (uint8_t)v;
}

static HOT int put_varint(Out *o, uint64_t v) {
    if (!reserve(o, 10)) return 0;
    int n = varint_size(v);
    put_varint_at(o, o->size, v);
    o->size += n;
    return 1;
}

static HOT int put_byte(Out *o, uint8_t c) {
    if (!reserve(o, 1)) return 0;
    o->data[o->size++] = c;
    return 1;
}

/* a key of one or two bytes (field numbers below 2048) */
static inline int put_key(Out *o, unsigned key) { return key < 0x80 ? put_byte(o, (uint8_t)key) : put_varint(o, key); }

static HOT int put_bytes(Out *o, const uint8_t *s, Py_ssize_t n) {
    if (!reserve(o, n)) return 0;
    memcpy(o->data + o->size, s, (size_t)n);
    o->size += n;
    return 1;
}

/* A length-delimited body: open() leaves `guess` bytes for its length, close() writes the length there,
 * moving the body where the length takes another number of bytes. */
static inline Py_ssize_t open_body(Out *o, int guess) {
    if (!reserve(o, guess)) return -1;
    o->size += guess;
    return o->size;
}

static inline int close_body(Out *o, Py_ssize_t body, int guess) {
    uint64_t len = (uint64_t)(o->size - body);
    int n = varint_size(len);
    if (n != guess) {
        if (n > guess && !reserve(o, n - guess)) return 0;
        memmove(o->data + body - guess + n, o->data + body, (size_t)len);
        o->size += n - guess;
    }
    put_varint_at(o, body - guess, len);
    return 1;
}

/* ---- reading one line: a cursor that never passes the line's end ---------------------------------------- */

typedef struct {
    const uint8_t *p, *e;
} Cur;

static inline int next_is(const Cur *c, uint8_t ch) { return c->p < c->e && *c->p == ch; }

static inline int take(Cur *c, uint8_t ch) {
    if (c->p < c->e && *c->p == ch) {
        c->p++;
        return 1;
    }
    return 0;
}

/* the literal s (n bytes) at the cursor, taken */
static inline int take_lit(Cur *c, const char *s, size_t n) {
    if ((size_t)(c->e - c->p) >= n && memcmp(c->p, s, n) == 0) {
        c->p += n;
        return 1;
    }
    return 0;
}

static inline uint64_t load64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return v;
}

#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL

/* A string of printable ASCII (0x20..0x7E, no backslash) between quotes: its bytes, the cursor after it.
 * Eight bytes at a time: the lowest byte flagged is the first quote, backslash, control or high byte. */
static HOT int take_string(Cur *c, const uint8_t **s, Py_ssize_t *n) {
    if (!take(c, '"')) return 0;
    const uint8_t *p = c->p, *e = c->e;
    while (e - p >= 8) {
        uint64_t w = load64(p);
        uint64_t quote = w ^ (ONES * '"'), slash = w ^ (ONES * '\\'), del = w ^ (ONES * 0x7F);
        uint64_t flags = ((quote - ONES) & ~quote) | ((slash - ONES) & ~slash) | ((del - ONES) & ~del) |
                         ((w - ONES * 0x20) & ~w) | w;
        flags &= HIGHS;
        if (flags) {
            p += __builtin_ctzll(flags) >> 3;
            goto found;
        }
        p += 8;
    }
    while (p < e && *p >= 0x20 && *p < 0x7F && *p != '"' && *p != '\\') p++;
found:
    if (p >= e || *p != '"') return 0;
    *s = c->p;
    *n = p - c->p;
    c->p = p + 1;
    return 1;
}

/* A plain decimal: `-?(0|[1-9][0-9]*)`, `-` only when signed, no "-0"; its magnitude (at most max_pos, or
 * max_neg when negative) and sign. The next byte is not looked at (the grammar around it is). */
static HOT int take_decimal(Cur *c, int is_signed, uint64_t max_pos, uint64_t max_neg, uint64_t *mag, int *neg) {
    *neg = 0;
    if (is_signed && take(c, '-')) *neg = 1;
    const uint8_t *p = c->p, *e = c->e;
    if (p >= e || *p < '0' || *p > '9') return 0;
    uint64_t v = 0;
    if (*p == '0') {
        p++;
        if (*neg) return 0;
    } else {
        while (p < e && *p >= '0' && *p <= '9') {
            unsigned d = (unsigned)(*p - '0');
            if (v > (UINT64_MAX - d) / 10) return 0;
            v = v * 10 + d;
            p++;
        }
    }
    if (p < e && *p >= '0' && *p <= '9') return 0; /* a digit after a leading zero */
    if (v > (*neg ? max_neg : max_pos)) return 0;
    c->p = p;
    *mag = v;
    return 1;
}

/* An id or time: a quoted unsigned 64-bit decimal. */
static inline int take_u64_string(Cur *c, uint64_t *v) {
    int neg;
    return take(c, '"') && take_decimal(c, 0, UINT64_MAX, 0, v, &neg) && take(c, '"');
}

/* An integer attribute value of `kind`, quoted or not (the Python path reads both the same), as its varint. */
static int take_integer(Cur *c, int kind, uint64_t *wire) {
    static const uint64_t max_pos[] = {0x7FFFFFFFULL, 0x7FFFFFFFFFFFFFFFULL, 0xFFFFFFFFULL, UINT64_MAX};
    static const uint64_t max_neg[] = {0x80000000ULL, 0x8000000000000000ULL, 0, 0};
    int quoted = take(c, '"'), neg;
    uint64_t mag;
    if (!take_decimal(c, kind == K_INT32 || kind == K_INT64, max_pos[kind], max_neg[kind], &mag, &neg)) return 0;
    if (quoted && !take(c, '"')) return 0;
    *wire = neg ? ~mag + 1 : mag; /* negatives sign-extended to 64 bits, as protobuf writes int32 and int64 */
    return 1;
}

static inline int take_bool(Cur *c, int *v) {
    if (take_lit(c, "true", 4)) {
        *v = 1;
        return 1;
    }
    if (take_lit(c, "false", 5)) {
        *v = 0;
        return 1;
    }
    return 0;
}

/* ---- the members ------------------------------------------------------------------------------------- */

/* ["D","D",...]: a packed field of the ids (nothing for []) */
static int deps(Cur *c, Out *o, uint8_t key) {
    if (!take(c, '[')) return 0;
    if (take(c, ']')) return 1;
    if (!put_byte(o, key)) return 0;
    Py_ssize_t body = open_body(o, 1);
    if (body < 0) return 0;
    do {
        uint64_t v;
        if (!take_u64_string(c, &v) || !put_varint(o, v)) return 0;
    } while (take(c, ','));
    return take(c, ']') && close_body(o, body, 1);
}

/* The index in IO_KEYS of the key k (n bytes, without its quotes), -1 if none. */
static inline int io_member(const uint8_t *k, Py_ssize_t n) {
    return n == 6 && IS(k, "values") ? 0 : n == 6 && IS(k, "shapes") ? 1 : n == 5 && IS(k, "types") ? 2 : -1;
}

/* {"values":"..","shapes":"..","types":".."} (any of them, in that order) or {}: the IOInfo field */
static int io_info(Cur *c, Out *o, uint8_t key) {
    if (!take(c, '{') || !put_byte(o, key)) return 0;
    Py_ssize_t body = open_body(o, 1);
    if (body < 0) return 0;
    if (!take(c, '}')) {
        int next = 0; /* in field order, each at most once */
        do {
            const uint8_t *k, *s;
            Py_ssize_t kn, n;
            if (!take_string(c, &k, &kn) || !take(c, ':')) return 0;
            int i = io_member(k, kn);
            if (i < next || !take_string(c, &s, &n)) return 0;
            if (n && !(put_byte(o, IO_TAGS[i]) && put_varint(o, (uint64_t)n) && put_bytes(o, s, n))) return 0;
            next = i + 1;
        } while (take(c, ','));
        if (!take(c, '}')) return 0;
    }
    return close_body(o, body, 1);
}

/* One value of member m: as its field of AttributeProto (a scalar) or as an element of the list's values. */
static int scalar(Cur *c, Out *o, const Member *m, int in_list) {
    if (m->kind == K_STRING) {
        const uint8_t *s;
        Py_ssize_t n;
        if (!take_string(c, &s, &n)) return 0;
        if (!put_key(o, in_list ? LIST_VALUES : (unsigned)(m->number << 3 | 2))) return 0;
        return put_varint(o, (uint64_t)n) && put_bytes(o, s, n);
    }
    uint64_t wire;
    if (m->kind == K_BOOL) {
        int v;
        if (!take_bool(c, &v)) return 0;
        wire = (uint64_t)v;
    } else if (!take_integer(c, m->kind, &wire)) {
        return 0;
    }
    return (in_list || put_key(o, (unsigned)(m->number << 3))) && put_varint(o, wire);
}

/* {} or {"values":[...]}: the list member's field */
static int list(Cur *c, Out *o, const Member *m) {
    if (!take(c, '{') || !put_key(o, (unsigned)(m->number << 3 | 2))) return 0;
    Py_ssize_t body = open_body(o, 1);
    if (body < 0) return 0;
    if (!take(c, '}')) {
        if (!take_lit(c, "\"values\":[", 10)) return 0;
        if (!take(c, ']')) {
            Py_ssize_t packed = -1;
            if (m->kind != K_STRING) { /* numbers and bools: one packed field */
                if (!put_byte(o, LIST_VALUES) || (packed = open_body(o, 1)) < 0) return 0;
            }
            do {
                if (!scalar(c, o, m, 1)) return 0;
            } while (take(c, ','));
            if (!take(c, ']') || (packed >= 0 && !close_body(o, packed, 1))) return 0;
        }
        if (!take(c, '}')) return 0;
    }
    return close_body(o, body, 1);
}

/* The index in MEMBERS of the key k (n bytes, without its quotes), -1 if none. */
static inline int attr_member(const uint8_t *k, Py_ssize_t n) {
    switch (n) {
    case 7: return IS(k, "boolVal") ? 8 : -1;
    case 8: return IS(k, "int64Val") ? 2 : IS(k, "int32Val") ? 0 : IS(k, "boolList") ? 9 : -1;
    case 9:
        return IS(k, "stringVal") ? 10 : IS(k, "uint64Val") ? 6 : IS(k, "uint32Val") ? 4 : IS(k, "int64List") ? 3
               : IS(k, "int32List") ? 1 : -1;
    case 10: return IS(k, "stringList") ? 11 : IS(k, "uint64List") ? 7 : IS(k, "uint32List") ? 5 : -1;
    default: return -1;
    }
}

/* {"name":"N","KIND":V} or {"name":"N"} (a name alone): the attr field */
static int attribute(Cur *c, Out *o) {
    const uint8_t *s, *k;
    Py_ssize_t n, kn;
    if (!take_lit(c, "{\"name\":", 8) || !take_string(c, &s, &n) || !n || !put_byte(o, NODE_ATTR)) return 0;
    Py_ssize_t body = open_body(o, 1);
    if (body < 0 || !put_byte(o, ATTR_NAME) || !put_varint(o, (uint64_t)n) || !put_bytes(o, s, n)) return 0;
    if (take(c, ',')) {
        if (!take_string(c, &k, &kn) || !take(c, ':')) return 0;
        int i = attr_member(k, kn);
        if (i < 0) return 0;
        const Member *m = &MEMBERS[i];
        if (!(m->list ? list(c, o, m) : scalar(c, o, m, 0))) return 0;
    }
    return take(c, '}') && close_body(o, body, 1);
}

static int attributes(Cur *c, Out *o) {
    if (!take(c, '[')) return 0;
    if (take(c, ']')) return 1;
    do {
        if (!attribute(c, o)) return 0;
    } while (take(c, ','));
    return take(c, ']');
}

/* The NodeType value of the name s (n bytes), -1 if none. */
static inline int type_value(const uint8_t *s, Py_ssize_t n) {
    if (n == 9 && IS(s, "COMP_NODE")) return 4; /* (most nodes) */
    for (int v = 0; v < NODE_TYPE_COUNT; v++) {
        if ((size_t)n == strlen(NODE_TYPES[v]) && memcmp(s, NODE_TYPES[v], (size_t)n) == 0) return v;
    }
    return -1;
}

static int node_type(Cur *c, Out *o) {
    const uint8_t *s;
    Py_ssize_t n;
    if (!take_string(c, &s, &n)) return 0;
    int v = type_value(s, n);
    return v == 0 || (v > 0 && put_byte(o, NODE_TYPE) && put_byte(o, (uint8_t)v));
}

/* The index in NODE_KEYS of the key k (n bytes, without its quotes), -1 if none. */
static inline int node_member(const uint8_t *k, Py_ssize_t n) {
    switch (n) {
    case 2: return IS(k, "id") ? 0 : -1;
    case 4: return IS(k, "name") ? 1 : IS(k, "type") ? 2 : IS(k, "attr") ? 9 : -1;
    case 6: return IS(k, "inputs") ? 7 : -1;
    case 7: return IS(k, "outputs") ? 8 : -1;
    case 8: return IS(k, "ctrlDeps") ? 3 : IS(k, "dataDeps") ? 4 : -1;
    case 14: return IS(k, "durationMicros") ? 6 : -1;
    case 15: return IS(k, "startTimeMicros") ? 5 : -1;
    default: return -1;
    }
}

/* member i's value at the cursor, its field written (nothing for a default value) */
static int member(Cur *c, Out *o, int i) {
    uint64_t v;
    const uint8_t *s;
    Py_ssize_t n;
    switch (i) {
    case 0: /* id */
    case 5: /* startTimeMicros */
    case 6: /* durationMicros */
        if (!take_u64_string(c, &v)) return 0;
        return !v || (put_byte(o, NODE_TAGS[i]) && put_varint(o, v));
    case 1:
        if (!take_string(c, &s, &n)) return 0;
        return !n || (put_byte(o, NODE_TAGS[i]) && put_varint(o, (uint64_t)n) && put_bytes(o, s, n));
    case 2:
        return node_type(c, o);
    case 3:
    case 4:
        return deps(c, o, NODE_TAGS[i]);
    case 7:
    case 8:
        return io_info(c, o, NODE_TAGS[i]);
    default:
        return attributes(c, o);
    }
}

/* The record of the node line b[s:e] (its `,` and `\n` not included), framed, appended to o: 1, or 0 with o as
 * it was (declined, or out of memory: o->failed, the error set). */
static int encode_line(const uint8_t *s, const uint8_t *e, Out *o) {
    Cur c = {s, e};
    Py_ssize_t start = o->size;
    Py_ssize_t body = open_body(o, 2); /* most records are 128 bytes to 16 KiB long */
    if (body < 0 || !take(&c, '{')) goto decline;
    if (!take(&c, '}')) {
        int next = 0; /* the members come in field order, each at most once */
        do {
            const uint8_t *k;
            Py_ssize_t n;
            if (!take_string(&c, &k, &n) || !take(&c, ':')) goto decline;
            int i = node_member(k, n);
            if (i < next || !member(&c, o, i)) goto decline;
            next = i + 1;
        } while (take(&c, ','));
        if (!take(&c, '}')) goto decline;
    }
    if (c.p != c.e || o->size == body) goto decline; /* text after the object, or an empty node */
    if (!close_body(o, body, 2)) goto decline;
    return 1;
decline:
    o->size = start;
    return 0;
}

/* ---- lines(buf, start, end) ------------------------------------------------------------------------- */

PyDoc_STRVAR(lines_doc,
"lines(buf, start, end, out) -> (size, count, stop)\n\n"
"The node lines of buf[start:end] (a buffer of twin lines, each ended by b'\\n') encoded, from the first on,\n"
"up to the first line this module does not vouch for: their records, each framed by its varint length, as\n"
"they follow in an .et file, are written into the bytearray out (out[:size]; out is grown as needed, never\n"
"shrunk); count is how many; stop is where the first line not taken starts (end when all were taken; a line\n"
"not ended by b'\\n' before end is not taken).");

static PyObject *lines(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *obuf, *out;
    Py_ssize_t start, end;
    if (!PyArg_ParseTuple(args, "OnnO!", &obuf, &start, &end, &PyByteArray_Type, &out)) return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(obuf, &view, PyBUF_C_CONTIGUOUS) < 0) return NULL;
    PyObject *result = NULL;
    if (start < 0 || end < start || end > view.len) {
        PyErr_Format(PyExc_ValueError, "lines: [%zd, %zd) is not within the buffer's %zd bytes", start, end, view.len);
        goto done;
    }
    const uint8_t *b = view.buf, *o0 = (const uint8_t *)PyByteArray_AS_STRING(out);
    if (b < o0 + PyByteArray_GET_SIZE(out) && o0 < b + view.len) {
        PyErr_SetString(PyExc_ValueError, "lines: out holds bytes of the buffer read");
        goto done;
    }
    Py_ssize_t pos = start, count = 0;
    Out o = {out, (uint8_t *)PyByteArray_AS_STRING(out), 0, PyByteArray_GET_SIZE(out), 0};
    while (pos < end) {
        const uint8_t *nl = memchr(b + pos, '\n', (size_t)(end - pos));
        if (nl == NULL) break;
        const uint8_t *e = nl;
        if (e > b + pos && e[-1] == ',') e--;
        if (!encode_line(b + pos, e, &o)) break;
        count++;
        pos = nl + 1 - b;
    }
    if (!o.failed) result = Py_BuildValue("nnn", o.size, count, pos);
done:
    PyBuffer_Release(&view);
    return result;
}

/* ---- keys() ---------------------------------------------------------------------------------------- */

PyDoc_STRVAR(keys_doc,
"keys() -> dict\n\n"
"What this module writes for each JSON key it reads, found by the lookups its reading uses, for a test to\n"
"check against the schema: 'node' (Node's JSON keys in the order they must come -> field key), 'io' (the\n"
"same for IOInfo), 'attr_name' (AttributeProto's name key), 'members' (AttributeProto's value keys ->\n"
"(field number, is a list)), 'types' (NodeType names -> value). -1 for a key its lookup does not find.");

/* dict[name] = value, the new reference value taken; -1 on failure */
static int put_item(PyObject *dict, const char *name, PyObject *value) {
    int bad = value == NULL || PyDict_SetItemString(dict, name, value) < 0;
    Py_XDECREF(value);
    return bad ? -1 : 0;
}

static PyObject *keys(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    PyObject *node = PyDict_New(), *io = PyDict_New(), *members = PyDict_New(), *types = PyDict_New();
    PyObject *result = NULL;
    if (node == NULL || io == NULL || members == NULL || types == NULL) goto done;
    for (int i = 0; i < NODE_MEMBERS; i++) {
        const char *k = NODE_KEYS[i];
        int found = node_member((const uint8_t *)k, (Py_ssize_t)strlen(k));
        if (put_item(node, k, PyLong_FromLong(found < 0 ? -1 : NODE_TAGS[found])) < 0) goto done;
    }
    for (int i = 0; i < 3; i++) {
        const char *k = IO_KEYS[i];
        int found = io_member((const uint8_t *)k, (Py_ssize_t)strlen(k));
        if (put_item(io, k, PyLong_FromLong(found < 0 ? -1 : IO_TAGS[found])) < 0) goto done;
    }
    for (int i = 0; i < MEMBER_COUNT; i++) {
        const char *k = MEMBERS[i].json;
        int found = attr_member((const uint8_t *)k, (Py_ssize_t)strlen(k));
        PyObject *entry = found < 0 ? PyLong_FromLong(-1)
                                    : Py_BuildValue("(iO)", MEMBERS[found].number, MEMBERS[found].list ? Py_True : Py_False);
        if (put_item(members, k, entry) < 0) goto done;
    }
    for (int v = 0; v < NODE_TYPE_COUNT; v++) {
        const char *k = NODE_TYPES[v];
        if (put_item(types, k, PyLong_FromLong(type_value((const uint8_t *)k, (Py_ssize_t)strlen(k)))) < 0) goto done;
    }
    result = Py_BuildValue("{sOsOsisOsO}", "node", node, "io", io, "attr_name", ATTR_NAME, "members", members,
                           "types", types);
done:
    Py_XDECREF(node);
    Py_XDECREF(io);
    Py_XDECREF(members);
    Py_XDECREF(types);
    return result;
}

static PyMethodDef methods[] = {
    {"lines", lines, METH_VARARGS, lines_doc},
    {"keys", keys, METH_NOARGS, keys_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "etkit.format._jsonin",
    "The JSON twin's node lines to .et records in C (optional: protojson's LineEncoder gives the same bytes).", -1,
    methods,
};

PyMODINIT_FUNC PyInit__jsonin(void) { return PyModule_Create(&module); }
