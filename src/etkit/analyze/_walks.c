/* The analyses' walks over one rank's nodes in C: the topological order, the dependency-bound schedule's
 * advance, and the critical path's walk back along its predecessors (etkit.analyze.timing,
 * etkit.analyze.critical_path). Optional: each caller keeps its Python loop, which gives the same results,
 * for when this module is not built.
 *
 * Arrays come in through the buffer protocol (numpy arrays, bytearrays), C-contiguous: int64 rows and times,
 * uint8 flags. Rows are checked against the arrays' lengths where they index them.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "../_buffers.h"

#define N64(b) ((b).view.len / 8)
#define I64(b) ((int64_t *)(b).view.buf)
#define U8(b) ((uint8_t *)(b).view.buf)

static PyObject *bad_row(const char *what) {
    PyErr_Format(PyExc_IndexError, "%s: a row outside the arrays", what);
    return NULL;
}

/* ---- topo(succ, ptr, indeg) ----------------------------------------------------------------------- */

PyDoc_STRVAR(topo_doc,
"topo(succ, ptr, indeg) -> bytearray of int64 rows\n\n"
"Kahn's order, first in first out: the rows of in-degree 0 in row order, then each row's successors\n"
"succ[ptr[row]:ptr[row + 1]] as their last dependency is placed. Fewer than len(indeg) rows: a cycle.");

static PyObject *topo(PyObject *self, PyObject *args) {
    PyObject *o_succ, *o_ptr, *o_deg;
    if (!PyArg_ParseTuple(args, "OOO", &o_succ, &o_ptr, &o_deg)) return NULL;
    Buf succ = {0}, ptr = {0}, deg = {0};
    PyObject *out = NULL;
    int64_t *left = NULL;
    if (get_buf_as(o_succ, &succ, 8, 0, "succ") < 0 || get_buf_as(o_ptr, &ptr, 8, 0, "ptr") < 0 ||
        get_buf_as(o_deg, &deg, 8, 0, "indeg") < 0)
        goto done;
    Py_ssize_t n = N64(deg), m = N64(succ);
    if (N64(ptr) != n + 1) {
        PyErr_SetString(PyExc_ValueError, "ptr: not one more entry than indeg");
        goto done;
    }
    const int64_t *s = I64(succ), *p = I64(ptr);
    left = PyMem_Malloc((size_t)(n ? n : 1) * sizeof(int64_t));
    out = PyByteArray_FromStringAndSize(NULL, n * 8);
    if (left == NULL || out == NULL) {
        Py_CLEAR(out);
        if (left == NULL) PyErr_NoMemory();
        goto done;
    }
    memcpy(left, deg.view.buf, (size_t)n * sizeof(int64_t));
    int64_t *queue = (int64_t *)PyByteArray_AS_STRING(out);  /* the order is the queue: head chases tail */
    Py_ssize_t head = 0, tail = 0;
    for (Py_ssize_t r = 0; r < n; r++)
        if (left[r] == 0) queue[tail++] = r;
    while (head < tail) {
        int64_t row = queue[head++];
        int64_t lo = p[row], hi = p[row + 1];
        if (lo < 0 || hi > m || lo > hi) {
            Py_CLEAR(out);
            bad_row("ptr");
            goto done;
        }
        for (int64_t k = lo; k < hi; k++) {
            int64_t child = s[k];
            if (child < 0 || child >= n) {
                Py_CLEAR(out);
                bad_row("succ");
                goto done;
            }
            if (--left[child] == 0) queue[tail++] = child;
        }
    }
    if (tail < n && PyByteArray_Resize(out, tail * 8) < 0) Py_CLEAR(out);
done:
    PyMem_Free(left);
    release(&succ);
    release(&ptr);
    release(&deg);
    return out;
}

/* ---- advance(order, ptr, deps, dur, start, end, done, special, pos) ------------------------------- */

PyDoc_STRVAR(advance_doc,
"advance(order, ptr, deps, dur, start, end, done, special, pos) -> int\n\n"
"Place the rows order[pos:] in turn: a row not done starts when the last of its dependencies\n"
"deps[ptr[row]:ptr[row + 1]] ended (0 without any) and ends dur[row] later (start, end, done written).\n"
"Stops at the first row not done that is special (it waits on another rank: the caller places it) and\n"
"returns its position; len(order) when every row was placed.");

