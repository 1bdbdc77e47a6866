/* A record's __init__ in C (etkit.records): one callable type, RecordInit, that binds a call's arguments to the
 * record's fields and assigns them, in the order and with the results of the __init__ that dataclasses writes,
 * without compiling source text for each class (Python 3.11's dataclass compiles every method it generates:
 * ~0.25 ms apiece, 18 ms of `etkit analyze`'s start-up for 68 records).
 *
 * What an instance holds, made by etkit.records from dataclasses.fields(cls):
 *   self_name the instance's parameter ("self"; a keyword of that name is a second value for it);
 *   params    the parameter names in signature order: the positional-or-keyword ones, then the keyword-only;
 *   required  one byte per parameter: 1 if it has no default (nor factory);
 *   names     the fields the call assigns, in field order (init=False fields with a default or a factory
 *             included, as dataclass assigns them in their place);
 *   kinds     one byte per assigned field: PARAM (an argument, maybe defaulted: see values), FACTORY_PARAM (an
 *             argument whose default is values[i]()), SET (values[i] itself), SET_FACTORY (values[i]());
 *   param_of  per assigned field, its parameter's number (-1 for SET and SET_FACTORY);
 *   values    per assigned field: the default, the factory, or None (a required argument).
 * A frozen record's fields are assigned with object.__setattr__ (as dataclass's frozen __init__ does); a
 * record with __post_init__ has it called last. Errors (missing, unexpected or repeated arguments, too many
 * positional ones) raise the TypeError Python raises for the same call of a Python function.
 *
 * The type is a method descriptor (Py_TPFLAGS_METHOD_DESCRIPTOR): the interpreter calls it with the instance
 * as its first argument, through vectorcall; `Cls.__init__` is the object itself, `obj.__init__` a bound method.
 * Where the record has slots (and cls is given), the fields of an instance of exactly cls are written to them
 * as the member descriptors write them (Python 3.11 specialises the generated __init__'s stores that way).
 * Its __signature__ is made on first use by a Python callable given to it (inspect.signature(Cls) works).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>
#include <structmember.h>

#include "_slots.h"

enum { PARAM = 0, FACTORY_PARAM = 1, SET = 2, SET_FACTORY = 3 };

#define STACK_PARAMS 32

typedef struct {
    PyObject_HEAD
    PyObject *qualname;   /* "Cls.__init__" (messages, __qualname__) */
    PyObject *self_name;  /* the instance's parameter: "self" (or "__dataclass_self__" beside a field "self") */
    PyObject *params;     /* tuple of str */
    Py_ssize_t npos;      /* positional-or-keyword parameters: params[:npos] */
    Py_ssize_t ndefaults; /* of those, the last ndefaults have defaults (the messages' "from n to m") */
    PyObject *required;   /* bytes, one per parameter */
    PyObject *names;      /* tuple of str, the assigned fields */
    PyObject *kinds;      /* bytes, one per assigned field */
    PyObject *param_of;   /* tuple of int */
    PyObject *values;     /* tuple */
    Py_ssize_t *param_index;  /* param_of as C integers */
    PyObject *cls;            /* the record class (or None) */
    Py_ssize_t *offset;       /* per assigned field, its slot in instances of exactly cls (0: none) ... */
    unsigned int version;     /* ... for this version of cls (0: not found yet) */
    int frozen, post_init;
    PyObject *signature_maker, *signature;
    vectorcallfunc vectorcall;
} RecordInit;

static PyObject *s_post_init;  /* "__post_init__", interned at module load (immutable: no state to share) */

/* "'a'", "'a' and 'b'", "'a', 'b', and 'c'": how CPython lists missing arguments. */
static PyObject *name_list(PyObject *names) {
    Py_ssize_t n = PyList_GET_SIZE(names);
    PyObject *quoted = PyList_New(n);
    if (quoted == NULL) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *r = PyObject_Repr(PyList_GET_ITEM(names, i));
        if (r == NULL) { Py_DECREF(quoted); return NULL; }
        PyList_SET_ITEM(quoted, i, r);
    }
    PyObject *out = NULL;
    if (n == 1) {
        out = PyList_GET_ITEM(quoted, 0);
        Py_INCREF(out);
    } else if (n == 2) {
        out = PyUnicode_FromFormat("%U and %U", PyList_GET_ITEM(quoted, 0), PyList_GET_ITEM(quoted, 1));
    } else {
        PyObject *sep = PyUnicode_FromString(", "), *head = PyList_GetSlice(quoted, 0, n - 1);
        PyObject *joined = (sep && head) ? PyUnicode_Join(sep, head) : NULL;
        if (joined) out = PyUnicode_FromFormat("%U, and %U", joined, PyList_GET_ITEM(quoted, n - 1));
        Py_XDECREF(sep); Py_XDECREF(head); Py_XDECREF(joined);
    }
    Py_DECREF(quoted);
    return out;
}

