/* etkit.anonymize._scan: the byte loops of etkit anonymize in C (optional: the numpy paths give the same results).
 *
 * - joined(buf, off, length, sep): byte spans of buf joined by a one-byte separator
 *   (etkit.format.parts.joined_spans, without a Python object per span);
 * - prefix_hits(data, bitmap, bits, words): where a 4-byte window of data is one of a sorted set of words
 *   (the first four bytes of the strings the leak search looks for: etkit.anonymize.leaks), every window
 *   hashed and looked up in the bitmap as leaks' numpy path does, then checked against the words themselves;
 * - tensors(text): the canonical tensors of an IOInfo values text (etkit.anonymize.ioinfo.canonical_tensors:
 *   the same spans, or None where it declines);
 * - cut(text, start, end), nones(text), tensors_written(...): the assembly of the rewritten values texts
 *   (etkit.anonymize.ioinfo.IoRewriter._tensors_located's numpy steps, byte for byte);
 * - first_use(keys): 1, 2, ... for each distinct key in order of first use (ioinfo._first_use_ranks, by hashing).
 *
 * Only the buffer protocol is used (no numpy headers): arrays come in as contiguous buffers of the dtypes the
 * docstrings name, results go out as bytes or bytearrays that the callers view as numpy arrays. Every read is
 * bounds-checked against its buffer (checked under ASan and UBSan with tests/anonymize/test_kernels.py).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "../_buffers.h"

/* The four bytes at p as a little-endian word. */
static inline uint32_t load32(const uint8_t *p) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
#else
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
#endif
}

/* ---- joined(buf, off, length, sep) ------------------------------------------------------------------ */

PyDoc_STRVAR(joined_doc,
"joined(buf, off, length, sep)\n\n"
"The spans buf[off[i]:off[i] + length[i]] (int64 buffers; an offset of -1 is an empty span) joined by the\n"
"byte sep (an int), as bytes. ValueError where a span lies outside buf.");

static PyObject *joined(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *ob, *ooff, *olen;
    int sep;
    if (!PyArg_ParseTuple(args, "OOOi", &ob, &ooff, &olen, &sep)) return NULL;
    Buf B = {0}, O = {0}, L = {0};
    PyObject *result = NULL;
    if (get_buf(ob, &B, 1, "buf") < 0 || get_buf(ooff, &O, 8, "off") < 0 || get_buf(olen, &L, 8, "length") < 0)
        goto done;
    if (O.view.len != L.view.len) {
        PyErr_SetString(PyExc_ValueError, "joined: off and length differ in size");
        goto done;
    }
    const uint8_t *b = B.view.buf;
    const int64_t *off = O.view.buf, *len = L.view.buf;
    Py_ssize_t n = O.view.len / 8, size = B.view.len, total = n ? n - 1 : 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (off[i] < 0) continue;
        if (len[i] < 0 || off[i] > size || len[i] > size - off[i]) {
            PyErr_Format(PyExc_ValueError, "joined: span %zd lies outside the buffer", i);
            goto done;
        }
        total += (Py_ssize_t)len[i];
    }
    result = PyBytes_FromStringAndSize(NULL, total);
    if (result == NULL) goto done;
    char *out = PyBytes_AS_STRING(result);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (i) *out++ = (char)sep;
        if (off[i] < 0 || !len[i]) continue;
        memcpy(out, b + off[i], (size_t)len[i]);
        out += len[i];
    }
done:
    release(&B);
    release(&O);
    release(&L);
    return result;
}

/* ---- prefix_hits(data, bitmap, bits, words) --------------------------------------------------------- */

PyDoc_STRVAR(prefix_hits_doc,
"prefix_hits(data, bitmap, bits, words)\n\n"
"Every offset i (ascending, int64 bytearray) at which the little-endian word data[i:i + 4] is one of\n"
"words (sorted uint32 buffer): the window's hash (w * 2654435761 mod 2**32) >> (32 - bits) is looked up in\n"
"bitmap (one byte per hash, 2**bits of them) first, then the word among words.");

