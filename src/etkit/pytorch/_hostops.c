/* etkit.pytorch._hostops: the host reader's typed path (etkit.pytorch.host._Compactor.typed_op) in C.
 *
 * ops() turns the nodes msgspec decoded (host._Node records) into HostOp records, node after node, as
 * typed_op does. It takes the common node itself: an integer id, a name seen before (of an op whose raw
 * arguments are not kept), an integer or absent parent, standard attributes only, every number an integer
 * in range, shapes and types seen before, no Kineto fields. Any other node goes to typed_op (the ``slow``
 * callable), which gives it, raises, or learns its strings and name for the next nodes. Both give the same
 * HostOp, field for field (tests/pytorch/test_host_typed.py compares them on the real traces).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

typedef struct {
    PyObject *names;       /* dict: op name -> (name, keeps raw arguments) */
    PyObject *raw_strings; /* dict: JSON text of shapes/types -> (str(), is a list) */
    PyObject *strings;     /* dict: interned strings */
    PyObject *known;       /* frozenset: the attributes with a place of their own in HostOp */
    PyObject *unset;       /* msgspec.UNSET */
    PyObject *empty_raw;   /* host._EMPTY: the shapes/types of an absent IOInfo */
} State;

static PyObject *s_id, *s_name, *s_ctrl_deps, *s_inputs, *s_outputs, *s_attrs, *s_ts, *s_values, *s_shapes,
    *s_types, *s_value, *k_rf_id, *k_fw_parent, *k_seq_id, *k_scope, *k_tid, *k_fw_tid, *k_op_schema, *s_empty;

/* A number of the node as build() takes it without repair: an exact int within int64. */
static int plain_int(PyObject *v) {
    if (!PyLong_CheckExact(v)) return 0;
    int overflow = 0;
    PyLong_AsLongLongAndOverflow(v, &overflow);
    if (PyErr_Occurred()) { PyErr_Clear(); return 0; }
    return overflow == 0;
}

/* attrs.get(key, default) as a new reference; NULL (no error set) when it is not a plain int. */
static PyObject *number(PyObject *attrs, PyObject *key, long dflt) {
    PyObject *v = PyDict_GetItemWithError(attrs, key);
    if (v == NULL) {
        if (PyErr_Occurred()) { PyErr_Clear(); return NULL; }
        return PyLong_FromLong(dflt);
    }
    if (!plain_int(v)) return NULL;
    Py_INCREF(v);
    return v;
}

/* (str(), is a list) of a Raw's JSON text seen before (borrowed); NULL (no error set) when not seen. */
static PyObject *raw_string(State *st, PyObject *raw) {
    Py_buffer view;
    if (PyObject_GetBuffer(raw, &view, PyBUF_SIMPLE) < 0) { PyErr_Clear(); return NULL; }
    PyObject *text = PyBytes_FromStringAndSize(view.buf, view.len);
    PyBuffer_Release(&view);
    if (text == NULL) { PyErr_Clear(); return NULL; }
    PyObject *found = PyDict_GetItemWithError(st->raw_strings, text);
    Py_DECREF(text);
    if (found == NULL || !PyTuple_CheckExact(found) || PyTuple_GET_SIZE(found) != 2) { PyErr_Clear(); return NULL; }
    return found;
}

