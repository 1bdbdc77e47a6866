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
#include <math.h>

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


/* ---- host_records: convert._Converter._host_record for a run of host ops ---------------------------------
 *
 * The per-rank context is a tuple (see convert._Converter._host_context for its order). Items from ``k`` on
 * are written while they are plain host ops (not GPU activity, not a chain head, not process_group:init) whose
 * name, IO shapes/types and attribute template are already encoded and whose rf_id/seq_id are int64 varints
 * (or seq_id -1); the first other item stops the run and its index is returned (_host_record writes it, which
 * fills the caches). Every lookup that may stop the run comes before the node changes any state.
 */
enum { X_OPS, X_HEAD, X_CTRL, X_LANE, X_OWNER, X_PG_INIT, X_NEW_ID, X_LAST_ON_LANE, X_PENDING, X_WRITER_OF, X_TS,
       X_EXCL, X_WAITS_HOST, X_OFFSET, X_TIMING, X_TEMPLATES, X_RF_HEADS, X_SEQ_HEADS, X_SEQ_MINUS1, X_NAMES,
       X_TAILS, X_IO_FIELD, X_RECORD, X_IDS, X_WRITE, X_INPUTS, X_OUTPUTS, X_COMP, X_COUNT };

static PyObject *a_name, *a_io, *a_rf_id, *a_seq_id, *a_fw_parent, *a_scope, *a_tid, *a_fw_tid, *a_op_schema,
    *a_reads, *a_writes, *s_brackets;

/* The framed int64 attribute: heads[len(varint)] + varint (assemble.AttrPieces.int64, value >= 0). */
static int put_int64(char *p, PyObject *heads, unsigned long long v, PyObject **head) {
    char buf[10];
    int n = 0;
    do { buf[n] = (char)(v & 0x7F); v >>= 7; if (v) buf[n] |= (char)0x80; n++; } while (v);
    *head = PyList_GET_ITEM(heads, n);
    if (p != NULL) memcpy(p, buf, n);
    return n;
}

/* The encoded inputs/outputs field of (values, shapes, types), or b"" when values and types are "[]";
 * NULL with no error set: the shapes/types are not encoded yet. */
static PyObject *io_part(PyObject **ctx, PyObject *key, PyObject *values, PyObject *shapes, PyObject *types) {
    if (PyUnicode_Compare(values, s_brackets) == 0 && PyUnicode_Compare(types, s_brackets) == 0)
        return PyBytes_FromStringAndSize(NULL, 0);
    PyObject *pair = PyTuple_Pack(2, shapes, types);
    if (pair == NULL) return NULL;
    PyObject *tail = PyDict_GetItemWithError(ctx[X_TAILS], pair);
    Py_DECREF(pair);
    if (tail == NULL) return NULL;
    PyObject *args[3] = {key, values, tail};
    return PyObject_Vectorcall(ctx[X_IO_FIELD], args, 3, NULL);
}

/* max(0, int(x)) as Python computes it (int() truncates; an infinite or NaN x raises as int() does). */
static PyObject *clamped_int(double x) {
    return PyLong_FromDouble(isfinite(x) && x < 1.0 ? 0.0 : x);
}

static int in_list(PyObject *list, PyObject *v) { return PySequence_Contains(list, v); }