static PyObject *prefix_hits(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *odata, *obitmap, *owords;
    int bits;
    if (!PyArg_ParseTuple(args, "OOiO", &odata, &obitmap, &bits, &owords)) return NULL;
    Buf D = {0}, M = {0}, W = {0};
    PyObject *result = NULL;
    int64_t *hits = NULL;
    Py_ssize_t count = 0, cap = 0;
    if (get_buf(odata, &D, 1, "data") < 0 || get_buf(obitmap, &M, 1, "bitmap") < 0 || get_buf(owords, &W, 4, "words") < 0)
        goto done;
    if (bits < 1 || bits > 30 || M.view.len != ((Py_ssize_t)1 << bits)) {
        PyErr_SetString(PyExc_ValueError, "prefix_hits: the bitmap is not 2**bits bytes");
        goto done;
    }
    const uint8_t *d = D.view.buf, *bitmap = M.view.buf;
    const uint32_t *words = W.view.buf;
    Py_ssize_t nwords = W.view.len / 4, n = D.view.len;
    const unsigned shift = 32u - (unsigned)bits;
    if (nwords) {
        for (Py_ssize_t i = 0; i + 4 <= n; i++) {
            uint32_t w = load32(d + i);
            if (!bitmap[(uint32_t)(w * 2654435761u) >> shift]) continue;
            Py_ssize_t lo = 0, hi = nwords; /* the first word >= w */
            while (lo < hi) {
                Py_ssize_t mid = lo + (hi - lo) / 2;
                if (words[mid] < w) lo = mid + 1;
                else hi = mid;
            }
            if (lo == nwords || words[lo] != w) continue;
            if (count == cap) {
                Py_ssize_t grown_cap = cap ? 2 * cap : 1024;
                int64_t *grown = PyMem_Realloc(hits, (size_t)grown_cap * sizeof(int64_t));
                if (grown == NULL) {
                    PyErr_NoMemory();
                    goto done;
                }
                hits = grown;
                cap = grown_cap;
            }
            hits[count++] = (int64_t)i;
        }
    }
    result = PyByteArray_FromStringAndSize(NULL, count * (Py_ssize_t)sizeof(int64_t));
    if (result != NULL && count) memcpy(PyByteArray_AS_STRING(result), hits, (size_t)count * sizeof(int64_t));
done:
    PyMem_Free(hits);
    release(&D);
    release(&M);
    release(&W);
    return result;
}

/* ---- tensors(text) ----------------------------------------------------------------------------------- */

PyDoc_STRVAR(tensors_doc,
"tensors(text)\n\n"
"The tensors [tensor_id, storage_id, offset, numel, elem_bytes, 'device'] of text written as PyTorch writes\n"
"them (one space after each comma), as etkit.anonymize.ioinfo.canonical_tensors finds them: an int64 bytearray\n"
"of 7 rows of m (start, end, tensor id, storage id, where the storage id ends, where the device starts and\n"
"ends); None where canonical_tensors declines (two tensors overlapping, an id with a leading zero or of more\n"
"than 18 digits).");

#define MAX_DIGITS 18

static inline int is_digit(uint8_t c) { return (uint8_t)(c - 48) <= 9; }

/* The end of the run of digits at text[at] (at itself: none); its value (first MAX_DIGITS digits) in *value. */
static inline Py_ssize_t digit_run(const uint8_t *t, Py_ssize_t n, Py_ssize_t at, int64_t *value) {
    int64_t v = 0;
    Py_ssize_t e = at;
    while (e < n && is_digit(t[e])) {
        if (e - at < MAX_DIGITS) v = v * 10 + (t[e] - 48);
        e++;
    }
    *value = v;
    return e;
}

