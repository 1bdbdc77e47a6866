/* etkit.format._walk: the lean walk of etkit.format.columnar, record by record in C.
 *
 * columnar's numpy walk reads the k-th field of every record at step k; these functions give the same
 * results (the same arrays, in the same order: by field kind, then step, then message) from one pass
 * over each message's bytes, plus a second pass that places what the first counted. Nothing here
 * allocates a Python object per record: results are bytearrays that columnar views as numpy arrays.
 *
 * Errors are the numpy walk's, decided the way it decides them: it stops at the first step at which
 * any message has a field it does not take (UNUSUAL) or bytes it cannot read (FAULT), and at one step
 * the unusual field wins. Every read is bounds-checked against the buffer (the numpy walk reads up to
 * columnar.PAD bytes past a record, which the caller provides; a read past the buffer is a FAULT).
 *
 * Only the buffer protocol is used (no numpy headers): arrays come in as contiguous buffers of the
 * dtypes the docstrings name, which columnar guarantees.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "../_buffers.h"

enum { OK = 0, UNUSUAL = 1, FAULT = 2 };
#define MAX_STEPS 65536
#define LENGTH_LIMIT ((uint64_t)1 << 40)

typedef struct {
    int kind;        /* OK, UNUSUAL or FAULT */
    Py_ssize_t step; /* the step of the error that decides */
} Err;

/* The numpy walk raises at the earliest step with an error; at that step, an unusual field first. */
static inline void note(Err *err, int kind, Py_ssize_t step) {
    if (err->kind == OK || step < err->step || (step == err->step && kind == UNUSUAL && err->kind == FAULT)) {
        err->kind = kind;
        err->step = step;
    }
}

#if defined(__GNUC__)
#define LIKELY(x) __builtin_expect(!!(x), 1)
/* Ask for the cache line at p ahead of its use (a hint: never faults, whatever p is). The chain of frames
 * follows records whose starts depend on the bytes before them, so without it each record of a buffer bigger
 * than the caches waits on memory (half of frames()' time on a 114 MB file). */
#define PREFETCH(p) __builtin_prefetch((const void *)(p))
#else
#define LIKELY(x) (x)
#define PREFETCH(p) ((void)0)
#endif
/* How far ahead of the walk (in bytes) PREFETCH asks for the buffer's lines. */
#define AHEAD 4096

/* The two cache lines AHEAD bytes past b[p] asked for (records of up to two lines read later), when in b */
static inline void ahead(const uint8_t *b, Py_ssize_t size, Py_ssize_t p) {
    if (p >= 0 && p + AHEAD + 64 < size) {
        PREFETCH(b + p + AHEAD);
        PREFETCH(b + p + AHEAD + 64);
    }
}

/* The eight bytes at p as a little-endian word. */
static inline uint64_t load64(const uint8_t *p) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
#else
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
#endif
}

/* The varint at b[q]: its byte length (1..10), 0 if longer than ten bytes, -1 if it runs past the buffer. */
static inline int read_varint(const uint8_t *b, Py_ssize_t size, Py_ssize_t q, uint64_t *out) {
    if (LIKELY(q >= 0 && q + 10 <= size)) { /* all ten bytes a varint may take lie in the buffer */
        const uint8_t *p = b + q;
        if (LIKELY(p[0] < 0x80)) {
            *out = p[0];
            return 1;
        }
        uint64_t v = p[0] & 0x7F;
        for (int i = 1; i < 10; i++) {
            v |= (uint64_t)(p[i] & 0x7F) << (7 * i);
            if (p[i] < 0x80) {
                *out = v;
                return i + 1;
            }
        }
        return 0;
    }
    uint64_t v = 0;
    for (int i = 0; i < 10; i++) {
        if (q + i >= size || q + i < 0) return -1;
        uint8_t c = b[q + i];
        v |= (uint64_t)(c & 0x7F) << (7 * i);
        if (c < 0x80) {
            *out = v;
            return i + 1;
        }
    }
    return 0;
}


static PyObject *new_array(Py_ssize_t bytes, char **data) {
    PyObject *out = PyByteArray_FromStringAndSize(NULL, bytes);
    if (out != NULL) *data = PyByteArray_AS_STRING(out);
    return out;
}

/* ---- growable arrays ------------------------------------------------------------------------------ */

typedef struct {
    char *data;
    Py_ssize_t size, cap, item;
} Vec;

static int grow(Vec *v, Py_ssize_t cap) {
    if (cap < 1024) cap = 1024;
    char *grown = PyMem_Realloc(v->data, (size_t)cap * v->item);
    if (grown == NULL) return -1;
    v->data = grown;
    v->cap = cap;
    return 0;
}

static inline void *push(Vec *v) {
    if (v->size == v->cap && grow(v, 2 * v->cap) < 0) return NULL;
    return v->data + (v->size++) * v->item;
}

/* counts[step * width + k], steps 0..cap-1, grown as steps appear (at most MAX_STEPS) */
typedef struct {
    int64_t *counts;
    Py_ssize_t cap, steps;
    int width;
} Steps;

static int grow_steps(Steps *c, int k, Py_ssize_t step);

static inline int count_step(Steps *c, int k, Py_ssize_t step) {
    if (LIKELY(step < c->cap)) {
        c->counts[step * c->width + k]++;
        if (step >= c->steps) c->steps = step + 1;
        return 0;
    }
    return grow_steps(c, k, step);
}

/* count_step past the table's last step: the table grown (doubled, at most MAX_STEPS steps), then counted */
static int grow_steps(Steps *c, int k, Py_ssize_t step) {
    Py_ssize_t cap = c->cap ? c->cap : 16;
    while (cap <= step) cap *= 2;
    if (cap > MAX_STEPS) cap = MAX_STEPS;
    int64_t *grown = PyMem_Realloc(c->counts, (size_t)cap * c->width * sizeof(int64_t));
    if (grown == NULL) return -1;
    memset(grown + c->cap * c->width, 0, (size_t)(cap - c->cap) * c->width * sizeof(int64_t));
    c->counts = grown;
    c->cap = cap;
    return count_step(c, k, step);
}

/* high_bytes() of the records b[start[i]:end[i]]: the count, -1 (out of order) or -2 (outside b) */
static long long count_high(const uint8_t *b, Py_ssize_t size, const int64_t *start, const int64_t *end, Py_ssize_t n) {
    long long total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (i && start[i] < end[i - 1]) return -1;
        if (start[i] < 0 || end[i] > size || start[i] > end[i]) return -2;
        long long c = 0;
        Py_ssize_t k = start[i];
        while (k + 8 <= end[i]) { /* eight byte lanes count the top bits of up to 255 words, then are summed */
            uint64_t lanes = 0;
            for (int w = 0; w < 255 && k + 8 <= end[i]; w++, k += 8) lanes += (load64(b + k) >> 7) & 0x0101010101010101ULL;
            uint64_t pairs = (lanes & 0x00FF00FF00FF00FFULL) + ((lanes >> 8) & 0x00FF00FF00FF00FFULL); /* 16-bit lanes */
            c += (long long)((pairs * 0x0001000100010001ULL) >> 48);
        }
        for (; k < end[i]; k++) c += b[k] >> 7;
        total += c;
    }
    return total;
}

/* ---- lean(b, rec_off, rec_end, node_codes, io_codes, value_tags, name_tag, io_kinds, attr_kind, texts) --- */

typedef struct { /* a Node field the walk keeps, in record order */
    int64_t row, off, len;
    int32_t step;
    int32_t kind;
} Field;

typedef struct { /* a string field of an IOInfo message, in record order */
    int64_t off, len;
    int32_t step;
    int32_t tag;
} Text;

