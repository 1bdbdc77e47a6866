/* etkit.format._jsonout: the JSON twin's node texts in C, for etkit.format.jsonfast.TwinWriter.
 *
 * render(buf, bounds, first) writes the text of the records buf[bounds[2i]:bounds[2i+1]], i = first, first+1, ...,
 * exactly as TwinWriter.node writes them (and, for the attributes that node hands to protobuf, exactly as
 * protojson.attr_json writes them), and stops at the first record it declines: the caller renders that one
 * the Python way (which also raises what is to be raised) and calls again after it.
 *
 * It declines, never guesses. It reads a record only when the record is canonical (what protobuf writes for
 * its fields: fields in number order, each once, no default value written, lists packed and not empty, minimal
 * varints, valid UTF-8, known fields and node types only) and every value is of a kind whose text it writes
 * byte for byte as Python does: integers, bools, strings (escaped as json.encoder.encode_basestring and orjson
 * escape them, which is the same for every code point), and lists of those. Floats, doubles and bytes, and any
 * record holding one, go to Python, as do empty records (an error there), and an attribute whose text would hold
 * "NaN" where attr_json refuses it.
 *
 * cut(buf) frames the records of a block as jsonfast._cut does (the Python loop it replaces).
 *
 * Only the buffer protocol is used (no numpy headers); every read is bounds-checked against the record's end.
 * Nothing is cached: the text is a function of the record's bytes alone.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#if defined(__GNUC__)
#define LIKELY(x) __builtin_expect(!!(x), 1)
#else
#define LIKELY(x) (x)
#endif

/* What a renderer returns: the text was written (OK), the record is left to Python (DECLINE), or no memory. */
enum { OK = 0, DECLINE = 1, NOMEM = -1 };
#define TRY(x)                  \
    do {                        \
        int r_ = (x);           \
        if (r_ != OK) return r_; \
    } while (0)

/* The keys of etkit.format.tags (one byte each). */
enum {
    NODE_ID = 0x08, NODE_NAME = 0x12, NODE_TYPE = 0x18, NODE_CTRL = 0x22, NODE_DATA = 0x2a, NODE_START = 0x30,
    NODE_DURATION = 0x38, NODE_INPUTS = 0x42, NODE_OUTPUTS = 0x4a, NODE_ATTR = 0x52,
    IO_VALUES = 0x0a, IO_SHAPES = 0x12, IO_TYPES = 0x1a, ATTR_NAME = 0x0a, ATTR_DOC = 0x12, LIST_VALUES = 0x0a,
};

/* ---- the output buffer ------------------------------------------------------------------------------ */

typedef struct {
    char *data;
    Py_ssize_t size, cap;
} Out;

static int reserve(Out *o, Py_ssize_t extra) {
    if (LIKELY(extra <= o->cap - o->size)) return OK;
    if (extra > PY_SSIZE_T_MAX / 4 - o->size) return NOMEM;
    Py_ssize_t cap = o->cap ? o->cap : (Py_ssize_t)1 << 16;
    while (cap - o->size < extra) cap *= 2;
    char *data = PyMem_Realloc(o->data, (size_t)cap);
    if (data == NULL) return NOMEM;
    o->data = data;
    o->cap = cap;
    return OK;
}

static inline int put(Out *o, const char *s, Py_ssize_t n) {
    TRY(reserve(o, n));
    memcpy(o->data + o->size, s, (size_t)n);
    o->size += n;
    return OK;
}

#define PUT_LIT(o, lit) put((o), (lit), (Py_ssize_t)(sizeof(lit) - 1))

static inline int put_char(Out *o, char c) {
    TRY(reserve(o, 1));
    o->data[o->size++] = c;
    return OK;
}

/* The decimal digits of v (as b"%d" % v writes them). */
static int put_u64(Out *o, uint64_t v) {
    char tmp[20];
    int n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    TRY(reserve(o, n));
    char *p = o->data + o->size;
    for (int i = 0; i < n; i++) p[i] = tmp[n - 1 - i];
    o->size += n;
    return OK;
}

