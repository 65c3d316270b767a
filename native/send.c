/* The producer's send path: Kafka's murmur2 key hashing and the drain's per-record column work.
 *
 * Pure-Python counterparts (the reference; tests/test_native_send.py checks both give equal results):
 *   murmur2(data)                      pylog/clients/partitioner.py murmur2
 *   murmur2_lengths(lengths, data)     partitioner._murmur2_u32's hashing (the checks stay in Python)
 *   key_partitions(keys, n)            partitions_for_keys over a key column (accumulator.Accumulation.place)
 *   take(items, index)                 accumulator.take
 *   unzip2(rows)                       accumulator.Accumulation.columns for values and keys
 *
 * Nothing here reads from disk: the inputs are the caller's lists and buffers, every index and length is
 * checked against what the buffer holds before it is used. */
#include "common.h"

#define MM_SEED 0x9747B28Cu
#define MM_M 0x5BD1E995u

/* Kafka's Utils.murmur2 as the unsigned 32 bits (Java's int is the same bits). */
static uint32_t mm2(const unsigned char *p, Py_ssize_t len) {
    uint32_t h = MM_SEED ^ (uint32_t)len;
    Py_ssize_t body = len & ~(Py_ssize_t)3;
    for (Py_ssize_t i = 0; i < body; i += 4) {
        uint32_t k = ld_u32(p + i);
        k *= MM_M;
        k ^= k >> 24;
        k *= MM_M;
        h *= MM_M;
        h ^= k;
    }
    switch (len & 3) {  /* Java's fall-through switch: the tail bytes at bits 16, 8, 0 */
    case 3: h ^= (uint32_t)p[body + 2] << 16; /* fall through */
    case 2: h ^= (uint32_t)p[body + 1] << 8; /* fall through */
    case 1: h ^= (uint32_t)p[body]; h *= MM_M;
    }
    h ^= h >> 13;
    h *= MM_M;
    h ^= h >> 15;
    return h;
}

static PyObject *py_murmur2(PyObject *self, PyObject *arg) {
    Py_buffer view;
    if (PyMemoryView_Check(arg) && !PyBuffer_IsContiguous(PyMemoryView_GET_BUFFER(arg), 'C')) {
        /* what the pure function's memoryview(data).cast("B") raises */
        PyErr_SetString(PyExc_TypeError, "memoryview: casts are restricted to C-contiguous views");
        return NULL;
    }
    if (PyObject_GetBuffer(arg, &view, PyBUF_C_CONTIGUOUS) < 0) return NULL;
    uint32_t h = mm2(view.buf, view.len);
    PyBuffer_Release(&view);
    return PyLong_FromLong((long)(int32_t)h);
}

/* A 1-D C-contiguous int64 buffer (numpy's int64 / intp arrays). */
static int get_i64(PyObject *obj, Py_buffer *view, const char *what) {
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return -1;
    const char *f = view->format ? view->format : "B";
    if (*f == '<' || *f == '=' || *f == '@') f++;
    if (view->ndim != 1 || view->itemsize != 8 || !(strcmp(f, "q") == 0 || strcmp(f, "l") == 0)) {
        PyBuffer_Release(view);
        PyErr_Format(PyExc_TypeError, "%s must be a 1-D int64 array", what);
        return -1;
    }
    return 0;
}

/* murmur2_lengths(lengths, data) -> bytearray: the unsigned murmur2 of each key as little-endian uint32 (0 for
 * a null key, length -1); the keys' bytes are back to back in data. */
static PyObject *py_murmur2_lengths(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "murmur2_lengths(lengths, data)");
        return NULL;
    }
    Py_buffer lv, dv;
    if (get_i64(args[0], &lv, "lengths") < 0) return NULL;
    if (PyObject_GetBuffer(args[1], &dv, PyBUF_C_CONTIGUOUS) < 0) {
        PyBuffer_Release(&lv);
        return NULL;
    }
    Py_ssize_t n = lv.shape ? lv.shape[0] : lv.len / 8;
    PyObject *out = NULL;
    if (n > PY_SSIZE_T_MAX / 4) {
        PyErr_NoMemory();
        goto done;
    }
    out = PyByteArray_FromStringAndSize(NULL, n * 4);
    if (out == NULL) goto done;
    unsigned char *o = (unsigned char *)PyByteArray_AS_STRING(out);
    const unsigned char *d = dv.buf;
    const unsigned char *lp = lv.buf;
    Py_ssize_t pos = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t len = ld_i64(lp + 8 * i);
        uint32_t h = 0;
        if (len >= 0) {
            if (len > dv.len - pos) {
                Py_CLEAR(out);
                PyErr_SetString(PyExc_ValueError, "key lengths add up to more bytes than data holds");
                goto done;
            }
            h = mm2(d + pos, (Py_ssize_t)len);
            pos += (Py_ssize_t)len;
        } else if (len != -1) {
            Py_CLEAR(out);
            PyErr_SetString(PyExc_ValueError, "key lengths must be >= -1 (-1 = null key)");
            goto done;
        }
        st_u32(o + 4 * i, h);
    }
    if (pos != dv.len) {
        Py_CLEAR(out);
        PyErr_SetString(PyExc_ValueError, "key lengths add up to fewer bytes than data holds");
    }
done:
    PyBuffer_Release(&lv);
    PyBuffer_Release(&dv);
    return out;
}

/* key_partitions(keys, num_partitions) -> bytearray | None: for each key of the list, Kafka's partition
 * toPositive(murmur2(key)) % num_partitions as little-endian int32, -1 for None. None when an item is
 * neither bytes, bytearray nor None (the caller takes its general path). */
