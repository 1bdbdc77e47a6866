/* A growable byte buffer for etkit's C kernels: one home for its growth (doubling, from 256 bytes) and appends.
 * Each kernel includes this after Python.h; the memory is PyMem's (PyMem_Free(v.data) lets it go). */
#ifndef ETKIT_VEC_H
#define ETKIT_VEC_H

#include <string.h>

typedef struct {
    char *data;
    Py_ssize_t size, cap;
} Vec;

/* Room for n more bytes; -1 with MemoryError set when there is none. */
static int vec_grow(Vec *v, Py_ssize_t n) {
    Py_ssize_t cap = v->cap ? v->cap : 256;
    while (cap < v->size + n) cap *= 2;
    char *data = PyMem_Realloc(v->data, (size_t)cap);
    if (data == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    v->data = data;
    v->cap = cap;
    return 0;
}

/* Append the n bytes at x (nothing for n <= 0: an empty buffer has no data to copy into, not even 0 bytes). */
static inline int vec_put(Vec *v, const void *x, Py_ssize_t n) {
    if (n <= 0) return 0;
    if (v->size + n > v->cap && vec_grow(v, n) < 0) return -1;
    memcpy(v->data + v->size, x, (size_t)n);
    v->size += n;
    return 0;
}

#endif