static PyObject *advance(PyObject *self, PyObject *args) {
    PyObject *o[8];
    Py_ssize_t pos;
    if (!PyArg_ParseTuple(args, "OOOOOOOOn", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6], &o[7], &pos))
        return NULL;
    Buf order = {0}, ptr = {0}, deps = {0}, dur = {0}, start = {0}, end = {0}, done = {0}, special = {0};
    PyObject *out = NULL;
    if (get_buf_as(o[0], &order, 8, 0, "order") < 0 || get_buf_as(o[1], &ptr, 8, 0, "ptr") < 0 ||
        get_buf_as(o[2], &deps, 8, 0, "deps") < 0 || get_buf_as(o[3], &dur, 8, 0, "dur") < 0 ||
        get_buf_as(o[4], &start, 8, 1, "start") < 0 || get_buf_as(o[5], &end, 8, 1, "end") < 0 ||
        get_buf_as(o[6], &done, 1, 1, "done") < 0 || get_buf_as(o[7], &special, 1, 0, "special") < 0)
        goto finish;
    Py_ssize_t n = N64(dur), count = N64(order), m = N64(deps);
    if (N64(ptr) != n + 1 || N64(start) != n || N64(end) != n || done.view.len != n || special.view.len != n) {
        PyErr_SetString(PyExc_ValueError, "advance: the per-row arrays differ in length");
        goto finish;
    }
    const int64_t *ord = I64(order), *p = I64(ptr), *d = I64(deps), *du = I64(dur);
    int64_t *st = I64(start), *en = I64(end);
    uint8_t *dn = U8(done);
    const uint8_t *sp = U8(special);
    for (; pos < count; pos++) {
        int64_t row = ord[pos];
        if (row < 0 || row >= n) {
            bad_row("order");
            goto finish;
        }
        if (dn[row]) continue;
        if (sp[row]) break;
        int64_t lo = p[row], hi = p[row + 1], ready = 0;
        if (lo < 0 || hi > m || lo > hi) {
            bad_row("ptr");
            goto finish;
        }
        for (int64_t k = lo; k < hi; k++) {
            int64_t dep = d[k];
            if (dep < 0 || dep >= n) {
                bad_row("deps");
                goto finish;
            }
            if (en[dep] > ready) ready = en[dep];
        }
        st[row] = ready;
        en[row] = ready + du[row];
        dn[row] = 1;
    }
    out = PyLong_FromSsize_t(pos < count ? pos : count);
finish:
    release(&order);
    release(&ptr);
    release(&deps);
    release(&dur);
    release(&start);
    release(&end);
    release(&done);
    release(&special);
    return out;
}

/* ---- chase(pred, start, stop, seen, pred0, limit) ------------------------------------------------- */

PyDoc_STRVAR(chase_doc,
"chase(pred, start, stop, seen, row, limit) -> (rows, limits, row, limit)\n\n"
"Follow pred from row while it is a row (>= 0) that is neither stop nor seen: each row followed is\n"
"marked seen and listed with the limit it was reached with, and the limit becomes its start. Returns the\n"
"rows and limits (bytearrays of int64) and the row and limit where it stopped.");

static PyObject *chase(PyObject *self, PyObject *args) {
    PyObject *o_pred, *o_start, *o_stop, *o_seen;
    long long row0, limit0;
    if (!PyArg_ParseTuple(args, "OOOOLL", &o_pred, &o_start, &o_stop, &o_seen, &row0, &limit0)) return NULL;
    Buf pred = {0}, start = {0}, stop = {0}, seen = {0};
    PyObject *rows = NULL, *limits = NULL, *out = NULL;
    if (get_buf_as(o_pred, &pred, 8, 0, "pred") < 0 || get_buf_as(o_start, &start, 8, 0, "start") < 0 ||
        get_buf_as(o_stop, &stop, 1, 0, "stop") < 0 || get_buf_as(o_seen, &seen, 1, 1, "seen") < 0)
        goto finish;
    Py_ssize_t n = N64(pred);
    if (N64(start) != n || stop.view.len != n || seen.view.len != n) {
        PyErr_SetString(PyExc_ValueError, "chase: the per-row arrays differ in length");
        goto finish;
    }
    const int64_t *pr = I64(pred), *st = I64(start);
    const uint8_t *sp = U8(stop);
    uint8_t *sn = U8(seen);
    int64_t row = row0, limit = limit0;
    Py_ssize_t len = 0, cap = 1024;
    int64_t *ro = PyMem_Malloc((size_t)cap * sizeof(int64_t)), *li = PyMem_Malloc((size_t)cap * sizeof(int64_t));
    if (ro == NULL || li == NULL) {
        PyErr_NoMemory();
        goto chased;
    }
    while (row >= 0) {
        if (row >= n) {
            bad_row("pred");
            goto chased;
        }
        if (sp[row] || sn[row]) break;
        if (len == cap) {
            cap *= 2;
            int64_t *r2 = PyMem_Realloc(ro, (size_t)cap * sizeof(int64_t));
            if (r2 == NULL) { PyErr_NoMemory(); goto chased; }
            ro = r2;
            int64_t *l2 = PyMem_Realloc(li, (size_t)cap * sizeof(int64_t));
            if (l2 == NULL) { PyErr_NoMemory(); goto chased; }
            li = l2;
        }
        ro[len] = row;
        li[len++] = limit;
        sn[row] = 1;
        limit = st[row];
        row = pr[row];
    }
    rows = PyByteArray_FromStringAndSize((const char *)ro, len * 8);
    limits = PyByteArray_FromStringAndSize((const char *)li, len * 8);
chased:
    PyMem_Free(ro);
    PyMem_Free(li);
    if (rows == NULL || limits == NULL) goto finish;
    out = Py_BuildValue("(OOLL)", rows, limits, (long long)row, (long long)limit);
finish:
    Py_XDECREF(rows);
    Py_XDECREF(limits);
    release(&pred);
    release(&start);
    release(&stop);
    release(&seen);
    return out;
}

static PyMethodDef methods[] = {
    {"topo", topo, METH_VARARGS, topo_doc},
    {"advance", advance, METH_VARARGS, advance_doc},
    {"chase", chase, METH_VARARGS, chase_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "etkit.analyze._walks",
    "The analyses' walks over a rank's nodes in C (optional: etkit.analyze's Python loops give the same results).",
    -1, methods,
};

PyMODINIT_FUNC PyInit__walks(void) { return PyModule_Create(&module); }