/* host.tensor_keys(values, []) as a tuple (the same order: a stack of the lists still to look into). */
static PyObject *tensor_keys(PyObject *values) {
    if (PyList_GET_SIZE(values) == 0) return PyTuple_New(0);
    PyObject *out = PyList_New(0), *pending = PyList_New(0);
    if (out == NULL || pending == NULL || PyList_Append(pending, values) < 0) goto fail;
    while (PyList_GET_SIZE(pending)) {
        Py_ssize_t last = PyList_GET_SIZE(pending) - 1;
        PyObject *list = PyList_GET_ITEM(pending, last);
        Py_INCREF(list);
        if (PyList_SetSlice(pending, last, last + 1, NULL) < 0) { Py_DECREF(list); goto fail; }
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(list); i++) {
            PyObject *item = PyList_GET_ITEM(list, i);
            if (!PyList_CheckExact(item)) continue;
            Py_ssize_t n = PyList_GET_SIZE(item);
            if (n == 6 && PyUnicode_CheckExact(PyList_GET_ITEM(item, 5)) && PyLong_CheckExact(PyList_GET_ITEM(item, 0))
                && PyLong_CheckExact(PyList_GET_ITEM(item, 1)) && PyLong_CheckExact(PyList_GET_ITEM(item, 4))) {
                PyObject *key = PyTuple_Pack(2, PyList_GET_ITEM(item, 0), PyList_GET_ITEM(item, 1));
                if (key == NULL || PyList_Append(out, key) < 0) { Py_XDECREF(key); Py_DECREF(list); goto fail; }
                Py_DECREF(key);
            } else if (n) {
                if (PyList_Append(pending, item) < 0) { Py_DECREF(list); goto fail; }
            }
        }
        Py_DECREF(list);
    }
    Py_DECREF(pending);
    PyObject *keys = PyList_AsTuple(out);
    Py_DECREF(out);
    return keys;
fail:
    Py_XDECREF(out);
    Py_XDECREF(pending);
    return NULL;
}

/* The IOInfo of a node: values (a new reference to a list), and its shapes and types (seen before,
 * borrowed). 0: taken; 1: the node goes to typed_op; -1: an error. */
static int io_of(State *st, PyObject *io, PyObject **values, PyObject **shapes, PyObject **types) {
    PyObject *raw_shapes, *raw_types;
    if (io == Py_None) {
        *values = PyList_New(0);
        if (*values == NULL) return -1;
        raw_shapes = raw_types = st->empty_raw;
        Py_INCREF(raw_shapes);
        Py_INCREF(raw_types);
    } else {
        *values = PyObject_GetAttr(io, s_values);
        raw_shapes = PyObject_GetAttr(io, s_shapes);
        raw_types = PyObject_GetAttr(io, s_types);
        if (*values == NULL || raw_shapes == NULL || raw_types == NULL) {
            Py_XDECREF(*values); Py_XDECREF(raw_shapes); Py_XDECREF(raw_types);
            *values = NULL;
            return -1;
        }
    }
    *shapes = raw_string(st, raw_shapes);
    *types = raw_string(st, raw_types);
    Py_DECREF(raw_shapes);
    Py_DECREF(raw_types);
    if (!PyList_CheckExact(*values) || *shapes == NULL || *types == NULL) {
        Py_DECREF(*values);
        *values = NULL;
        return 1;
    }
    return 0;
}

/* The HostOp of a common node (new reference); Py_None (new reference) when the node goes to typed_op;
 * NULL on an error. */
