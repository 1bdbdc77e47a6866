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
#include <structmember.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "../_buffers.h"
#include "../_jsonbytes.h"
#include "../_slots.h"
#include "../_varint.h"
#include "../_vec.h"

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
 * fills the caches). Every lookup that may stop the run comes before the node changes any state. A GPU activity
 * (item -g - 1) whose record is already encoded (ctx's gpu records, by activity) and which is no orphan comm
 * kernel (those are counted where they are written) is taken into the run as it is.
 */
enum { X_OPS, X_HEAD, X_CTRL, X_LANE, X_OWNER, X_PG_INIT, X_NEW_ID, X_LAST_ON_LANE, X_PENDING, X_WRITER_OF, X_TS,
       X_EXCL, X_WAITS_HOST, X_OFFSET, X_TIMING, X_TEMPLATES, X_RF_HEADS, X_SEQ_HEADS, X_SEQ_MINUS1, X_NAMES,
       X_TAILS, X_IO_FIELD, X_RECORD, X_IDS, X_WRITE, X_INPUTS, X_OUTPUTS, X_COMP, X_GPU, X_ORPHANS, X_COUNT };

static PyObject *a_name, *a_io, *a_rf_id, *a_seq_id, *a_fw_parent, *a_scope, *a_tid, *a_fw_tid, *a_op_schema,
    *a_reads, *a_writes, *s_brackets, *s_t, *s_et;

/* The framed int64 attribute: heads[len(varint)] + varint (assemble.AttrPieces.int64, value >= 0). */
static int put_int64(char *p, PyObject *heads, unsigned long long v, PyObject **head) {
    char buf[10];
    int n = (int)(put_varint(buf, v) - buf);
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

/* Append record (non-empty bytes) to framed after its varint length, as in the file. */
static int append_framed(PyObject *framed, PyObject *record) {
    Py_ssize_t at = PyByteArray_GET_SIZE(framed), n = PyBytes_GET_SIZE(record);
    char head[10];
    int h = (int)(put_varint(head, (uint64_t)n) - head);
    if (PyByteArray_Resize(framed, at + h + n) < 0) return -1;
    memcpy(PyByteArray_AS_STRING(framed) + at, head, h);
    memcpy(PyByteArray_AS_STRING(framed) + at + h, PyBytes_AS_STRING(record), n);
    return 0;
}

/* max(0, int(x)) as Python computes it (int() truncates; an infinite or NaN x raises as int() does). */
static PyObject *clamped_int(double x) {
    return PyLong_FromDouble(isfinite(x) && x < 1.0 ? 0.0 : x);
}

static int in_list(PyObject *list, PyObject *v) { return PySequence_Contains(list, v); }

/* Where a HostOp's fields lie: the offsets of its slots, found once per call from the member descriptors of its
 * class. For an object of exactly that class (whose attribute look-up is the generic one), reading the slot is
 * what PyObject_GetAttr does: a slot is a data descriptor, found before anything else; an empty slot (or any
 * other class) goes through PyObject_GetAttr itself, which raises as it would. 11 look-ups by name a node were
 * 117M instructions of analysing a 40,000-op Kineto trace. */
enum { F_NAME, F_IO, F_RF_ID, F_SEQ_ID, F_FW_PARENT, F_SCOPE, F_TID, F_FW_TID, F_OP_SCHEMA, F_READS, F_WRITES, F_COUNT };
typedef struct { PyTypeObject *type; Py_ssize_t offset[F_COUNT]; PyObject *name[F_COUNT]; } OpSlots;

static void op_slots_init(OpSlots *s, PyTypeObject *type) {
    PyObject *const names[F_COUNT] = {a_name, a_io, a_rf_id, a_seq_id, a_fw_parent, a_scope, a_tid, a_fw_tid,
                                      a_op_schema, a_reads, a_writes};
    s->type = type->tp_getattro == PyObject_GenericGetAttr ? type : NULL;
    for (int f = 0; f < F_COUNT; f++) {
        s->name[f] = names[f];
        s->offset[f] = s->type != NULL ? slot_offset(type, names[f]) : 0;
    }
}

static PyObject *op_field(const OpSlots *s, PyObject *op, int f) {
    if (Py_TYPE(op) == s->type && s->offset[f] > 0) {
        PyObject *v = *(PyObject **)((char *)op + s->offset[f]);
        if (v != NULL) { Py_INCREF(v); return v; }
    }
    return PyObject_GetAttr(op, s->name[f]);
}

/* One host op's node (written); 1: done, 0: not a plain one (nothing changed), -1: error. */
static int host_record(PyObject **ctx, const OpSlots *slots, Py_ssize_t i, Py_ssize_t nid_value, PyObject *framed) {
    PyObject *op = PyList_GET_ITEM(ctx[X_OPS], i);
    PyObject *name = NULL, *io = NULL, *rf = NULL, *seq = NULL, *key = NULL, *fields[5] = {NULL};
    PyObject *in_io = NULL, *out_io = NULL, *attrs = NULL, *deps = NULL, *nid = NULL, *start = NULL,
             *duration = NULL, *record = NULL, *reads = NULL, *writes = NULL, *written = NULL, *ikey = NULL;
    int result = -1;
    if ((name = op_field(slots, op, F_NAME)) == NULL || (io = op_field(slots, op, F_IO)) == NULL
        || (rf = op_field(slots, op, F_RF_ID)) == NULL || (seq = op_field(slots, op, F_SEQ_ID)) == NULL)
        goto done;
    for (int f = 0; f < 5; f++)
        if ((fields[f] = op_field(slots, op, F_FW_PARENT + f)) == NULL) goto done;
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
        if ((reads = op_field(slots, op, F_READS)) == NULL || (writes = op_field(slots, op, F_WRITES)) == NULL)
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
        if (append_framed(framed, record) < 0) goto done_ctrl;
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
"state changes) or GPU activities whose records are made (not orphans'); the run framed, to ctx's\n"
"write_framed at once; the index of the first item not written.");

static PyObject *host_records(PyObject *self, PyObject *args) {
    PyObject *ctx_tuple, *items;
    Py_ssize_t k;
    if (!PyArg_ParseTuple(args, "O!O!n", &PyTuple_Type, &ctx_tuple, &PyList_Type, &items, &k)) return NULL;
    if (k < 0) { PyErr_SetString(PyExc_ValueError, "host_records: k must not be negative"); return NULL; }
    if (PyTuple_GET_SIZE(ctx_tuple) != X_COUNT) { PyErr_SetString(PyExc_TypeError, "host_records: bad context"); return NULL; }
    PyObject **ctx = &PyTuple_GET_ITEM(ctx_tuple, 0);
    int list_slots[] = {X_OPS, X_HEAD, X_CTRL, X_LANE, X_OWNER, X_TS, X_EXCL, X_TIMING, X_RF_HEADS, X_SEQ_HEADS, X_IDS,
                        X_GPU};
    int dict_slots[] = {X_NEW_ID, X_LAST_ON_LANE, X_PENDING, X_WRITER_OF, X_WAITS_HOST, X_TEMPLATES, X_NAMES, X_TAILS,
                        X_ORPHANS};
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
    OpSlots slots;
    op_slots_init(&slots, n_ops ? Py_TYPE(PyList_GET_ITEM(ctx[X_OPS], 0)) : &PyBaseObject_Type);
    PyObject *framed = PyByteArray_FromStringAndSize(NULL, 0);
    if (framed == NULL) return NULL;
    for (; k < n_items; k++) {
        Py_ssize_t ref = PyLong_AsSsize_t(PyList_GET_ITEM(items, k));
        if (ref == -1 && PyErr_Occurred()) goto fail;
        if (ref < 0) {  /* a GPU activity: its record as it is, unless it is missing or an orphan's */
            Py_ssize_t g = -(ref + 1);
            if (g >= PyList_GET_SIZE(ctx[X_GPU])) break;
            PyObject *record = PyList_GET_ITEM(ctx[X_GPU], g);
            if (!PyBytes_CheckExact(record) || PyBytes_GET_SIZE(record) == 0) break;
            if (PyDict_GET_SIZE(ctx[X_ORPHANS])) {
                PyObject *key = PyLong_FromSsize_t(g);
                if (key == NULL) goto fail;
                int orphan = PyDict_Contains(ctx[X_ORPHANS], key);
                Py_DECREF(key);
                if (orphan < 0) goto fail;
                if (orphan) break;
            }
            if (append_framed(framed, record) < 0) goto fail;
            continue;
        }
        if (ref >= n_ops || ref == pg_init) break;
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
        int done = host_record(ctx, &slots, ref, k + 1, framed);
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


/* ---- scan: host nodes read straight from the document's JSON text ----------------------------------------
 *
 * scan() reads the elements of a host trace's "nodes" array from its text, one after another, and makes the
 * HostOp of each common node itself, from the bytes: no msgspec record, no list of argument values; the str()
 * of the values is written as Python writes it, the tensors' keys taken on the way. A node outside what it
 * takes here (a kept op, extra attributes, a linked trace's fields, a name or strings not seen before, string
 * escapes it does not write, floats with an exponent, integers of 19 digits or more, ...) is handed whole, as
 * its JSON text, to ``slow`` (the reader's chunk path on that one node). Text that is not plain JSON ends the
 * scan at that element: the chunk reader takes over there and reports what is wrong.
 */

typedef const unsigned char *Ptr;

#define DIGIT(c) ((unsigned)((c) - '0') < 10u)

/* Whether the len bytes at s are the literal lit (the first byte tested before memcmp is called). */
#define SPELLS(s, len, lit) ((len) == sizeof(lit) - 1 && (s)[0] == (lit)[0] && memcmp((s), (lit), sizeof(lit) - 1) == 0)

enum { TAKEN = 0, NOT_HERE = 1, FAILED = -1 };  /* a node: made here / for slow (or malformed) / error set */

#define MAX_DEPTH 64      /* deeper values go to slow */
#define SKIP_DEPTH 1000   /* deeper text ends the scan (the chunk reader reports it) */
#define MAX_NUMBER 18     /* digits of an integer made here (int64 whatever they are) */

typedef struct {
    Vec v;      /* the text's bytes (_vec.h) */
    int ascii;
} Text;

typedef struct {  /* one entry of a list of argument values: a tensor's key, or a non-empty, non-tensor list */
    long long a, b;
    int child;    /* -1: a tensor (a, b); else the list's number */
    int next;     /* the next entry of the same list (-1: none) */
} Entry;

/* HostOp(*args) of 13 positional values, its other fields None, made without calling the class: allocated and
 * its slots filled, as the dataclass's __init__ would fill them (one assignment per field, in order). Only
 * where the class is a plain slots record: object's __new__, no __post_init__, exactly HOSTOP_FIELDS fields
 * each held by a slot of its own (T_OBJECT_EX) and, past the 13th, defaulting to None; else (type NULL) the
 * class is called. Calling it was 40M instructions of converting a 14,391-node host trace. */
#define HOSTOP_FIELDS 19
typedef struct { PyTypeObject *type; Py_ssize_t offset[HOSTOP_FIELDS]; } OpMaker;

/* Whether the class's own __init__ is the one etkit.records gives it (etkit._records.RecordInit) or the one
 * dataclass writes (compiled inside its __create_fn__), not one the class body defines, which filling the slots
 * would skip. */
static int generated_init(PyTypeObject *type) {
    PyObject *init = PyDict_GetItemString(type->tp_dict, "__init__");  /* (borrowed) */
    if (init != NULL && strcmp(Py_TYPE(init)->tp_name, "etkit._records.RecordInit") == 0) return 1;
    if (init == NULL || !PyFunction_Check(init)) return 0;
    PyObject *qualname = PyObject_GetAttrString(PyFunction_GET_CODE(init), "co_qualname");  /* (Python 3.11 on) */
    int generated = qualname != NULL && PyUnicode_Check(qualname)
                    && PyUnicode_CompareWithASCIIString(qualname, "__create_fn__.<locals>.__init__") == 0;
    Py_XDECREF(qualname);
    PyErr_Clear();
    return generated;
}

static void op_maker_init(OpMaker *m, PyObject *cls) {
    m->type = NULL;
    if (!PyType_Check(cls)) return;
    PyTypeObject *type = (PyTypeObject *)cls;
    if (type->tp_new != PyBaseObject_Type.tp_new || type->tp_alloc == NULL) return;
    PyObject *post = PyObject_GetAttrString(cls, "__post_init__");
    if (post != NULL) { Py_DECREF(post); return; }
    PyErr_Clear();
    if (!generated_init(type)) return;
    PyObject *fields = PyObject_GetAttrString(cls, "__dataclass_fields__"), *missing = NULL;
    if (fields == NULL || !PyDict_Check(fields) || PyDict_GET_SIZE(fields) != HOSTOP_FIELDS) goto out;
    PyObject *dataclasses = PyImport_ImportModule("dataclasses");
    if (dataclasses == NULL) goto out;
    missing = PyObject_GetAttrString(dataclasses, "MISSING");
    Py_DECREF(dataclasses);
    if (missing == NULL) goto out;
    PyObject *name, *field;
    Py_ssize_t pos = 0, f = 0;
    while (PyDict_Next(fields, &pos, &name, &field)) {
        Py_ssize_t offset = slot_offset(type, name);
        if (offset == 0) goto out;
        if (f >= 13) {  /* a default of None, no factory */
            PyObject *dflt = PyObject_GetAttrString(field, "default"), *factory = PyObject_GetAttrString(field, "default_factory");
            int ok = dflt == Py_None && factory == missing;
            Py_XDECREF(dflt);
            Py_XDECREF(factory);
            if (!ok) goto out;
        }
        m->offset[f++] = offset;
    }
    if (f == HOSTOP_FIELDS) m->type = type;
out:
    Py_XDECREF(missing);
    Py_XDECREF(fields);
    PyErr_Clear();
}

static PyObject *op_make(const OpMaker *m, PyObject *cls, PyObject *const *args) {
    if (m->type == NULL) return PyObject_Vectorcall(cls, args, 13, NULL);
    PyObject *op = m->type->tp_alloc(m->type, 0);
    if (op == NULL) return NULL;
    for (int f = 0; f < HOSTOP_FIELDS; f++) {
        PyObject *v = f < 13 ? args[f] : Py_None;
        Py_INCREF(v);
        *(PyObject **)((char *)op + m->offset[f]) = v;
    }
    return op;
}

typedef struct {
    PyObject *names, *raw_strings, *strings, *learn, *learn_name, *hostop;
    OpMaker maker;
    /* the texts looked up before (see jb_seen): raw_lookup's, a name's (its tuple in names), op_schema's (its str) */
    JbSeen seen_raw, seen_name, seen_schema;
    Text text;
    Entry *entries;
    int n_entries, cap_entries;
    int *first, *last;  /* per list: its first and last entry */
    int n_lists, cap_lists;
    char scratch[4096];  /* a decoded string or a number's text */
} Scan;

#define WS_BITS ((UINT64_C(1) << ' ') | (UINT64_C(1) << '\n') | (UINT64_C(1) << '\r') | (UINT64_C(1) << '\t'))

static inline Ptr ws(Ptr p, Ptr end) {
    while (p < end && *p <= ' ' && ((WS_BITS >> *p) & 1)) p++;
    return p;
}

/* ---- a JSON value skipped, validated: the pointer after it; NULL when it is not plain JSON ---- */

static Ptr skip_utf8(Ptr p, Ptr end) {  /* p at a byte >= 0x80: the end of its well-formed UTF-8 sequence */
    unsigned c = p[0];
    int n;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) n = 1;
    else if (c >= 0xE0 && c <= 0xEF) { n = 2; if (c == 0xE0) lo = 0xA0; else if (c == 0xED) hi = 0x9F; }
    else if (c >= 0xF0 && c <= 0xF4) { n = 3; if (c == 0xF0) lo = 0x90; else if (c == 0xF4) hi = 0x8F; }
    else return NULL;
    if (end - p <= n) return NULL;
    if (p[1] < lo || p[1] > hi) return NULL;
    for (int k = 2; k <= n; k++)
        if (p[k] < 0x80 || p[k] > 0xBF) return NULL;
    return p + n + 1;
}

static int is_hex(unsigned c) { return (c - '0' < 10u) || ((c | 0x20) - 'a' < 6u); }

static Ptr skip_string_rest(Ptr p, Ptr end) {  /* p inside the string, at a byte that is not plain (or end) */
    while ((p = jb_plain_run(p, end, NULL)) < end) {
        unsigned c = *p;
        if (c == '"') return p + 1;
        if (c < 0x20) return NULL;
        if (c == '\\') {
            if (end - p < 2) return NULL;
            c = p[1];
            if (c == 'u') {
                if (end - p < 6 || !is_hex(p[2]) || !is_hex(p[3]) || !is_hex(p[4]) || !is_hex(p[5])) return NULL;
                p += 6;
            } else if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' || c == 't') {
                p += 2;
            } else {
                return NULL;
            }
        } else if (c >= 0x80) {
            if ((p = skip_utf8(p, end)) == NULL) return NULL;
        } else {
            p++;
        }
    }
    return NULL;
}

static inline Ptr skip_string(Ptr p, Ptr end) {  /* p at the opening quote */
    p = jb_plain_run(p + 1, end, NULL);
    if (p < end && *p == '"') return p + 1;  /* (the common string: plain bytes, then the quote) */
    return skip_string_rest(p, end);
}

static Ptr skip_digits(Ptr p, Ptr end) {
    while (p < end && DIGIT(*p)) p++;
    return p;
}

static Ptr skip_number(Ptr p, Ptr end) {
    if (p < end && *p == '-') p++;
    if (p >= end) return NULL;
    if (*p == '0') p++;
    else if ((unsigned)(*p - '1') < 9u) p = skip_digits(p, end);
    else return NULL;
    if (p < end && *p == '.') {
        Ptr q = skip_digits(p + 1, end);
        if (q == p + 1) return NULL;
        p = q;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < end && (*p == '+' || *p == '-')) p++;
        Ptr q = skip_digits(p, end);
        if (q == p) return NULL;
        p = q;
    }
    return p;
}

static Ptr skip_word(Ptr p, Ptr end, const char *word, size_t n) {
    return (size_t)(end - p) >= n && memcmp(p, word, n) == 0 ? p + n : NULL;
}

static Ptr skip_value(Ptr p, Ptr end, int depth);

/* skip_value, a string or a number taken here (the callers' usual values), any other value by skip_value. */
static inline Ptr skip_scalar(Ptr p, Ptr end, int depth) {
    if (depth > SKIP_DEPTH) return NULL;
    if (p < end && *p == '"') return skip_string(p, end);
    if (p < end && (*p == '-' || DIGIT(*p))) return skip_number(p, end);
    return skip_value(p, end, depth);
}

static Ptr skip_value(Ptr p, Ptr end, int depth) {
    if (p >= end || depth > SKIP_DEPTH) return NULL;
    switch (*p) {
    case '"': return skip_string(p, end);
    case 't': return skip_word(p, end, "true", 4);
    case 'f': return skip_word(p, end, "false", 5);
    case 'n': return skip_word(p, end, "null", 4);
    case '[': case '{': {
        int object = *p == '{';
        unsigned char close = object ? '}' : ']';
        p = ws(p + 1, end);
        if (p < end && *p == close) return p + 1;
        for (;;) {
            if (object) {
                if (p >= end || *p != '"' || (p = skip_string(p, end)) == NULL) return NULL;
                p = ws(p, end);
                if (p >= end || *p != ':') return NULL;
                p = ws(p + 1, end);
            }
            if ((p = skip_scalar(p, end, depth + 1)) == NULL) return NULL;
            p = ws(p, end);
            if (p >= end) return NULL;
            if (*p == close) return p + 1;
            if (*p != ',') return NULL;
            p = ws(p + 1, end);
        }
    }
    default: return skip_number(p, end);
    }
}

/* ---- the pieces of a common node ---- */

static inline int text_put(Text *t, const char *s, Py_ssize_t n) { return vec_put(&t->v, s, n); }

/* A JSON string (p at its quote) decoded into sc->scratch when it is short and has no \u escape: its
 * length, *after the pointer after it, *plain whether it is printable ASCII without quote or backslash
 * (its repr is then the text in single quotes); -1 when it is not taken here (no error set). */
static Py_ssize_t decode_string(Scan *sc, Ptr p, Ptr end, Ptr *after, int *plain) {
    Py_ssize_t n = 0;
    int simple = 1, odd = 0;
    p++;
    while (p < end) {
        Ptr run = jb_plain_run(p, end, &odd);  /* (bytes kept as they are: copied at once) */
        if (run > p) {
            if (run - p > (Py_ssize_t)sizeof sc->scratch - 1 - n) return -1;
            memcpy(sc->scratch + n, p, run - p);
            n += run - p;
            if (odd) simple = 0;
            if ((p = run) == end) break;
        }
        unsigned c = *p;
        if (c == '"') { *after = p + 1; *plain = simple; return n; }
        if (n >= (Py_ssize_t)sizeof sc->scratch - 1 || c < 0x20) return -1;
        if (c == '\\') {
            if (end - p < 2) return -1;
            switch (p[1]) {
            case '"': c = '"'; break;
            case '\\': c = '\\'; break;
            case '/': c = '/'; break;
            case 'b': c = '\b'; break;
            case 'f': c = '\f'; break;
            case 'n': c = '\n'; break;
            case 'r': c = '\r'; break;
            case 't': c = '\t'; break;
            default: return -1;
            }
            p += 2;
        } else {
            p++;
        }
        if (c < 0x20 || c >= 0x7F || c == '\'' || c == '\\' || c == '"') simple = 0;
        sc->scratch[n++] = (char)c;
    }
    return -1;
}

/* The str of a decoded string (new reference); NULL with no error set when it is not UTF-8. */
static PyObject *string_object(Scan *sc, Py_ssize_t n) {
    PyObject *s = PyUnicode_DecodeUTF8(sc->scratch, n, "strict");
    if (s == NULL && PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) PyErr_Clear();
    return s;
}

/* An integer of at most MAX_NUMBER digits (p at its first byte, not "-0"): 1 and *value, *after; 0 when it
 * is not such an integer (a float, a longer one, not a number). */
static inline int small_int(Ptr p, Ptr end, long long *value, Ptr *after) {
    int negative = p < end && *p == '-';
    Ptr q = p + negative;
    if (q >= end || !DIGIT(*q) || (*q == '0' && q + 1 < end && DIGIT(q[1]))) return 0;
    long long v = 0;
    Ptr last = end - q > MAX_NUMBER ? q + MAX_NUMBER : end;  /* (a digit after MAX_NUMBER of them: not taken) */
    for (; q < last && DIGIT(*q); q++) v = v * 10 + (*q - '0');
    if (q < end && (DIGIT(*q) || *q == '.' || *q == 'e' || *q == 'E')) return 0;
    if (negative && v == 0) return 0;
    *value = negative ? -v : v;
    *after = q;
    return 1;
}

enum { K_OTHER, K_INT, K_STR, K_LIST };

static int new_list(Scan *sc) {
    if (sc->n_lists == sc->cap_lists) {
        int cap = sc->cap_lists ? 2 * sc->cap_lists : 64;
        int *first = PyMem_Realloc(sc->first, cap * sizeof(int));
        if (first == NULL) { PyErr_NoMemory(); return -1; }
        sc->first = first;
        int *last = PyMem_Realloc(sc->last, cap * sizeof(int));
        if (last == NULL) { PyErr_NoMemory(); return -1; }
        sc->last = last;
        sc->cap_lists = cap;
    }
    sc->first[sc->n_lists] = sc->last[sc->n_lists] = -1;
    return sc->n_lists++;
}

static int add_entry(Scan *sc, int list, long long a, long long b, int child) {
    if (sc->n_entries == sc->cap_entries) {
        int cap = sc->cap_entries ? 2 * sc->cap_entries : 64;
        Entry *entries = PyMem_Realloc(sc->entries, cap * sizeof(Entry));
        if (entries == NULL) { PyErr_NoMemory(); return -1; }
        sc->entries = entries;
        sc->cap_entries = cap;
    }
    int e = sc->n_entries++;
    sc->entries[e] = (Entry){a, b, child, -1};
    if (sc->last[list] >= 0) sc->entries[sc->last[list]].next = e;
    else sc->first[list] = e;
    sc->last[list] = e;
    return 0;
}

/* A JSON list of argument values (p at '['), its str() appended to sc->text: TAKEN and *after, NOT_HERE or
 * FAILED. *count, *tensor (whether it is a tensor 6-tuple, host.tensor_keys' test) and its key (*a, *b) tell
 * the caller what it was; list is its number (new_list). */
static int values_list(Scan *sc, Ptr p, Ptr end, int depth, int list, Ptr *after, int *count, int *tensor,
                       long long *a, long long *b) {
    int n = 0, kinds[6] = {K_OTHER, K_OTHER, K_OTHER, K_OTHER, K_OTHER, K_OTHER};
    long long ints[2] = {0, 0};
    if (depth > MAX_DEPTH || text_put(&sc->text, "[", 1) < 0) return depth > MAX_DEPTH ? NOT_HERE : FAILED;
    p = ws(p + 1, end);
    if (p < end && *p == ']') {
        p++;
    } else {
        for (;;) {
            if (p >= end) return NOT_HERE;
            if (n && text_put(&sc->text, ", ", 2) < 0) return FAILED;
            int kind = K_OTHER;
            unsigned c = *p;
            if (c == '[') {
                int child = new_list(sc), items, is_tensor;
                long long ta, tb;
                if (child < 0) return FAILED;
                int got = values_list(sc, p, end, depth + 1, child, &p, &items, &is_tensor, &ta, &tb);
                if (got != TAKEN) return got;
                if (is_tensor) { if (add_entry(sc, list, ta, tb, -1) < 0) return FAILED; }
                else if (items && add_entry(sc, list, 0, 0, child) < 0) return FAILED;
                kind = K_LIST;
            } else if (c == '"') {
                int plain;
                Py_ssize_t len = decode_string(sc, p, end, &p, &plain);
                if (len < 0) return NOT_HERE;
                if (plain) {
                    if (text_put(&sc->text, "'", 1) < 0 || text_put(&sc->text, sc->scratch, len) < 0
                        || text_put(&sc->text, "'", 1) < 0)
                        return FAILED;
                } else {  /* Python's repr of it */
                    PyObject *s = string_object(sc, len);
                    if (s == NULL) return PyErr_Occurred() ? FAILED : NOT_HERE;
                    PyObject *r = PyObject_Repr(s);
                    Py_DECREF(s);
                    if (r == NULL) return FAILED;
                    Py_ssize_t rn;
                    const char *u = PyUnicode_AsUTF8AndSize(r, &rn);
                    int bad = u == NULL || text_put(&sc->text, u, rn) < 0;
                    if (!bad && !PyUnicode_IS_ASCII(r)) sc->text.ascii = 0;
                    Py_DECREF(r);
                    if (bad) return FAILED;
                }
                kind = K_STR;
            } else if (c == 't' || c == 'f' || c == 'n') {
                const char *word = c == 't' ? "true" : c == 'f' ? "false" : "null";
                const char *shown = c == 't' ? "True" : c == 'f' ? "False" : "None";
                size_t len = strlen(word);
                if ((p = skip_word(p, end, word, len)) == NULL) return NOT_HERE;
                if (text_put(&sc->text, shown, (Py_ssize_t)strlen(shown)) < 0) return FAILED;
            } else if (c == '-' || DIGIT(c)) {
                long long v;
                Ptr q;
                if (small_int(p, end, &v, &q)) {
                    if (text_put(&sc->text, (const char *)p, q - p) < 0) return FAILED;
                    if (n < 2) ints[n] = v;
                    kind = K_INT;
                    p = q;
                } else {  /* a float without exponent: its repr */
                    q = skip_number(p, end);
                    if (q == NULL || q - p >= (Py_ssize_t)sizeof sc->scratch) return NOT_HERE;
                    for (Ptr r = p; r < q; r++)
                        if (*r == 'e' || *r == 'E') return NOT_HERE;
                    if (memchr(p, '.', q - p) == NULL) return NOT_HERE;  /* (a long integer) */
                    memcpy(sc->scratch, p, q - p);
                    sc->scratch[q - p] = 0;
                    char *stop;
                    double x = PyOS_string_to_double(sc->scratch, &stop, NULL);
                    if (x == -1.0 && PyErr_Occurred()) return FAILED;
                    if (stop != sc->scratch + (q - p) || !isfinite(x)) return NOT_HERE;
                    char *shown = PyOS_double_to_string(x, 'r', 0, Py_DTSF_ADD_DOT_0, NULL);
                    if (shown == NULL) return FAILED;
                    int bad = text_put(&sc->text, shown, (Py_ssize_t)strlen(shown)) < 0;
                    PyMem_Free(shown);
                    if (bad) return FAILED;
                    p = q;
                }
            } else {
                return NOT_HERE;  /* an object, or not JSON */
            }
            if (n < 6) kinds[n] = kind;
            n++;
            p = ws(p, end);
            if (p >= end) return NOT_HERE;
            if (*p == ']') { p++; break; }
            if (*p != ',') return NOT_HERE;
            p = ws(p + 1, end);
        }
    }
    if (text_put(&sc->text, "]", 1) < 0) return FAILED;
    *after = p;
    *count = n;
    *tensor = n == 6 && kinds[5] == K_STR && kinds[0] == K_INT && kinds[1] == K_INT && kinds[4] == K_INT;
    *a = ints[0];
    *b = ints[1];
    return TAKEN;
}

/* host.tensor_keys of the values just read (list 0 and the lists it holds: a stack of those still to look
 * into), as a tuple (new reference).
 *
 * The tuples made here (the keys, pairs of ints; the tuple of them; a HostOp's io, six strings) hold no
 * container, so they are not tracked by the cyclic garbage collector: it would untrack each of them itself at
 * the first collection that sees it, after walking them all (14 ms after a 14k-node host trace's pause). */
static PyObject *tensor_key_tuple(Scan *sc) {
    int *stack = PyMem_Malloc((sc->n_lists + 1) * sizeof(int));
    if (stack == NULL) return PyErr_NoMemory();
    PyObject *keys = NULL;
    for (int pass = 0; pass < 2; pass++) {  /* count them, then make them */
        int top = 0, k = 0;
        stack[top++] = 0;
        while (top) {
            int list = stack[--top];
            for (int e = sc->first[list]; e >= 0; e = sc->entries[e].next) {
                Entry *entry = &sc->entries[e];
                if (entry->child >= 0) { stack[top++] = entry->child; continue; }
                if (pass == 1) {
                    PyObject *a = PyLong_FromLongLong(entry->a), *b = a ? PyLong_FromLongLong(entry->b) : NULL;
                    PyObject *key = b ? PyTuple_Pack(2, a, b) : NULL;
                    Py_XDECREF(a);
                    Py_XDECREF(b);
                    if (key == NULL) { PyMem_Free(stack); Py_DECREF(keys); return NULL; }
                    PyObject_GC_UnTrack(key);  /* (see untracked_tuple) */
                    PyTuple_SET_ITEM(keys, k, key);
                }
                k++;
            }
        }
        if (pass == 0 && (keys = PyTuple_New(k)) == NULL) break;
        if (k == 0) break;
    }
    PyMem_Free(stack);
    if (keys != NULL) PyObject_GC_UnTrack(keys);
    return keys;
}

/* raw_strings[text] for the JSON value text [a, b) (borrowed; learnt by learn(text) when new): (str(), is a
 * list); NULL with no error set when the node goes to slow. */
static PyObject *raw_lookup(Scan *sc, Ptr a, Ptr b) {
    PyObject *found = jb_seen_get(&sc->seen_raw, a, b - a);
    if (found != NULL) return found;
    PyObject *key = PyBytes_FromStringAndSize((const char *)a, b - a);
    if (key == NULL) return NULL;
    found = PyDict_GetItemWithError(sc->raw_strings, key);
    if (found == NULL && !PyErr_Occurred()) {
        PyObject *learnt = PyObject_CallOneArg(sc->learn, key);
        if (learnt == NULL && PyErr_ExceptionMatches(PyExc_ValueError)) PyErr_Clear();  /* (orjson: not JSON) */
        Py_XDECREF(learnt);
        if (learnt != NULL) found = PyDict_GetItemWithError(sc->raw_strings, key);
    }
    Py_DECREF(key);
    if (found != NULL && (!PyTuple_CheckExact(found) || PyTuple_GET_SIZE(found) != 2
                          || !PyUnicode_CheckExact(PyTuple_GET_ITEM(found, 0))))
        found = NULL;
    if (found != NULL && jb_seen_put(&sc->seen_raw, a, b - a, found) < 0) found = NULL;
    return found;
}

typedef struct {
    PyObject *values;          /* str() of the values (new reference) */
    PyObject *keys;            /* their tensors' keys (new reference) */
    PyObject *shapes, *types;  /* raw_strings entries (borrowed) */
} Io;

static void io_clear(Io *io) { Py_CLEAR(io->values); Py_CLEAR(io->keys); }

/* The str() of an empty values list, and no keys. */
static int io_empty(Scan *sc, Io *io) {
    static const unsigned char empty[] = "[]";
    if ((io->shapes = io->types = raw_lookup(sc, empty, empty + 2)) == NULL) return PyErr_Occurred() ? FAILED : NOT_HERE;
    if ((io->values = PyUnicode_FromStringAndSize("[]", 2)) == NULL || (io->keys = PyTuple_New(0)) == NULL)
        return FAILED;
    return TAKEN;
}

/* The "inputs"/"outputs" object (p at it): values, shapes, types (one of them twice: slow). */
static int io_object(Scan *sc, Ptr p, Ptr end, Ptr *after, Io *io) {
    if (*p == 'n') {
        if ((p = skip_word(p, end, "null", 4)) == NULL) return NOT_HERE;
        *after = p;
        return io_empty(sc, io);
    }
    if (*p != '{') return NOT_HERE;
    static const unsigned char empty[] = "[]";
    Ptr shapes[2] = {empty, empty + 2}, types[2] = {empty, empty + 2};
    int seen = 0;
    p = ws(p + 1, end);
    if (p < end && *p == '}') p++;
    else for (;;) {
        if (p >= end || *p != '"') return NOT_HERE;
        Ptr key = p + 1, q = skip_string(p, end);
        if (q == NULL) return NOT_HERE;
        size_t len = q - key - 1;
        p = ws(q, end);
        if (p >= end || *p != ':') return NOT_HERE;
        p = ws(p + 1, end);
        if (p >= end) return NOT_HERE;
        if (SPELLS(key, len, "values") && !(seen & 1)) {
            seen |= 1;
            if (*p != '[') return NOT_HERE;
            sc->text.v.size = 0;
            sc->text.ascii = 1;
            sc->n_entries = sc->n_lists = 0;
            int list = new_list(sc), count, tensor;
            long long a, b;
            if (list < 0) return FAILED;
            int got = values_list(sc, p, end, 0, list, &p, &count, &tensor, &a, &b);
            if (got != TAKEN) return got;
            io->values = sc->text.ascii ? PyUnicode_New(sc->text.v.size, 127)
                                        : PyUnicode_DecodeUTF8(sc->text.v.data, sc->text.v.size, "strict");
            if (io->values == NULL) return FAILED;
            if (sc->text.ascii) memcpy(PyUnicode_DATA(io->values), sc->text.v.data, sc->text.v.size);
            if ((io->keys = count ? tensor_key_tuple(sc) : PyTuple_New(0)) == NULL) return FAILED;
        } else if (((SPELLS(key, len, "shapes") && !(seen & 2))
                    || (SPELLS(key, len, "types") && !(seen & 4)))) {
            Ptr *span = len == 6 ? shapes : types;
            seen |= len == 6 ? 2 : 4;
            span[0] = p;
            if ((p = skip_value(p, end, 0)) == NULL) return NOT_HERE;
            span[1] = p;
        } else if (memchr(key, '\\', len) != NULL || (p = skip_value(p, end, 0)) == NULL) {
            return NOT_HERE;  /* (any other key, "strides" of 1.1.1, is not read) */
        }
        p = ws(p, end);
        if (p >= end) return NOT_HERE;
        if (*p == '}') { p++; break; }
        if (*p != ',') return NOT_HERE;
        p = ws(p + 1, end);
    }
    if (!(seen & 1) && ((io->values = PyUnicode_FromStringAndSize("[]", 2)) == NULL || (io->keys = PyTuple_New(0)) == NULL))
        return FAILED;
    if ((io->shapes = raw_lookup(sc, shapes[0], shapes[1])) == NULL || (io->types = raw_lookup(sc, types[0], types[1])) == NULL)
        return PyErr_Occurred() ? FAILED : NOT_HERE;
    *after = p;
    return TAKEN;
}

enum { A_RF_ID, A_FW_PARENT, A_SEQ_ID, A_SCOPE, A_TID, A_FW_TID, A_NUMBERS };
static const char *const number_attrs[A_NUMBERS] = {"rf_id", "fw_parent", "seq_id", "scope", "tid", "fw_tid"};
static const size_t number_attr_len[A_NUMBERS] = {5, 9, 6, 5, 3, 6};

/* The "attrs" list (p at it): the six numbers (last one wins, as in a dict) and op_schema (a new reference,
 * or left NULL); attributes kept elsewhere (kernel_*, tensor_range) skipped, any other one must be empty. */
static int attrs_list(Scan *sc, Ptr p, Ptr end, Ptr *after, long long numbers[A_NUMBERS], PyObject **schema) {
    if (*p != '[') return NOT_HERE;
    p = ws(p + 1, end);
    if (p < end && *p == ']') { *after = p + 1; return TAKEN; }
    for (;;) {
        if (p >= end || *p != '{') return NOT_HERE;
        Ptr name = NULL, name_end = NULL, value = NULL, value_end = NULL;
        int has_type = 0;
        p = ws(p + 1, end);
        if (p < end && *p == '}') return NOT_HERE;  /* (no name) */
        for (;;) {
            if (p >= end || *p != '"') return NOT_HERE;
            Ptr key = p + 1, q = skip_string(p, end);
            if (q == NULL) return NOT_HERE;
            size_t len = q - key - 1;
            p = ws(q, end);
            if (p >= end || *p != ':') return NOT_HERE;
            p = ws(p + 1, end);
            Ptr v = p;
            if ((p = skip_scalar(p, end, 0)) == NULL) return NOT_HERE;
            if (SPELLS(key, len, "name") && name == NULL) { name = v; name_end = p; }
            else if (SPELLS(key, len, "value") && value == NULL) { value = v; value_end = p; }
            else if (SPELLS(key, len, "type") && !has_type) has_type = 1;
            else return NOT_HERE;
            p = ws(p, end);
            if (p >= end) return NOT_HERE;
            if (*p == '}') { p++; break; }
            if (*p != ',') return NOT_HERE;
            p = ws(p + 1, end);
        }
        if (name == NULL || *name != '"') return NOT_HERE;
        Ptr n0 = name + 1;
        size_t len = name_end - n0 - 1;
        if (memchr(n0, '\\', len) != NULL) return NOT_HERE;
        int which = -1;
        for (int k = 0; k < A_NUMBERS; k++)
            if (number_attr_len[k] == len && number_attrs[k][0] == (char)n0[0] && memcmp(n0, number_attrs[k], len) == 0)
                which = k;
        if (which >= 0) {
            Ptr q;
            if (value == NULL || !small_int(value, value_end, &numbers[which], &q) || q != value_end) return NOT_HERE;
        } else if (SPELLS(n0, len, "op_schema")) {
            int plain;
            Ptr q;
            Py_ssize_t n;
            if (value == NULL || *value != '"') return NOT_HERE;
            PyObject *s = jb_seen_get(&sc->seen_schema, value, value_end - value);
            if (s != NULL) {  /* (a text decoded before) */
                Py_INCREF(s);
            } else {
                if ((n = decode_string(sc, value, value_end, &q, &plain)) < 0) return NOT_HERE;
                if ((s = string_object(sc, n)) == NULL) return PyErr_Occurred() ? FAILED : NOT_HERE;
                if (jb_seen_put(&sc->seen_schema, value, value_end - value, s) < 0) { Py_DECREF(s); return FAILED; }
            }
            Py_XSETREF(*schema, s);
        } else if ((SPELLS(n0, len, "kernel_backend")) || (SPELLS(n0, len, "kernel_file"))
                   || (SPELLS(n0, len, "tensor_range"))) {
            /* (in HostOp's known attributes: not kept) */
        } else if (!(value == NULL || (value_end - value == 4 && memcmp(value, "null", 4) == 0)
                     || (value_end - value == 2 && memcmp(value, "\"\"", 2) == 0))) {
            return NOT_HERE;  /* an extra attribute (etkit.pytorch.host._extra) */
        }
        p = ws(p, end);
        if (p >= end) return NOT_HERE;
        if (*p == ']') { *after = p + 1; return TAKEN; }
        if (*p != ',') return NOT_HERE;
        p = ws(p + 1, end);
    }
}

/* The HostOp of the node at p (an object), as _Compactor.typed_op makes it: TAKEN (*op, *after), NOT_HERE
 * or FAILED. */
static int scan_node(Scan *sc, Ptr p, Ptr end, Ptr *after, PyObject **op) {
    long long id = -1, parent = 0, numbers[A_NUMBERS] = {0, 0, -1, 0, 0, 0};
    int has_parent = 0, seen = 0, result = NOT_HERE;
    PyObject *named = NULL, *schema = NULL, *args[13] = {NULL};
    Io in = {NULL, NULL, NULL, NULL}, out = {NULL, NULL, NULL, NULL};
    p = ws(p + 1, end);
    if (p < end && *p == '}') goto done;
    for (;;) {
        if (p >= end || *p != '"') goto done;
        Ptr key = p + 1, q = skip_string(p, end);
        if (q == NULL) goto done;
        size_t len = q - key - 1;
        p = ws(q, end);
        if (p >= end || *p != ':') goto done;
        p = ws(p + 1, end);
        if (p >= end) goto done;
        int bit = 0, got = TAKEN;
        if (SPELLS(key, len, "id")) bit = 1;
        else if (SPELLS(key, len, "name")) bit = 2;
        else if (SPELLS(key, len, "ctrl_deps")) bit = 4;
        else if (SPELLS(key, len, "inputs")) bit = 8;
        else if (SPELLS(key, len, "outputs")) bit = 16;
        else if (SPELLS(key, len, "attrs")) bit = 32;
        else if ((SPELLS(key, len, "ts")) || (SPELLS(key, len, "inclusive_dur"))
                 || (SPELLS(key, len, "exclusive_dur")) || (SPELLS(key, len, "cat"))
                 || (SPELLS(key, len, "stream")) || (SPELLS(key, len, "pg_name"))
                 || memchr(key, '\\', len) != NULL)
            goto done;  /* a linked trace's fields (or a key written with escapes) */
        if (seen & bit) goto done;  /* a key twice */
        seen |= bit;
        if (bit == 1) {
            if (!small_int(p, end, &id, &p) || id < 0) goto done;
        } else if (bit == 2) {
            int plain;
            Py_ssize_t n;
            if (*p != '"') goto done;
            Ptr text = p;
            q = skip_string(p, end);
            if (q != NULL && (named = jb_seen_get(&sc->seen_name, text, q - text)) != NULL) {
                p = q;  /* (a name decoded before) */
            } else {
                if ((n = decode_string(sc, p, end, &p, &plain)) < 0) goto done;
                PyObject *name = string_object(sc, n);
                if (name == NULL) { result = PyErr_Occurred() ? FAILED : NOT_HERE; goto done; }
                named = PyDict_GetItemWithError(sc->names, name);
                if (named == NULL && !PyErr_Occurred()) {  /* a name not seen before: learnt */
                    PyObject *learnt = PyObject_CallOneArg(sc->learn_name, name);
                    Py_XDECREF(learnt);
                    if (learnt != NULL) named = PyDict_GetItemWithError(sc->names, name);
                }
                Py_DECREF(name);
                if (named != NULL && jb_seen_put(&sc->seen_name, text, p - text, named) < 0) named = NULL;
            }
            if (named == NULL) { result = PyErr_Occurred() ? FAILED : NOT_HERE; goto done; }
            if (!PyTuple_CheckExact(named) || PyTuple_GET_SIZE(named) != 2 || PyTuple_GET_ITEM(named, 1) != Py_False)
                goto done;  /* (a kept op) */
        } else if (bit == 4) {
            if (!small_int(p, end, &parent, &p)) goto done;
            has_parent = 1;
        } else if (bit == 8) {
            got = io_object(sc, p, end, &p, &in);
        } else if (bit == 16) {
            got = io_object(sc, p, end, &p, &out);
        } else if (bit == 32) {
            got = attrs_list(sc, p, end, &p, numbers, &schema);
        } else if ((p = skip_value(p, end, 0)) == NULL) {
            goto done;  /* (any other key is not read) */
        }
        if (got != TAKEN) { result = got; goto done; }
        p = ws(p, end);
        if (p >= end) goto done;
        if (*p == '}') { p++; break; }
        if (*p != ',') goto done;
        p = ws(p + 1, end);
    }
    if (!(seen & 1) || named == NULL) goto done;
    if (!(seen & 8) && io_empty(sc, &in) != TAKEN) { result = PyErr_Occurred() ? FAILED : NOT_HERE; goto done; }
    if (!(seen & 16) && io_empty(sc, &out) != TAKEN) { result = PyErr_Occurred() ? FAILED : NOT_HERE; goto done; }
    if (PyTuple_GET_ITEM(in.types, 1) != Py_True) goto done;  /* (typed_op: the input types must be a list) */
    result = FAILED;
    if (schema == NULL || PyUnicode_GET_LENGTH(schema) == 0) {
        Py_XSETREF(schema, s_empty);
        Py_INCREF(schema);
    } else {
        PyObject *interned = PyDict_SetDefault(sc->strings, schema, schema);
        if (interned == NULL) goto done;
        Py_INCREF(interned);
        Py_SETREF(schema, interned);
    }
    args[0] = PyLong_FromLongLong(id);
    args[2] = PyLong_FromLongLong(has_parent ? parent : id);
    for (int k = 0; k < A_NUMBERS; k++) args[3 + k] = PyLong_FromLongLong(numbers[k]);
    args[11] = in.keys;
    args[12] = out.keys;
    for (int k = 0; k < 13; k++)
        if (k != 1 && k < 9 && args[k] == NULL) goto done;
    args[1] = PyTuple_GET_ITEM(named, 0);
    args[9] = schema;
    args[10] = PyTuple_Pack(6, in.values, PyTuple_GET_ITEM(in.shapes, 0), PyTuple_GET_ITEM(in.types, 0), out.values,
                            PyTuple_GET_ITEM(out.shapes, 0), PyTuple_GET_ITEM(out.types, 0));
    if (args[10] == NULL) goto done;
    PyObject_GC_UnTrack(args[10]);
    if ((*op = op_make(&sc->maker, sc->hostop, args)) == NULL) goto done;
    *after = p;
    result = TAKEN;
done:
    Py_XDECREF(args[0]);
    Py_XDECREF(args[2]);
    for (int k = 0; k < A_NUMBERS; k++) Py_XDECREF(args[3 + k]);
    Py_XDECREF(args[10]);
    Py_XDECREF(schema);
    io_clear(&in);
    io_clear(&out);
    return result;
}

PyDoc_STRVAR(scan_doc,
"scan(data, pos, stop, limit, names, raw_strings, strings, learn, learn_name, slow, hostop) -> (ops, pos, status)\n\n"
"The HostOps of the elements of a JSON array in data (a bytes-like object) from pos (at an element, or the\n"
"space before it) on, at most limit of them; stop is the offset of the document's last ']'. Common nodes are\n"
"made here as _Compactor.typed_op makes them (names, raw_strings, strings: its caches; learn: its\n"
"raw_string, called with the bytes of shapes or types not seen before; learn_name: called with a name not\n"
"seen before, puts it in names; hostop: the HostOp class); any other\n"
"node, well-formed, is slow(its JSON text), which returns its HostOp or None (then the scan ends there).\n"
"status: 0 the array is read (pos == stop), 1 limit reached (call again from pos), 2 the rest from pos is\n"
"for the chunk reader (text this scan does not read: not JSON, or the array ends before stop).");

static PyObject *scan(PyObject *self, PyObject *args) {
    PyObject *data, *slow;
    Py_ssize_t pos, stop, limit;
    Scan sc;
    memset(&sc, 0, sizeof sc);
    if (!PyArg_ParseTuple(args, "OnnnO!O!O!OOOO:scan", &data, &pos, &stop, &limit, &PyDict_Type, &sc.names,
                          &PyDict_Type, &sc.raw_strings, &PyDict_Type, &sc.strings, &sc.learn, &sc.learn_name, &slow,
                          &sc.hostop))
        return NULL;
    op_maker_init(&sc.maker, sc.hostop);
    Buf buf = {0};
    if (get_buf(data, &buf, 1, "scan: data") < 0) { release(&buf); return NULL; }
    if (pos < 0 || stop < pos || stop > buf.view.len || limit < 1) {
        release(&buf);
        PyErr_SetString(PyExc_ValueError, "scan: need 0 <= pos <= stop <= len(data) and limit >= 1");
        return NULL;
    }
    Ptr base = buf.view.buf, end = base + stop, p = ws(base + pos, end);
    PyObject *ops = PyList_New(0), *result = NULL;
    int status = 2;
    if (ops == NULL) goto fail;
    if (p == end) { status = 0; pos = stop; }
    while (p < end) {
        Ptr start = p, after = NULL;
        PyObject *op = NULL;
        if (*p != '{') break;
        int got = scan_node(&sc, p, end, &after, &op);
        if (got == FAILED) goto fail;
        if (got == NOT_HERE) {
            if ((after = skip_value(p, end, 0)) == NULL) break;
            PyObject *text = PyBytes_FromStringAndSize((const char *)start, after - start);
            if (text == NULL) goto fail;
            op = PyObject_CallOneArg(slow, text);
            Py_DECREF(text);
            if (op == NULL) goto fail;
            if (op == Py_None) { Py_DECREF(op); break; }
        }
        p = ws(after, end);
        if (p < end && *p != ',') { Py_DECREF(op); break; }  /* (the array ends before stop, or not JSON) */
        int appended = PyList_Append(ops, op);
        Py_DECREF(op);
        if (appended < 0) goto fail;
        pos = p - base;
        if (p == end) { status = 0; break; }
        Ptr next = ws(p + 1, end);
        pos = p + 1 - base;
        if (next == end || *next != '{') break;  /* (a trailing comma, or not JSON: the chunk reader decides) */
        p = next;
        if (PyList_GET_SIZE(ops) >= limit) { status = 1; break; }
    }
    result = Py_BuildValue("Oni", ops, pos, status);
fail:
    Py_XDECREF(ops);
    jb_seen_clear(&sc.seen_raw);
    jb_seen_clear(&sc.seen_name);
    jb_seen_clear(&sc.seen_schema);
    PyMem_Free(sc.text.v.data);
    PyMem_Free(sc.entries);
    PyMem_Free(sc.first);
    PyMem_Free(sc.last);
    release(&buf);
    return result;
}


/* ---- walk: convert.depth_first in C ----------------------------------------------------------------------- */

typedef struct { double key; unsigned long long id; Py_ssize_t index; } Kid;

/* Siblings in the order convert.depth_first pushes them: (start or inf, id) descending, equal ones in index
 * order (Python's stable reverse sort); roots: (id, index) ascending. */
static int kid_desc(const void *x, const void *y) {
    const Kid *a = x, *b = y;
    if (a->key != b->key) return a->key > b->key ? -1 : 1;
    if (a->id != b->id) return a->id > b->id ? -1 : 1;
    return a->index < b->index ? -1 : a->index > b->index;
}

static int root_asc(const void *x, const void *y) {
    const Kid *a = x, *b = y;
    if (a->id != b->id) return a->id < b->id ? -1 : 1;
    return a->index < b->index ? -1 : a->index > b->index;
}

typedef struct { Py_ssize_t i, h, own, ctrl, lane; double parent_key; int chain_level; } Visit;

PyDoc_STRVAR(walk_doc,
"walk(ops, parent, ts, levels, thread) -> (order, key, head, owner, ctrl, lane_of) | None\n\n"
"convert.depth_first(ops, parent, ts, levels, thread), the same lists; None where it does not take the\n"
"input (an id that is not an unsigned 64-bit integer, a parent outside the ops), which depth_first then does.");

static PyObject *walk(PyObject *self, PyObject *args) {
    PyObject *ops, *parent, *ts, *levels, *thread;
    if (!PyArg_ParseTuple(args, "O!O!O!O!O!:walk", &PyList_Type, &ops, &PyList_Type, &parent, &PyList_Type, &ts,
                          &PyDict_Type, &levels, &PyList_Type, &thread))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(ops);
    if (PyList_GET_SIZE(parent) != n || PyList_GET_SIZE(ts) != n || PyList_GET_SIZE(thread) != n) Py_RETURN_NONE;
    PyObject *result = NULL, *order = NULL, *key = NULL, *head = NULL, *owner = NULL, *ctrl = NULL, *lane_of = NULL,
             *lanes = NULL, *lane_objects = NULL;
    Py_ssize_t *par = PyMem_Calloc(n + 1, sizeof(Py_ssize_t)), *start = PyMem_Calloc(n + 2, sizeof(Py_ssize_t)),
               *heads = PyMem_Calloc(n + 1, sizeof(Py_ssize_t)), *owners = PyMem_Calloc(n + 1, sizeof(Py_ssize_t)),
               *ctrls = PyMem_Calloc(n + 1, sizeof(Py_ssize_t)), *lane_at = PyMem_Calloc(n + 1, sizeof(Py_ssize_t));
    long long *threads = PyMem_Calloc(n + 1, sizeof(long long));
    int *level = PyMem_Calloc(n + 1, sizeof(int)), *seen = PyMem_Calloc(n + 1, sizeof(int));
    double *t = PyMem_Calloc(n + 1, sizeof(double)), *keys = PyMem_Calloc(n + 1, sizeof(double));
    unsigned long long *ids = PyMem_Calloc(n + 1, sizeof(unsigned long long));
    Kid *kids = PyMem_Calloc(n + 1, sizeof(Kid));
    Py_ssize_t *walked = PyMem_Calloc(n + 1, sizeof(Py_ssize_t));
    Visit *stack = PyMem_Calloc(n + 1, sizeof(Visit));
    int fallback = 0;
    if (!par || !start || !heads || !owners || !ctrls || !lane_at || !threads || !level || !seen || !t || !keys || !ids
        || !kids || !walked || !stack) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *op = PyList_GET_ITEM(ops, i), *id = PyObject_GetAttr(op, s_id);
        if (id == NULL) goto done;
        ids[i] = PyLong_Check(id) ? PyLong_AsUnsignedLongLong(id) : (unsigned long long)-1;
        int bad = !PyLong_Check(id) || PyErr_Occurred();
        Py_DECREF(id);
        if (bad) { PyErr_Clear(); fallback = 1; goto done; }
        par[i] = PyLong_AsSsize_t(PyList_GET_ITEM(parent, i));
        threads[i] = PyLong_AsLongLong(PyList_GET_ITEM(thread, i));
        t[i] = PyFloat_AsDouble(PyList_GET_ITEM(ts, i));
        if (PyErr_Occurred()) { PyErr_Clear(); fallback = 1; goto done; }
        if (par[i] >= n) { fallback = 1; goto done; }  /* (depth_first: an IndexError) */
        if (par[i] < -1) par[i] = -1;  /* (a root, as any negative parent) */
        level[i] = -1;
    }
    {
        PyObject *k, *v;
        Py_ssize_t pos = 0;
        while (PyDict_Next(levels, &pos, &k, &v)) {
            Py_ssize_t i = PyLong_AsSsize_t(k);
            long lv = PyLong_AsLong(v);
            if (PyErr_Occurred()) { PyErr_Clear(); fallback = 1; goto done; }
            if (i < 0 || i >= n || lv < 0 || lv > 1000) { fallback = 1; goto done; }
            level[i] = (int)lv;
        }
    }
    /* children, in index order: start[p + 1] .. start[p + 2] of kids_of (roots: p = -1) */
    for (Py_ssize_t i = 0; i < n; i++) start[par[i] + 2]++;
    for (Py_ssize_t p = 0; p <= n; p++) start[p + 1] += start[p];
    Py_ssize_t *fill = PyMem_Calloc(n + 1, sizeof(Py_ssize_t)), *kids_of = PyMem_Calloc(n + 1, sizeof(Py_ssize_t));
    if (fill == NULL || kids_of == NULL) { PyMem_Free(fill); PyMem_Free(kids_of); PyErr_NoMemory(); goto done; }
    for (Py_ssize_t i = 0; i < n; i++) kids_of[start[par[i] + 1] + fill[par[i] + 1]++] = i;
    PyMem_Free(fill);
    if ((lanes = PyDict_New()) == NULL || (lane_objects = PyList_New(0)) == NULL) { PyMem_Free(kids_of); goto done; }
    Py_ssize_t top = 0, walked_n = 0;
    {   /* the roots, smallest id on top */
        Py_ssize_t r0 = start[0], r1 = start[1], m = r1 - r0;
        for (Py_ssize_t k = 0; k < m; k++) kids[k] = (Kid){0.0, ids[kids_of[r0 + k]], kids_of[r0 + k]};
        qsort(kids, m, sizeof(Kid), root_asc);
        for (Py_ssize_t k = m - 1; k >= 0; k--)
            stack[top++] = (Visit){kids[k].index, -1, -1, -1, -1, -Py_HUGE_VAL, -1};
    }
    while (top) {
        Visit v = stack[--top];
        Py_ssize_t i = v.i, h = v.h, own = v.own;
        double k = t[i] != t[i] ? v.parent_key : (v.parent_key > t[i] ? v.parent_key : t[i]);
        keys[i] = k;
        int lv = level[i];
        if (lv >= 0) {
            if (h < 0 || lv <= v.chain_level) h = own = i;
        } else {
            h = -1;
        }
        heads[i] = h;
        owners[i] = own;
        ctrls[i] = v.ctrl;
        seen[i] = 1;
        Py_ssize_t lane = v.lane;
        if (threads[i] >= 0 || lane < 0) {  /* ("t", thread) once per thread; ("et", tid) */
            PyObject *lk = NULL;
            if (threads[i] >= 0) {
                lk = PyTuple_Pack(2, s_t, PyList_GET_ITEM(thread, i));
            } else {
                PyObject *tid = PyObject_GetAttr(PyList_GET_ITEM(ops, i), a_tid);
                if (tid != NULL) lk = PyTuple_Pack(2, s_et, tid);
                Py_XDECREF(tid);
            }
            if (lk == NULL) { PyMem_Free(kids_of); goto done; }
            PyObject *index = PyDict_GetItemWithError(lanes, lk);
            if (index == NULL) {
                if (PyErr_Occurred() || (index = PyLong_FromSsize_t(PyList_GET_SIZE(lane_objects))) == NULL
                    || PyList_Append(lane_objects, lk) < 0 || PyDict_SetItem(lanes, lk, index) < 0) {
                    Py_XDECREF(index); Py_DECREF(lk); PyMem_Free(kids_of); goto done;
                }
                Py_DECREF(index);
                index = PyDict_GetItemWithError(lanes, lk);
            }
            Py_DECREF(lk);
            if (index == NULL) { PyMem_Free(kids_of); goto done; }
            lane = PyLong_AsSsize_t(index);
        }
        lane_at[i] = lane;
        walked[walked_n++] = i;
        Py_ssize_t next_ctrl = lv >= 0 ? v.ctrl : i, c0 = start[i + 1], c1 = start[i + 2], m = c1 - c0;
        for (Py_ssize_t q = 0; q < m; q++) {
            Py_ssize_t c = kids_of[c0 + q];
            kids[q] = (Kid){t[c] != t[c] ? Py_HUGE_VAL : t[c], ids[c], c};
        }
        if (m > 1) qsort(kids, m, sizeof(Kid), kid_desc);
        for (Py_ssize_t q = 0; q < m; q++)
            stack[top++] = (Visit){kids[q].index, h, own, next_ctrl, lane, k, lv};
    }
    PyMem_Free(kids_of);
    for (Py_ssize_t i = 0; i < n; i++)  /* ops outside every root's tree */
        if (!seen[i]) {
            walked[walked_n++] = i;
            keys[i] = t[i] != t[i] ? Py_HUGE_VAL : t[i];
            heads[i] = owners[i] = ctrls[i] = lane_at[i] = -1;
        }
    if ((order = PyList_New(n)) == NULL || (key = PyList_New(n)) == NULL || (head = PyList_New(n)) == NULL
        || (owner = PyList_New(n)) == NULL || (ctrl = PyList_New(n)) == NULL || (lane_of = PyList_New(n)) == NULL)
        goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *o = PyLong_FromSsize_t(walked[i]), *kk = PyFloat_FromDouble(keys[i]), *hh = PyLong_FromSsize_t(heads[i]),
                 *ow = PyLong_FromSsize_t(owners[i]), *cc = PyLong_FromSsize_t(ctrls[i]);
        PyObject *ln = lane_at[i] >= 0 ? PyList_GET_ITEM(lane_objects, lane_at[i]) : Py_None;
        Py_INCREF(ln);
        PyList_SET_ITEM(order, i, o);
        PyList_SET_ITEM(key, i, kk);
        PyList_SET_ITEM(head, i, hh);
        PyList_SET_ITEM(owner, i, ow);
        PyList_SET_ITEM(ctrl, i, cc);
        PyList_SET_ITEM(lane_of, i, ln);
        if (!o || !kk || !hh || !ow || !cc) goto done;
    }
    result = PyTuple_Pack(6, order, key, head, owner, ctrl, lane_of);