static PyObject *tensors(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *otext;
    if (!PyArg_ParseTuple(args, "O", &otext)) return NULL;
    Buf T = {0};
    PyObject *result = NULL;
    int64_t *rows = NULL;
    Py_ssize_t count = 0, cap = 0;
    if (get_buf(otext, &T, 1, "text") < 0) goto done;
    const uint8_t *t = T.view.buf;
    const Py_ssize_t n = T.view.len;
    int64_t prev_stop = -1;
    int declined = 0;
    /* the first special byte (' \\ \x1e \x1f) at or after special_from (n: none): what ends a device */
    Py_ssize_t special = -1, special_from = -1;
    for (const uint8_t *p = memchr(t, '[', (size_t)n); p != NULL; p = memchr(p + 1, '[', (size_t)(n - (p + 1 - t)))) {
        Py_ssize_t lb = p - t, f0 = lb + 1;
        if (f0 >= n || !is_digit(t[f0])) continue;
        int64_t tid, sid, unused;
        Py_ssize_t e0 = digit_run(t, n, f0, &tid), end = e0, f1 = 0, e1 = 0;
        int ok = 1;
        for (int k = 0; k < 4 && ok; k++) { /* ", " and the next run (the third number: maybe a minus first) */
            Py_ssize_t nxt = end + 2;
            if (k == 1 && nxt < n && t[nxt] == '-') nxt++;
            if (!(end + 1 < n && t[end] == ',' && t[end + 1] == ' ' && nxt < n && is_digit(t[nxt]))) {
                ok = 0;
                break;
            }
            end = digit_run(t, n, nxt, k == 0 ? &sid : &unused);
            if (k == 0) {
                f1 = nxt;
                e1 = end;
            }
        }
        if (!ok) continue;
        if (!(end + 2 < n && t[end] == ',' && t[end + 1] == ' ' && t[end + 2] == '\'')) continue;
        Py_ssize_t device = end + 3;
        if (special < device || device < special_from) { /* the first special byte at or after device, else n */
            special = special_from = device;
            while (special < n && t[special] != '\'' && t[special] != '\\' && t[special] != 0x1E && t[special] != 0x1F)
                special++;
        }
        Py_ssize_t close = special;
        if (!(close + 1 < n && t[close] == '\'' && t[close + 1] == ']')) continue;
        int64_t start = lb, stop = close + 2;
        if (start < prev_stop || (e0 - f0 > 1 && t[f0] == '0') || e0 - f0 > MAX_DIGITS || (e1 - f1 > 1 && t[f1] == '0') ||
            e1 - f1 > MAX_DIGITS) {
            declined = 1;
            break;
        }
        prev_stop = stop;
        if (count == cap) {
            Py_ssize_t grown_cap = cap ? 2 * cap : 1024;
            int64_t *grown = PyMem_Realloc(rows, (size_t)grown_cap * 7 * sizeof(int64_t));
            if (grown == NULL) {
                PyErr_NoMemory();
                goto done;
            }
            rows = grown;
            cap = grown_cap;
        }
        int64_t *row = rows + 7 * count++;
        row[0] = start, row[1] = stop, row[2] = tid, row[3] = sid, row[4] = e1, row[5] = device, row[6] = close;
    }
    if (declined) {
        Py_INCREF(Py_None);
        result = Py_None;
        goto done;
    }
    result = PyByteArray_FromStringAndSize(NULL, 7 * count * (Py_ssize_t)sizeof(int64_t));
    if (result == NULL) goto done;
    int64_t *out = (int64_t *)PyByteArray_AS_STRING(result);
    for (Py_ssize_t i = 0; i < count; i++)
        for (int j = 0; j < 7; j++) out[j * count + i] = rows[7 * i + j];
done:
    PyMem_Free(rows);
    release(&T);
    return result;
}

/* ---- cut(text, start, end) -------------------------------------------------------------------------- */

PyDoc_STRVAR(cut_doc,
"cut(text, start, end)\n\n"
"text with each span text[start[i]:end[i]] (int64 buffers; ascending, not overlapping, none empty) replaced\n"
"by one byte 0x1e, as bytes. ValueError where the spans are not so.");

static PyObject *cut(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *otext, *ostart, *oend;
    if (!PyArg_ParseTuple(args, "OOO", &otext, &ostart, &oend)) return NULL;
    Buf T = {0}, S = {0}, E = {0};
    PyObject *result = NULL;
    if (get_buf(otext, &T, 1, "text") < 0 || get_buf(ostart, &S, 8, "start") < 0 || get_buf(oend, &E, 8, "end") < 0)
        goto done;
    const uint8_t *t = T.view.buf;
    const int64_t *start = S.view.buf, *end = E.view.buf;
    Py_ssize_t n = T.view.len, m = S.view.len / 8, size = n;
    int64_t last = 0;
    if (E.view.len != S.view.len) goto bad;
    for (Py_ssize_t i = 0; i < m; i++) {
        if (start[i] < last || end[i] <= start[i] || end[i] > n) goto bad;
        size -= (Py_ssize_t)(end[i] - start[i]) - 1;
        last = end[i];
    }
    result = PyBytes_FromStringAndSize(NULL, size);
    if (result == NULL) goto done;
    char *out = PyBytes_AS_STRING(result);
    last = 0;
    for (Py_ssize_t i = 0; i < m; i++) {
        memcpy(out, t + last, (size_t)(start[i] - last));
        out += start[i] - last;
        *out++ = 0x1E;
        last = end[i];
    }
    memcpy(out, t + last, (size_t)(n - last));
    goto done;
bad:
    PyErr_SetString(PyExc_ValueError, "cut: the spans are not ascending, apart and inside the text");
done:
    release(&T);
    release(&S);
    release(&E);
    return result;
}

/* ---- nones(text) ------------------------------------------------------------------------------------ */

PyDoc_STRVAR(nones_doc,
"nones(text)\n\n"
"text with every run of bytes that are not delimiters ([](), space, \\t\\n\\r\\f\\v, 0x1e, 0x1f) replaced by\n"
"None, as bytes (etkit.anonymize.ioinfo._nones of a text without quotes).");

