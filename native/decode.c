/* Decoding record batch bodies into Python objects: the compiled counterpart of pylog/storage/records/views.py.
 *
 * - batch_layout(body, count, attributes, last_offset_delta, path, position): the body's section bounds,
 *   exactly what BatchView.__init__ checks in pure Python (views.batch_layout_pure).
 * - decode_records(body, header, start, stop, topic, partition, row_type, headers): records start:stop of a
 *   batch as row_type tuples in Record's field order (views.records_pure).
 * - decode_rows(out, body, header, start, stop, topic, partition, row_type, headers, key_deserializer,
 *   value_deserializer): the same records in ConsumerRecord's field order, appended to `out`, the
 *   deserializers applied to each non-null key and value (views.consumer_rows_pure).
 *
 * The body is hostile: every length is bounded by the bytes present before anything is read or allocated,
 * and the layout is worked out again from the body on every decode call (nothing a caller passes about
 * positions is trusted). A bad body raises pylog.errors.CorruptRecordError with the pure path's message.
 *
 * Built tuples are taken off the cyclic collector's lists when every item is untracked (ints, bytes, str,
 * None, tuples of those): they can hold no cycle, and the collector scanning thousands of young tuples
 * per read costs as much as building them. */
#include "common.h"

/* format.py's attribute bits and header field positions (BatchHeader's order). */
#define ATTR_LOG_APPEND_TIME 0x08
#define ATTR_KEYS 0x40
#define ATTR_TIMESTAMPS 0x80
#define ATTR_HEADERS 0x100
#define ATTR_OFFSET_DELTAS 0x200
#define H_BASE 0
#define H_ATTRS 4
#define H_LAST_DELTA 5
#define H_FIRST_TS 6
#define H_MAX_TS 7
#define H_COUNT 11
#define H_FIELDS 13

/* Record's and ConsumerRecord's arity (record.py's Record._fields, consumer.py's ConsumerRecord). */
#define RECORD_FIELDS 8
#define ROW_FIELDS 12

static PyObject *corrupt_error; /* pylog.errors.CorruptRecordError, imported on first use */

/* Raise CorruptRecordError(message, path, position); steals nothing, returns -1. */
static int raise_corrupt(PyObject *message, PyObject *path, PyObject *position) {
    if (message == NULL) return -1;
    if (corrupt_error == NULL) {
        PyObject *mod = PyImport_ImportModule("pylog.errors");
        if (mod == NULL) {
            Py_DECREF(message);
            return -1;
        }
        corrupt_error = PyObject_GetAttrString(mod, "CorruptRecordError");
        Py_DECREF(mod);
        if (corrupt_error == NULL) {
            Py_DECREF(message);
            return -1;
        }
    }
    PyObject *exc = PyObject_CallFunctionObjArgs(corrupt_error, message, path, position, NULL);
    Py_DECREF(message);
    if (exc == NULL) return -1;
    PyErr_SetObject(corrupt_error, exc);
    Py_DECREF(exc);
    return -1;
}

static int corrupt(const char *message, PyObject *path, PyObject *position) {
    return raise_corrupt(PyUnicode_FromString(message), path, position);
}

/* (min, data bytes, uniform) of the length column at body[pos:pos + 4n] (the caller bounded it). */
static void length_stats(const unsigned char *p, int64_t n, int32_t *low, int64_t *total, int *uniform) {
    /* Branch-free so the compiler vectorises it: this runs over every length column of every batch read. */
    int32_t first = ld_i32(p), lo = first;
    int64_t sum = 0;
    uint32_t diff = 0;
    for (int64_t i = 0; i < n; i++) {
        int32_t v = ld_i32(p + 4 * i);
        diff |= (uint32_t)v ^ (uint32_t)first;
        lo = v < lo ? v : lo;
        sum += v > 0 ? v : 0;
    }
    *low = lo;
    *total = sum;
    *uniform = diff == 0;
}

/* Fill L from the body, or raise CorruptRecordError (the messages and order of views.batch_layout_pure).
 * Shared with kafka.c (common.h). */