done:
    PyMem_Free(par); PyMem_Free(start); PyMem_Free(heads); PyMem_Free(owners); PyMem_Free(ctrls); PyMem_Free(lane_at);
    PyMem_Free(threads); PyMem_Free(level); PyMem_Free(seen); PyMem_Free(t); PyMem_Free(keys); PyMem_Free(ids);
    PyMem_Free(kids); PyMem_Free(walked); PyMem_Free(stack);
    Py_XDECREF(order); Py_XDECREF(key); Py_XDECREF(head); Py_XDECREF(owner); Py_XDECREF(ctrl); Py_XDECREF(lane_of);
    Py_XDECREF(lanes); Py_XDECREF(lane_objects);
    if (fallback && result == NULL && !PyErr_Occurred()) Py_RETURN_NONE;
    return result;
}

static PyMethodDef methods[] = {
    {"ops", ops, METH_VARARGS, ops_doc},
    {"long_number", long_number, METH_O, long_number_doc},
    {"host_records", host_records, METH_VARARGS, host_records_doc},
    {"scan", scan, METH_VARARGS, scan_doc},
    {"walk", walk, METH_VARARGS, walk_doc},
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
        {&s_brackets, "[]"}, {&s_t, "t"}, {&s_et, "et"},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if ((*names[i].slot = PyUnicode_InternFromString(names[i].text)) == NULL) return NULL;
    return PyModule_Create(&module);
}