static PyObject *fast_op(State *st, PyObject *hostop, PyObject *node) {
    PyObject *id = NULL, *name = NULL, *parent = NULL, *attr_list = NULL, *attrs = NULL, *ts = NULL,
             *in_io = NULL, *out_io = NULL, *ins = NULL, *outs = NULL, *nums[6] = {NULL}, *op_schema = NULL,
             *io = NULL, *reads = NULL, *writes = NULL, *result = NULL;
    PyObject *in_shapes, *in_types, *out_shapes, *out_types, *named;
    int slow = 1;
    if ((id = PyObject_GetAttr(node, s_id)) == NULL) goto error;
    if (!PyLong_CheckExact(id)) goto done;
    PyLong_AsUnsignedLongLong(id);
    if (PyErr_Occurred()) { PyErr_Clear(); goto done; }
    if ((name = PyObject_GetAttr(node, s_name)) == NULL) goto error;
    if (!PyUnicode_CheckExact(name)) goto done;
    named = PyDict_GetItemWithError(st->names, name);
    if (named == NULL) { PyErr_Clear(); goto done; }
    if (!PyTuple_CheckExact(named) || PyTuple_GET_SIZE(named) != 2 || PyTuple_GET_ITEM(named, 1) != Py_False)
        goto done;  /* (a kept op: typed_op parses its types) */
    if ((ts = PyObject_GetAttr(node, s_ts)) == NULL) goto error;
    if (ts != st->unset) goto done;
    if ((parent = PyObject_GetAttr(node, s_ctrl_deps)) == NULL) goto error;
    if (parent == st->unset) { Py_DECREF(parent); parent = id; Py_INCREF(parent); }
    if (!plain_int(parent)) goto done;
    if ((attr_list = PyObject_GetAttr(node, s_attrs)) == NULL) goto error;
    if (!PyList_CheckExact(attr_list)) goto done;
    if ((attrs = PyDict_New()) == NULL) goto error;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(attr_list); i++) {
        PyObject *a = PyList_GET_ITEM(attr_list, i);
        PyObject *key = PyObject_GetAttr(a, s_name), *value = key ? PyObject_GetAttr(a, s_value) : NULL;
        int bad = key == NULL || value == NULL || PyDict_SetItem(attrs, key, value) < 0;
        Py_XDECREF(key);
        Py_XDECREF(value);
        if (bad) { PyErr_Clear(); goto done; }
    }
    {   /* _extra(attrs) is None: standard attributes only */
        PyObject *key;
        Py_ssize_t pos = 0;
        while (PyDict_Next(attrs, &pos, &key, NULL)) {
            int in = PySet_Contains(st->known, key);
            if (in < 0) { PyErr_Clear(); goto done; }
            if (!in) goto done;
        }
    }
    PyObject *keys[6] = {k_rf_id, k_fw_parent, k_seq_id, k_scope, k_tid, k_fw_tid};
    long dflt[6] = {0, 0, -1, 0, 0, 0};
    for (int k = 0; k < 6; k++)
        if ((nums[k] = number(attrs, keys[k], dflt[k])) == NULL) goto done;
    PyObject *schema = PyDict_GetItemWithError(attrs, k_op_schema);  /* (borrowed) */
    if (schema == NULL) {
        if (PyErr_Occurred()) { PyErr_Clear(); goto done; }
        schema = s_empty;
    } else if (!PyUnicode_CheckExact(schema)) {
        goto done;  /* (typed_op: "or" and str() of other values) */
    } else if (PyUnicode_GET_LENGTH(schema) == 0) {
        schema = s_empty;
    } else if ((schema = PyDict_SetDefault(st->strings, schema, schema)) == NULL) {
        goto error;
    }
    Py_INCREF(schema);
    op_schema = schema;
    if ((in_io = PyObject_GetAttr(node, s_inputs)) == NULL || (out_io = PyObject_GetAttr(node, s_outputs)) == NULL)
        goto error;
    int got = io_of(st, in_io, &ins, &in_shapes, &in_types);
    if (got < 0) goto error;
    if (got > 0 || PyTuple_GET_ITEM(in_types, 1) != Py_True) goto done;
    got = io_of(st, out_io, &outs, &out_shapes, &out_types);
    if (got < 0) goto error;
    if (got > 0) goto done;
    PyObject *in_str = PyObject_Str(ins), *out_str = in_str ? PyObject_Str(outs) : NULL;
    if (out_str == NULL) { Py_XDECREF(in_str); goto error; }
    io = PyTuple_Pack(6, in_str, PyTuple_GET_ITEM(in_shapes, 0), PyTuple_GET_ITEM(in_types, 0), out_str,
                      PyTuple_GET_ITEM(out_shapes, 0), PyTuple_GET_ITEM(out_types, 0));
    Py_DECREF(in_str);
    Py_DECREF(out_str);
    if (io == NULL || (reads = tensor_keys(ins)) == NULL || (writes = tensor_keys(outs)) == NULL) goto error;
    PyObject *args[13] = {id, PyTuple_GET_ITEM(named, 0), parent, nums[0], nums[1], nums[2], nums[3], nums[4],
                          nums[5], op_schema, io, reads, writes};
    result = PyObject_Vectorcall(hostop, args, 13, NULL);
    slow = 0;
    goto done;
error:
    slow = 0;
    result = NULL;