static PyObject *py_key_partitions(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyList_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "key_partitions(keys: list, num_partitions: int)");
        return NULL;
    }
    long parts = PyLong_AsLong(args[1]);
    if (parts == -1 && PyErr_Occurred()) return NULL;
    if (parts < 1 || parts > 0x7FFFFFFFL) {
        PyErr_SetString(PyExc_ValueError, "num_partitions must be in [1, 2**31 - 1]");
        return NULL;
    }
    PyObject *keys = args[0];
    Py_ssize_t n = PyList_GET_SIZE(keys);
    for (Py_ssize_t i = 0; i < n; i++) {  /* types first: nothing below can change the list */
        PyObject *k = PyList_GET_ITEM(keys, i);
        if (k != Py_None && !PyBytes_CheckExact(k) && !PyByteArray_CheckExact(k)) Py_RETURN_NONE;
    }
    if (n > PY_SSIZE_T_MAX / 4) return PyErr_NoMemory();
    PyObject *out = PyByteArray_FromStringAndSize(NULL, n * 4);
    if (out == NULL) return NULL;
    unsigned char *o = (unsigned char *)PyByteArray_AS_STRING(out);
    uint32_t np_ = (uint32_t)parts;
    for (Py_ssize_t i = 0; i < n; i++) {  /* no Python code runs in the loop: the list stays as checked */
        PyObject *k = PyList_GET_ITEM(keys, i);
        int32_t p = -1;
        if (PyBytes_CheckExact(k)) {
            p = (int32_t)((mm2((const unsigned char *)PyBytes_AS_STRING(k), PyBytes_GET_SIZE(k)) & 0x7FFFFFFFu) % np_);
        } else if (k != Py_None) {
            p = (int32_t)((mm2((const unsigned char *)PyByteArray_AS_STRING(k), PyByteArray_GET_SIZE(k))
                           & 0x7FFFFFFFu) % np_);
        }
        st_i32(o + 4 * i, p);
    }
    return out;
}

/* take(items, index) -> list: [items[i] for i in index], index a 1-D int64 array; a negative index counts
 * from the end and one out of range raises IndexError, as list indexing does. */
static PyObject *py_take(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyList_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "take(items: list, index: int64 array)");
        return NULL;
    }
    Py_buffer iv;
    if (get_i64(args[1], &iv, "index") < 0) return NULL;
    PyObject *items = args[0];
    Py_ssize_t n = iv.shape ? iv.shape[0] : iv.len / 8;
    PyObject *out = PyList_New(n);
    if (out != NULL) {
        const unsigned char *ip = iv.buf;
        Py_ssize_t size = PyList_GET_SIZE(items);
        for (Py_ssize_t j = 0; j < n; j++) {
            int64_t i = ld_i64(ip + 8 * j);
            if (i < 0) i += size;
            if (i < 0 || i >= size) {
                Py_CLEAR(out);
                PyErr_SetString(PyExc_IndexError, "list index out of range");
                break;
            }
            PyObject *v = PyList_GET_ITEM(items, (Py_ssize_t)i);
            Py_INCREF(v);
            PyList_SET_ITEM(out, j, v);
        }
    }
    PyBuffer_Release(&iv);
    return out;
}

/* unzip2(rows) -> (values, keys): items 0 and 1 of each tuple row, (row, None) for any other row. */
static PyObject *py_unzip2(PyObject *self, PyObject *rows) {
    if (!PyList_Check(rows)) {
        PyErr_SetString(PyExc_TypeError, "unzip2(rows: list)");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(rows);
    PyObject *values = PyList_New(n);
    PyObject *keys = PyList_New(n);
    if (values == NULL || keys == NULL) goto fail;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *r = PyList_GET_ITEM(rows, i);
        PyObject *v = r, *k = Py_None;
        if (PyTuple_CheckExact(r)) {
            if (PyTuple_GET_SIZE(r) < 2) {
                PyErr_SetString(PyExc_IndexError, "tuple index out of range");
                goto fail;
            }
            v = PyTuple_GET_ITEM(r, 0);
            k = PyTuple_GET_ITEM(r, 1);
        }
        Py_INCREF(v);
        PyList_SET_ITEM(values, i, v);
        Py_INCREF(k);
        PyList_SET_ITEM(keys, i, k);
    }
    PyObject *pair = PyTuple_New(2);
    if (pair == NULL) goto fail;
    PyTuple_SET_ITEM(pair, 0, values);
    PyTuple_SET_ITEM(pair, 1, keys);
    return pair;
fail:
    Py_XDECREF(values);
    Py_XDECREF(keys);
    return NULL;
}

PyMethodDef pylog_send_methods[] = {
    {"murmur2", (PyCFunction)py_murmur2, METH_O,
     "murmur2(data) -> int: Kafka's Utils.murmur2 of a bytes-like object (Java's signed int)."},
    {"murmur2_lengths", (PyCFunction)(void (*)(void))py_murmur2_lengths, METH_FASTCALL,
     "murmur2_lengths(lengths, data) -> bytearray: unsigned murmur2 per key as uint32 (0 for null keys)."},
    {"key_partitions", (PyCFunction)(void (*)(void))py_key_partitions, METH_FASTCALL,
     "key_partitions(keys, num_partitions) -> bytearray | None: Kafka's partition per key as int32, -1 for None."},
    {"take", (PyCFunction)(void (*)(void))py_take, METH_FASTCALL,
     "take(items, index) -> list: [items[i] for i in index]."},
    {"unzip2", (PyCFunction)py_unzip2, METH_O,
     "unzip2(rows) -> (values, keys): items 0 and 1 of tuple rows, (row, None) for others."},
    {NULL, NULL, 0, NULL},
};
