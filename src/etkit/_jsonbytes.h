/* What etkit's JSON-reading C kernels share (each includes this after Python.h): the run of bytes a JSON string
 * holds as they are, found eight bytes at a time, and a table of the texts looked up before.
 *
 * A "plain" byte is printable ASCII (0x20 .. 0x7F) other than '"' and '\\': what a string may hold with
 * nothing to check. Every other byte (the closing quote, an escape, a control byte, the first byte of a UTF-8
 * sequence) is left to the caller, which checks it as it did byte by byte. */
#ifndef ETKIT_JSONBYTES_H
#define ETKIT_JSONBYTES_H

#include <stdint.h>
#include <string.h>

#define JB_ONES UINT64_C(0x0101010101010101)
#define JB_HIGHS UINT64_C(0x8080808080808080)

/* The high bit of each byte of w equal to c, exact at the lowest such byte (a false mark only lies above a
 * true one, which is all a search for the first one needs). */
static inline uint64_t jb_bytes_eq(uint64_t w, unsigned char c) {
    uint64_t x = w ^ (JB_ONES * c);
    return (x - JB_ONES) & ~x & JB_HIGHS;
}

/* Per byte: 1 plain, 3 plain and '\'' or 0x7F (bytes Python's repr of a str does not write as they are), 0 not
 * plain. */
static const unsigned char jb_plain_class[256] = {
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    1, 1, 0, 1, 1, 1, 1, 3, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 3,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
};

/* The first byte from p on (p <= e) that is not plain, or e. When odd is not NULL, *odd is set to 1 when a
 * byte of the run is '\'' or 0x7F, left as it is otherwise. The first bytes are looked at one by one (most
 * strings are short), the rest eight at a time. */
static inline const unsigned char *jb_plain_run(const unsigned char *p, const unsigned char *e, int *odd) {
    const unsigned char *first = e - p > 8 ? p + 8 : e;
    for (; p < first; p++) {
        unsigned k = jb_plain_class[*p];
        if (k == 0) return p;
        if (odd != NULL && k == 3) *odd = 1;
    }
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ && defined(__GNUC__)
    while (e - p >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        uint64_t stop = (jb_bytes_eq(w, '"') | jb_bytes_eq(w, '\\') | ((w - JB_ONES * 0x20) & ~w) | w) & JB_HIGHS;
        if (odd != NULL) {
            uint64_t below = stop ? (stop & -stop) - 1 : ~UINT64_C(0); /* the bits of the run's bytes in w */
            if ((jb_bytes_eq(w, '\'') | jb_bytes_eq(w, 0x7F)) & below) *odd = 1;
        }
        if (stop) return p + (__builtin_ctzll(stop) >> 3);
        p += 8;
    }
#endif
    for (; p < e; p++) {
        unsigned k = jb_plain_class[*p];
        if (k == 0) return p;
        if (odd != NULL && k == 3) *odd = 1;
    }
    return p;
}

/* The first byte from p on (p <= e) that is not an ASCII digit, or e; eight at a time. */
static inline const unsigned char *jb_digit_run(const unsigned char *p, const unsigned char *e) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ && defined(__GNUC__)
    while (e - p >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        uint64_t t = w ^ (JB_ONES * '0'); /* a digit's byte: 0 .. 9 */
        uint64_t other = (t & (JB_ONES * 0xF0)) | (((t & (JB_ONES * 0x0F)) + JB_ONES * 0x06) & (JB_ONES * 0x10));
        other = (((other & ~JB_HIGHS) + ~JB_HIGHS) | other) & JB_HIGHS; /* (exact: no carry between bytes) */
        if (other) return p + (__builtin_ctzll(other) >> 3);
        p += 8;
    }
#endif
    while (p < e && (unsigned)(*p - '0') < 10u) p++;
    return p;
}

/* ---- the texts a kernel has looked up before ----
 *
 * What a lookup found for a JSON text (a name, a raw value), kept by the text's bytes so the same text is not
 * made into a Python object, hashed and looked up again: for caches where what a text gives never changes
 * while the kernel runs. The texts are spans of the buffer the kernel reads, which it holds all the while;
 * each found object is held (a strong reference) until jb_seen_clear. An open-addressing table of
 * JB_SEEN_SLOTS, filled at most half (then nothing more is kept). A zeroed JbSeen is empty. */

#define JB_SEEN_SLOTS 2048

typedef struct {
    uint64_t hash;
    const unsigned char *text;
    Py_ssize_t len;
    PyObject *found; /* NULL: an empty slot */
} JbSeenSlot;

typedef struct {
    JbSeenSlot *slots;
    int used;
} JbSeen;

static inline uint64_t jb_hash(const unsigned char *p, Py_ssize_t n) {
    uint64_t h = (uint64_t)n * UINT64_C(0x9E3779B97F4A7C15), w;
    for (; n >= 8; p += 8, n -= 8) {
        memcpy(&w, p, 8);
        h = (h ^ w) * UINT64_C(0xBF58476D1CE4E5B9);
        h ^= h >> 31;
    }
    w = 0;
    memcpy(&w, p, n);
    h = (h ^ w) * UINT64_C(0x94D049BB133111EB);
    return h ^ (h >> 29);
}

/* The slot of the text [p, p + n) (hash h): the one holding it, or the empty one where it would go. */
static inline JbSeenSlot *jb_seen_slot(JbSeen *t, uint64_t h, const unsigned char *p, Py_ssize_t n) {
    for (size_t i = (size_t)h & (JB_SEEN_SLOTS - 1);; i = (i + 1) & (JB_SEEN_SLOTS - 1)) {
        JbSeenSlot *s = &t->slots[i];
        if (s->found == NULL || (s->hash == h && s->len == n && memcmp(s->text, p, n) == 0)) return s;
    }
}

/* What was kept for the text (borrowed), or NULL (no error set). */
static inline PyObject *jb_seen_get(JbSeen *t, const unsigned char *p, Py_ssize_t n) {
    if (t->slots == NULL) return NULL;
    return jb_seen_slot(t, jb_hash(p, n), p, n)->found;
}

/* found kept for the text (a new reference taken; nothing done when the table is full or holds the text);
 * -1 on an error (set). */
static int jb_seen_put(JbSeen *t, const unsigned char *p, Py_ssize_t n, PyObject *found) {
    if (t->slots == NULL && (t->slots = PyMem_Calloc(JB_SEEN_SLOTS, sizeof(JbSeenSlot))) == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    if (t->used >= JB_SEEN_SLOTS / 2) return 0;
    uint64_t h = jb_hash(p, n);
    JbSeenSlot *s = jb_seen_slot(t, h, p, n);
    if (s->found != NULL) return 0;
    *s = (JbSeenSlot){h, p, n, found};
    Py_INCREF(found);
    t->used++;
    return 0;
}

static void jb_seen_clear(JbSeen *t) {
    if (t->slots != NULL)
        for (int i = 0; i < JB_SEEN_SLOTS; i++) Py_XDECREF(t->slots[i].found);
    PyMem_Free(t->slots);
    t->slots = NULL;
    t->used = 0;
}

#endif