typedef struct { /* one attribute's decoding (columnar._LeanAttrs' columns, and the hot name id) */
    uint64_t head, value;
    int64_t name_len, kind, v_off, id;
} Attr;

typedef struct { /* columnar._Hot's lookup table of the attribute names it makes columns of */
    const uint64_t *w0, *w1;
    const int64_t *id;
    uint64_t mult;
    int shift;
} HotNames;

static inline uint64_t low_bytes(Py_ssize_t k) { return k >= 8 ? ~(uint64_t)0 : k <= 0 ? 0 : (((uint64_t)1 << (8 * k)) - 1); }

/* columnar._lean_hot_ids of one attribute at b[s] (head h, a name of nl < 0x80 bytes): -1 unless a hot name */
static inline int64_t hot_id(const uint8_t *b, Py_ssize_t size, Py_ssize_t s, uint64_t h, Py_ssize_t nl,
                             const HotNames *hot, int *readable) {
    uint64_t w0 = h & low_bytes(nl + 2);
    uint64_t slot = (w0 * hot->mult) >> hot->shift;
    if (hot->w0[slot] != w0) return -1;
    if (s + 16 > size) {
        *readable = 0;
        return -1;
    }
    uint64_t w1 = load64(b + s + 8) & low_bytes(nl - 6);
    return w1 == hot->w1[slot] ? hot->id[slot] : -1;
}

typedef struct { /* what columnar._lean_attributes checks, over all attributes, in its order */
    int heads_in, short_name, value_word, scalar, readable, exact, hot_readable;
    int64_t high;
} AttrChecks;

/* The verdict of the attributes' checks, in the order columnar._lean_attributes makes them (it reads a hot
 * name's second word after all the others) */
static int attr_status(const AttrChecks *ck) {
    return !ck->heads_in ? FAULT : !ck->short_name ? UNUSUAL : !ck->value_word ? FAULT : !ck->scalar ? UNUSUAL
           : !ck->readable ? FAULT : !ck->exact ? UNUSUAL : !ck->hot_readable ? FAULT : OK;
}

typedef struct {
    Err err;
    int64_t high;
    Steps steps; /* texts per step (width 1) */
    Vec first;   /* int64: each message's first Text (texts kept) */
    Vec texts;   /* Text */
} Side;

/* columnar._lean_attributes of the one attribute b[s:e] */
static void decode_attr(const uint8_t *b, Py_ssize_t size, Py_ssize_t s, Py_ssize_t e, const int16_t *vt, int name_tag,
                        const HotNames *hot, Attr *out, AttrChecks *ck) {
    if (s < 0 || s + 8 > size) {
        ck->heads_in = 0;
        return;
    }
    uint64_t h = load64(b + s);
    Py_ssize_t nl = (Py_ssize_t)((h >> 8) & 0xFF);
    Py_ssize_t q = s + 2 + nl;
    out->head = h;
    out->name_len = nl;
    if ((int)(h & 0xFF) != name_tag || nl >= 0x80 || q > e) {
        ck->short_name = 0;
        return;
    }
    out->id = hot_id(b, size, s, h, nl, hot, &ck->hot_readable);
    if (q + 8 > size) {
        ck->value_word = 0;
        return;
    }
    uint64_t wq = load64(b + q);
    int code = vt[wq & 0xFFFF];
    out->value = 0;
    if (q == e) { /* a name alone */
        out->kind = 0;
        out->v_off = q + 1;
        return;
    }
    if (code < 0) {
        ck->scalar = 0;
        return;
    }
    int two = (wq & 0x80) != 0;
    int wire = code >> 6;
    out->kind = code & 63;
    ck->high += two;
    Py_ssize_t off = q + 1 + two, vlen;
    if (wire == 1 || wire == 5) {
        int width = wire == 1 ? 8 : 4;
        if (off + width > size) {
            ck->readable = 0;
            return;
        }
        uint64_t x = 0;
        for (int i = width - 1; i >= 0; i--) {
            x = (x << 8) | b[off + i];
            ck->high += b[off + i] >> 7;
        }
        out->value = x;
        vlen = width;
    } else {
        uint64_t x;
        int vl = read_varint(b, size, off, &x);
        if (vl <= 0) {
            ck->readable = 0;
            return;
        }
        out->value = x;
        vlen = vl;
        ck->high += vl - 1;
    }
    out->v_off = off + vlen;
    if ((uint64_t)(off + vlen) + (wire == 2 ? out->value : 0) != (uint64_t)e) ck->exact = 0;
}

/* columnar._lean_io's walk of the one IOInfo message b[p:e] */
static int walk_io(const uint8_t *b, Py_ssize_t size, Py_ssize_t p, Py_ssize_t e, const int8_t *io_codes, int texts,
                   Side *side) {
    if (texts) {
        int64_t *first = push(&side->first);
        if (first == NULL) return -1;
        *first = side->texts.size;
    }
    for (Py_ssize_t step = 0; p < e; step++) {
        if (side->err.kind != OK && step > side->err.step) break;
        if (step >= MAX_STEPS) {
            note(&side->err, UNUSUAL, step);
            break;
        }
        if (p >= size) {
            note(&side->err, FAULT, step);
            break;
        }
        int tag = b[p];
        if (io_codes[tag] < 0) {
            note(&side->err, UNUSUAL, step);
            break;
        }
        uint64_t v;
        int vl = read_varint(b, size, p + 1, &v);
        if (vl <= 0 || v > LENGTH_LIMIT) {
            note(&side->err, FAULT, step);
            break;
        }
        side->high += vl - 1;
        Py_ssize_t at = p + 1 + vl, after = at + (Py_ssize_t)v;
        if (after > e) {
            note(&side->err, FAULT, step);
            break;
        }
        if (texts) {
            if (count_step(&side->steps, 0, step) < 0) return -1;
            Text *t = push(&side->texts);
            if (t == NULL) return -1;
            t->off = at;
            t->len = (int64_t)v;
            t->step = (int32_t)step;
            t->tag = tag;
        }
        p = after;
    }
    return 0;
}

#define NODE_KINDS 8

typedef struct { /* one top-level field of a Node record, as node_field reads it */
    int code;             /* its tag's code (lean's node_codes) */
    int vl;               /* the byte length of its varint */
    uint64_t v;           /* the varint: the value, or the length of a length-delimited field */
    Py_ssize_t at, after; /* where its value (or payload) starts, and where the field ends */
    Py_ssize_t step;      /* its position in the record (set by next_field) */
} NodeField;

/* The Node field at b[p] of a record that ends at e: OK with *f filled, UNUSUAL (a tag the lean walk does not
 * take) or FAULT (bytes it cannot read: cut, over-long or past the record), as the numpy walk decides them. */
static inline int node_field(const uint8_t *b, Py_ssize_t size, Py_ssize_t p, Py_ssize_t e, const int8_t *codes,
                             NodeField *f) {
    if (p < 0 || p >= size) return FAULT;
    int code = codes[b[p]];
    if (code < 0 || (code >= 4 && code < 8) || code >= 24) return UNUSUAL;
    int vl = read_varint(b, size, p + 1, &f->v);
    if (vl <= 0) return FAULT;
    Py_ssize_t at = p + 1 + vl, after = at;
    if (code >= 8 && code < 16) { /* length-delimited: the length must fit the record */
        if (f->v > LENGTH_LIMIT) return FAULT;
        after += (Py_ssize_t)f->v;
    }
    if (after > e) return FAULT;
    f->code = code;
    f->vl = vl;
    f->at = at;
    f->after = after;
    return OK;
}