static int put_i64(Out *o, int64_t v) {
    if (v < 0) {
        TRY(put_char(o, '-'));
        return put_u64(o, (uint64_t)0 - (uint64_t)v);
    }
    return put_u64(o, (uint64_t)v);
}

/* ---- strings: UTF-8 checked as Python's strict decoder checks it, escaped as encode_basestring escapes ---- */

/* By first byte: 0 copied as it is, 1 escaped, 2..4 the lead of a sequence of that many bytes, 5 never valid. */
static uint8_t byte_class[256];
static char short_escape[0x60]; /* the letter of \b \t \n \f \r \" \\ (0: \u00XX) */

static void init_tables(void) {
    for (int c = 0; c < 256; c++)
        byte_class[c] = c < 0x20 ? 1 : c < 0x80 ? 0 : c < 0xC2 ? 5 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : c < 0xF5 ? 4 : 5;
    byte_class['"'] = byte_class['\\'] = 1;
    short_escape['\b'] = 'b';
    short_escape['\t'] = 't';
    short_escape['\n'] = 'n';
    short_escape['\f'] = 'f';
    short_escape['\r'] = 'r';
    short_escape['"'] = '"';
    short_escape['\\'] = '\\';
}

/* Whether none of the eight bytes at p is escaped or part of a multi-byte sequence (byte_class 0). */
static inline int plain8(const uint8_t *p) {
    uint64_t x;
    memcpy(&x, p, 8);
    const uint64_t ones = 0x0101010101010101ULL, highs = 0x8080808080808080ULL;
    uint64_t quote = x ^ (ones * '"'), backslash = x ^ (ones * '\\');
    uint64_t odd = (x - ones * 0x20) | (quote - ones) | (backslash - ones); /* a byte below 0x20, a '"' or '\\' ... */
    return ((odd & ~x) | x) & highs ? 0 : 1; /* ... sets its top bit here, as a byte of 0x80 or more does */
}

/* The JSON text (quoted) of the UTF-8 bytes s[0:n], as jsonfast.json_string writes it; DECLINE if not UTF-8. */
static int put_string(Out *o, const uint8_t *s, Py_ssize_t n) {
    if (n > (PY_SSIZE_T_MAX / 4 - 2) / 6) return NOMEM;
    TRY(reserve(o, 6 * n + 2)); /* \u00XX: six bytes for one */
    char *p = o->data + o->size;
    *p++ = '"';
    Py_ssize_t i = 0;
    while (i < n) {
        if (i + 8 <= n && plain8(s + i)) { /* eight bytes to copy as they are */
            memcpy(p, s + i, 8);
            p += 8;
            i += 8;
            continue;
        }
        uint8_t c = s[i];
        switch (byte_class[c]) {
        case 0:
            *p++ = (char)c;
            i++;
            continue;
        case 1:
            *p++ = '\\';
            if (short_escape[c]) {
                *p++ = short_escape[c];
            } else {
                static const char hex[] = "0123456789abcdef";
                *p++ = 'u';
                *p++ = '0';
                *p++ = '0';
                *p++ = hex[c >> 4];
                *p++ = hex[c & 15];
            }
            i++;
            continue;
        case 2:
            if (i + 1 >= n || (s[i + 1] & 0xC0) != 0x80) return DECLINE;
            break;
        case 3: {
            if (i + 2 >= n || (s[i + 1] & 0xC0) != 0x80 || (s[i + 2] & 0xC0) != 0x80) return DECLINE;
            if ((c == 0xE0 && s[i + 1] < 0xA0) || (c == 0xED && s[i + 1] >= 0xA0)) return DECLINE; /* over-long, surrogate */
            break;
        }
        case 4: {
            if (i + 3 >= n || (s[i + 1] & 0xC0) != 0x80 || (s[i + 2] & 0xC0) != 0x80 || (s[i + 3] & 0xC0) != 0x80)
                return DECLINE;
            if ((c == 0xF0 && s[i + 1] < 0x90) || (c == 0xF4 && s[i + 1] >= 0x90)) return DECLINE; /* over-long, > U+10FFFF */
            break;
        }
        default:
            return DECLINE;
        }
        int k = byte_class[c];
        memcpy(p, s + i, (size_t)k);
        p += k;
        i += k;
    }
    *p++ = '"';
    o->size = p - o->data;
    return OK;
}