int pylog_layout(layout_t *L, const unsigned char *body, Py_ssize_t size, int64_t n, long attrs,
                  int64_t last_delta, PyObject *path, PyObject *position) {
    L->body = body;
    L->size = size;
    L->n = n;
    if (n < 1) /* check_header keeps count >= 1; a caller skipping it still gets an error, not a read */
        return raise_corrupt(PyUnicode_FromFormat("record count %lld impossible for a %zd-byte body", (long long)n,
                                                  size), path, position);
    if (n > (int64_t)(size / 4)) /* bounds n before any multiplication: 4 * n cannot overflow below */
        return raise_corrupt(PyUnicode_FromFormat("body of %zd bytes too small for %lld records", size,
                                                  (long long)n), path, position);
    int64_t width = 4 * n;
    int64_t need = width * (1 + ((attrs & ATTR_KEYS) != 0) + 2 * ((attrs & ATTR_TIMESTAMPS) != 0) +
                            ((attrs & ATTR_OFFSET_DELTAS) != 0));
    if (need > (int64_t)size)
        return raise_corrupt(PyUnicode_FromFormat("body of %zd bytes too small for %lld records", size,
                                                  (long long)n), path, position);
    Py_ssize_t pos = 0;
    L->od_pos = L->ts_pos = L->k_pos = -1;
    if (attrs & ATTR_OFFSET_DELTAS) {
        L->od_pos = pos;
        const unsigned char *d = body + pos;
        int ok = ld_i32(d) == 0 && (int64_t)ld_i32(d + 4 * (n - 1)) == last_delta;
        for (int64_t i = 1; ok && i < n; i++) ok = ld_i32(d + 4 * i) > ld_i32(d + 4 * (i - 1));
        if (!ok) return corrupt("offset deltas not strictly increasing from 0", path, position);
        pos += width;
    } else if (last_delta != n - 1) {
        return corrupt("dense batch whose last offset delta is not count - 1", path, position);
    }
    if (attrs & ATTR_TIMESTAMPS) {
        L->ts_pos = pos;
        pos += 2 * width;
    }
    int32_t low;
    int uniform;
    L->k_bytes = 0;
    L->k_uniform = -1;
    if (attrs & ATTR_KEYS) {
        L->k_pos = pos;
        length_stats(body + pos, n, &low, &L->k_bytes, &uniform);
        if (low < -1) return corrupt("negative key length", path, position);
        if (uniform && low >= 0) L->k_uniform = low;
        pos += width;
    }
    L->v_pos = pos;
    length_stats(body + pos, n, &low, &L->v_bytes, &uniform);
    if (low < -1) return corrupt("negative value length", path, position);
    L->v_uniform = uniform && low >= 0 ? low : -1;
    pos += width;
    /* Each sum is at most n * (2^31 - 1) < 2^62: no overflow. */
    int64_t rest = (int64_t)size - pos - L->k_bytes - L->v_bytes;
    int has_headers = (attrs & ATTR_HEADERS) != 0;
    if (rest < 0 || (rest && !has_headers) || (!rest && has_headers))
        return corrupt("record lengths do not add up to the body size", path, position);
    L->k_data = pos;
    L->v_data = pos + (Py_ssize_t)L->k_bytes;
    L->h_pos = rest ? L->v_data + (Py_ssize_t)L->v_bytes : -1;
    return 0;
}

static int as_i64(PyObject *o, int64_t *out) {
    long long v = PyLong_AsLongLong(o);
    if (v == -1 && PyErr_Occurred()) return -1;
    *out = v;
    return 0;
}

/* batch_layout(body, count, attributes, last_offset_delta, path, position)
 *   -> (key_pos, key_bytes, key_uniform, value_pos, value_bytes, value_uniform, headers_pos)
 * positions -1 where a section is absent, uniforms -1 where the items' lengths differ (or are null). */