/* The buffers lean() and columns() read: the records and the walk's tables (see lean's docstring) */
typedef struct {
    Buf B, O, E, NC, IC, VT, W0, W1, ID;
    HotNames hot;
    const uint8_t *b;
    Py_ssize_t size, n;
    const int64_t *rec_off, *rec_end;
    const int8_t *codes, *io_codes;
    const int16_t *vt;
} Walk;

/* Take the buffers of a walk (released by walk_release whatever this returns); -1 with an exception set. */
static int walk_bufs(Walk *w, const char *name, PyObject *ob, PyObject *ooff, PyObject *oend, PyObject *onodes,
                     PyObject *oio, PyObject *otags, PyObject *ow0, PyObject *ow1, PyObject *oid, unsigned long long mult,
                     int shift) {
    if (get_buf(ob, &w->B, 1, "b") < 0 || get_buf(ooff, &w->O, 8, "rec_off") < 0 || get_buf(oend, &w->E, 8, "rec_end") < 0 ||
        get_buf(onodes, &w->NC, 1, "node_codes") < 0 || get_buf(oio, &w->IC, 1, "io_codes") < 0 ||
        get_buf(otags, &w->VT, 2, "value_tags") < 0 || get_buf(ow0, &w->W0, 8, "hot w0") < 0 ||
        get_buf(ow1, &w->W1, 8, "hot w1") < 0 || get_buf(oid, &w->ID, 8, "hot ids") < 0)
        return -1;
    if (w->O.view.len != w->E.view.len || w->NC.view.len != 256 || w->IC.view.len != 256 ||
        w->VT.view.len != 65536 * 2 || shift < 1 || shift > 63 || w->W0.view.len != ((Py_ssize_t)8 << (64 - shift)) ||
        w->W1.view.len != w->W0.view.len || w->ID.view.len != w->W0.view.len) {
        PyErr_Format(PyExc_ValueError, "%s: rec_off and rec_end differ in length, or a table has the wrong size", name);
        return -1;
    }
    HotNames hot = {w->W0.view.buf, w->W1.view.buf, w->ID.view.buf, (uint64_t)mult, shift};
    w->hot = hot;
    w->b = w->B.view.buf;
    w->size = w->B.view.len;
    w->n = w->O.view.len / 8;
    w->rec_off = w->O.view.buf;
    w->rec_end = w->E.view.buf;
    w->codes = w->NC.view.buf;
    w->io_codes = w->IC.view.buf;
    w->vt = w->VT.view.buf;
    return 0;
}

static void walk_release(Walk *w) {
    Buf *bufs[] = {&w->B, &w->O, &w->E, &w->NC, &w->IC, &w->VT, &w->W0, &w->W1, &w->ID};
    for (size_t k = 0; k < sizeof(bufs) / sizeof(bufs[0]); k++) release(bufs[k]);
}

static void sides_init(Side sides[2]) {
    memset(sides, 0, 2 * sizeof(Side));
    for (int k = 0; k < 2; k++) {
        sides[k].steps.width = 1;
        sides[k].first.item = sizeof(int64_t);
        sides[k].texts.item = sizeof(Text);
    }
}

static void sides_free(Side sides[2]) {
    for (int k = 0; k < 2; k++) {
        PyMem_Free(sides[k].steps.counts);
        PyMem_Free(sides[k].first.data);
        PyMem_Free(sides[k].texts.data);
    }
}

typedef struct { /* where the walk of one record is: the next field at p, the record's end e, the step */
    Py_ssize_t p, e, step;
} Cursor;

/* The step loop of the numpy walk over one record: the record's next field into *f (1), or 0 at its end, at a
 * step past the error that decides already, or at an error (noted in err). */
static inline int next_field(const Walk *w, Cursor *c, Err *err, NodeField *f) {
    if (c->p >= c->e || (err->kind != OK && c->step > err->step)) return 0;
    if (c->step >= MAX_STEPS) {
        note(err, UNUSUAL, c->step);
        return 0;
    }
    int bad = node_field(w->b, w->size, c->p, c->e, w->codes, f);
    if (bad) {
        note(err, bad, c->step);
        return 0;
    }
    f->step = c->step++;
    c->p = f->after;
    return 1;
}

PyDoc_STRVAR(lean_doc,
"lean(b, rec_off, rec_end, node_codes, io_codes, value_tags, name_tag, io_kinds, attr_kind, texts)\n\n"
"columnar's lean walk of the Node records b[rec_off[i]:rec_end[i]] (int64 buffers), their IOInfo messages\n"
"and their attributes, in one pass over the records. node_codes (256 int8) gives each one-byte Node tag its\n"
"code: -1 a field the lean walk does not take; 0..3 a varint scalar (row `code` of the scalars; the last\n"
"wins); 8 + k a length-delimited field of kind k; 16 + k a varint field of kind k (its value stands as the\n"
"offset, its byte length as the length). io_codes (256 int8): >= 0 for the IOInfo string fields.\n"
"value_tags: 65536 int16 (columnar._VALUE_TAGS). io_kinds: the kinds of the inputs and outputs fields;\n"
"attr_kind: that of the attributes. texts: keep the IOInfo strings.\n"
"Returns (nodes, inputs, outputs, attrs):\n"
"  nodes = (status, high, scalars 4 x n uint64, counts steps x 8 int64, rows, offset, length int64), the\n"
"  fields ordered by kind, step, record;\n"
"  inputs/outputs = (status, high, msg, tag, offset, length int64: the strings by step, then message, where\n"
"  a message's index is its place among that kind's fields);\n"
"  attrs = (status, high, head uint64, name_len, kind int64, value uint64, v_off int64), in the attribute\n"
"  fields' order. status: 0, 1 (unusual) or 2 (fault).");