done:
    Py_XDECREF(id); Py_XDECREF(name); Py_XDECREF(parent); Py_XDECREF(attr_list); Py_XDECREF(attrs);
    Py_XDECREF(ts); Py_XDECREF(in_io); Py_XDECREF(out_io); Py_XDECREF(ins); Py_XDECREF(outs);
    for (int k = 0; k < 6; k++) Py_XDECREF(nums[k]);
    Py_XDECREF(op_schema); Py_XDECREF(io); Py_XDECREF(reads); Py_XDECREF(writes);
    if (slow) { Py_XDECREF(result); Py_RETURN_NONE; }
    return result;
}

PyDoc_STRVAR(ops_doc,
"ops(nodes, names, raw_strings, strings, known, unset, empty_raw, hostop, slow) -> list\n\n"
"The HostOp of every decoded node (host._Node), in order: the common ones made here as\n"
"_Compactor.typed_op makes them, every other one by slow(node) (typed_op itself; what it raises\n"
"propagates). names, raw_strings and strings are the compactor's caches, known host._KNOWN_ATTRS,\n"
"unset msgspec.UNSET, empty_raw host._EMPTY, hostop the HostOp class.");

static PyObject *ops(PyObject *self, PyObject *args) {
    PyObject *nodes, *hostop, *slow;
    State st;
    if (!PyArg_ParseTuple(args, "O!O!O!O!OOOOO:ops", &PyList_Type, &nodes, &PyDict_Type, &st.names, &PyDict_Type,
                          &st.raw_strings, &PyDict_Type, &st.strings, &st.known, &st.unset, &st.empty_raw, &hostop,
                          &slow))
        return NULL;
    if (!PyAnySet_Check(st.known)) {
        PyErr_SetString(PyExc_TypeError, "ops: known must be a set or frozenset");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(nodes);
    PyObject *out = PyList_New(n);
    if (out == NULL) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *node = PyList_GET_ITEM(nodes, i);
        PyObject *op = fast_op(&st, hostop, node);
        if (op == Py_None) {
            Py_DECREF(op);
            op = PyObject_CallOneArg(slow, node);
        }
        if (op == NULL) { Py_DECREF(out); return NULL; }
        PyList_SET_ITEM(out, i, op);
    }
    return out;
}

PyDoc_STRVAR(long_number_doc,
"long_number(text) -> bool\n\n"
"Whether the bytes hold 20 ASCII digits in a row (host._LONG_NUMBER in text.translate(host._DIGITS_TO_ZERO)).");

static PyObject *long_number(PyObject *self, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    const unsigned char *p = view.buf, *end = p + view.len;
    int run = 0, found = 0;
    for (; p < end; p++) {
        if ((unsigned)(*p - '0') < 10) {
            if (++run >= 20) { found = 1; break; }
        } else {
            run = 0;
        }
    }
    PyBuffer_Release(&view);
    return PyBool_FromLong(found);
}

static PyMethodDef methods[] = {
    {"ops", ops, METH_VARARGS, ops_doc},
    {"long_number", long_number, METH_O, long_number_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "etkit.pytorch._hostops",
    "The host reader's typed path in C (optional: etkit.pytorch.host gives the same records without it).", -1,
    methods,
};

PyMODINIT_FUNC PyInit__hostops(void) {
    struct { PyObject **slot; const char *text; } names[] = {
        {&s_id, "id"}, {&s_name, "name"}, {&s_ctrl_deps, "ctrl_deps"}, {&s_inputs, "inputs"},
        {&s_outputs, "outputs"}, {&s_attrs, "attrs"}, {&s_ts, "ts"}, {&s_values, "values"}, {&s_shapes, "shapes"},
        {&s_types, "types"}, {&s_value, "value"}, {&k_rf_id, "rf_id"}, {&k_fw_parent, "fw_parent"},
        {&k_seq_id, "seq_id"}, {&k_scope, "scope"}, {&k_tid, "tid"}, {&k_fw_tid, "fw_tid"},
        {&k_op_schema, "op_schema"}, {&s_empty, ""},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if ((*names[i].slot = PyUnicode_InternFromString(names[i].text)) == NULL) return NULL;
    return PyModule_Create(&module);
}