/* ---- varints ------------------------------------------------------------------------------------------ */

/* The canonical varint at b[p] before end (minimal, at most ten bytes, below 2^64: what jsonfast._varint
 * accepts): the position after it, or -1. */
static inline Py_ssize_t varint(const uint8_t *b, Py_ssize_t p, Py_ssize_t end, uint64_t *out) {
    if (LIKELY(p < end && b[p] < 0x80)) {
        *out = b[p];
        return p + 1;
    }
    uint64_t v = 0;
    for (int i = 0; i < 10; i++) {
        if (p + i >= end) return -1;
        uint8_t c = b[p + i];
        v |= (uint64_t)(c & 0x7F) << (7 * i);
        if (c < 0x80) {
            if ((i && c == 0) || (i == 9 && c > 1)) return -1;
            *out = v;
            return p + i + 1;
        }
    }
    return -1;
}

/* The length-delimited bytes whose length varint is at b[p]: b[*start:*stop] (within end), or -1. */
static inline int lspan(const uint8_t *b, Py_ssize_t p, Py_ssize_t end, Py_ssize_t *start, Py_ssize_t *stop) {
    uint64_t length;
    Py_ssize_t q = varint(b, p, end, &length);
    if (q < 0 || length > (uint64_t)(end - q)) return -1;
    *start = q;
    *stop = q + (Py_ssize_t)length;
    return 0;
}

/* The same for the field whose one-byte key is at b[p]. */
static inline int span(const uint8_t *b, Py_ssize_t p, Py_ssize_t end, Py_ssize_t *start, Py_ssize_t *stop) {
    return lspan(b, p + 1, end, start, stop);
}

/* ---- attribute values ---------------------------------------------------------------------------------- */

/* How the value of AttributeProto field 2k+1 (a scalar) or 2k+2 (its list) reads, k = 1 .. 15. */
typedef enum { V_DOUBLE, V_FLOAT, V_SIGNED, V_UNSIGNED, V_ZIGZAG, V_FIXED, V_SFIXED, V_BOOL, V_STRING, V_BYTES } How;

typedef struct {
    const char *key;  /* the JSON key of the scalar member, "int64Val" (the list's: "int64List") */
    const char *list;
    How how;
    int bits;   /* 32 or 64 */
    int quoted; /* 64-bit integers are JSON strings */
} Kind;

static const Kind KINDS[16] = {
    {NULL, NULL, V_DOUBLE, 0, 0}, /* field numbers 1 and 2: name, doc_string */
    {"doubleVal", "doubleList", V_DOUBLE, 64, 0},
    {"floatVal", "floatList", V_FLOAT, 32, 0},
    {"int32Val", "int32List", V_SIGNED, 32, 0},
    {"int64Val", "int64List", V_SIGNED, 64, 1},
    {"uint32Val", "uint32List", V_UNSIGNED, 32, 0},
    {"uint64Val", "uint64List", V_UNSIGNED, 64, 1},
    {"sint32Val", "sint32List", V_ZIGZAG, 32, 0},
    {"sint64Val", "sint64List", V_ZIGZAG, 64, 1},
    {"fixed32Val", "fixed32List", V_FIXED, 32, 0},
    {"fixed64Val", "fixed64List", V_FIXED, 64, 1},
    {"sfixed32Val", "sfixed32List", V_SFIXED, 32, 0},
    {"sfixed64Val", "sfixed64List", V_SFIXED, 64, 1},
    {"boolVal", "boolList", V_BOOL, 0, 0},
    {"stringVal", "stringList", V_STRING, 0, 0},
    {"bytesVal", "bytesList", V_BYTES, 0, 0},
};