static PyObject *lean(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *ob, *ooff, *oend, *onodes, *oio, *otags, *ow0, *ow1, *oid;
    int name_tag, in_kind, out_kind, attr_kind, texts, shift;
    unsigned long long mult;
    if (!PyArg_ParseTuple(args, "OOOOOOi(ii)ip(OOOKi)", &ob, &ooff, &oend, &onodes, &oio, &otags, &name_tag, &in_kind,
                          &out_kind, &attr_kind, &texts, &ow0, &ow1, &oid, &mult, &shift))
        return NULL;
    if (in_kind < 0 || in_kind >= NODE_KINDS || out_kind < 0 || out_kind >= NODE_KINDS || attr_kind < 0 ||
        attr_kind >= NODE_KINDS || in_kind == out_kind || attr_kind == in_kind || attr_kind == out_kind) {
        PyErr_SetString(PyExc_ValueError, "lean: io_kinds and attr_kind must be distinct kinds 0..7");
        return NULL;
    }
    Walk w;
    memset(&w, 0, sizeof(w));
    PyObject *result = NULL;
    PyObject *objs[32] = {NULL};
    int nobj = 0;
    Steps steps = {NULL, 0, 0, NODE_KINDS};
    Vec fields = {NULL, 0, 0, sizeof(Field)}, attrs = {NULL, 0, 0, sizeof(Attr)};
    Side sides[2];
    sides_init(sides);
    Py_ssize_t *pos = NULL, *inv[2] = {NULL, NULL};
    if (walk_bufs(&w, "lean", ob, ooff, oend, onodes, oio, otags, ow0, ow1, oid, mult, shift) < 0) goto done;
    const HotNames hot = w.hot;
    const uint8_t *b = w.b;
    Py_ssize_t size = w.size, n = w.n;
    const int64_t *rec_off = w.rec_off, *rec_end = w.rec_end;
    const int8_t *io_codes = w.io_codes;
    const int16_t *vt = w.vt;
    char *scal_data = NULL;
    PyObject *scal = objs[nobj++] = new_array(4 * n * 8, &scal_data);
    if (scal == NULL) goto done;
    uint64_t *scalars = (uint64_t *)scal_data;
    memset(scalars, 0, (size_t)4 * n * 8);
    if (n) { /* room for a field per 16 bytes and an attribute per 32 (real traces have fewer), 64 a record at most */
        Py_ssize_t bytes = rec_end[n - 1] - rec_off[0];
        if (bytes > 0 && (grow(&fields, bytes / 16 < 64 * n ? bytes / 16 : 64 * n) < 0 ||
                          grow(&attrs, bytes / 32 < 32 * n ? bytes / 32 : 32 * n) < 0))
            goto nomem;
    }
    Err err = {OK, 0};
    int64_t high = 0;
    AttrChecks ck = {1, 1, 1, 1, 1, 1, 1, 0};
    for (Py_ssize_t i = 0; i < n; i++) {
        Cursor cur = {rec_off[i], rec_end[i], 0};
        NodeField nf;
        while (next_field(&w, &cur, &err, &nf)) {
            int code = nf.code, vl = nf.vl;
            uint64_t v = nf.v;
            Py_ssize_t at = nf.at, after = nf.after, step = nf.step;
            high += vl - 1;
            if (code < 4) {
                scalars[(Py_ssize_t)code * n + i] = v;
            } else {
                int kind = code & 7;
                if (err.kind == OK) { /* (after an error, nothing kept would be used) */
                    Field *f = push(&fields);
                    if (f == NULL || count_step(&steps, kind, step) < 0) goto nomem;
                    f->row = i;
                    f->step = (int32_t)step;
                    f->kind = kind;
                    if (code < 16) {
                        f->off = at;
                        f->len = (int64_t)v;
                        if (kind == attr_kind) {
                            Attr *a = push(&attrs);
                            if (a == NULL) goto nomem;
                            decode_attr(b, size, at, after, vt, name_tag, &hot, a, &ck);
                        } else if (kind == in_kind || kind == out_kind) {
                            if (walk_io(b, size, at, after, io_codes, texts, &sides[kind == out_kind]) < 0) goto nomem;
                        }
                    } else {
                        f->off = (int64_t)v;
                        f->len = vl;
                    }
                }
            }
        }
    }
    /* the fields placed by kind, then step, then record */
    Py_ssize_t total = err.kind == OK ? fields.size : 0;
    char *cnt_data = NULL, *rows_data = NULL, *offs_data = NULL, *lens_data = NULL;
    PyObject *cnt = objs[nobj++] = new_array(steps.steps * NODE_KINDS * 8, &cnt_data);
    PyObject *rows = objs[nobj++] = new_array(total * 8, &rows_data);
    PyObject *offs = objs[nobj++] = new_array(total * 8, &offs_data);
    PyObject *lens = objs[nobj++] = new_array(total * 8, &lens_data);
    Py_ssize_t nattr = err.kind == OK ? attrs.size : 0;
    char *ad[6] = {NULL};
    PyObject *acol[6];
    for (int k = 0; k < 6; k++) acol[k] = objs[nobj++] = new_array(nattr * 8, &ad[k]);
    for (int k = 0; k < nobj; k++)
        if (objs[k] == NULL) goto done;
    if (steps.steps) memcpy(cnt_data, steps.counts, (size_t)steps.steps * NODE_KINDS * 8);
    Py_ssize_t base[NODE_KINDS] = {0}, nmsg[2] = {0, 0};
    if (total) {
        pos = PyMem_Malloc((size_t)steps.steps * NODE_KINDS * sizeof(Py_ssize_t));
        if (pos == NULL) goto nomem;
        Py_ssize_t at = 0;
        for (int k = 0; k < NODE_KINDS; k++) {
            base[k] = at;
            for (Py_ssize_t s = 0; s < steps.steps; s++) {
                pos[s * NODE_KINDS + k] = at;
                at += steps.counts[s * NODE_KINDS + k];
            }
        }
        nmsg[0] = (in_kind < NODE_KINDS - 1 ? base[in_kind + 1] : total) - base[in_kind];
        nmsg[1] = (out_kind < NODE_KINDS - 1 ? base[out_kind + 1] : total) - base[out_kind];
        for (int k = 0; k < 2; k++) {
            inv[k] = PyMem_Malloc((size_t)(nmsg[k] ? nmsg[k] : 1) * sizeof(Py_ssize_t));
            if (inv[k] == NULL) goto nomem;
        }
        int64_t *r = (int64_t *)rows_data, *o = (int64_t *)offs_data, *l = (int64_t *)lens_data;
        uint64_t *a_head = (uint64_t *)ad[0], *a_value = (uint64_t *)ad[3];
        int64_t *a_nl = (int64_t *)ad[1], *a_kind = (int64_t *)ad[2], *a_voff = (int64_t *)ad[4], *a_id = (int64_t *)ad[5];
        const Field *fs = (const Field *)fields.data;
        const Attr *as = (const Attr *)attrs.data;
        Py_ssize_t attr_i = 0, msg_i[2] = {0, 0};
        for (Py_ssize_t j = 0; j < total; j++) {
            const Field *f = fs + j;
            Py_ssize_t slot = pos[(Py_ssize_t)f->step * NODE_KINDS + f->kind]++;
            r[slot] = f->row;
            o[slot] = f->off;
            l[slot] = f->len;
            if (f->kind == attr_kind) {
                Py_ssize_t d = slot - base[attr_kind];
                const Attr *a = as + attr_i++;
                a_head[d] = a->head;
                a_nl[d] = a->name_len;
                a_kind[d] = a->kind;
                a_value[d] = a->value;
                a_voff[d] = a->v_off;
                a_id[d] = a->id;
            } else if (f->kind == in_kind || f->kind == out_kind) {
                int k = f->kind == out_kind;
                inv[k][slot - base[f->kind]] = msg_i[k]++;
            }
        }
    }
    /* each side's strings placed by step, then message (messages in the order of their fields) */
    PyObject *side_obj[2] = {NULL, NULL};
    for (int k = 0; k < 2; k++) {
        Side *sd = &sides[k];
        Py_ssize_t nt = (err.kind == OK && sd->err.kind == OK && texts) ? sd->texts.size : 0;
        char *md = NULL, *td = NULL, *od = NULL, *ld = NULL;
        PyObject *m = objs[nobj++] = new_array(nt * 8, &md);
        PyObject *t = objs[nobj++] = new_array(nt * 8, &td);
        PyObject *oo = objs[nobj++] = new_array(nt * 8, &od);
        PyObject *ll = objs[nobj++] = new_array(nt * 8, &ld);
        if (m == NULL || t == NULL || oo == NULL || ll == NULL) goto done;
        if (nt) {
            Py_ssize_t *tpos = PyMem_Malloc((size_t)sd->steps.steps * sizeof(Py_ssize_t));
            if (tpos == NULL) goto nomem;
            Py_ssize_t at = 0;
            for (Py_ssize_t s = 0; s < sd->steps.steps; s++) {
                tpos[s] = at;
                at += sd->steps.counts[s];
            }
            const int64_t *first = (const int64_t *)sd->first.data;
            const Text *ts = (const Text *)sd->texts.data;
            int64_t *mm = (int64_t *)md, *tt = (int64_t *)td, *o2 = (int64_t *)od, *l2 = (int64_t *)ld;
            for (Py_ssize_t x = 0; x < nmsg[k]; x++) {
                Py_ssize_t msg = inv[k][x];
                Py_ssize_t lo = first[msg], hi = msg + 1 < sd->first.size ? first[msg + 1] : sd->texts.size;
                for (Py_ssize_t y = lo; y < hi; y++) {
                    Py_ssize_t slot = tpos[ts[y].step]++;
                    mm[slot] = x;
                    tt[slot] = ts[y].tag;
                    o2[slot] = ts[y].off;
                    l2[slot] = ts[y].len;
                }
            }
            PyMem_Free(tpos);
        }
        side_obj[k] = Py_BuildValue("iLOOOO", sd->err.kind, (long long)sd->high, m, t, oo, ll);
        if (side_obj[k] == NULL) goto done;
        objs[nobj++] = side_obj[k];
    }
    int astatus = attr_status(&ck);
    result = Py_BuildValue("(iLOOOOO)OO(iLOOOOOO)", err.kind, (long long)high, scal, cnt, rows, offs, lens,
                           side_obj[0], side_obj[1], astatus, (long long)ck.high, acol[0], acol[1], acol[2], acol[3],
                           acol[4], acol[5]);
    goto done;
nomem:
    PyErr_NoMemory();
done:
    for (int k = 0; k < nobj; k++) Py_XDECREF(objs[k]);
    PyMem_Free(pos);
    PyMem_Free(inv[0]);
    PyMem_Free(inv[1]);
    PyMem_Free(steps.counts);
    PyMem_Free(fields.data);
    PyMem_Free(attrs.data);
    sides_free(sides);
    walk_release(&w);
    return result;
}

