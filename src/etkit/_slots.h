/* Where a slots class keeps an attribute, for etkit's C code that fills or reads records' slots directly
 * (etkit._records' __init__, etkit.pytorch._hostops' HostOp maker and reader): one home for the rule of when a
 * slot may be written or read without the attribute protocol. Include after Python.h and structmember.h. */
#ifndef ETKIT_SLOTS_H
#define ETKIT_SLOTS_H

/* The offset of the slot that holds attribute ``name`` in objects of exactly ``type``: a writable T_OBJECT_EX
 * member descriptor of the class's own dict (no MRO walk: the class's own dict comes first in it); 0 where there
 * is none. */
static Py_ssize_t slot_offset(PyTypeObject *type, PyObject *name) {
    PyObject *d = PyDict_GetItemWithError(type->tp_dict, name);
    if (d == NULL) { PyErr_Clear(); return 0; }
    if (!Py_IS_TYPE(d, &PyMemberDescr_Type)) return 0;
    PyMemberDef *m = ((PyMemberDescrObject *)d)->d_member;
    return m->type == T_OBJECT_EX && m->offset > 0 && !(m->flags & READONLY) ? m->offset : 0;
}

#endif