static PyObject *py_batch_layout(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "batch_layout(body, count, attributes, last_offset_delta, path, position)");
        return NULL;
    }
    int64_t n, attrs, last_delta;
    if (as_i64(args[1], &n) < 0 || as_i64(args[2], &attrs) < 0 || as_i64(args[3], &last_delta) < 0) return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    layout_t L;
    PyObject *out = NULL;
    if (pylog_layout(&L, view.buf, view.len, n, (long)attrs, last_delta, args[4], args[5]) == 0)
        out = Py_BuildValue("(nLinLin)", L.k_pos, (long long)L.k_bytes, (int)L.k_uniform, L.v_pos,
                            (long long)L.v_bytes, (int)L.v_uniform, L.h_pos);
    PyBuffer_Release(&view);
    return out;
}

/* True when `o` can be part of no reference cycle: it is not tracked by the collector, or it is an exact
 * tuple of such objects (then it is untracked here, as the collector itself would). Depth-limited: headers
 * are tuples of (str, bytes | None) tuples. */
static int acyclic(PyObject *o, int depth) {
    if (!PyObject_GC_IsTracked(o)) return 1;
    if (depth <= 0 || !PyTuple_CheckExact(o)) return 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(o); i++)
        if (!acyclic(PyTuple_GET_ITEM(o, i), depth - 1)) return 0;
    PyObject_GC_UnTrack(o);
    return 1;
}

/* The UTF-8 bytes of a headers tuple's keys plus its values' bytes (ConsumerRecord.serialized_header_size,
 * what `sum(len(k.encode()) + len(v or b""))` gives), or -1 with an exception. */
static Py_ssize_t header_size(PyObject *h) {
    if (!PyTuple_Check(h)) {
        PyErr_SetString(PyExc_TypeError, "headers must be a tuple of (str, bytes | None) pairs");
        return -1;
    }
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(h); i++) {
        PyObject *pair = PyTuple_GET_ITEM(h, i);
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2 || !PyUnicode_Check(PyTuple_GET_ITEM(pair, 0))) {
            PyErr_SetString(PyExc_TypeError, "headers must be a tuple of (str, bytes | None) pairs");
            return -1;
        }
        Py_ssize_t klen;
        if (PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(pair, 0), &klen) == NULL) return -1;
        PyObject *v = PyTuple_GET_ITEM(pair, 1);
        Py_ssize_t vlen = 0;
        if (v != Py_None) {
            vlen = PyObject_Length(v);
            if (vlen < 0) return -1;
        }
        total += klen + vlen;
    }
    return total;
}

/* A new tuple of `type` (tuple itself or a subclass without extra fields) of `size` items, all NULL. */
static PyObject *new_row(PyTypeObject *type, Py_ssize_t size) {
    if (type == &PyTuple_Type) return PyTuple_New(size);
    return type->tp_alloc(type, size);
}

/* One item of a key or value column: bytes (or None) of `len` at `*data`, moving `*data` on. */
static inline PyObject *column_item(const unsigned char **data, int32_t len) {
    if (len < 0) Py_RETURN_NONE;
    PyObject *b = PyBytes_FromStringAndSize((const char *)*data, len);
    *data += len;
    return b;
}

/* Where item `start` of a column starts in its data: the sum of the lengths before it (nulls take none).
 * Shared with kafka.c (common.h). */
Py_ssize_t pylog_data_start(const unsigned char *lengths, int32_t uniform, int64_t start) {
    if (uniform >= 0) return (Py_ssize_t)(uniform * start);
    int64_t sum = 0;
    for (int64_t i = 0; i < start; i++) {
        int32_t v = ld_i32(lengths + 4 * i);
        if (v > 0) sum += v;
    }
    return (Py_ssize_t)sum;
}

/* A Python int, shared while the same value repeats (item sizes are mostly all equal). */
static inline PyObject *cached_int(PyObject **slot, long *cached, long v) {
    if (*slot == NULL || *cached != v) {
        PyObject *o = PyLong_FromLong(v);
        if (o == NULL) return NULL;
        Py_XSETREF(*slot, o);
        *cached = v;
    }
    Py_INCREF(*slot);
    return *slot;
}

