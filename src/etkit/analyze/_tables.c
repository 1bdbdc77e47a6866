/* The CSV body of an analysis table in C (etkit.analyze.tables.Table.csv_bytes; its Python, _csv_body, without it).
 *
 * body(rows, width, quoted) -> bytes | None: every row (a list or tuple of exactly `width` fields) as one line of
 * UTF-8, its fields joined by "," and ended by "\n", each field as the csv module writes it (QUOTE_MINIMAL):
 *   an int (exactly int) in decimal, as str() writes it; True and False as their names; None as nothing;
 *   a float (exactly float) as repr() writes it (the csv module writes floats by repr);
 *   a str (exactly str) as it is, unless it holds a "," a '"' or a line break ("\n", "\r"): then quoted(s) (a
 *   callable that returns what the csv module's writer writes for it, made by the caller, who also keeps the
 *   answers) is written in its place.
 * None (nothing written) for anything else: a row of another width or kind, a field of another type (an int or
 * str subclass, numpy's scalars): the caller then lets the csv module write the whole table.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#include "../_vec.h"

typedef Vec Out;  /* the lines written so far (_vec.h) */

static inline int put(Out *out, const char *text, Py_ssize_t n) { return vec_put(out, text, n); }

/* The UTF-8 of a str object (a result of `quoted`, which must be a str). */
static int put_str(Out *out, PyObject *text) {
    Py_ssize_t n;
    const char *utf8 = PyUnicode_AsUTF8AndSize(text, &n);
    return utf8 == NULL ? -1 : put(out, utf8, n);
}

static int put_int(Out *out, PyObject *value) {
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(value, &overflow);
    if (v == -1 && PyErr_Occurred()) return -1;
    if (overflow) {  /* beyond 64 bits: Python's own decimal */
        PyObject *text = PyObject_Str(value);
        if (text == NULL) return -1;
        int rc = put_str(out, text);
        Py_DECREF(text);
        return rc;
    }
    char digits[24];
    int n = 0;
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    do {
        digits[sizeof digits - 1 - n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0) digits[sizeof digits - 1 - n++] = '-';
    return put(out, digits + sizeof digits - n, n);
}

static int put_float(Out *out, PyObject *value) {
    char *text = PyOS_double_to_string(PyFloat_AS_DOUBLE(value), 'r', 0, Py_DTSF_ADD_DOT_0, NULL);
    if (text == NULL) return -1;
    int rc = put(out, text, (Py_ssize_t)strlen(text));
    PyMem_Free(text);
    return rc;
}

static int needs_quoting(const char *s, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) {
        char c = s[i];
        if (c == ',' || c == '"' || c == '\n' || c == '\r') return 1;
    }
    return 0;
}

/* 1: written; 0: a field this writer does not take (the table goes to the csv module); -1: an error. */
static int put_field(Out *out, PyObject *value, PyObject *quoted) {
    if (PyLong_CheckExact(value)) return put_int(out, value) < 0 ? -1 : 1;
    if (PyFloat_CheckExact(value)) return put_float(out, value) < 0 ? -1 : 1;
    if (PyUnicode_CheckExact(value)) {
        Py_ssize_t n;
        const char *utf8 = PyUnicode_AsUTF8AndSize(value, &n);
        if (utf8 == NULL) return -1;
        if (!needs_quoting(utf8, n)) return put(out, utf8, n) < 0 ? -1 : 1;
        PyObject *text = PyObject_CallOneArg(quoted, value);
        if (text == NULL) return -1;
        int rc = PyUnicode_Check(text) ? put_str(out, text) : (PyErr_SetString(PyExc_TypeError,
                                                                                 "quoted() must return a str"), -1);
        Py_DECREF(text);
        return rc < 0 ? -1 : 1;
    }
    if (value == Py_True) return put(out, "True", 4) < 0 ? -1 : 1;
    if (value == Py_False) return put(out, "False", 5) < 0 ? -1 : 1;
    if (value == Py_None) return 1;
    return 0;
}

static PyObject *body(PyObject *module, PyObject *args) {
    PyObject *rows, *quoted;
    Py_ssize_t width;
    if (!PyArg_ParseTuple(args, "OnO:body", &rows, &width, &quoted)) return NULL;
    PyObject *seq = PySequence_Fast(rows, "rows must be a sequence");
    if (seq == NULL) return NULL;
    Out out = {NULL, 0, 0};
    int ok = 1;
    for (Py_ssize_t r = 0; r < PySequence_Fast_GET_SIZE(seq) && ok == 1; r++) {
        PyObject *row = PySequence_Fast_GET_ITEM(seq, r);
        if (!(PyList_CheckExact(row) || PyTuple_CheckExact(row)) || PySequence_Fast_GET_SIZE(row) != width) {
            ok = 0;
            break;
        }
        Py_INCREF(row);  /* (held, and its fields looked up again after each one: quoted() runs Python code) */
        for (Py_ssize_t k = 0; k < width; k++) {
            if (PySequence_Fast_GET_SIZE(row) != width) {
                ok = 0;
                break;
            }
            if (k && put(&out, ",", 1) < 0) {
                ok = -1;
                break;
            }
            PyObject *value = Py_NewRef(PySequence_Fast_ITEMS(row)[k]);
            ok = put_field(&out, value, quoted);
            Py_DECREF(value);
            if (ok != 1) break;
        }
        Py_DECREF(row);
        if (ok == 1 && put(&out, "\n", 1) < 0) ok = -1;
    }
    Py_DECREF(seq);
    PyObject *result = NULL;
    if (ok == 1)
        result = PyBytes_FromStringAndSize(out.data ? out.data : "", out.size);
    else if (ok == 0)
        result = Py_NewRef(Py_None);
    PyMem_Free(out.data);
    return result;
}

static PyMethodDef methods[] = {
    {"body", body, METH_VARARGS,
     "body(rows, width, quoted) -> bytes | None: the CSV lines of rows as the csv module writes them (see the "
     "module's source)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_tables", "CSV lines of analysis tables in C.", -1,
                                    methods};

PyMODINIT_FUNC PyInit__tables(void) { return PyModule_Create(&module); }