/* The wire type of a scalar of that kind. */
static int wire_of(How how, int bits) {
    switch (how) {
    case V_FIXED:
    case V_SFIXED:
        return bits == 32 ? 5 : 1;
    case V_STRING:
        return 2;
    case V_DOUBLE:
        return 1;
    case V_FLOAT:
        return 5;
    case V_BYTES:
        return 2;
    default:
        return 0;
    }
}

/* One varint-coded integer of kind k, as protobuf reads it and as it would write it again (else DECLINE):
 * its text, quoted if 64-bit (what _int_field and str() of the value give). */
static int put_varint_value(Out *o, const Kind *k, uint64_t v) {
    int64_t s;
    switch (k->how) {
    case V_SIGNED:
        s = (int64_t)v;
        if (k->bits == 32 && (s < INT32_MIN || s > INT32_MAX)) return DECLINE;
        if (k->quoted) TRY(put_char(o, '"'));
        TRY(put_i64(o, s));
        break;
    case V_UNSIGNED:
        if (k->bits == 32 && v >> 32) return DECLINE;
        if (k->quoted) TRY(put_char(o, '"'));
        TRY(put_u64(o, v));
        break;
    case V_ZIGZAG:
        if (k->bits == 32 && v >> 32) return DECLINE;
        if (k->quoted) TRY(put_char(o, '"'));
        TRY(put_i64(o, (int64_t)(v >> 1) ^ -(int64_t)(v & 1)));
        break;
    case V_BOOL:
        if (v > 1) return DECLINE; /* protobuf reads any other value as true and writes 1 */
        return v ? PUT_LIT(o, "true") : PUT_LIT(o, "false");
    default:
        return DECLINE;
    }
    return k->quoted ? put_char(o, '"') : OK;
}

/* One fixed-width integer of kind k at b (bits/8 bytes, little-endian). */
static int put_fixed_value(Out *o, const Kind *k, const uint8_t *b) {
    uint64_t v = 0;
    int n = k->bits / 8;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | b[i];
    if (k->quoted) TRY(put_char(o, '"'));
    if (k->how == V_SFIXED)
        TRY(put_i64(o, n == 4 ? (int64_t)(int32_t)(uint32_t)v : (int64_t)v));
    else
        TRY(put_u64(o, v));
    return k->quoted ? put_char(o, '"') : OK;
}

/* The scalar of kind k that fills b[p:end] exactly (its key read already). */
static int put_scalar(Out *o, const Kind *k, const uint8_t *b, Py_ssize_t p, Py_ssize_t end) {
    switch (k->how) {
    case V_FIXED:
    case V_SFIXED:
        if (end - p != k->bits / 8) return DECLINE;
        return put_fixed_value(o, k, b + p);
    case V_STRING: {
        uint64_t length;
        Py_ssize_t q = varint(b, p, end, &length);
        if (q < 0 || length != (uint64_t)(end - q)) return DECLINE;
        return put_string(o, b + q, end - q);
    }
    case V_SIGNED:
    case V_UNSIGNED:
    case V_ZIGZAG:
    case V_BOOL: {
        uint64_t v = 0;
        if (varint(b, p, end, &v) != end) return DECLINE;
        return put_varint_value(o, k, v);
    }
    default:
        return DECLINE;
    }
}


/* The list message b[p:end] of kind k: protojson's {"values":[..]}, or {} when empty, where the message is as
 * protobuf writes it (one packed field for numbers, one field per string). */