/* ---- columns(b, rec_off, rec_end, node_codes, io_codes, value_tags, name_tag, kinds, names, deps, hot, ... -- */

typedef struct { /* an integer attribute of a hot name, stored into int_rows once the chunk is proven readable */
    int64_t value;
    int32_t row, id;
} IntSet;

typedef struct { /* a pg_name attribute: its record, the step of its field, its value as decode_attr reads it */
    int64_t row, step, kind;
    uint64_t value;
    int64_t v_off;
} PgSet;

/* attrwire.int_values of one value of the oneof member decoded as `code` (columnar._INT_CODES) */
static inline int64_t int_value(int code, uint64_t v) {
    switch (code) {
    case 1: return (int64_t)(int32_t)(uint32_t)v;                                 /* int32 */
    case 2: return (int64_t)(v & 0xFFFFFFFFULL);                                  /* uint32 */
    case 3: return v > (uint64_t)INT64_MAX ? INT64_MIN : (int64_t)v;              /* uint64 (too big: MISSING) */
    case 4: { uint32_t u = (uint32_t)v; return (int64_t)(u >> 1) ^ -(int64_t)(u & 1); } /* sint32 */
    case 5: return (int64_t)(v >> 1) ^ -(int64_t)(v & 1);                         /* sint64 */
    case 6: return v != 0;                                                        /* bool */
    default: return (int64_t)v;                                                   /* int64 */
    }
}

/* A packed varint list b[at:after] (after > at) as columnar._lean_deps and _checked_deps read it: its top-bit
 * bytes added to *high and its values pushed onto `values` (NULL: checked only). FAULT if a varint crosses
 * its end or is longer than ten bytes, or the list lies outside b; -1 out of memory. */
static int packed_list(const uint8_t *b, Py_ssize_t size, Py_ssize_t at, Py_ssize_t after, Vec *values, int64_t *high) {
    if (at < 0 || after > size || b[after - 1] >= 0x80) return FAULT;
    for (Py_ssize_t k = at; k < after;) {
        uint64_t x = 0;
        int bytes = 0;
        for (;;) {
            uint8_t byte = b[k++];
            x |= (uint64_t)(byte & 0x7F) << (7 * bytes);
            bytes++;
            if (byte < 0x80) break;
            if (bytes == 10) return FAULT;
        }
        *high += bytes - 1;
        if (values != NULL) {
            uint64_t *slot = push(values);
            if (slot == NULL) return -1;
            *slot = x;
        }
    }
    return OK;
}

PyDoc_STRVAR(columns_doc,
"columns(b, rec_off, rec_end, node_codes, io_codes, value_tags, name_tag, kinds, names, deps, hot, int_rows,\n"
"        int_codes, cpu_id, pg_id)\n\n"
"columnar._lean_chunk's columns in one pass over the records, without the spans: what lean() walks and checks,\n"
"with the same verdict, and the columns columnar builds from lean()'s results. kinds: the kinds (as lean()'s\n"
"node_codes number them) of (name, ctrl, data, inputs, outputs, attr, single ctrl, single data); names: decode\n"
"the names' spans; deps: the dependency lists' values (else only checked). hot: (w0, w1, id, mult, shift) as\n"
"lean's. int_rows: writable int64 2-D buffer (a row per integer hot name, a column per record), which receives\n"
"the integer attributes (the last of a record wins) only when status is 0. int_codes: 64 int8, how the\n"
"integer value of each oneof member is read (-1: not an integer). cpu_id, pg_id: the hot ids of is_cpu_op\n"
"and pg_name (-1: not decoded).\n"
"Returns (status, proven, scalars 4 x n uint64, name_off, name_len int64, ctrl_ptr int64 n + 1, ctrl_deps\n"
"uint64, data_ptr, data_deps, is_cpu_op int8, (row, step, kind int64, value uint64, v_off int64 of every\n"
"pg_name attribute, in record order)); status as lean()'s, proven: the records hold no string byte with the\n"
"top bit set.");