static uint8_t delimiter[256];

static PyObject *nones(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *otext;
    if (!PyArg_ParseTuple(args, "O", &otext)) return NULL;
    Buf T = {0};
    PyObject *result = NULL;
    if (get_buf(otext, &T, 1, "text") < 0) goto done;
    const uint8_t *t = T.view.buf;
    Py_ssize_t n = T.view.len, size = 0;
    for (Py_ssize_t i = 0; i < n; i++) { /* a delimiter is one byte, a run four */
        if (delimiter[t[i]]) size++;
        else if (i == 0 || delimiter[t[i - 1]]) size += 4;
    }
    result = PyBytes_FromStringAndSize(NULL, size);
    if (result == NULL) goto done;
    char *out = PyBytes_AS_STRING(result);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (delimiter[t[i]]) *out++ = (char)t[i];
        else if (i == 0 || delimiter[t[i - 1]]) {
            memcpy(out, "None", 4);
            out += 4;
        }
    }
done:
    release(&T);
    return result;
}

/* ---- tensors_written(text, source, ids, storages, storage_end, device, kind, kinds) ------------------ */

PyDoc_STRVAR(tensors_written_doc,
"tensors_written(text, source, ids, storages, storage_end, device, kind, kinds)\n\n"
"text with its i-th byte 0x1e replaced by the tensor [ids[i], storages[i]<source[storage_end[i]:device[i]]>\n"
"<kinds[kind[i]]>'] (int64 buffers; ids and storages positive; kinds a tuple of bytes), as bytes: the\n"
"renumbered tensors of IoRewriter._tensors_located. ValueError where text has not one 0x1e per tensor.");

static inline char *put_decimal(char *out, int64_t v) {
    char digits[24];
    int k = 0;
    do {
        digits[k++] = (char)('0' + v % 10);
        v /= 10;
    } while (v > 0);
    while (k) *out++ = digits[--k];
    return out;
}

static inline Py_ssize_t decimal_len(int64_t v) {
    Py_ssize_t k = 1;
    while (v >= 10) {
        v /= 10;
        k++;
    }
    return k;
}

static PyObject *tensors_written(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *otext, *osource, *oids, *ostorages, *oend, *odevice, *okind, *okinds;
    if (!PyArg_ParseTuple(args, "OOOOOOOO!", &otext, &osource, &oids, &ostorages, &oend, &odevice, &okind,
                          &PyTuple_Type, &okinds))
        return NULL;
    Buf T = {0}, S = {0}, I = {0}, G = {0}, E = {0}, D = {0}, K = {0};
    PyObject *result = NULL;
    if (get_buf(otext, &T, 1, "text") < 0 || get_buf(osource, &S, 1, "source") < 0 || get_buf(oids, &I, 8, "ids") < 0 ||
        get_buf(ostorages, &G, 8, "storages") < 0 || get_buf(oend, &E, 8, "storage_end") < 0 ||
        get_buf(odevice, &D, 8, "device") < 0 || get_buf(okind, &K, 8, "kind") < 0)
        goto done;
    const uint8_t *t = T.view.buf, *src = S.view.buf;
    const int64_t *ids = I.view.buf, *storages = G.view.buf, *send = E.view.buf, *device = D.view.buf,
                  *kind = K.view.buf;
    Py_ssize_t n = T.view.len, m = I.view.len / 8, nk = PyTuple_GET_SIZE(okinds), marks = 0;
    if (G.view.len != I.view.len || E.view.len != I.view.len || D.view.len != I.view.len || K.view.len != I.view.len)
        goto bad;
    for (Py_ssize_t k = 0; k < nk; k++)
        if (!PyBytes_Check(PyTuple_GET_ITEM(okinds, k))) goto bad;
    Py_ssize_t size = n;
    for (Py_ssize_t i = 0; i < m; i++) {
        if (ids[i] < 1 || storages[i] < 1 || kind[i] < 0 || kind[i] >= nk || send[i] < 0 || device[i] < send[i] ||
            device[i] > S.view.len)
            goto bad;
        size += 1 + decimal_len(ids[i]) + 2 + decimal_len(storages[i]) + (Py_ssize_t)(device[i] - send[i]) +
                PyBytes_GET_SIZE(PyTuple_GET_ITEM(okinds, kind[i])) + 2 - 1;
    }
    for (const uint8_t *p = memchr(t, 0x1E, (size_t)n); p != NULL; p = memchr(p + 1, 0x1E, (size_t)(n - (p + 1 - t))))
        marks++;
    if (marks != m) goto bad;
    result = PyBytes_FromStringAndSize(NULL, size);
    if (result == NULL) goto done;
    char *out = PyBytes_AS_STRING(result);
    Py_ssize_t i = 0, done_to = 0;
    for (const uint8_t *p = memchr(t, 0x1E, (size_t)n); p != NULL; p = memchr(p + 1, 0x1E, (size_t)(n - (p + 1 - t)))) {
        Py_ssize_t j = p - t;
        memcpy(out, t + done_to, (size_t)(j - done_to));
        out += j - done_to;
        done_to = j + 1;
        *out++ = '[';
        out = put_decimal(out, ids[i]);
        *out++ = ',';
        *out++ = ' ';
        out = put_decimal(out, storages[i]);
        memcpy(out, src + send[i], (size_t)(device[i] - send[i]));
        out += device[i] - send[i];
        PyObject *k = PyTuple_GET_ITEM(okinds, kind[i]);
        memcpy(out, PyBytes_AS_STRING(k), (size_t)PyBytes_GET_SIZE(k));
        out += PyBytes_GET_SIZE(k);
        *out++ = '\'';
        *out++ = ']';
        i++;
    }
    memcpy(out, t + done_to, (size_t)(n - done_to));
    goto done;
bad:
    PyErr_SetString(PyExc_ValueError, "tensors_written: the tensors do not fit the text");
done:
    release(&T);
    release(&S);
    release(&I);
    release(&G);
    release(&E);
    release(&D);
    release(&K);
    return result;
}