static int put_list(Out *o, const Kind *k, const uint8_t *b, Py_ssize_t p, Py_ssize_t end) {
    if (p == end) return PUT_LIT(o, "{}");
    TRY(PUT_LIT(o, "{\"values\":["));
    if (k->how == V_STRING) {
        for (int first = 1; p < end; first = 0) {
            Py_ssize_t start, stop;
            if (b[p] != LIST_VALUES || span(b, p, end, &start, &stop) < 0) return DECLINE;
            if (!first) TRY(put_char(o, ','));
            TRY(put_string(o, b + start, stop - start));
            p = stop;
        }
        return PUT_LIT(o, "]}");
    }
    Py_ssize_t start, stop;
    if (b[p] != LIST_VALUES || span(b, p, end, &start, &stop) < 0 || stop != end || stop == start) return DECLINE;
    if (k->how == V_FIXED || k->how == V_SFIXED) {
        Py_ssize_t width = k->bits / 8;
        if ((stop - start) % width) return DECLINE;
        for (Py_ssize_t q = start; q < stop; q += width) {
            if (q > start) TRY(put_char(o, ','));
            TRY(put_fixed_value(o, k, b + q));
        }
    } else {
        for (Py_ssize_t q = start; q < stop;) {
            if (q > start) TRY(put_char(o, ','));
            uint64_t v;
            q = varint(b, q, stop, &v);
            if (q < 0) return DECLINE;
            TRY(put_varint_value(o, k, v));
        }
    }
    return PUT_LIT(o, "]}");
}

/* "key":value of the attribute's value field at b[p:end] whose key (read already) is `key`: a field 3..32 of
 * the right wire type, numbers, bools and strings only (no floats, no bytes). */
static int put_member(Out *o, uint64_t key, const uint8_t *b, Py_ssize_t p, Py_ssize_t end) {
    uint64_t field = key >> 3, wire = key & 7;
    if (field < 3 || field > 32) return DECLINE;
    const Kind *k = &KINDS[(field - 1) / 2];
    int list = (field & 1) == 0;
    if (k->how == V_DOUBLE || k->how == V_FLOAT || k->how == V_BYTES) return DECLINE;
    if (wire != (uint64_t)(list ? 2 : wire_of(k->how, k->bits))) return DECLINE;
    const char *name = list ? k->list : k->key;
    TRY(put_char(o, '"'));
    TRY(put(o, name, (Py_ssize_t)strlen(name)));
    TRY(PUT_LIT(o, "\":"));
    if (!list) return put_scalar(o, k, b, p, end);
    Py_ssize_t start, stop;
    if (lspan(b, p, end, &start, &stop) < 0 || stop != end) return DECLINE;
    return put_list(o, k, b, start, stop);
}

/* protojson.attr_json of the attribute b[p:end] (name, doc string and value, each optional, in that order);
 * DECLINE where attr_json gives None (a text holding "NaN") or where this reader does not go. */
static int put_other_attr(Out *o, const uint8_t *b, Py_ssize_t p, Py_ssize_t end) {
    Py_ssize_t begin = o->size;
    TRY(put_char(o, '{'));
    for (int field = 0; field < 2 && p < end; field++) {
        if (b[p] != (field ? ATTR_DOC : ATTR_NAME)) continue;
        Py_ssize_t start, stop;
        if (span(b, p, end, &start, &stop) < 0 || stop == start) return DECLINE; /* protobuf leaves "" out */
        if (field && o->size > begin + 1) TRY(put_char(o, ','));
        TRY(field ? PUT_LIT(o, "\"docString\":") : PUT_LIT(o, "\"name\":"));
        TRY(put_string(o, b + start, stop - start));
        p = stop;
    }
    if (p < end) {
        uint64_t key;
        Py_ssize_t q = varint(b, p, end, &key);
        if (q < 0) return DECLINE;
        if (o->size > begin + 1) TRY(put_char(o, ','));
        TRY(put_member(o, key, b, q, end));
    }
    TRY(put_char(o, '}'));
    for (Py_ssize_t i = begin; i + 5 <= o->size; i++)
        if (o->data[i] == '"' && memcmp(o->data + i, "\"NaN\"", 5) == 0) return DECLINE;
    return OK;
}

/* jsonfast._attr_json of the attribute b[p:end]: a name, then an integer, bool or string value (or nothing)
 * read there; any other shape as protobuf reads it (put_other_attr). */
