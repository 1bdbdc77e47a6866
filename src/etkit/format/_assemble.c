/* etkit.format._assemble: the byte joins of etkit.format.assemble (node_record, IoPieces.field) in C.
 *
 * Each function gives exactly the bytes of its Python twin in assemble.py (which is used without this
 * module): the same fields in the same order, varints as protobuf writes an (u)int64 (a negative value
 * or one of more than 64 bits as its low 64 bits: ten bytes for a negative), list indexing as Python's.
 * tests/format/test_assemble.py compares the two, and both against protobuf.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "../_varint.h"

/* The node field keys (et-format.md; assemble.py takes them from format.tags). */
enum { K_ID = 0x08, K_TYPE = 0x18, K_CTRL = 0x22, K_DATA = 0x2a, K_START = 0x30, K_DUR = 0x38, K_IO_VALUES = 0x0a };


/* The low 64 bits of an int (as assemble.varint encodes it); -1 with an error set when not an int. */
static int low64(PyObject *v, uint64_t *out) {
    if (!PyLong_Check(v)) { PyErr_SetString(PyExc_TypeError, "an integer is required"); return -1; }
    *out = PyLong_AsUnsignedLongLongMask(v);
    return PyErr_Occurred() ? -1 : 0;
}

/* ids[i] as Python indexes a list (negative from the end), a bytes object (borrowed); NULL on an error. */
static PyObject *id_bytes(PyObject *ids, PyObject *index) {
    Py_ssize_t i = PyNumber_AsSsize_t(index, PyExc_IndexError);
    if (i == -1 && PyErr_Occurred()) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(ids);
    if (i < 0) i += n;
    if (i < 0 || i >= n) { PyErr_SetString(PyExc_IndexError, "list index out of range"); return NULL; }
    PyObject *b = PyList_GET_ITEM(ids, i);
    if (!PyBytes_Check(b)) { PyErr_SetString(PyExc_TypeError, "ids must hold bytes"); return NULL; }
    return b;
}

PyDoc_STRVAR(record_doc,
"record(node_id, name_field, node_type, ctrl, deps, start, duration, io, attrs, ids) -> bytes\n\n"
"assemble.node_record: one Node payload from its encoded parts (ids: id_varints, a list).");