/* ---- first_use(keys) -------------------------------------------------------------------------------- */

PyDoc_STRVAR(first_use_doc,
"first_use(keys)\n\n"
"(numbers, count): for each key of keys (int64 buffer) the number 1, 2, ... of its value in order of first use\n"
"(an int64 bytearray), and how many distinct values there are.");

static PyObject *first_use(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *okeys;
    if (!PyArg_ParseTuple(args, "O", &okeys)) return NULL;
    Buf K = {0};
    PyObject *numbers = NULL, *result = NULL;
    int64_t *slot_key = NULL, *slot_number = NULL;
    if (get_buf(okeys, &K, 8, "keys") < 0) goto done;
    const int64_t *keys = K.view.buf;
    Py_ssize_t n = K.view.len / 8;
    size_t cap = 16;
    while (cap < 2 * (size_t)n) cap <<= 1;
    slot_key = PyMem_Malloc(cap * sizeof(int64_t));
    slot_number = PyMem_Calloc(cap, sizeof(int64_t)); /* 0: an empty slot */
    numbers = PyByteArray_FromStringAndSize(NULL, n * (Py_ssize_t)sizeof(int64_t));
    if (slot_key == NULL || slot_number == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    if (numbers == NULL) goto done;
    int64_t *out = (int64_t *)PyByteArray_AS_STRING(numbers), count = 0;
    const size_t mask = cap - 1;
    for (Py_ssize_t i = 0; i < n; i++) {
        uint64_t h = (uint64_t)keys[i] * 0x9E3779B97F4A7C15ULL;
        size_t at = (size_t)(h >> 32) & mask;
        while (slot_number[at] && slot_key[at] != keys[i]) at = (at + 1) & mask;
        if (!slot_number[at]) {
            slot_key[at] = keys[i];
            slot_number[at] = ++count;
        }
        out[i] = slot_number[at];
    }
    result = Py_BuildValue("(OL)", numbers, (long long)count);
done:
    Py_XDECREF(numbers);
    PyMem_Free(slot_key);
    PyMem_Free(slot_number);
    release(&K);
    return result;
}

static PyMethodDef methods[] = {
    {"joined", joined, METH_VARARGS, joined_doc},
    {"prefix_hits", prefix_hits, METH_VARARGS, prefix_hits_doc},
    {"tensors", tensors, METH_VARARGS, tensors_doc},
    {"cut", cut, METH_VARARGS, cut_doc},
    {"nones", nones, METH_VARARGS, nones_doc},
    {"tensors_written", tensors_written, METH_VARARGS, tensors_written_doc},
    {"first_use", first_use, METH_VARARGS, first_use_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "etkit.anonymize._scan",
    "The byte loops of etkit anonymize in C (optional: the numpy paths give the same results).", -1, methods,
};

PyMODINIT_FUNC PyInit__scan(void) {
    static const char delimiters[] = "[](), \t\n\r\f\v\x1e\x1f";
    for (const char *c = delimiters; *c; c++) delimiter[(uint8_t)*c] = 1;
    return PyModule_Create(&module);
}
