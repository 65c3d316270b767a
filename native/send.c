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

/* ------------------------------------------------------------------------------------------------------
 * Sender: Producer.send()'s fast path (pylog/clients/producer.py), installed as the producer's `send`.
 *
 * It does what the Python method's fast path does, step for step: for a bytes value without headers or
 * timestamp, a key that is None or bytes and a partition that is None or an int, it takes the producer's
 * lock, looks the topic's Accumulation up, checks the value (and key) against its limit (and the partition
 * against its count), appends the value (with a key and no partition: the value, and the key at the same
 * index of `rkeys`, counted in `adjust`; with a partition: the (value, key, partition, None, None) tuple,
 * counted in `slow`, `extra` and `adjust`) and makes the FutureRecordMetadata; it calls the producer's _settle when the
 * record's index reaches check_at and its _drain_all when _settle says the buffer is full. Every other call
 * (other types, keywords it does not know, a topic not seen yet, a record over the limit) goes, before
 * anything is changed, to the Python method itself, which gives the same results and errors.
 *
 * The Accumulation's and the future's fields are __slots__ of Python classes: read and written at the
 * offsets their member descriptors give (what CPython's own LOAD_ATTR_SLOT does), only for objects of
 * exactly those classes. No Python code runs between the checks and the append except what Python's own
 * fast path runs (allocation may collect garbage in both). */
#include <structmember.h>

enum { A_RECORDS, A_RKEYS, A_LIMIT, A_KLIMIT, A_NPARTS, A_CHECK_AT, A_SLOW, A_EXTRA, A_ADJUST, A_COUNT };
static const char *const acc_fields[A_COUNT] = {"records", "rkeys", "limit", "klimit", "nparts", "check_at",
                                                "slow", "extra", "adjust"};

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *py_send, *acquire, *release, *accs, *settle, *drain_all, *acc_type, *fut_type;
    Py_ssize_t acc_off[A_COUNT];
    Py_ssize_t fut_acc_off, fut_i_off;
} Sender;

#define SLOT(obj, off) (*(PyObject **)((char *)(obj) + (off)))

static int slot_offset(PyObject *type, const char *name, Py_ssize_t *off) {
    PyObject *d = PyObject_GetAttrString(type, name);
    if (d == NULL) return -1;
    int ok = Py_IS_TYPE(d, &PyMemberDescr_Type) && ((PyMemberDescrObject *)d)->d_member->type == T_OBJECT_EX
             && !(((PyMemberDescrObject *)d)->d_member->flags & READONLY);
    if (ok) *off = ((PyMemberDescrObject *)d)->d_member->offset;
    Py_DECREF(d);
    if (!ok) {
        PyErr_Format(PyExc_TypeError, "Sender: %s is not a __slots__ field", name);
        return -1;
    }
    return 0;
}

/* An int slot's value as a Py_ssize_t; 0 with *ok = 0 when it is not an exact int that fits. */
static Py_ssize_t int_slot(PyObject *obj, Py_ssize_t off, int *ok) {
    PyObject *v = SLOT(obj, off);
    if (v == NULL || !PyLong_CheckExact(v)) {
        *ok = 0;
        return 0;
    }
    int overflow;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow || (x == -1LL && PyErr_Occurred())) {
        PyErr_Clear();
        *ok = 0;
        return 0;
    }
    return (Py_ssize_t)x;
}

static int set_int_slot(PyObject *obj, Py_ssize_t off, Py_ssize_t value) {
    PyObject *v = PyLong_FromSsize_t(value);
    if (v == NULL) return -1;
    PyObject *old = SLOT(obj, off);
    SLOT(obj, off) = v;
    Py_XDECREF(old);
    return 0;
}

static PyObject *sender_fallback(Sender *s, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    return PyObject_Vectorcall(s->py_send, args, nargsf, kwnames);
}