static int put_attr(Out *o, const uint8_t *b, Py_ssize_t p, Py_ssize_t end) {
    if (p >= end || b[p] != ATTR_NAME) return put_other_attr(o, b, p, end);
    Py_ssize_t start, stop, begin = o->size;
    if (span(b, p, end, &start, &stop) < 0 || stop == start) return DECLINE;
    TRY(PUT_LIT(o, "{\"name\":"));
    TRY(put_string(o, b + start, stop - start));
    if (stop == end) return put_char(o, '}');
    uint64_t key;
    Py_ssize_t q = varint(b, stop, end, &key);
    if (q < 0) return DECLINE;
    uint64_t field = key >> 3;
    How how = field >= 3 && field <= 32 && (field & 1) ? KINDS[(field - 1) / 2].how : V_DOUBLE;
    if (how == V_DOUBLE || how == V_FLOAT || how == V_BYTES) { /* lists, a doc string, ...: protobuf's way */
        o->size = begin;
        return put_other_attr(o, b, p, end);
    }
    TRY(put_char(o, ','));
    TRY(put_member(o, key, b, q, end));
    return put_char(o, '}');
}

/* ---- nodes --------------------------------------------------------------------------------------------- */

/* {"values":..,"shapes":..,"types":..} of the IOInfo b[p:end] (each when set; set means not empty). */
static int put_io(Out *o, const uint8_t *b, Py_ssize_t p, Py_ssize_t end) {
    static const struct {
        uint8_t key;
        const char *text;
    } fields[3] = {{IO_VALUES, "\"values\":"}, {IO_SHAPES, "\"shapes\":"}, {IO_TYPES, "\"types\":"}};
    TRY(put_char(o, '{'));
    for (int i = 0; i < 3 && p < end; i++) {
        if (b[p] != fields[i].key) continue;
        Py_ssize_t start, stop;
        if (span(b, p, end, &start, &stop) < 0 || stop == start) return DECLINE;
        if (o->data[o->size - 1] != '{') TRY(put_char(o, ','));
        TRY(put(o, fields[i].text, (Py_ssize_t)strlen(fields[i].text)));
        TRY(put_string(o, b + start, stop - start));
        p = stop;
    }
    if (p != end) return DECLINE; /* unknown fields, or fields out of order or repeated */
    return put_char(o, '}');
}

static const char *const TYPE_JSON[8] = {
    NULL, "\"type\":\"METADATA_NODE\"", "\"type\":\"MEM_LOAD_NODE\"", "\"type\":\"MEM_STORE_NODE\"",
    "\"type\":\"COMP_NODE\"", "\"type\":\"COMM_SEND_NODE\"", "\"type\":\"COMM_RECV_NODE\"", "\"type\":\"COMM_COLL_NODE\""};

/* "key":"value" of a positive varint field (id, start, duration) at b[p]: the position after it, or -1. */
static Py_ssize_t put_positive(Out *o, const char *key, const uint8_t *b, Py_ssize_t p, Py_ssize_t end, int *status) {
    uint64_t v;
    Py_ssize_t q = varint(b, p + 1, end, &v);
    if (q < 0 || v == 0) {
        *status = DECLINE;
        return -1;
    }
    if ((*status = put(o, key, (Py_ssize_t)strlen(key))) != OK || (*status = put_u64(o, v)) != OK ||
        (*status = put_char(o, '"')) != OK)
        return -1;
    return q;
}