/* TypeError "Cls.__init__() missing 2 required positional arguments: 'a' and 'b'" for the parameters of
 * [start, stop) that are required and unbound (there is at least one). */
static void missing(RecordInit *ri, PyObject **bound, Py_ssize_t start, Py_ssize_t stop, const char *kind) {
    const char *req = PyBytes_AS_STRING(ri->required);
    PyObject *names = PyList_New(0);
    if (names == NULL) return;
    for (Py_ssize_t j = start; j < stop; j++)
        if (bound[j] == NULL && req[j] && PyList_Append(names, PyTuple_GET_ITEM(ri->params, j)) < 0) {
            Py_DECREF(names);
            return;
        }
    Py_ssize_t n = PyList_GET_SIZE(names);
    PyObject *listed = name_list(names);
    if (listed != NULL)
        PyErr_Format(PyExc_TypeError, "%U() missing %zd required %s argument%s: %U", ri->qualname, n, kind,
                     n == 1 ? "" : "s", listed);
    Py_XDECREF(listed);
    Py_DECREF(names);
}

/* TypeError "Cls.__init__() takes 3 positional arguments but 4 were given" (counting self, as CPython does). */
static void too_many(RecordInit *ri, Py_ssize_t given, PyObject **bound) {
    Py_ssize_t argcount = ri->npos + 1, kwonly_given = 0;
    for (Py_ssize_t j = ri->npos; j < PyTuple_GET_SIZE(ri->params); j++) kwonly_given += bound[j] != NULL;
    PyObject *sig = ri->ndefaults ? PyUnicode_FromFormat("from %zd to %zd", argcount - ri->ndefaults, argcount)
                                  : PyUnicode_FromFormat("%zd", argcount);
    if (sig == NULL) return;
    int plural = ri->ndefaults ? 1 : argcount != 1;
    if (kwonly_given) {
        PyObject *kw = PyUnicode_FromFormat(" positional argument%s (and %zd keyword-only argument%s)",
                                            given != 1 ? "s" : "", kwonly_given, kwonly_given != 1 ? "s" : "");
        if (kw != NULL)
            PyErr_Format(PyExc_TypeError, "%U() takes %U positional argument%s but %zd%U %s given", ri->qualname,
                         sig, plural ? "s" : "", given, kw, given == 1 && !kwonly_given ? "was" : "were");
        Py_XDECREF(kw);
    } else {
        PyErr_Format(PyExc_TypeError, "%U() takes %U positional argument%s but %zd %s given", ri->qualname, sig,
                     plural ? "s" : "", given, given == 1 ? "was" : "were");
    }
    Py_DECREF(sig);
}

/* The parameter named key, or -1: by identity first (keyword names are interned), then by value. */
static Py_ssize_t find_param(RecordInit *ri, PyObject *key) {
    Py_ssize_t n = PyTuple_GET_SIZE(ri->params);
    PyObject **items = &PyTuple_GET_ITEM(ri->params, 0);
    for (Py_ssize_t j = 0; j < n; j++)
        if (items[j] == key) return j;
    for (Py_ssize_t j = 0; j < n; j++) {
        int eq = PyUnicode_Compare(items[j], key);
        if (eq == 0) return j;
        if (eq == -1 && PyErr_Occurred()) PyErr_Clear();
    }
    return -1;
}