static PyObject *sender_call(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Sender *s = (Sender *)self;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    /* topic, value, key, headers, partition, timestamp_ms */
    PyObject *a[6] = {NULL, Py_None, Py_None, Py_None, Py_None, Py_None};
    if (nargs < 1 || nargs > 6) return sender_fallback(s, args, nargsf, kwnames);
    for (Py_ssize_t i = 0; i < nargs; i++) a[i] = args[i];
    if (kwnames != NULL) {
        static const char *const names[6] = {"topic", "value", "key", "headers", "partition", "timestamp_ms"};
        Py_ssize_t nk = PyTuple_GET_SIZE(kwnames);
        for (Py_ssize_t j = 0; j < nk; j++) {
            PyObject *name = PyTuple_GET_ITEM(kwnames, j);
            int at = -1;
            for (int k = 1; k < 6; k++) {
                if (PyUnicode_CompareWithASCIIString(name, names[k]) == 0) {
                    at = k;
                    break;
                }
            }
            if (at < nargs) return sender_fallback(s, args, nargsf, kwnames);  /* unknown or given twice */
            a[at] = args[nargs + j];
        }
    }
    PyObject *topic = a[0], *value = a[1], *key = a[2], *partition = a[4];
    if (!PyBytes_CheckExact(value) || a[3] != Py_None || a[5] != Py_None)
        return sender_fallback(s, args, nargsf, kwnames);
    if (key != Py_None && !PyBytes_CheckExact(key)) return sender_fallback(s, args, nargsf, kwnames);
    if (partition != Py_None && !PyLong_CheckExact(partition)) return sender_fallback(s, args, nargsf, kwnames);
    int plain = key == Py_None && partition == Py_None;
    int keyed = key != Py_None && partition == Py_None; /* the value in records, the key in rkeys */

    PyObject *r = PyObject_CallNoArgs(s->acquire);
    if (r == NULL) return NULL;
    Py_DECREF(r);
    PyObject *acc = PyDict_GetItemWithError(s->accs, topic);
    PyObject *fut = NULL, *rec = NULL;
    int take = 0, full = 0;
    Py_ssize_t i = 0, size = 0, slow = 0, adjust = 0, check_at = 0;
    if (acc == NULL) {
        if (PyErr_Occurred()) goto error;  /* an unhashable topic: what the Python method raises too */
        goto decline;  /* the topic's first record */
    }
    Py_INCREF(acc);
    if (Py_TYPE(acc) != (PyTypeObject *)s->acc_type) goto decline;
    PyObject *recs = SLOT(acc, s->acc_off[A_RECORDS]);
    if (recs == NULL || !PyList_CheckExact(recs)) goto decline;
    PyObject *rkeys = SLOT(acc, s->acc_off[A_RKEYS]);
    if (keyed && (rkeys == NULL || !PyList_CheckExact(rkeys))) goto decline;
    int ok = 1;
    Py_ssize_t limit = int_slot(acc, s->acc_off[plain || key == Py_None ? A_LIMIT : A_KLIMIT], &ok);
    check_at = int_slot(acc, s->acc_off[A_CHECK_AT], &ok);
    if (!plain) {
        slow = int_slot(acc, s->acc_off[A_SLOW], &ok);
        adjust = int_slot(acc, s->acc_off[A_ADJUST], &ok);
    }
    if (!ok) goto decline;
    size = PyBytes_GET_SIZE(value) + (key == Py_None ? 0 : PyBytes_GET_SIZE(key));
    if (size > limit) goto decline;
    if (partition != Py_None) {
        Py_ssize_t nparts = int_slot(acc, s->acc_off[A_NPARTS], &ok);
        int overflow;
        long long p = PyLong_AsLongLongAndOverflow(partition, &overflow);
        if (p == -1 && PyErr_Occurred()) PyErr_Clear();
        if (!ok || overflow || p < 0 || p >= nparts) goto decline;
    }
    /* Allocate first: nothing is changed yet if that fails. */
    if (plain || keyed) {
        rec = Py_NewRef(value);
    } else {
        rec = PyTuple_Pack(5, value, key, partition, Py_None, Py_None);
        if (rec == NULL) goto error;
        /* bytes, None and an int: the tuple can hold no cycle. Off the collector's lists, so the records
         * waiting for a drain are not traversed by every collection their allocations trigger. */
        PyObject_GC_UnTrack(rec);
    }
    fut = ((PyTypeObject *)s->fut_type)->tp_alloc((PyTypeObject *)s->fut_type, 0);
    if (fut == NULL) goto error;
    recs = SLOT(acc, s->acc_off[A_RECORDS]);  /* allocation may have run a collection: read it again */
    if (recs == NULL || !PyList_CheckExact(recs)) goto decline;
    i = PyList_GET_SIZE(recs);
    PyObject *index = PyLong_FromSsize_t(i);
    if (index == NULL) goto error;
    SLOT(fut, s->fut_i_off) = index;
    SLOT(fut, s->fut_acc_off) = Py_NewRef(acc);
    if (keyed) {
        /* rkeys[i] is this record's key: pad it with None for the records before that had none. The key
         * goes in first and comes out again if the value cannot: never a key beside the wrong record. */
        rkeys = SLOT(acc, s->acc_off[A_RKEYS]);
        if (rkeys == NULL || !PyList_CheckExact(rkeys)) goto decline;
        while (PyList_GET_SIZE(rkeys) < i)
            if (PyList_Append(rkeys, Py_None) < 0) goto error;
        if (PyList_GET_SIZE(rkeys) != i) goto decline; /* longer than records: not this code's layout */
        if (PyList_Append(rkeys, key) < 0) goto error;
        if (PyList_Append(recs, rec) < 0) {
            PyObject *et, *ev, *tb;
            PyErr_Fetch(&et, &ev, &tb);
            if (PyList_SetSlice(rkeys, i, i + 1, NULL) < 0) PyErr_Clear();
            PyErr_Restore(et, ev, tb);
            goto error;
        }
        take = 1;
        if (set_int_slot(acc, s->acc_off[A_ADJUST], adjust + PyBytes_GET_SIZE(key)) < 0) goto error;
    } else {
        if (PyList_Append(recs, rec) < 0) goto error;
        take = 1;
    }
    if (!plain && !keyed) {
        if (set_int_slot(acc, s->acc_off[A_SLOW], slow + 1) < 0) goto error;
        if (partition != Py_None) {
            PyObject *old = SLOT(acc, s->acc_off[A_EXTRA]);
            SLOT(acc, s->acc_off[A_EXTRA]) = Py_NewRef(Py_True);
            Py_XDECREF(old);
        }
        if (set_int_slot(acc, s->acc_off[A_ADJUST], adjust + size - 5) < 0) goto error;
    }
    if (i >= check_at) {
        r = PyObject_CallNoArgs(s->settle);
        if (r == NULL) goto error;
        full = PyObject_IsTrue(r);
        Py_DECREF(r);
        if (full < 0) goto error;
    }
    goto release;
decline:
    take = 0;
release:
    r = PyObject_CallNoArgs(s->release);
    if (r == NULL) goto error_unlocked;
    Py_DECREF(r);
    Py_XDECREF(acc);
    Py_XDECREF(rec);
    if (!take) {
        Py_XDECREF(fut);
        return sender_fallback(s, args, nargsf, kwnames);
    }
    if (full) {
        r = PyObject_CallNoArgs(s->drain_all);
        if (r == NULL) {
            Py_DECREF(fut);
            return NULL;
        }
        Py_DECREF(r);
    }
    return fut;
error:
    {
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        r = PyObject_CallNoArgs(s->release);
        if (r == NULL) PyErr_Clear();  /* the first error is the one to report */
        Py_XDECREF(r);
        PyErr_Restore(et, ev, tb);
    }
error_unlocked:
    Py_XDECREF(acc);
    Py_XDECREF(rec);
    Py_XDECREF(fut);
    return NULL;
}

