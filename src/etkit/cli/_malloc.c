/* glibc's mallopt() for etkit.cli.guard.reuse_freed_memory, without ctypes (whose import and symbol lookup cost
 * 1.4-2 ms of every start of the verbs that tune the heap; ctypes takes its place where this was not built).
 *
 * mallopt(param, value) -> int: what mallopt returns (1: done, 0: refused); 0 where the C library has none. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

static PyObject *py_mallopt(PyObject *module, PyObject *args) {
    int param, value;
    (void)module;
    if (!PyArg_ParseTuple(args, "ii:mallopt", &param, &value)) return NULL;
#if defined(__GLIBC__)
    return PyLong_FromLong(mallopt(param, value));
#else
    (void)param;
    (void)value;
    return PyLong_FromLong(0);
#endif
}

static PyMethodDef methods[] = {
    {"mallopt", py_mallopt, METH_VARARGS, "mallopt(param, value) -> int: glibc's mallopt (0 without glibc)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_malloc", "glibc's mallopt, for etkit.cli.guard.", -1,
                                    methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__malloc(void) { return PyModule_Create(&module); }