static int bind(RecordInit *ri, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, PyObject **bound) {
    Py_ssize_t nparams = PyTuple_GET_SIZE(ri->params), take = nargs < ri->npos ? nargs : ri->npos;
    for (Py_ssize_t i = 0; i < take; i++) bound[i] = args[i];
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    for (Py_ssize_t k = 0; k < nkw; k++) {
        PyObject *key = PyTuple_GET_ITEM(kwnames, k);
        Py_ssize_t j = find_param(ri, key);
        if (j < 0 && PyUnicode_Compare(key, ri->self_name) == 0) {  /* the instance, given again */
            PyErr_Format(PyExc_TypeError, "%U() got multiple values for argument '%S'", ri->qualname, key);
            return -1;
        }
        if (j < 0) {
            PyErr_Format(PyExc_TypeError, "%U() got an unexpected keyword argument '%S'", ri->qualname, key);
            return -1;
        }
        if (bound[j] != NULL) {
            PyErr_Format(PyExc_TypeError, "%U() got multiple values for argument '%S'", ri->qualname, key);
            return -1;
        }
        bound[j] = args[nargs + k];
    }
    if (nargs > ri->npos) {
        too_many(ri, nargs + 1, bound);
        return -1;
    }
    const char *req = PyBytes_AS_STRING(ri->required);
    for (Py_ssize_t j = 0; j < nparams; j++)
        if (bound[j] == NULL && req[j]) {
            if (j < ri->npos) missing(ri, bound, 0, ri->npos, "positional");
            else missing(ri, bound, ri->npos, nparams, "keyword-only");
            return -1;
        }
    return 0;
}

/* Whether the fields of self can be written straight to their slots (ri->offset): self is exactly of the class,
 * which assigns attributes as object does (or is frozen: object.__setattr__ is used), and the offsets were
 * found for the class as it is now (a change to the class gives it a new version tag). */
static int direct_slots(RecordInit *ri, PyObject *self) {
    PyTypeObject *type = Py_TYPE(self);
    if ((PyObject *)type != ri->cls || !(ri->frozen || type->tp_setattro == PyObject_GenericSetAttr) ||
        !PyType_HasFeature(type, Py_TPFLAGS_VALID_VERSION_TAG))
        return 0;
    if (ri->version != type->tp_version_tag) {
        Py_ssize_t n = PyTuple_GET_SIZE(ri->names);
        for (Py_ssize_t i = 0; i < n; i++) ri->offset[i] = slot_offset(type, PyTuple_GET_ITEM(ri->names, i));
        ri->version = type->tp_version_tag;
    }
    return 1;
}

static int assign(RecordInit *ri, PyObject *self, PyObject **bound) {
    Py_ssize_t n = PyTuple_GET_SIZE(ri->names);
    const char *kinds = PyBytes_AS_STRING(ri->kinds);
    int direct = direct_slots(ri, self);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *value = NULL, *made = NULL, *dflt = PyTuple_GET_ITEM(ri->values, i);
        Py_ssize_t j = ri->param_index[i];
        switch (kinds[i]) {
        case PARAM: value = bound[j] != NULL ? bound[j] : dflt; break;
        case FACTORY_PARAM: value = bound[j] != NULL ? bound[j] : (made = PyObject_CallNoArgs(dflt)); break;
        case SET: value = dflt; break;
        default: value = made = PyObject_CallNoArgs(dflt); break;
        }
        if (value == NULL) return -1;
        PyObject *name = PyTuple_GET_ITEM(ri->names, i);
        int rc = 0;
        if (direct && ri->offset[i] > 0) {  /* what the member descriptor's set does */
            PyObject **slot = (PyObject **)((char *)self + ri->offset[i]), *old = *slot;
            Py_INCREF(value);
            *slot = value;
            Py_XDECREF(old);
        } else {
            rc = ri->frozen ? PyObject_GenericSetAttr(self, name, value) : PyObject_SetAttr(self, name, value);
        }
        Py_XDECREF(made);
        if (rc < 0) return -1;
    }
    return 0;
}

static PyObject *ri_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    RecordInit *ri = (RecordInit *)callable;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs < 1) {
        PyErr_Format(PyExc_TypeError, "%U() missing 1 required positional argument: 'self'", ri->qualname);
        return NULL;
    }
    PyObject *self = args[0];
    Py_ssize_t nparams = PyTuple_GET_SIZE(ri->params);
    PyObject *stack[STACK_PARAMS], **bound = stack;
    if (nparams > STACK_PARAMS && (bound = PyMem_Malloc(nparams * sizeof(PyObject *))) == NULL)
        return PyErr_NoMemory();
    memset(bound, 0, (nparams ? nparams : 1) * sizeof(PyObject *));
    int rc = bind(ri, args + 1, nargs - 1, kwnames, bound);
    if (rc == 0) rc = assign(ri, self, bound);
    if (bound != stack) PyMem_Free(bound);
    if (rc < 0) return NULL;
    if (ri->post_init) {
        PyObject *r = PyObject_CallMethodNoArgs(self, s_post_init);
        if (r == NULL) return NULL;
        Py_DECREF(r);
    }
    Py_RETURN_NONE;
}