static PyObject *record(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 10) { PyErr_SetString(PyExc_TypeError, "record() takes 10 arguments"); return NULL; }
    PyObject *node_id = args[0], *name = args[1], *type = args[2], *ctrl = args[3], *deps = args[4],
             *io = args[7], *attrs = args[8], *ids = args[9];
    if (!PyBytes_Check(name) || !PyBytes_Check(io) || !PyBytes_Check(attrs) || !PyList_Check(deps) || !PyList_Check(ids)) {
        PyErr_SetString(PyExc_TypeError, "record(): name_field, io and attrs are bytes, deps and ids lists");
        return NULL;
    }
    uint64_t start, duration;
    int has_start = PyObject_IsTrue(args[5]), has_duration = PyObject_IsTrue(args[6]);
    if (has_start < 0 || has_duration < 0 || low64(args[5], &start) < 0 || low64(args[6], &duration) < 0)
        return NULL;
    Py_ssize_t t = PyNumber_AsSsize_t(type, PyExc_IndexError);
    if (t == -1 && PyErr_Occurred()) return NULL;
    if (t < 0) t += 0x80;  /* (assemble._TYPE_FIELD[node_type]: 128 entries) */
    if (t < 0 || t >= 0x80) { PyErr_SetString(PyExc_IndexError, "list index out of range"); return NULL; }
    PyObject *id_field = NULL, *ctrl_field = NULL;
    int has_id = PyObject_IsTrue(node_id);
    if (has_id < 0) return NULL;
    if (has_id && (id_field = id_bytes(ids, node_id)) == NULL) return NULL;
    if (ctrl != Py_None && (ctrl_field = id_bytes(ids, ctrl)) == NULL) return NULL;
    Py_ssize_t n_deps = PyList_GET_SIZE(deps), body = 0;
    for (Py_ssize_t k = 0; k < n_deps; k++) {
        PyObject *b = id_bytes(ids, PyList_GET_ITEM(deps, k));
        if (b == NULL) return NULL;
        body += PyBytes_GET_SIZE(b);
    }
    Py_ssize_t size = PyBytes_GET_SIZE(name) + PyBytes_GET_SIZE(io) + PyBytes_GET_SIZE(attrs);
    if (id_field) size += 1 + PyBytes_GET_SIZE(id_field);
    if (t) size += 2;
    if (ctrl_field) size += 2 + PyBytes_GET_SIZE(ctrl_field);
    if (n_deps) size += 1 + varint_len((uint64_t)body) + body;
    if (has_start) size += 1 + varint_len(start);
    if (has_duration) size += 1 + varint_len(duration);
    PyObject *out = PyBytes_FromStringAndSize(NULL, size);
    if (out == NULL) return NULL;
    char *p = PyBytes_AS_STRING(out);
    if (id_field) {
        *p++ = K_ID;
        memcpy(p, PyBytes_AS_STRING(id_field), PyBytes_GET_SIZE(id_field));
        p += PyBytes_GET_SIZE(id_field);
    }
    memcpy(p, PyBytes_AS_STRING(name), PyBytes_GET_SIZE(name));
    p += PyBytes_GET_SIZE(name);
    if (t) { *p++ = K_TYPE; *p++ = (char)t; }
    if (ctrl_field) {
        *p++ = K_CTRL;
        *p++ = (char)PyBytes_GET_SIZE(ctrl_field);  /* (an id's varint: at most 10 bytes) */
        memcpy(p, PyBytes_AS_STRING(ctrl_field), PyBytes_GET_SIZE(ctrl_field));
        p += PyBytes_GET_SIZE(ctrl_field);
    }
    if (n_deps) {
        *p++ = K_DATA;
        p = put_varint(p, (uint64_t)body);
        for (Py_ssize_t k = 0; k < n_deps; k++) {
            PyObject *b = id_bytes(ids, PyList_GET_ITEM(deps, k));  /* (checked above) */
            memcpy(p, PyBytes_AS_STRING(b), PyBytes_GET_SIZE(b));
            p += PyBytes_GET_SIZE(b);
        }
    }
    if (has_start) { *p++ = K_START; p = put_varint(p, start); }
    if (has_duration) { *p++ = K_DUR; p = put_varint(p, duration); }
    memcpy(p, PyBytes_AS_STRING(io), PyBytes_GET_SIZE(io));
    p += PyBytes_GET_SIZE(io);
    memcpy(p, PyBytes_AS_STRING(attrs), PyBytes_GET_SIZE(attrs));
    return out;
}

PyDoc_STRVAR(io_field_doc,
"io_field(key, values, tail) -> bytes\n\n"
"IoPieces.field once the encoded shapes and types (tail) are known: key, length, the values string's\n"
"field (left out when empty), tail.");

static PyObject *io_field(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3 || !PyBytes_Check(args[0]) || !PyUnicode_Check(args[1]) || !PyBytes_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "io_field(key: bytes, values: str, tail: bytes)");
        return NULL;
    }
    PyObject *encoded = NULL;  /* (a non-ASCII string: its UTF-8, not cached in the string) */
    Py_ssize_t n = 0, key = PyBytes_GET_SIZE(args[0]), tail = PyBytes_GET_SIZE(args[2]);
    const char *values;
    if (PyUnicode_IS_ASCII(args[1])) {
        values = PyUnicode_AsUTF8AndSize(args[1], &n);
    } else {
        if ((encoded = PyUnicode_AsUTF8String(args[1])) == NULL) return NULL;
        values = PyBytes_AS_STRING(encoded);
        n = PyBytes_GET_SIZE(encoded);
    }
    if (values == NULL) return NULL;
    uint64_t inner = (uint64_t)tail + (n ? 1 + varint_len((uint64_t)n) + (uint64_t)n : 0);
    PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(key + varint_len(inner) + inner));
    if (out != NULL) {
        char *p = PyBytes_AS_STRING(out);
        memcpy(p, PyBytes_AS_STRING(args[0]), key);
        p = put_varint(p + key, inner);
        if (n) {
            *p++ = K_IO_VALUES;
            p = put_varint(p, (uint64_t)n);
            memcpy(p, values, n);
            p += n;
        }
        memcpy(p, PyBytes_AS_STRING(args[2]), tail);
    }
    Py_XDECREF(encoded);
    return out;
}

PyDoc_STRVAR(int64_rows_doc,
"int64_rows(heads, columns, present) -> list[bytes]\n\n"
"AttrPieces.int64_rows: per row, heads[j][len(varint)] + varint(columns[j][row]) for every column, joined\n"
"(columns: C-contiguous uint64 buffers of one length; present: a bool buffer for the last column, or None).");