static PyObject *columns(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *ob, *ooff, *oend, *onodes, *oio, *otags, *ow0, *ow1, *oid, *orows, *ocodes;
    int name_tag, names, deps, shift, cpu_id, pg_id;
    int kd[8];
    unsigned long long mult;
    if (!PyArg_ParseTuple(args, "OOOOOOi(iiiiiiii)pp(OOOKi)OOii", &ob, &ooff, &oend, &onodes, &oio, &otags, &name_tag,
                          &kd[0], &kd[1], &kd[2], &kd[3], &kd[4], &kd[5], &kd[6], &kd[7], &names, &deps, &ow0, &ow1,
                          &oid, &mult, &shift, &orows, &ocodes, &cpu_id, &pg_id))
        return NULL;
    int seen = 0;
    for (int k = 0; k < 8; k++) {
        if (kd[k] < 0 || kd[k] >= NODE_KINDS || (seen >> kd[k]) & 1) {
            PyErr_SetString(PyExc_ValueError, "columns: kinds must be eight distinct kinds 0..7");
            return NULL;
        }
        seen |= 1 << kd[k];
    }
    int name_kind = kd[0], ctrl_kind = kd[1], data_kind = kd[2], in_kind = kd[3], out_kind = kd[4], attr_kind = kd[5],
        ctrl_one = kd[6], data_one = kd[7];
    Walk w;
    memset(&w, 0, sizeof(w));
    Buf IK = {0};
    Py_buffer R;
    int r_held = 0;
    PyObject *result = NULL;
    PyObject *objs[24] = {NULL};
    int nobj = 0;
    Vec ctrl = {NULL, 0, 0, sizeof(uint64_t)}, data = {NULL, 0, 0, sizeof(uint64_t)};
    Vec ints = {NULL, 0, 0, sizeof(IntSet)}, pgs = {NULL, 0, 0, sizeof(PgSet)};
    Side sides[2];
    sides_init(sides);
    if (walk_bufs(&w, "columns", ob, ooff, oend, onodes, oio, otags, ow0, ow1, oid, mult, shift) < 0 ||
        get_buf(ocodes, &IK, 1, "int_codes") < 0)
        goto done;
    if (PyObject_GetBuffer(orows, &R, PyBUF_STRIDES | PyBUF_WRITABLE) < 0) goto done;
    r_held = 1;
    Py_ssize_t n = w.n;
    if (IK.view.len != 64 || R.ndim != 2 || R.itemsize != 8 || R.shape[1] != n || n > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "columns: int_codes or int_rows has the wrong size, or more than 2**31 records");
        goto done;
    }
    const HotNames hot = w.hot;
    const uint8_t *b = w.b;
    Py_ssize_t size = w.size;
    const int64_t *rec_off = w.rec_off, *rec_end = w.rec_end;
    const int8_t *io_codes = w.io_codes, *int_codes = IK.view.buf;
    const int16_t *vt = w.vt;
    Py_ssize_t n_ints = R.shape[0];
    char *sd = NULL, *nod = NULL, *nld = NULL, *cpd = NULL, *dpd = NULL, *cud = NULL;
    PyObject *scal = objs[nobj++] = new_array(4 * n * 8, &sd);
    PyObject *noff = objs[nobj++] = new_array(names ? n * 8 : 0, &nod);
    PyObject *nlen = objs[nobj++] = new_array(names ? n * 8 : 0, &nld);
    PyObject *cptr = objs[nobj++] = new_array((n + 1) * 8, &cpd);
    PyObject *dptr = objs[nobj++] = new_array((n + 1) * 8, &dpd);
    PyObject *cpu = objs[nobj++] = new_array(n, &cud);
    for (int k = 0; k < nobj; k++)
        if (objs[k] == NULL) goto done;
    uint64_t *scalars = (uint64_t *)sd;
    int64_t *name_off = (int64_t *)nod, *name_len = (int64_t *)nld, *ctrl_ptr = (int64_t *)cpd, *data_ptr = (int64_t *)dpd;
    int8_t *cpu_col = (int8_t *)cud;
    memset(scalars, 0, (size_t)4 * n * 8);
    if (names) {
        memset(name_off, 0, (size_t)n * 8);
        memset(name_len, 0, (size_t)n * 8);
    }
    memset(ctrl_ptr, 0, (size_t)(n + 1) * 8);
    memset(data_ptr, 0, (size_t)(n + 1) * 8);
    memset(cpu_col, 0xFF, (size_t)n);
    if (n) { /* room for an attribute per 32 bytes (real traces have fewer), 32 a record at most */
        Py_ssize_t bytes = rec_end[n - 1] - rec_off[0];
        if (bytes > 0 && grow(&ints, bytes / 32 < 32 * n ? bytes / 32 : 32 * n) < 0) goto nomem;
    }
    Err err = {OK, 0};
    int64_t high = 0, dep_high = 0;
    int dep_fault = 0;
    AttrChecks ck = {1, 1, 1, 1, 1, 1, 1, 0};
    for (Py_ssize_t i = 0; i < n; i++) {
        Cursor cur = {rec_off[i], rec_end[i], 0};
        NodeField nf;
        while (next_field(&w, &cur, &err, &nf)) {
            high += nf.vl - 1;
            if (nf.code < 4) {
                scalars[(Py_ssize_t)nf.code * n + i] = nf.v;
                continue;
            }
            if (err.kind != OK) continue; /* (after an error, nothing kept would be used) */
            int kind = nf.code & 7;
            if (nf.code >= 16) { /* a single dependency: its value */
                if (deps && !dep_fault && (kind == ctrl_one || kind == data_one)) {
                    uint64_t *slot = push(kind == ctrl_one ? &ctrl : &data);
                    if (slot == NULL) goto nomem;
                    *slot = nf.v;
                }
            } else if (kind == name_kind) {
                if (names) { /* a later name wins */
                    name_off[i] = nf.at;
                    name_len[i] = (int64_t)nf.v;
                }
            } else if (kind == attr_kind) {
                Attr a = {0, 0, 0, 0, 0, -1};
                decode_attr(b, size, nf.at, nf.after, vt, name_tag, &hot, &a, &ck);
                if (a.id >= 0) {
                    int code = int_codes[a.kind & 63];
                    if (code >= 0) {
                        int64_t value = int_value(code, a.value);
                        if (a.id < n_ints) {
                            IntSet *set = push(&ints);
                            if (set == NULL) goto nomem;
                            set->value = value;
                            set->row = (int32_t)i;
                            set->id = (int32_t)a.id;
                        } else if (a.id == cpu_id) {
                            cpu_col[i] = value != 0;
                        }
                    }
                    if (a.id == pg_id) {
                        PgSet *pg = push(&pgs);
                        if (pg == NULL) goto nomem;
                        pg->row = i;
                        pg->step = nf.step;
                        pg->kind = a.kind;
                        pg->value = a.value;
                        pg->v_off = a.v_off;
                    }
                }
            } else if (kind == in_kind || kind == out_kind) {
                if (walk_io(b, size, nf.at, nf.after, io_codes, 0, &sides[kind == out_kind]) < 0) goto nomem;
            } else if ((kind == ctrl_kind || kind == data_kind) && nf.v > 0 && !dep_fault) {
                int got = packed_list(b, size, nf.at, nf.after, deps ? (kind == ctrl_kind ? &ctrl : &data) : NULL,
                                      &dep_high);
                if (got < 0) goto nomem;
                dep_fault = got != OK;
            }
        }
        if (deps) {
            ctrl_ptr[i + 1] = ctrl.size;
            data_ptr[i + 1] = data.size;
        }
    }
    /* the verdict, decided in the order columnar's steps decide it: the walk of the records, of each side's
     * IOInfo, of the attributes, the dependency lists, the records' bytes */
    int status = err.kind;
    for (int k = 0; k < 2 && status == OK; k++) status = sides[k].err.kind;
    if (status == OK)
        status = attr_status(&ck);
    if (status == OK && dep_fault) status = FAULT;
    long long record_high = 0;
    if (status == OK && n) {
        record_high = count_high(b, size, rec_off, rec_end, n);
        if (record_high < 0) status = record_high == -1 ? UNUSUAL : FAULT;
    }
    int proven = record_high == high + sides[0].high + sides[1].high + ck.high + dep_high;
    if (status == OK) {
        const IntSet *set = (const IntSet *)ints.data;
        char *base = R.buf;
        for (Py_ssize_t j = 0; j < ints.size; j++)
            *(int64_t *)(base + set[j].id * R.strides[0] + (Py_ssize_t)set[j].row * R.strides[1]) = set[j].value;
    }
    char *cdd = NULL, *ddd = NULL;
    PyObject *cdeps = objs[nobj++] = new_array(ctrl.size * 8, &cdd);
    PyObject *ddeps = objs[nobj++] = new_array(data.size * 8, &ddd);
    if (cdeps == NULL || ddeps == NULL) goto done;
    if (ctrl.size) memcpy(cdd, ctrl.data, (size_t)ctrl.size * 8);
    if (data.size) memcpy(ddd, data.data, (size_t)data.size * 8);
    char *pd[5] = {NULL};
    PyObject *pcol[5];
    for (int k = 0; k < 5; k++) {
        pcol[k] = objs[nobj++] = new_array(pgs.size * 8, &pd[k]);
        if (pcol[k] == NULL) goto done;
    }
    const PgSet *ps = (const PgSet *)pgs.data;
    for (Py_ssize_t j = 0; j < pgs.size; j++) {
        ((int64_t *)pd[0])[j] = ps[j].row;
        ((int64_t *)pd[1])[j] = ps[j].step;
        ((int64_t *)pd[2])[j] = ps[j].kind;
        ((uint64_t *)pd[3])[j] = ps[j].value;
        ((int64_t *)pd[4])[j] = ps[j].v_off;
    }
    result = Py_BuildValue("iOOOOOOOOO(OOOOO)", status, proven ? Py_True : Py_False, scal, noff, nlen, cptr, cdeps,
                           dptr, ddeps, cpu, pcol[0], pcol[1], pcol[2], pcol[3], pcol[4]);
    goto done;
nomem:
    PyErr_NoMemory();