typedef struct {
    PyObject *body, *header;
    int64_t start, stop;
    PyObject *topic, *partition;
    PyTypeObject *row_type;
    PyObject *headers;
    int rows; /* 0: Record's fields; 1: ConsumerRecord's, with the deserializers below */
    PyObject *key_des, *value_des;
} decode_args;

/* Decode records start:stop into `out` (a list: filled from index `at` when `fill`, else appended to). */
static int decode(decode_args *A, PyObject *out, Py_ssize_t at, int fill) {
    PyObject *hd = A->header;
    if (!PyTuple_Check(hd) || PyTuple_GET_SIZE(hd) != H_FIELDS) {
        PyErr_SetString(PyExc_TypeError, "header must be a BatchHeader");
        return -1;
    }
    int64_t base, attrs, last_delta, first_ts, max_ts, n;
    if (as_i64(PyTuple_GET_ITEM(hd, H_BASE), &base) < 0 || as_i64(PyTuple_GET_ITEM(hd, H_ATTRS), &attrs) < 0 ||
        as_i64(PyTuple_GET_ITEM(hd, H_LAST_DELTA), &last_delta) < 0 ||
        as_i64(PyTuple_GET_ITEM(hd, H_FIRST_TS), &first_ts) < 0 ||
        as_i64(PyTuple_GET_ITEM(hd, H_MAX_TS), &max_ts) < 0 || as_i64(PyTuple_GET_ITEM(hd, H_COUNT), &n) < 0)
        return -1;
    if (!PyType_IsSubtype(A->row_type, &PyTuple_Type) || A->row_type->tp_basicsize != PyTuple_Type.tp_basicsize ||
        A->row_type->tp_itemsize != PyTuple_Type.tp_itemsize) {
        PyErr_SetString(PyExc_TypeError, "row_type must be tuple or a tuple subclass with no fields of its own");
        return -1;
    }
    if (A->start >= A->stop) return 0; /* views.records_pure: nothing, as a Python slice gives */
    if (A->start < 0 || A->stop > n) {
        PyErr_Format(PyExc_ValueError, "records %lld:%lld of a batch of %lld", (long long)A->start,
                     (long long)A->stop, (long long)n);
        return -1;
    }
    int want_headers = (attrs & ATTR_HEADERS) != 0;
    if (want_headers ? !(PyList_Check(A->headers) && PyList_GET_SIZE(A->headers) == n) : A->headers != Py_None) {
        PyErr_SetString(PyExc_TypeError, "headers must be the batch's list of header tuples, or None without them");
        return -1;
    }
    /* A private tuple of the headers: a deserializer (Python code, run mid-loop) may change the caller's list. */
    PyObject *hdr_rows = want_headers ? PyList_AsTuple(A->headers) : NULL;
    if (want_headers && hdr_rows == NULL) return -1;
    Py_buffer view;
    if (PyObject_GetBuffer(A->body, &view, PyBUF_SIMPLE) < 0) {
        Py_XDECREF(hdr_rows);
        return -1;
    }
    layout_t L;
    int rc = -1;
    PyObject *shared_ts = NULL, *ts_type = NULL, *empty = NULL, *ksize = NULL, *vsize = NULL;
    long ksize_v = 0, vsize_v = 0;
    if (pylog_layout(&L, view.buf, view.len, n, (long)attrs, last_delta, Py_None, Py_None) < 0) goto done;
    const unsigned char *body = L.body;
    const unsigned char *kdata = NULL, *vdata;
    if (L.k_pos >= 0) kdata = body + L.k_data + pylog_data_start(body + L.k_pos, L.k_uniform, A->start);
    vdata = body + L.v_data + pylog_data_start(body + L.v_pos, L.v_uniform, A->start);
    int log_append = (attrs & ATTR_LOG_APPEND_TIME) != 0;
    if (log_append || L.ts_pos < 0) {
        shared_ts = PyLong_FromLongLong(log_append ? max_ts : first_ts);
        if (shared_ts == NULL) goto done;
    }
    ts_type = PyLong_FromLong(log_append ? 1 : 0);
    empty = PyTuple_New(0);
    if (ts_type == NULL || empty == NULL) goto done;
    const int width = A->rows ? ROW_FIELDS : RECORD_FIELDS;
    for (int64_t i = A->start; i < A->stop; i++) {
        PyObject *row = new_row(A->row_type, width);
        if (row == NULL) goto done;
        /* Every slot is set before anything can fail: a half-built row is released with its NULLs. */
        int64_t off = L.od_pos >= 0 ? base + ld_i32(body + L.od_pos + 4 * i) : base + i;
        PyObject *offset = PyLong_FromLongLong(off);
        PyObject *ts;
        if (shared_ts != NULL) {
            ts = Py_NewRef(shared_ts);
        } else { /* numpy's int64 addition wraps: so does this one */
            ts = PyLong_FromLongLong((int64_t)((uint64_t)ld_i64(body + L.ts_pos + 8 * i) + (uint64_t)first_ts));
        }
        int32_t klen = L.k_pos >= 0 ? ld_i32(body + L.k_pos + 4 * i) : -1;
        int32_t vlen = ld_i32(body + L.v_pos + 4 * i);
        PyObject *key = klen >= 0 ? column_item(&kdata, klen) : Py_NewRef(Py_None);
        PyObject *value = column_item(&vdata, vlen);
        PyObject *hdrs = want_headers ? PyTuple_GET_ITEM(hdr_rows, i) : empty;
        Py_INCREF(hdrs);
        int tracked = 0;
        if (A->rows) {
            PyObject *ks = cached_int(&ksize, &ksize_v, klen);
            PyObject *vs = cached_int(&vsize, &vsize_v, vlen);
            Py_ssize_t hsize = hdrs == empty ? 0 : header_size(hdrs);
            PyObject *hs = hsize >= 0 ? PyLong_FromSsize_t(hsize) : NULL;
            PyTuple_SET_ITEM(row, 0, Py_NewRef(A->topic));
            PyTuple_SET_ITEM(row, 1, Py_NewRef(A->partition));
            PyTuple_SET_ITEM(row, 2, offset);
            PyTuple_SET_ITEM(row, 3, ts);
            PyTuple_SET_ITEM(row, 4, Py_NewRef(ts_type));
            PyTuple_SET_ITEM(row, 7, hdrs);
            PyTuple_SET_ITEM(row, 8, Py_NewRef(Py_None));
            PyTuple_SET_ITEM(row, 9, ks);
            PyTuple_SET_ITEM(row, 10, vs);
            PyTuple_SET_ITEM(row, 11, hs);
            int ok = offset && ts && key && value && ks && vs && hs;
            /* No Python code runs with an exception set: the deserializers only once all else succeeded. */
            if (ok && key != Py_None && A->key_des != Py_None) {
                Py_SETREF(key, PyObject_CallOneArg(A->key_des, key));
                ok = key != NULL;
            }
            if (ok && value != Py_None && A->value_des != Py_None) {
                Py_SETREF(value, PyObject_CallOneArg(A->value_des, value));
                ok = value != NULL;
            }
            PyTuple_SET_ITEM(row, 5, key);
            PyTuple_SET_ITEM(row, 6, value);
            if (!ok) {
                Py_DECREF(row);
                goto done;
            }
            tracked = !acyclic(key, 0) || !acyclic(value, 0) || !acyclic(A->topic, 0) || !acyclic(A->partition, 0);
        } else {
            PyTuple_SET_ITEM(row, 0, offset);
            PyTuple_SET_ITEM(row, 1, ts);
            PyTuple_SET_ITEM(row, 2, key);
            PyTuple_SET_ITEM(row, 3, value);
            PyTuple_SET_ITEM(row, 4, hdrs);
            PyTuple_SET_ITEM(row, 5, Py_NewRef(A->topic));
            PyTuple_SET_ITEM(row, 6, Py_NewRef(A->partition));
            PyTuple_SET_ITEM(row, 7, Py_NewRef(ts_type));
            if (!offset || !ts || !key || !value) {
                Py_DECREF(row);
                goto done;
            }
            tracked = !acyclic(A->topic, 0) || !acyclic(A->partition, 0);
        }
        if (!tracked && hdrs != empty) tracked = !acyclic(hdrs, 2);
        if (!tracked && PyObject_GC_IsTracked(row)) PyObject_GC_UnTrack(row);
        if (fill) {
            PyList_SET_ITEM(out, at + (i - A->start), row);
        } else {
            int err = PyList_Append(out, row);
            Py_DECREF(row);
            if (err < 0) goto done;
        }
    }
    rc = 0;
done:
    Py_XDECREF(hdr_rows);
    Py_XDECREF(shared_ts);
    Py_XDECREF(ts_type);
    Py_XDECREF(empty);
    Py_XDECREF(ksize);
    Py_XDECREF(vsize);
    PyBuffer_Release(&view);
    return rc;
}