/* TwinWriter.node: the text of the canonical node record b[p:end]. */
static int put_node(Out *o, const uint8_t *b, Py_ssize_t p, Py_ssize_t end) {
    if (p >= end) return DECLINE; /* an empty record: Python raises */
    Py_ssize_t begin = o->size;
    int status = OK;
    TRY(put_char(o, '{'));
#define COMMA() \
    if (o->size > begin + 1) TRY(put_char(o, ','))
    if (b[p] == NODE_ID) {
        if ((p = put_positive(o, "\"id\":\"", b, p, end, &status)) < 0) return status;
    }
    if (p < end && b[p] == NODE_NAME) {
        Py_ssize_t start, stop;
        if (span(b, p, end, &start, &stop) < 0 || stop == start) return DECLINE;
        COMMA();
        TRY(PUT_LIT(o, "\"name\":"));
        TRY(put_string(o, b + start, stop - start));
        p = stop;
    }
    if (p < end && b[p] == NODE_TYPE) {
        if (p + 1 >= end || b[p + 1] == 0 || b[p + 1] >= 8) return DECLINE;
        COMMA();
        TRY(put(o, TYPE_JSON[b[p + 1]], (Py_ssize_t)strlen(TYPE_JSON[b[p + 1]])));
        p += 2;
    }
    for (int i = 0; i < 2 && p < end; i++) {
        if (b[p] != (i ? NODE_DATA : NODE_CTRL)) continue;
        Py_ssize_t start, stop;
        if (span(b, p, end, &start, &stop) < 0 || stop == start) return DECLINE;
        COMMA();
        TRY(i ? PUT_LIT(o, "\"dataDeps\":[") : PUT_LIT(o, "\"ctrlDeps\":["));
        for (Py_ssize_t q = start; q < stop;) {
            uint64_t v;
            if (q > start) TRY(put_char(o, ','));
            if ((q = varint(b, q, stop, &v)) < 0) return DECLINE;
            TRY(put_char(o, '"'));
            TRY(put_u64(o, v));
            TRY(put_char(o, '"'));
        }
        TRY(put_char(o, ']'));
        p = stop;
    }
    if (p < end && b[p] == NODE_START) {
        COMMA();
        if ((p = put_positive(o, "\"startTimeMicros\":\"", b, p, end, &status)) < 0) return status;
    }
    if (p < end && b[p] == NODE_DURATION) {
        COMMA();
        if ((p = put_positive(o, "\"durationMicros\":\"", b, p, end, &status)) < 0) return status;
    }
    for (int i = 0; i < 2 && p < end; i++) {
        if (b[p] != (i ? NODE_OUTPUTS : NODE_INPUTS)) continue;
        Py_ssize_t start, stop;
        if (span(b, p, end, &start, &stop) < 0) return DECLINE; /* (an empty IOInfo is written: {}) */
        COMMA();
        TRY(i ? PUT_LIT(o, "\"outputs\":") : PUT_LIT(o, "\"inputs\":"));
        TRY(put_io(o, b, start, stop));
        p = stop;
    }
    if (p < end && b[p] == NODE_ATTR) {
        COMMA();
        TRY(PUT_LIT(o, "\"attr\":["));
        for (int first = 1; p < end && b[p] == NODE_ATTR; first = 0) {
            Py_ssize_t start, stop;
            if (span(b, p, end, &start, &stop) < 0) return DECLINE;
            if (!first) TRY(put_char(o, ','));
            TRY(put_attr(o, b, start, stop));
            p = stop;
        }
        TRY(put_char(o, ']'));
    }
#undef COMMA
    if (p != end) return DECLINE; /* an unknown field, a field out of order or repeated */
    return put_char(o, '}');
}

/* ---- render(buf, bounds, first) ------------------------------------------------------------------------ */

PyDoc_STRVAR(render_doc,
"render(buf, bounds, first)\n\n"
"(text, stop): the texts of the records buf[bounds[2i]:bounds[2i+1]] for i = first, first+1, ... up to the\n"
"first one this reader declines (stop; len(bounds) // 2 if none), joined by b\",\\n\", exactly as\n"
"TwinWriter.node writes them. bounds is a list of ints, each record within buf.");