done:
    for (int k = 0; k < nobj; k++) Py_XDECREF(objs[k]);
    PyMem_Free(ctrl.data);
    PyMem_Free(data.data);
    PyMem_Free(ints.data);
    PyMem_Free(pgs.data);
    sides_free(sides);
    if (r_held) PyBuffer_Release(&R);
    walk_release(&w);
    release(&IK);
    return result;
}

/* ---- the byte spans b[off[i]:off[i]+length[i]] that strings(), packed() and checked() take ------------ */

typedef struct {
    Buf B, O, L;
    const uint8_t *b;
    Py_ssize_t size, n;
    const int64_t *off, *len;
} Spans;

/* Parse (b, off, length) into *sp; every span must lie in b, and be non-empty where `lists` (packed lists).
 * Returns -1 with an exception set (release the spans either way). */
static int spans_args(PyObject *args, const char *name, int lists, Spans *sp) {
    PyObject *ob, *ooff, *olen;
    if (!PyArg_ParseTuple(args, "OOO", &ob, &ooff, &olen)) return -1;
    if (get_buf(ob, &sp->B, 1, "b") < 0 || get_buf(ooff, &sp->O, 8, "off") < 0 || get_buf(olen, &sp->L, 8, "length") < 0)
        return -1;
    if (sp->O.view.len != sp->L.view.len) {
        PyErr_Format(PyExc_ValueError, "%s: off and length differ in length", name);
        return -1;
    }
    sp->b = sp->B.view.buf;
    sp->size = sp->B.view.len;
    sp->n = sp->O.view.len / 8;
    sp->off = sp->O.view.buf;
    sp->len = sp->L.view.len ? sp->L.view.buf : NULL;
    for (Py_ssize_t i = 0; i < sp->n; i++) {
        if (sp->off[i] < 0 || sp->len[i] < lists || sp->off[i] > sp->size - sp->len[i]) {
            PyErr_Format(PyExc_ValueError, "%s: a span outside the buffer%s", name, lists ? ", or an empty list" : "");
            return -1;
        }
    }
    return 0;
}

static void spans_release(Spans *sp) {
    release(&sp->B);
    release(&sp->O);
    release(&sp->L);
}

/* ---- strings(b, off, length) ----------------------------------------------------------------------- */

static inline uint64_t mix(uint64_t h) {
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ULL;
    return h ^ (h >> 33);
}

static uint64_t hash_bytes(const uint8_t *p, Py_ssize_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ (uint64_t)n;
    Py_ssize_t k = 0;
    for (; k + 8 <= n; k += 8) h = mix(h ^ load64(p + k)) + 0x632BE59BD9B4E019ULL;
    uint64_t tail = 0;
    for (Py_ssize_t j = n - 1; j >= k; j--) tail = (tail << 8) | p[j];
    return mix(h ^ tail);
}

PyDoc_STRVAR(strings_doc,
"strings(b, off, length)\n\n"
"The distinct byte strings b[off[i]:off[i]+length[i]] (int64 buffers) in first-seen order: (index of each\n"
"string's distinct one, int32; the row where each distinct one is first seen, int64). Exact (strings that\n"
"hash alike are compared byte for byte). A string outside b raises ValueError.");