static int parse_common(decode_args *A, PyObject *const *args) {
    A->body = args[0];
    A->header = args[1];
    if (as_i64(args[2], &A->start) < 0 || as_i64(args[3], &A->stop) < 0) return -1;
    A->topic = args[4];
    A->partition = args[5];
    if (!PyType_Check(args[6])) {
        PyErr_SetString(PyExc_TypeError, "row_type must be a type");
        return -1;
    }
    A->row_type = (PyTypeObject *)args[6];
    A->headers = args[7];
    return 0;
}

/* decode_records(body, header, start, stop, topic, partition, row_type, headers) -> list */
static PyObject *py_decode_records(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 8) {
        PyErr_SetString(PyExc_TypeError,
                        "decode_records(body, header, start, stop, topic, partition, row_type, headers)");
        return NULL;
    }
    decode_args A;
    if (parse_common(&A, args) < 0) return NULL;
    A.rows = 0;
    A.key_des = A.value_des = Py_None;
    Py_ssize_t m = A.stop > A.start ? (Py_ssize_t)(A.stop - A.start) : 0;
    if (A.start < 0 || m > PY_SSIZE_T_MAX / 8) m = 0; /* decode() refuses the range before filling */
    PyObject *out = PyList_New(m);
    if (out == NULL) return NULL;
    if (decode(&A, out, 0, 1) < 0) {
        Py_DECREF(out);
        return NULL;
    }
    return out;
}