static PyObject *render(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *ob, *obounds;
    Py_ssize_t first;
    if (!PyArg_ParseTuple(args, "OO!n", &ob, &PyList_Type, &obounds, &first)) return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(ob, &view, PyBUF_C_CONTIGUOUS) < 0) return NULL;
    const uint8_t *b = view.buf;
    Py_ssize_t size = view.len, n = PyList_GET_SIZE(obounds) / 2, i = first < 0 ? 0 : first;
    Out o = {NULL, 0, 0};
    PyObject *result = NULL;
    for (; i < n; i++) {
        PyObject *ostart = PyList_GET_ITEM(obounds, 2 * i), *oend = PyList_GET_ITEM(obounds, 2 * i + 1);
        if (!PyLong_CheckExact(ostart) || !PyLong_CheckExact(oend)) { /* (no Python code runs while the list is read) */
            PyErr_SetString(PyExc_TypeError, "render: bounds must be a list of ints");
            goto done;
        }
        Py_ssize_t start = PyLong_AsSsize_t(ostart), end = PyLong_AsSsize_t(oend);
        if ((start == -1 || end == -1) && PyErr_Occurred()) goto done;
        if (start < 0 || end > size || start > end) {
            PyErr_Format(PyExc_ValueError, "render: record %zd (%zd:%zd) lies outside the buffer of %zd bytes", i, start,
                         end, size);
            goto done;
        }
        Py_ssize_t mark = o.size;
        int status = mark ? put(&o, ",\n", 2) : OK;
        if (status == OK) status = put_node(&o, b, start, end);
        if (status == NOMEM) {
            PyErr_NoMemory();
            goto done;
        }
        if (status == DECLINE) {
            o.size = mark;
            break;
        }
    }
    result = Py_BuildValue("y#n", o.data ? o.data : "", o.size, i);
done:
    PyMem_Free(o.data);
    PyBuffer_Release(&view);
    return result;
}

/* ---- cut(buf) ------------------------------------------------------------------------------------------ */

PyDoc_STRVAR(cut_doc,
"cut(buf)\n\n"
"(bounds, stop, over) of the records framed in buf from byte 0, as etkit.format.jsonfast._cut gives them:\n"
"bounds holds start, end of each whole record's payload, stop is where the first record that is not whole\n"
"starts (its length prefix), over how far that record runs past the end of buf (0 if its prefix is cut\n"
"off, or none). None where a length prefix is longer than five bytes.");

static PyObject *cut(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *ob;
    if (!PyArg_ParseTuple(args, "O", &ob)) return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(ob, &view, PyBUF_C_CONTIGUOUS) < 0) return NULL;
    const uint8_t *b = view.buf;
    Py_ssize_t size = view.len, pos = 0, over = 0;
    PyObject *bounds = PyList_New(0), *result = NULL;
    if (bounds == NULL) goto done;
    while (pos < size) {
        uint64_t length = 0;
        int k = 0;
        for (;; k++) {
            if (k == 5) { /* (a length prefix of more than five bytes: the caller's FramingFault) */
                Py_INCREF(Py_None);
                result = Py_None;
                goto done;
            }
            if (pos + k >= size) goto cut_off;
            uint8_t byte = b[pos + k];
            length |= (uint64_t)(byte & 0x7F) << (7 * k);
            if (byte < 0x80) break;
        }
        length &= 0xFFFFFFFFULL;
        Py_ssize_t start = pos + k + 1;
        if (length > (uint64_t)(size - start)) {
            over = start + (Py_ssize_t)length - size;
            break;
        }
        Py_ssize_t stop = start + (Py_ssize_t)length;
        PyObject *a = PyLong_FromSsize_t(start), *z = a ? PyLong_FromSsize_t(stop) : NULL;
        int failed = z == NULL || PyList_Append(bounds, a) < 0 || PyList_Append(bounds, z) < 0;
        Py_XDECREF(a);
        Py_XDECREF(z);
        if (failed) goto done;
        pos = stop;
    }
cut_off:
    result = Py_BuildValue("Onn", bounds, pos, over);
done:
    Py_XDECREF(bounds);
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"render", render, METH_VARARGS, render_doc},
    {"cut", cut, METH_VARARGS, cut_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "etkit.format._jsonout",
    "The JSON twin's node texts in C (optional: etkit.format.jsonfast.TwinWriter writes the same in Python).", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__jsonout(void) {
    init_tables();
    return PyModule_Create(&module);
}