static int check_spec(RecordInit *ri) {
    Py_ssize_t nparams = PyTuple_GET_SIZE(ri->params), n = PyTuple_GET_SIZE(ri->names);
    if (PyBytes_GET_SIZE(ri->required) != nparams || PyBytes_GET_SIZE(ri->kinds) != n ||
        PyTuple_GET_SIZE(ri->param_of) != n || PyTuple_GET_SIZE(ri->values) != n || ri->npos < 0 ||
        ri->npos > nparams || ri->ndefaults < 0 || ri->ndefaults > ri->npos) {
        PyErr_SetString(PyExc_ValueError, "RecordInit: the spec's lengths disagree");
        return -1;
    }
    for (Py_ssize_t j = 0; j < nparams; j++)
        if (!PyUnicode_Check(PyTuple_GET_ITEM(ri->params, j))) {
            PyErr_SetString(PyExc_TypeError, "RecordInit: parameter names must be str");
            return -1;
        }
    if ((ri->param_index = PyMem_Malloc((n ? n : 1) * sizeof(Py_ssize_t))) == NULL ||
        (ri->offset = PyMem_Calloc(n ? n : 1, sizeof(Py_ssize_t))) == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    /* interned names: the attribute lookups of the assignments hit the type's cache only with those */
    PyObject *names = PyTuple_New(n);
    if (names == NULL) return -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *name = PyTuple_GET_ITEM(ri->names, i);
        if (!PyUnicode_CheckExact(name)) {
            Py_DECREF(names);
            PyErr_SetString(PyExc_TypeError, "RecordInit: field names must be str");
            return -1;
        }
        Py_INCREF(name);
        PyUnicode_InternInPlace(&name);
        PyTuple_SET_ITEM(names, i, name);
    }
    Py_SETREF(ri->names, names);
    const char *kinds = PyBytes_AS_STRING(ri->kinds);
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t j = PyLong_AsSsize_t(PyTuple_GET_ITEM(ri->param_of, i));
        if (j == -1 && PyErr_Occurred()) return -1;
        int takes_param = kinds[i] == PARAM || kinds[i] == FACTORY_PARAM;
        if (kinds[i] > SET_FACTORY || (takes_param ? (j < 0 || j >= nparams) : j != -1)) {
            PyErr_SetString(PyExc_ValueError, "RecordInit: a field's kind, parameter or name is wrong");
            return -1;
        }
        ri->param_index[i] = j;
    }
    return 0;
}

static PyObject *ri_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    static char *kw[] = {"qualname", "self_name", "params", "npos", "ndefaults", "required", "names", "kinds", "param_of",
                         "values", "frozen", "post_init", "signature_maker", "cls", NULL};
    PyObject *qualname, *self_name, *params, *required, *names, *kinds, *param_of, *values, *maker, *cls = Py_None;
    Py_ssize_t npos, ndefaults;
    int frozen, post_init;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "UUO!nnO!O!O!O!O!ppO|O:RecordInit", kw, &qualname, &self_name, &PyTuple_Type,
                                     &params, &npos, &ndefaults, &PyBytes_Type, &required, &PyTuple_Type, &names,
                                     &PyBytes_Type, &kinds, &PyTuple_Type, &param_of, &PyTuple_Type, &values, &frozen,
                                     &post_init, &maker, &cls))
        return NULL;
    RecordInit *ri = (RecordInit *)type->tp_alloc(type, 0);
    if (ri == NULL) return NULL;
    PyObject **slots[] = {&ri->qualname, &ri->self_name, &ri->params, &ri->required, &ri->names, &ri->kinds, &ri->param_of,
                          &ri->values, &ri->signature_maker, &ri->cls};
    PyObject *given[] = {qualname, self_name, params, required, names, kinds, param_of, values, maker, cls};
    for (size_t k = 0; k < sizeof(given) / sizeof(given[0]); k++) {
        Py_INCREF(given[k]);
        *slots[k] = given[k];
    }
    ri->npos = npos;
    ri->ndefaults = ndefaults;
    ri->frozen = frozen;
    ri->post_init = post_init;
    ri->vectorcall = ri_vectorcall;
    if (check_spec(ri) < 0) {
        Py_DECREF(ri);
        return NULL;
    }
    return (PyObject *)ri;
}