static PyObject *int64_rows(PyObject *self, PyObject *args) {
    PyObject *heads, *columns, *present_obj;
    if (!PyArg_ParseTuple(args, "O!O!O", &PyList_Type, &heads, &PyList_Type, &columns, &present_obj)) return NULL;
    Py_ssize_t n_cols = PyList_GET_SIZE(columns);
    if (n_cols < 1 || n_cols > 8 || PyList_GET_SIZE(heads) != n_cols) {
        PyErr_SetString(PyExc_ValueError, "int64_rows: 1-8 columns, one heads list each");
        return NULL;
    }
    for (Py_ssize_t j = 0; j < n_cols; j++) {
        PyObject *h = PyList_GET_ITEM(heads, j);
        if (!PyList_Check(h) || PyList_GET_SIZE(h) < 11) {
            PyErr_SetString(PyExc_ValueError, "int64_rows: each heads list holds 11 bytes");
            return NULL;
        }
        for (Py_ssize_t k = 1; k < 11; k++)
            if (!PyBytes_Check(PyList_GET_ITEM(h, k))) { PyErr_SetString(PyExc_TypeError, "int64_rows: heads hold bytes"); return NULL; }
    }
    Py_buffer views[9];
    int got = 0;
    PyObject *out = NULL;
    Py_ssize_t rows = -1;
    for (; got < n_cols; got++) {
        if (PyObject_GetBuffer(PyList_GET_ITEM(columns, got), &views[got], PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) goto done;
        Py_buffer *v = &views[got];
        if (v->itemsize != 8 || v->format == NULL || (strcmp(v->format, "Q") && strcmp(v->format, "L") && strcmp(v->format, "<Q"))) {
            got++;
            PyErr_SetString(PyExc_TypeError, "int64_rows: columns are uint64 arrays");
            goto done;
        }
        Py_ssize_t n = v->len / 8;
        if (rows >= 0 && n != rows) { got++; PyErr_SetString(PyExc_ValueError, "int64_rows: columns of different lengths"); goto done; }
        rows = n;
    }
    const unsigned char *present = NULL;
    if (present_obj != Py_None) {
        if (PyObject_GetBuffer(present_obj, &views[got], PyBUF_C_CONTIGUOUS) < 0) goto done;
        got++;
        if (views[got - 1].len != rows) { PyErr_SetString(PyExc_ValueError, "int64_rows: present has another length"); goto done; }
        present = views[got - 1].buf;
    }
    if ((out = PyList_New(rows)) == NULL) goto done;
    for (Py_ssize_t r = 0; r < rows; r++) {
        char buf[8 * (10 + 64)];
        Py_ssize_t size = 0;
        for (Py_ssize_t j = 0; j < n_cols; j++) {
            if (j == n_cols - 1 && present != NULL && !present[r]) continue;
            uint64_t value = ((const uint64_t *)views[j].buf)[r];
            int len = varint_len(value);
            PyObject *head = PyList_GET_ITEM(PyList_GET_ITEM(heads, j), len);
            Py_ssize_t hn = PyBytes_GET_SIZE(head);
            if (hn > 64) { PyErr_SetString(PyExc_ValueError, "int64_rows: attribute name too long"); Py_CLEAR(out); goto done; }
            memcpy(buf + size, PyBytes_AS_STRING(head), hn);
            size = put_varint(buf + size + hn, value) - buf;
        }
        PyObject *row = PyBytes_FromStringAndSize(buf, size);
        if (row == NULL) { Py_CLEAR(out); goto done; }
        PyList_SET_ITEM(out, r, row);
    }
done:
    for (int k = 0; k < got; k++) PyBuffer_Release(&views[k]);
    return out;
}

static PyMethodDef methods[] = {
    {"record", (PyCFunction)(void (*)(void))record, METH_FASTCALL, record_doc},
    {"io_field", (PyCFunction)(void (*)(void))io_field, METH_FASTCALL, io_field_doc},
    {"int64_rows", int64_rows, METH_VARARGS, int64_rows_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "etkit.format._assemble",
    "The byte joins of etkit.format.assemble in C (optional: assemble's Python gives the same bytes).", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__assemble(void) { return PyModule_Create(&module); }