static int sender_traverse(Sender *s, visitproc visit, void *arg) {
    Py_VISIT(s->py_send);
    Py_VISIT(s->acquire);
    Py_VISIT(s->release);
    Py_VISIT(s->accs);
    Py_VISIT(s->settle);
    Py_VISIT(s->drain_all);
    Py_VISIT(s->acc_type);
    Py_VISIT(s->fut_type);
    return 0;
}

static int sender_clear(Sender *s) {
    Py_CLEAR(s->py_send);
    Py_CLEAR(s->acquire);
    Py_CLEAR(s->release);
    Py_CLEAR(s->accs);
    Py_CLEAR(s->settle);
    Py_CLEAR(s->drain_all);
    Py_CLEAR(s->acc_type);
    Py_CLEAR(s->fut_type);
    return 0;
}

static void sender_dealloc(Sender *s) {
    PyObject_GC_UnTrack(s);
    sender_clear(s);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

static PyObject *sender_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    PyObject *py_send, *lock, *accs, *settle, *drain_all, *acc_type, *fut_type;
    if (kwds != NULL && PyDict_GET_SIZE(kwds)) {
        PyErr_SetString(PyExc_TypeError, "Sender takes positional arguments only");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "OOO!OOO!O!:Sender", &py_send, &lock, &PyDict_Type, &accs, &settle, &drain_all,
                          &PyType_Type, &acc_type, &PyType_Type, &fut_type))
        return NULL;
    Sender *s = (Sender *)type->tp_alloc(type, 0);
    if (s == NULL) return NULL;
    s->vectorcall = sender_call;
    s->py_send = Py_NewRef(py_send);
    s->accs = Py_NewRef(accs);
    s->settle = Py_NewRef(settle);
    s->drain_all = Py_NewRef(drain_all);
    s->acc_type = Py_NewRef(acc_type);
    s->fut_type = Py_NewRef(fut_type);
    s->acquire = PyObject_GetAttrString(lock, "acquire");
    s->release = s->acquire ? PyObject_GetAttrString(lock, "release") : NULL;
    if (s->release == NULL) goto fail;
    for (int k = 0; k < A_COUNT; k++) {
        if (slot_offset(acc_type, acc_fields[k], &s->acc_off[k]) < 0) goto fail;
    }
    if (slot_offset(fut_type, "_acc", &s->fut_acc_off) < 0 || slot_offset(fut_type, "_i", &s->fut_i_off) < 0)
        goto fail;
    return (PyObject *)s;
fail:
    Py_DECREF(s);
    return NULL;
}

static PyTypeObject SenderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pylog._native.Sender",
    .tp_basicsize = sizeof(Sender),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "Sender(py_send, lock, accs, settle, drain_all, accumulation_type, future_type): a producer's "
              "send() fast path (see native/send.c); called as send(topic, value=None, key=None, headers=None, "
              "partition=None, timestamp_ms=None).",
    .tp_new = sender_new,
    .tp_dealloc = (destructor)sender_dealloc,
    .tp_traverse = (traverseproc)sender_traverse,
    .tp_clear = (inquiry)sender_clear,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(Sender, vectorcall),
};

int pylog_send_add_types(PyObject *m) {
    if (PyType_Ready(&SenderType) < 0) return -1;
    Py_INCREF(&SenderType);
    if (PyModule_AddObject(m, "Sender", (PyObject *)&SenderType) < 0) {
        Py_DECREF(&SenderType);
        return -1;
    }
    return 0;
}