/* One host op's node (written); 1: done, 0: not a plain one (nothing changed), -1: error. */
static int host_record(PyObject **ctx, Py_ssize_t i, Py_ssize_t nid_value, PyObject *framed) {
    PyObject *op = PyList_GET_ITEM(ctx[X_OPS], i);
    PyObject *name = NULL, *io = NULL, *rf = NULL, *seq = NULL, *key = NULL, *fields[5] = {NULL};
    PyObject *in_io = NULL, *out_io = NULL, *attrs = NULL, *deps = NULL, *nid = NULL, *start = NULL,
             *duration = NULL, *record = NULL, *reads = NULL, *writes = NULL, *written = NULL, *ikey = NULL;
    int result = -1;
    if ((name = PyObject_GetAttr(op, a_name)) == NULL || (io = PyObject_GetAttr(op, a_io)) == NULL
        || (rf = PyObject_GetAttr(op, a_rf_id)) == NULL || (seq = PyObject_GetAttr(op, a_seq_id)) == NULL)
        goto done;
    PyObject *const attr_names[5] = {a_fw_parent, a_scope, a_tid, a_fw_tid, a_op_schema};
    for (int f = 0; f < 5; f++)
        if ((fields[f] = PyObject_GetAttr(op, attr_names[f])) == NULL) goto done;
    result = 0;
    PyObject *name_field = PyUnicode_CheckExact(name) ? PyDict_GetItemWithError(ctx[X_NAMES], name) : NULL;
    if (name_field == NULL) goto stop;
    if (!PyTuple_CheckExact(io) || PyTuple_GET_SIZE(io) != 6) goto stop;
    for (int f = 0; f < 6; f++)
        if (!PyUnicode_CheckExact(PyTuple_GET_ITEM(io, f))) goto stop;
    if (!PyLong_CheckExact(rf) || !PyLong_CheckExact(seq)) goto stop;
    int overflow = 0;
    long long rf_v = PyLong_AsLongLongAndOverflow(rf, &overflow);
    if (overflow || rf_v < 0) goto stop;
    long long seq_v = PyLong_AsLongLongAndOverflow(seq, &overflow);
    if (overflow || seq_v < -1) goto stop;
    key = PyTuple_Pack(6, fields[0], fields[1], fields[2], fields[3], fields[4], Py_True);
    if (key == NULL) { result = -1; goto done; }
    PyObject *template = PyDict_GetItemWithError(ctx[X_TEMPLATES], key);
    if (template == NULL || !PyBytes_CheckExact(template)) goto stop;
    in_io = io_part(ctx, ctx[X_INPUTS], PyTuple_GET_ITEM(io, 0), PyTuple_GET_ITEM(io, 1), PyTuple_GET_ITEM(io, 2));
    if (in_io == NULL) goto stop;
    out_io = io_part(ctx, ctx[X_OUTPUTS], PyTuple_GET_ITEM(io, 3), PyTuple_GET_ITEM(io, 4), PyTuple_GET_ITEM(io, 5));
    if (out_io == NULL) goto stop;
    if (!PyBytes_CheckExact(in_io) || !PyBytes_CheckExact(out_io)) { result = -1; goto done; }
    result = -1;
    /* from here on the node is written */
    PyObject *t_obj = PyList_GET_ITEM(ctx[X_TS], i);
    double t = PyFloat_AsDouble(t_obj);
    if (t == -1.0 && PyErr_Occurred()) goto done;
    PyObject *timing = NULL;
    if (t == t) {
        double offset = PyFloat_AsDouble(ctx[X_OFFSET]);
        if (offset == -1.0 && PyErr_Occurred()) goto done;
        double excl = PyFloat_AsDouble(PyList_GET_ITEM(ctx[X_EXCL], i));
        if (excl == -1.0 && PyErr_Occurred()) goto done;
        if ((start = clamped_int(t + offset + 0.5)) == NULL || (duration = clamped_int(excl + 0.5)) == NULL) goto done;
        timing = PyList_GET_ITEM(ctx[X_TIMING], i);
        if (!PyBytes_Check(timing)) { PyErr_SetString(PyExc_TypeError, "op_timing must hold bytes"); goto done; }
    } else {
        start = PyLong_FromLong(0);
        duration = PyLong_FromLong(0);
        if (start == NULL || duration == NULL) goto done;
    }
    /* attrs: rf_id, seq_id, the template, the timing */
    PyObject *rf_head, *seq_head = NULL;
    int rf_n = put_int64(NULL, ctx[X_RF_HEADS], (unsigned long long)rf_v, &rf_head), seq_n = 0;
    if (seq_v >= 0) seq_n = put_int64(NULL, ctx[X_SEQ_HEADS], (unsigned long long)seq_v, &seq_head);
    else seq_head = ctx[X_SEQ_MINUS1];
    Py_ssize_t size = PyBytes_GET_SIZE(rf_head) + rf_n + PyBytes_GET_SIZE(seq_head) + seq_n
                      + PyBytes_GET_SIZE(template) + (timing ? PyBytes_GET_SIZE(timing) : 0);
    if ((attrs = PyBytes_FromStringAndSize(NULL, size)) == NULL) goto done;
    char *p = PyBytes_AS_STRING(attrs);
    memcpy(p, PyBytes_AS_STRING(rf_head), PyBytes_GET_SIZE(rf_head));
    p += PyBytes_GET_SIZE(rf_head);
    p += put_int64(p, ctx[X_RF_HEADS], (unsigned long long)rf_v, &rf_head);
    memcpy(p, PyBytes_AS_STRING(seq_head), PyBytes_GET_SIZE(seq_head));
    p += PyBytes_GET_SIZE(seq_head);
    if (seq_v >= 0) p += put_int64(p, ctx[X_SEQ_HEADS], (unsigned long long)seq_v, &seq_head);
    memcpy(p, PyBytes_AS_STRING(template), PyBytes_GET_SIZE(template));
    p += PyBytes_GET_SIZE(template);
    if (timing) memcpy(p, PyBytes_AS_STRING(timing), PyBytes_GET_SIZE(timing));
    /* deps: the lane's previous node, the device work waited for, the collective waited on, other writers */
    PyObject *lane = PyList_GET_ITEM(ctx[X_LANE], i);
    if ((nid = PyLong_FromSsize_t(nid_value)) == NULL || (deps = PyList_New(0)) == NULL) goto done;
    PyObject *prev = PyDict_GetItemWithError(ctx[X_LAST_ON_LANE], lane);
    if (prev == NULL && PyErr_Occurred()) goto done;
    if (prev != NULL && PyList_Append(deps, prev) < 0) goto done;
    Py_ssize_t parent = PyLong_AsSsize_t(PyList_GET_ITEM(ctx[X_CTRL], i));
    if (parent == -1 && PyErr_Occurred()) goto done;
    PyObject *ctrl_id = Py_None;
    if (parent >= 0) {
        PyObject *pkey = PyList_GET_ITEM(ctx[X_CTRL], i);
        ctrl_id = PyDict_GetItemWithError(ctx[X_NEW_ID], pkey);
        if (ctrl_id == NULL) { if (PyErr_Occurred()) goto done; ctrl_id = Py_None; }
    }
    Py_INCREF(ctrl_id);
    if ((ikey = PyLong_FromSsize_t(i)) == NULL) goto done_ctrl;
    PyObject *waited_for = PyDict_GetItemWithError(ctx[X_WAITS_HOST], ikey);
    if (waited_for == NULL && PyErr_Occurred()) goto done_ctrl;
    if (waited_for != NULL) {
        int truth = PyObject_IsTrue(waited_for);
        if (truth < 0) goto done_ctrl;
        if (truth) {
            PyObject *it = PyObject_GetIter(waited_for), *g;
            if (it == NULL) goto done_ctrl;
            while ((g = PyIter_Next(it)) != NULL) {
                long long gv = PyLong_AsLongLong(g);
                Py_DECREF(g);
                if (gv == -1 && PyErr_Occurred()) { Py_DECREF(it); goto done_ctrl; }
                PyObject *ref = PyLong_FromLongLong(-(gv + 1));
                if (ref == NULL) { Py_DECREF(it); goto done_ctrl; }
                PyObject *waited = PyDict_GetItemWithError(ctx[X_NEW_ID], ref);
                Py_DECREF(ref);
                if (waited == NULL) { if (PyErr_Occurred()) { Py_DECREF(it); goto done_ctrl; } continue; }
                int has = in_list(deps, waited);
                int before = PyObject_RichCompareBool(waited, nid, Py_LT);
                if (has < 0 || before < 0 || (!has && before && PyList_Append(deps, waited) < 0)) { Py_DECREF(it); goto done_ctrl; }
            }
            Py_DECREF(it);
            if (PyErr_Occurred()) goto done_ctrl;
        }
    }
    if (PyDict_SetItem(ctx[X_LAST_ON_LANE], lane, nid) < 0) goto done_ctrl;
    Py_ssize_t owner = PyLong_AsSsize_t(PyList_GET_ITEM(ctx[X_OWNER], i));
    if (owner == -1 && PyErr_Occurred()) goto done_ctrl;
    if (owner < 0) {
        if ((reads = PyObject_GetAttr(op, a_reads)) == NULL || (writes = PyObject_GetAttr(op, a_writes)) == NULL)
            goto done_ctrl;
        if (!PyTuple_CheckExact(reads) || !PyTuple_CheckExact(writes)) {
            PyErr_SetString(PyExc_TypeError, "HostOp reads/writes must be tuples");
            goto done_ctrl;
        }
        PyObject *pending = ctx[X_PENDING], *writer_of = ctx[X_WRITER_OF];
        if (PyDict_GET_SIZE(pending)) {
            for (int side = 0; side < 2; side++) {
                PyObject *keys = side ? writes : reads;
                for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(keys); k++) {
                    PyObject *tk = PyTuple_GET_ITEM(keys, k);
                    PyObject *waited = PyDict_GetItemWithError(pending, tk);
                    if (waited == NULL) { if (PyErr_Occurred()) goto done_ctrl; continue; }
                    Py_INCREF(waited);
                    int has = PyDict_DelItem(pending, tk) < 0 ? -1 : in_list(deps, waited);
                    if (has < 0 || (!has && PyList_Append(deps, waited) < 0)) { Py_DECREF(waited); goto done_ctrl; }
                    Py_DECREF(waited);
                }
            }
        }
        for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(reads); k++) {
            PyObject *w = PyDict_GetItemWithError(writer_of, PyTuple_GET_ITEM(reads, k));
            if (w == NULL) { if (PyErr_Occurred()) goto done_ctrl; continue; }
            if (!PyTuple_CheckExact(w) || PyTuple_GET_SIZE(w) != 2) {
                PyErr_SetString(PyExc_TypeError, "writer_of must hold (node, lane) pairs");
                goto done_ctrl;
            }
            int other = PyObject_RichCompareBool(PyTuple_GET_ITEM(w, 1), lane, Py_NE);
            if (other < 0) goto done_ctrl;
            if (other) {
                int has = in_list(deps, PyTuple_GET_ITEM(w, 0));
                if (has < 0 || (!has && PyList_Append(deps, PyTuple_GET_ITEM(w, 0)) < 0)) goto done_ctrl;
            }
        }
        if (PyTuple_GET_SIZE(writes) && (written = PyTuple_Pack(2, nid, lane)) == NULL) goto done_ctrl;
        for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(writes); k++)
            if (PyDict_SetItem(writer_of, PyTuple_GET_ITEM(writes, k), written) < 0) goto done_ctrl;
    }
    {
        PyObject *joined = PyBytes_FromStringAndSize(NULL, PyBytes_GET_SIZE(in_io) + PyBytes_GET_SIZE(out_io));
        if (joined == NULL) goto done_ctrl;
        memcpy(PyBytes_AS_STRING(joined), PyBytes_AS_STRING(in_io), PyBytes_GET_SIZE(in_io));
        memcpy(PyBytes_AS_STRING(joined) + PyBytes_GET_SIZE(in_io), PyBytes_AS_STRING(out_io), PyBytes_GET_SIZE(out_io));
        PyObject *args[10] = {nid, name_field, ctx[X_COMP], ctrl_id, deps, start, duration, joined, attrs, ctx[X_IDS]};
        record = PyObject_Vectorcall(ctx[X_RECORD], args, 10, NULL);
        Py_DECREF(joined);
        if (record == NULL) goto done_ctrl;
        /* framed: its varint length, then the record (TraceWriter.write_framed takes the run at once) */
        Py_ssize_t at = PyByteArray_GET_SIZE(framed), n = PyBytes_GET_SIZE(record);
        char head[10];
        int h = 0;
        size_t rest = (size_t)n;
        do { head[h] = (char)(rest & 0x7F); rest >>= 7; if (rest) head[h] |= (char)0x80; h++; } while (rest);
        if (PyByteArray_Resize(framed, at + h + n) < 0) goto done_ctrl;
        memcpy(PyByteArray_AS_STRING(framed) + at, head, h);
        memcpy(PyByteArray_AS_STRING(framed) + at + h, PyBytes_AS_STRING(record), n);
    }
    result = 1;