static int ri_traverse(RecordInit *ri, visitproc visit, void *arg) {
    Py_VISIT(ri->values);
    Py_VISIT(ri->signature_maker);
    Py_VISIT(ri->signature);
    Py_VISIT(ri->cls);
    return 0;
}

static int ri_clear(RecordInit *ri) {
    Py_CLEAR(ri->values);
    Py_CLEAR(ri->signature_maker);
    Py_CLEAR(ri->signature);
    Py_CLEAR(ri->cls);
    return 0;
}

static void ri_dealloc(RecordInit *ri) {
    PyObject_GC_UnTrack(ri);
    ri_clear(ri);
    Py_CLEAR(ri->qualname);
    Py_CLEAR(ri->self_name);
    Py_CLEAR(ri->params);
    Py_CLEAR(ri->required);
    Py_CLEAR(ri->names);
    Py_CLEAR(ri->kinds);
    Py_CLEAR(ri->param_of);
    PyMem_Free(ri->param_index);
    PyMem_Free(ri->offset);
    Py_TYPE(ri)->tp_free((PyObject *)ri);
}

/* As a function is: the object itself from the class, a bound method from an instance. */
static PyObject *ri_descr_get(PyObject *self, PyObject *obj, PyObject *type) {
    if (obj == NULL || obj == Py_None) {
        Py_INCREF(self);
        return self;
    }
    return PyMethod_New(self, obj);
}

static PyObject *ri_repr(RecordInit *ri) { return PyUnicode_FromFormat("<record __init__ %U>", ri->qualname); }

static PyObject *get_signature(RecordInit *ri, void *closure) {
    if (ri->signature == NULL) {
        if (ri->signature_maker == NULL || ri->signature_maker == Py_None) {
            PyErr_SetString(PyExc_AttributeError, "__signature__");
            return NULL;
        }
        ri->signature = PyObject_CallNoArgs(ri->signature_maker);
        if (ri->signature == NULL) return NULL;
    }
    Py_INCREF(ri->signature);
    return ri->signature;
}

static PyObject *get_name(RecordInit *ri, void *closure) { return PyUnicode_FromString("__init__"); }

static PyObject *get_qualname(RecordInit *ri, void *closure) {
    Py_INCREF(ri->qualname);
    return ri->qualname;
}

static PyGetSetDef ri_getset[] = {
    {"__signature__", (getter)get_signature, NULL, "inspect.Signature of the call, made on first use", NULL},
    {"__name__", (getter)get_name, NULL, NULL, NULL},
    {"__qualname__", (getter)get_qualname, NULL, NULL, NULL},
    {NULL},
};

static PyMemberDef ri_members[] = {
    {"params", T_OBJECT, offsetof(RecordInit, params), READONLY, "the parameter names, in signature order"},
    {"names", T_OBJECT, offsetof(RecordInit, names), READONLY, "the fields assigned, in order"},
    {NULL},
};

PyDoc_STRVAR(ri_doc,
"RecordInit(qualname, self_name, params, npos, ndefaults, required, names, kinds, param_of, values, frozen, post_init,\n"
"           signature_maker, cls=None)\n\n"
"A record's __init__: binds the call's arguments to the parameters and assigns the fields (see etkit.records).");

static PyTypeObject RecordInitType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "etkit._records.RecordInit",
    .tp_basicsize = sizeof(RecordInit),
    .tp_dealloc = (destructor)ri_dealloc,
    .tp_vectorcall_offset = offsetof(RecordInit, vectorcall),
    .tp_repr = (reprfunc)ri_repr,
    .tp_call = PyVectorcall_Call,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_doc = ri_doc,
    .tp_traverse = (traverseproc)ri_traverse,
    .tp_clear = (inquiry)ri_clear,
    .tp_members = ri_members,
    .tp_getset = ri_getset,
    .tp_descr_get = ri_descr_get,
    .tp_new = ri_new,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "etkit._records",
    "A record's __init__ in C: RecordInit (etkit.records uses it where it was built).", -1, NULL,
};

PyMODINIT_FUNC PyInit__records(void) {
    if (PyType_Ready(&RecordInitType) < 0) return NULL;
    if (s_post_init == NULL && (s_post_init = PyUnicode_InternFromString("__post_init__")) == NULL) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    Py_INCREF(&RecordInitType);
    if (PyModule_AddObject(m, "RecordInit", (PyObject *)&RecordInitType) < 0) {
        Py_DECREF(&RecordInitType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