/* decode_rows(out, body, header, start, stop, topic, partition, row_type, headers, key_deserializer,
 *             value_deserializer) -> None: appends to out. */
static PyObject *py_decode_rows(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 11 || !PyList_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "decode_rows(out: list, body, header, start, stop, topic, partition, "
                                         "row_type, headers, key_deserializer, value_deserializer)");
        return NULL;
    }
    decode_args A;
    if (parse_common(&A, args + 1) < 0) return NULL;
    A.rows = 1;
    A.key_des = args[9];
    A.value_des = args[10];
    if (decode(&A, args[0], 0, 0) < 0) return NULL;
    Py_RETURN_NONE;
}

PyMethodDef pylog_decode_methods[] = {
    {"batch_layout", (PyCFunction)(void (*)(void))py_batch_layout, METH_FASTCALL,
     "batch_layout(body, count, attributes, last_offset_delta, path, position) -> (key_pos, key_bytes, "
     "key_uniform, value_pos, value_bytes, value_uniform, headers_pos): a batch body's checked section bounds."},
    {"decode_records", (PyCFunction)(void (*)(void))py_decode_records, METH_FASTCALL,
     "decode_records(body, header, start, stop, topic, partition, row_type, headers) -> list of row_type "
     "tuples in Record's field order."},
    {"decode_rows", (PyCFunction)(void (*)(void))py_decode_rows, METH_FASTCALL,
     "decode_rows(out, body, header, start, stop, topic, partition, row_type, headers, key_deserializer, "
     "value_deserializer): append ConsumerRecord-shaped row_type tuples to out."},
    {NULL, NULL, 0, NULL},
};