done_ctrl:
    Py_DECREF(ctrl_id);
    goto done;
stop:
    if (PyErr_Occurred()) result = -1;
done:
    Py_XDECREF(name); Py_XDECREF(io); Py_XDECREF(rf); Py_XDECREF(seq); Py_XDECREF(key);
    for (int f = 0; f < 5; f++) Py_XDECREF(fields[f]);
    Py_XDECREF(in_io); Py_XDECREF(out_io); Py_XDECREF(attrs); Py_XDECREF(deps); Py_XDECREF(nid);
    Py_XDECREF(start); Py_XDECREF(duration); Py_XDECREF(record); Py_XDECREF(reads); Py_XDECREF(writes);
    Py_XDECREF(written); Py_XDECREF(ikey);
    return result;
}

PyDoc_STRVAR(host_records_doc,
"host_records(ctx, items, k) -> int\n\n"
"Write the nodes of items[k:] while they are plain host ops (convert._Converter._host_record's bytes and\n"
"state changes; the run framed, to ctx's write_framed at once); the index of the first item not written.");

static PyObject *host_records(PyObject *self, PyObject *args) {
    PyObject *ctx_tuple, *items;
    Py_ssize_t k;
    if (!PyArg_ParseTuple(args, "O!O!n", &PyTuple_Type, &ctx_tuple, &PyList_Type, &items, &k)) return NULL;
    if (k < 0) { PyErr_SetString(PyExc_ValueError, "host_records: k must not be negative"); return NULL; }
    if (PyTuple_GET_SIZE(ctx_tuple) != X_COUNT) { PyErr_SetString(PyExc_TypeError, "host_records: bad context"); return NULL; }
    PyObject **ctx = &PyTuple_GET_ITEM(ctx_tuple, 0);
    int list_slots[] = {X_OPS, X_HEAD, X_CTRL, X_LANE, X_OWNER, X_TS, X_EXCL, X_TIMING, X_RF_HEADS, X_SEQ_HEADS, X_IDS};
    int dict_slots[] = {X_NEW_ID, X_LAST_ON_LANE, X_PENDING, X_WRITER_OF, X_WAITS_HOST, X_TEMPLATES, X_NAMES, X_TAILS};
    for (size_t s = 0; s < sizeof list_slots / sizeof list_slots[0]; s++)
        if (!PyList_CheckExact(ctx[list_slots[s]])) { PyErr_SetString(PyExc_TypeError, "host_records: bad context"); return NULL; }
    for (size_t s = 0; s < sizeof dict_slots / sizeof dict_slots[0]; s++)
        if (!PyDict_CheckExact(ctx[dict_slots[s]])) { PyErr_SetString(PyExc_TypeError, "host_records: bad context"); return NULL; }
    if (PyList_GET_SIZE(ctx[X_RF_HEADS]) < 11 || PyList_GET_SIZE(ctx[X_SEQ_HEADS]) < 11
        || !PyBytes_CheckExact(ctx[X_SEQ_MINUS1])) {
        PyErr_SetString(PyExc_TypeError, "host_records: bad context");
        return NULL;
    }
    for (Py_ssize_t s = 0; s < 11; s++)
        if (!PyBytes_CheckExact(PyList_GET_ITEM(ctx[X_RF_HEADS], s)) || !PyBytes_CheckExact(PyList_GET_ITEM(ctx[X_SEQ_HEADS], s))) {
            PyErr_SetString(PyExc_TypeError, "host_records: bad context");
            return NULL;
        }
    Py_ssize_t n_ops = PyList_GET_SIZE(ctx[X_OPS]);
    Py_ssize_t pg_init = ctx[X_PG_INIT] == Py_None ? -1 : PyLong_AsSsize_t(ctx[X_PG_INIT]);
    if (pg_init == -1 && PyErr_Occurred()) return NULL;
    Py_ssize_t n_items = PyList_GET_SIZE(items), first = k;
    PyObject *framed = PyByteArray_FromStringAndSize(NULL, 0);
    if (framed == NULL) return NULL;
    for (; k < n_items; k++) {
        Py_ssize_t ref = PyLong_AsSsize_t(PyList_GET_ITEM(items, k));
        if (ref == -1 && PyErr_Occurred()) goto fail;
        if (ref < 0 || ref >= n_ops || ref == pg_init) break;
        /* every per-op list is as long as ops (checked here, not assumed) */
        if (ref >= PyList_GET_SIZE(ctx[X_HEAD]) || ref >= PyList_GET_SIZE(ctx[X_CTRL])
            || ref >= PyList_GET_SIZE(ctx[X_LANE]) || ref >= PyList_GET_SIZE(ctx[X_OWNER])
            || ref >= PyList_GET_SIZE(ctx[X_TS]) || ref >= PyList_GET_SIZE(ctx[X_EXCL])) break;
        Py_ssize_t h = PyLong_AsSsize_t(PyList_GET_ITEM(ctx[X_HEAD], ref));
        if (h == -1 && PyErr_Occurred()) goto fail;
        if (h == ref) break;
        double t = PyFloat_AsDouble(PyList_GET_ITEM(ctx[X_TS], ref));
        if (t == -1.0 && PyErr_Occurred()) goto fail;
        if (t == t && ref >= PyList_GET_SIZE(ctx[X_TIMING])) break;
        int done = host_record(ctx, ref, k + 1, framed);
        if (done < 0) goto fail;
        if (done == 0) break;
    }
    if (k > first) {
        PyObject *count = PyLong_FromSsize_t(k - first);
        if (count == NULL) goto fail;
        PyObject *args[2] = {framed, count};
        PyObject *w = PyObject_Vectorcall(ctx[X_WRITE], args, 2, NULL);
        Py_DECREF(count);
        if (w == NULL) goto fail;
        Py_DECREF(w);
    }
    Py_DECREF(framed);
    return PyLong_FromSsize_t(k);
fail:
    Py_DECREF(framed);
    return NULL;
}

static PyMethodDef methods[] = {
    {"ops", ops, METH_VARARGS, ops_doc},
    {"long_number", long_number, METH_O, long_number_doc},
    {"host_records", host_records, METH_VARARGS, host_records_doc},
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
        {&k_op_schema, "op_schema"}, {&s_empty, ""}, {&a_name, "name"}, {&a_io, "io"}, {&a_rf_id, "rf_id"},
        {&a_seq_id, "seq_id"}, {&a_fw_parent, "fw_parent"}, {&a_scope, "scope"}, {&a_tid, "tid"},
        {&a_fw_tid, "fw_tid"}, {&a_op_schema, "op_schema"}, {&a_reads, "reads"}, {&a_writes, "writes"},
        {&s_brackets, "[]"},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if ((*names[i].slot = PyUnicode_InternFromString(names[i].text)) == NULL) return NULL;
    return PyModule_Create(&module);
}