static PyObject *strings(PyObject *self, PyObject *args) {
    (void)self;
    Spans sp = {0};
    PyObject *idx = NULL, *firsts = NULL, *result = NULL;
    int64_t *slots = NULL, *first = NULL;
    uint64_t *hashes = NULL;
    if (spans_args(args, "strings", 0, &sp) < 0) goto done;
    const uint8_t *b = sp.b;
    Py_ssize_t n = sp.n;
    const int64_t *off = sp.off, *len = sp.len;
    char *id = NULL;
    idx = new_array(n * 4, &id);
    if (idx == NULL) goto done;
    int32_t *out = (int32_t *)id;
    Py_ssize_t cap = 64, distinct = 0; /* open addressing, at most half full; slots hold distinct ids (-1: empty) */
    slots = PyMem_Malloc((size_t)cap * sizeof(int64_t));
    hashes = PyMem_Malloc((size_t)(n ? n : 1) * sizeof(uint64_t)); /* of each distinct string */
    first = PyMem_Malloc((size_t)(n ? n : 1) * sizeof(int64_t));
    if (slots == NULL || hashes == NULL || first == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    memset(slots, 0xFF, (size_t)cap * sizeof(int64_t));
    for (Py_ssize_t i = 0; i < n; i++) {
        const uint8_t *p = b + off[i];
        uint64_t h = hash_bytes(p, len[i]);
        Py_ssize_t at = (Py_ssize_t)(h & (uint64_t)(cap - 1));
        for (;;) {
            int64_t d = slots[at];
            if (d < 0) {
                if (distinct > INT32_MAX) {
                    PyErr_SetString(PyExc_OverflowError, "strings: more distinct strings than int32 indexes");
                    goto done;
                }
                slots[at] = distinct;
                hashes[distinct] = h;
                first[distinct] = i;
                out[i] = (int32_t)distinct++;
                if (2 * distinct > cap) { /* grow and re-place every distinct string */
                    Py_ssize_t grown = 2 * cap;
                    int64_t *more = PyMem_Realloc(slots, (size_t)grown * sizeof(int64_t));
                    if (more == NULL) {
                        PyErr_NoMemory();
                        goto done;
                    }
                    slots = more;
                    cap = grown;
                    memset(slots, 0xFF, (size_t)cap * sizeof(int64_t));
                    for (Py_ssize_t k = 0; k < distinct; k++) {
                        Py_ssize_t a = (Py_ssize_t)(hashes[k] & (uint64_t)(cap - 1));
                        while (slots[a] >= 0) a = (a + 1) & (cap - 1);
                        slots[a] = k;
                    }
                }
                break;
            }
            int64_t r = first[d];
            if (hashes[d] == h && len[r] == len[i] && memcmp(b + off[r], p, (size_t)len[i]) == 0) {
                out[i] = (int32_t)d;
                break;
            }
            at = (at + 1) & (cap - 1);
        }
    }
    char *fd = NULL;
    firsts = new_array(distinct * 8, &fd);
    if (firsts == NULL) goto done;
    if (distinct) memcpy(fd, first, (size_t)distinct * 8);
    result = PyTuple_Pack(2, idx, firsts);
done:
    Py_XDECREF(idx);
    Py_XDECREF(firsts);
    PyMem_Free(slots);
    PyMem_Free(hashes);
    PyMem_Free(first);
    spans_release(&sp);
    return result;
}

/* ---- packed(b, off, length) ------------------------------------------------------------------------ */

PyDoc_STRVAR(packed_doc,
"packed(b, off, length)\n\n"
"The packed varint lists b[off[i]:off[i]+length[i]] (int64 buffers; every length > 0), as\n"
"etkit.format.wire.packed_varints gives them: (status, values uint64 of all lists in order, count of each\n"
"list int64). status 0; 1: a varint crosses the end of its list; 2: a varint longer than ten bytes.");

static PyObject *packed(PyObject *self, PyObject *args) {
    (void)self;
    Spans sp = {0};
    PyObject *values = NULL, *counts = NULL, *result = NULL;
    if (spans_args(args, "packed", 1, &sp) < 0) goto done;
    const uint8_t *b = sp.b;
    Py_ssize_t n = sp.n;
    const int64_t *off = sp.off, *len = sp.len;
    int status = 0;
    for (Py_ssize_t i = 0; i < n && !status; i++) /* a list ends with a varint's last byte */
        if (b[off[i] + len[i] - 1] >= 0x80) status = 1;
    Py_ssize_t nvalues = 0;
    if (!status)
        for (Py_ssize_t i = 0; i < n; i++)
            for (Py_ssize_t k = off[i]; k < off[i] + len[i]; k++) nvalues += b[k] < 0x80;
    char *vd = NULL, *cd = NULL;
    values = new_array(status ? 0 : nvalues * 8, &vd);
    counts = new_array(status ? 0 : n * 8, &cd);
    if (values == NULL || counts == NULL) goto done;
    if (!status) {
        uint64_t *v = (uint64_t *)vd;
        int64_t *c = (int64_t *)cd;
        Py_ssize_t at = 0;
        for (Py_ssize_t i = 0; i < n && !status; i++) {
            Py_ssize_t k = off[i], e = off[i] + len[i];
            int64_t here = 0;
            while (k < e) {
                uint64_t x = 0;
                int shift = 0, bytes = 0;
                for (;;) {
                    uint8_t byte = b[k++];
                    if (bytes == 10) {
                        status = 2;
                        break;
                    }
                    x |= (uint64_t)(byte & 0x7F) << shift;
                    shift += 7;
                    bytes++;
                    if (byte < 0x80) break;
                }
                if (status) break;
                v[at++] = x;
                here++;
            }
            c[i] = here;
        }
    }
    result = Py_BuildValue("iOO", status, values, counts);
done:
    Py_XDECREF(values);
    Py_XDECREF(counts);
    spans_release(&sp);
    return result;
}

/* ---- checked(b, off, length) ----------------------------------------------------------------------- */

PyDoc_STRVAR(checked_doc,
"checked(b, off, length)\n\n"
"The packed varint lists b[off[i]:off[i]+length[i]] checked as packed() decodes them, without the values:\n"
"(status, top-bit bytes of all the lists); status as packed()'s.");

static PyObject *checked(PyObject *self, PyObject *args) {
    (void)self;
    Spans sp = {0};
    PyObject *result = NULL;
    if (spans_args(args, "checked", 1, &sp) < 0) goto done;
    const uint8_t *b = sp.b;
    Py_ssize_t n = sp.n;
    const int64_t *off = sp.off, *len = sp.len;
    int status = 0;
    long long high = 0;
    for (Py_ssize_t i = 0; i < n; i++)
        if (b[off[i] + len[i] - 1] >= 0x80) status = 1;
    for (Py_ssize_t i = 0; i < n && !status; i++) {
        int run = 0; /* continuation bytes in a row: ten make a varint of eleven bytes */
        for (Py_ssize_t k = off[i]; k < off[i] + len[i]; k++) {
            int more = b[k] >> 7;
            high += more;
            run = more ? run + 1 : 0;
            if (run == 10) {
                status = 2;
                break;
            }
        }
    }
    result = Py_BuildValue("iL", status, status ? 0LL : high);
done:
    spans_release(&sp);
    return result;
}

/* ---- frames(buf) ----------------------------------------------------------------------------------- */

PyDoc_STRVAR(frames_doc,
"frames(buf, table=False)\n\n"
"Where every frame of buf starts, following the chain of varint32 length prefixes from byte 0, as\n"
"etkit.format.stream._frame_starts does (int64 bytearray); None if a prefix is cut or longer than five\n"
"bytes. Only the last frame can run past the end of buf (the caller checks). With table: (starts, payload\n"
"offsets, payload lengths), as etkit.format.stream.frame_table decodes them from the starts.");

static PyObject *frames(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *ob;
    int table = 0;
    if (!PyArg_ParseTuple(args, "O|p", &ob, &table)) return NULL;
    Buf B = {0};
    PyObject *result = NULL, *cols[3] = {NULL, NULL, NULL};
    Vec vecs[3] = {{NULL, 0, 0, sizeof(int64_t)}, {NULL, 0, 0, sizeof(int64_t)}, {NULL, 0, 0, sizeof(int64_t)}};
    int kept = table ? 3 : 1;
    if (get_buf(ob, &B, 1, "buf") < 0) goto done;
    const uint8_t *b = B.view.buf;
    Py_ssize_t size = B.view.len, pos = 0;
    for (int c = 0; c < kept; c++)
        if (size && grow(&vecs[c], size / 64) < 0) goto nomem;
    while (pos < size) {
        ahead(b, size, pos);
        int64_t *at = push(&vecs[0]);
        if (at == NULL) goto nomem;
        *at = pos;
        uint64_t length = 0;
        int k = 0;
        for (;; k++) {
            if (k == 5 || pos + k >= size) { /* over-long, or cut */
                Py_INCREF(Py_None);
                result = Py_None;
                goto done;
            }
            uint8_t byte = b[pos + k];
            length |= (uint64_t)(byte & 0x7F) << (7 * k);
            if (byte < 0x80) break;
        }
        length &= 0xFFFFFFFFULL;
        if (table) {
            int64_t *off = push(&vecs[1]), *len = push(&vecs[2]);
            if (off == NULL || len == NULL) goto nomem;
            *off = pos + k + 1;
            *len = (int64_t)length;
        }
        pos += k + 1 + (Py_ssize_t)length;
    }
    for (int c = 0; c < kept; c++) {
        char *data = NULL;
        cols[c] = new_array(vecs[c].size * 8, &data);
        if (cols[c] == NULL) goto done;
        if (vecs[c].size) memcpy(data, vecs[c].data, (size_t)vecs[c].size * 8);
    }
    if (table) {
        result = PyTuple_Pack(3, cols[0], cols[1], cols[2]);
    } else {
        result = cols[0];
        cols[0] = NULL;
    }
    goto done;
nomem:
    PyErr_NoMemory();
done:
    for (int c = 0; c < 3; c++) {
        Py_XDECREF(cols[c]);
        PyMem_Free(vecs[c].data);
    }
    release(&B);
    return result;
}

/* ---- high_bytes(b, start, end) --------------------------------------------------------------------- */

PyDoc_STRVAR(high_bytes_doc,
"high_bytes(b, start, end)\n\n"
"How many bytes of b[start[i]:end[i]] (all i; int64 buffers, each record after the one before) have\n"
"the top bit set; -1 if a record starts before the previous one ends, -2 if one lies outside b.");

static PyObject *high_bytes(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *ob, *ostart, *oend;
    if (!PyArg_ParseTuple(args, "OOO", &ob, &ostart, &oend)) return NULL;
    Buf B = {0}, S = {0}, E = {0};
    PyObject *result = NULL;
    if (get_buf(ob, &B, 1, "b") < 0 || get_buf(ostart, &S, 8, "start") < 0 || get_buf(oend, &E, 8, "end") < 0) goto done;
    if (S.view.len != E.view.len) {
        PyErr_SetString(PyExc_ValueError, "high_bytes: start and end differ in length");
        goto done;
    }
    const uint8_t *b = B.view.buf;
    Py_ssize_t size = B.view.len, n = S.view.len / 8;
    const int64_t *start = S.view.buf, *end = E.view.buf;
    result = PyLong_FromLongLong(count_high(b, size, start, end, n));
done:
    release(&B);
    release(&S);
    release(&E);
    return result;
}

static PyMethodDef methods[] = {
    {"lean", lean, METH_VARARGS, lean_doc},
    {"columns", columns, METH_VARARGS, columns_doc},
    {"strings", strings, METH_VARARGS, strings_doc},
    {"packed", packed, METH_VARARGS, packed_doc},
    {"frames", frames, METH_VARARGS, frames_doc},
    {"checked", checked, METH_VARARGS, checked_doc},
    {"high_bytes", high_bytes, METH_VARARGS, high_bytes_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "etkit.format._walk",
    "The lean walk of etkit.format.columnar in C (optional: columnar's numpy walk gives the same results).", -1,
    methods,
};

PyMODINIT_FUNC PyInit__walk(void) { return PyModule_Create(&module); }
