/* The buffer views etkit's C kernels take their arrays through: one home for holding a view, checking that it
 * is a whole number of items, and letting it go (each kernel includes this after Python.h). Only the buffer
 * protocol is used, so no kernel needs numpy's headers. */
#ifndef ETKIT_BUFFERS_H
#define ETKIT_BUFFERS_H

typedef struct {
    Py_buffer view;
    int held;
} Buf;

/* A C-contiguous view of obj (writable when asked) in buf, of whole itemsize-byte items; -1 with an exception
 * set otherwise. buf is released by release() whether or not this succeeded. */
static int get_buf_as(PyObject *obj, Buf *buf, Py_ssize_t itemsize, int writable, const char *what) {
    int flags = PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, &buf->view, flags) < 0) return -1;
    buf->held = 1;
    if (itemsize > 1 && buf->view.len % itemsize) {
        PyErr_Format(PyExc_ValueError, "%s: %zd bytes is not a whole number of %zd-byte items", what, buf->view.len,
                     itemsize);
        return -1;
    }
    return 0;
}

/* get_buf_as, read-only. */
static inline int get_buf(PyObject *obj, Buf *buf, Py_ssize_t itemsize, const char *what) {
    return get_buf_as(obj, buf, itemsize, 0, what);
}

static void release(Buf *buf) {
    if (buf->held) PyBuffer_Release(&buf->view);
    buf->held = 0;
}

#endif
