/* Decoding record batch bodies into Python objects: the compiled counterpart of pylog/storage/records/views.py.
 *
 * - batch_layout(body, count, attributes, last_offset_delta, path, position): the body's section bounds,
 *   exactly what BatchView.__init__ checks in pure Python (views.batch_layout_pure).
 * - decode_records(body, header, start, stop, topic, partition, row_type, headers): records start:stop of a
 *   batch as row_type tuples in Record's field order (views.records_pure).
 * - decode_rows(out, body, header, start, stop, topic, partition, row_type, headers, key_deserializer,
 *   value_deserializer): the same records in ConsumerRecord's field order, appended to `out`, the
 *   deserializers applied to each non-null key and value (views.consumer_rows_pure).
 * - consumer_row_iter(parts, topic, partition, row_type, key_deserializer, value_deserializer): decode_rows'
 *   rows of several parts, each built when an iterator's __next__ asks for it (views.consumer_row_iter;
 *   the RowIter type below).
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

/* One slice start:stop of a batch being decoded: what slice_open checked and worked out, and the objects
 * its rows share. Filled by slice_open, released by slice_close (both safe on a zeroed slice_t). */
typedef struct {
    int open;
    PyObject *hdr_rows; /* a private tuple of the batch's headers, or NULL without them */
    Py_buffer view;
    layout_t L;
    int64_t base;
    int64_t first_ts;
    const unsigned char *kdata, *vdata; /* where the next row's key and value start */
    PyObject *shared_ts, *ts_type, *empty, *ksize, *vsize;
    long ksize_v, vsize_v;
} slice_t;

static void slice_close(slice_t *S) {
    if (S->open) PyBuffer_Release(&S->view);
    Py_CLEAR(S->hdr_rows);
    Py_CLEAR(S->shared_ts);
    Py_CLEAR(S->ts_type);
    Py_CLEAR(S->empty);
    Py_CLEAR(S->ksize);
    Py_CLEAR(S->vsize);
    S->open = 0;
}

/* Check A's arguments and open its slice into S: 0 when rows A->start:A->stop are to be built (S holds the
 * body's buffer until slice_close), 1 when the range is empty (nothing held), -1 with an exception. */
static int slice_open(slice_t *S, decode_args *A) {
    memset(S, 0, sizeof(*S));
    PyObject *hd = A->header;
    if (!PyTuple_Check(hd) || PyTuple_GET_SIZE(hd) != H_FIELDS) {
        PyErr_SetString(PyExc_TypeError, "header must be a BatchHeader");
        return -1;
    }
    int64_t attrs, last_delta, max_ts, n;
    if (as_i64(PyTuple_GET_ITEM(hd, H_BASE), &S->base) < 0 || as_i64(PyTuple_GET_ITEM(hd, H_ATTRS), &attrs) < 0 ||
        as_i64(PyTuple_GET_ITEM(hd, H_LAST_DELTA), &last_delta) < 0 ||
        as_i64(PyTuple_GET_ITEM(hd, H_FIRST_TS), &S->first_ts) < 0 ||
        as_i64(PyTuple_GET_ITEM(hd, H_MAX_TS), &max_ts) < 0 || as_i64(PyTuple_GET_ITEM(hd, H_COUNT), &n) < 0)
        return -1;
    if (!PyType_IsSubtype(A->row_type, &PyTuple_Type) || A->row_type->tp_basicsize != PyTuple_Type.tp_basicsize ||
        A->row_type->tp_itemsize != PyTuple_Type.tp_itemsize) {
        PyErr_SetString(PyExc_TypeError, "row_type must be tuple or a tuple subclass with no fields of its own");
        return -1;
    }
    if (A->start >= A->stop) return 1; /* views.records_pure: nothing, as a Python slice gives */
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
    if (want_headers && (S->hdr_rows = PyList_AsTuple(A->headers)) == NULL) return -1;
    if (PyObject_GetBuffer(A->body, &S->view, PyBUF_SIMPLE) < 0) {
        slice_close(S);
        return -1;
    }
    S->open = 1;
    layout_t *L = &S->L;
    if (pylog_layout(L, S->view.buf, S->view.len, n, (long)attrs, last_delta, Py_None, Py_None) < 0) goto fail;
    const unsigned char *body = L->body;
    if (L->k_pos >= 0) S->kdata = body + L->k_data + pylog_data_start(body + L->k_pos, L->k_uniform, A->start);
    S->vdata = body + L->v_data + pylog_data_start(body + L->v_pos, L->v_uniform, A->start);
    int log_append = (attrs & ATTR_LOG_APPEND_TIME) != 0;
    if (log_append || L->ts_pos < 0) {
        S->shared_ts = PyLong_FromLongLong(log_append ? max_ts : S->first_ts);
        if (S->shared_ts == NULL) goto fail;
    }
    S->ts_type = PyLong_FromLong(log_append ? 1 : 0);
    S->empty = PyTuple_New(0);
    if (S->ts_type == NULL || S->empty == NULL) goto fail;
    return 0;
fail:
    slice_close(S);
    return -1;
}

/* Row i of the open slice S (rows are built in order: S's data pointers move past the row's key and
 * value), a new reference; NULL with an exception, S's data pointers then left where they were. Its
 * offset goes to *offset_out. */
static PyObject *slice_row(slice_t *S, decode_args *A, int64_t i, int64_t *offset_out) {
    const layout_t *L = &S->L;
    const unsigned char *body = L->body;
    const int width = A->rows ? ROW_FIELDS : RECORD_FIELDS;
    PyObject *row = new_row(A->row_type, width);
    if (row == NULL) return NULL;
    const unsigned char *kdata = S->kdata, *vdata = S->vdata;
    /* Every slot is set before anything can fail: a half-built row is released with its NULLs. */
    int64_t off = L->od_pos >= 0 ? S->base + ld_i32(body + L->od_pos + 4 * i) : S->base + i;
    PyObject *offset = PyLong_FromLongLong(off);
    PyObject *ts;
    if (S->shared_ts != NULL) {
        ts = Py_NewRef(S->shared_ts);
    } else { /* numpy's int64 addition wraps: so does this one */
        ts = PyLong_FromLongLong((int64_t)((uint64_t)ld_i64(body + L->ts_pos + 8 * i) + (uint64_t)S->first_ts));
    }
    int32_t klen = L->k_pos >= 0 ? ld_i32(body + L->k_pos + 4 * i) : -1;
    int32_t vlen = ld_i32(body + L->v_pos + 4 * i);
    PyObject *key = klen >= 0 ? column_item(&kdata, klen) : Py_NewRef(Py_None);
    PyObject *value = column_item(&vdata, vlen);
    PyObject *hdrs = S->hdr_rows != NULL ? PyTuple_GET_ITEM(S->hdr_rows, i) : S->empty;
    Py_INCREF(hdrs);
    int tracked = 0;
    if (A->rows) {
        PyObject *ks = cached_int(&S->ksize, &S->ksize_v, klen);
        PyObject *vs = cached_int(&S->vsize, &S->vsize_v, vlen);
        Py_ssize_t hsize = hdrs == S->empty ? 0 : header_size(hdrs);
        PyObject *hs = hsize >= 0 ? PyLong_FromSsize_t(hsize) : NULL;
        PyTuple_SET_ITEM(row, 0, Py_NewRef(A->topic));
        PyTuple_SET_ITEM(row, 1, Py_NewRef(A->partition));
        PyTuple_SET_ITEM(row, 2, offset);
        PyTuple_SET_ITEM(row, 3, ts);
        PyTuple_SET_ITEM(row, 4, Py_NewRef(S->ts_type));
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
            return NULL;
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
        PyTuple_SET_ITEM(row, 7, Py_NewRef(S->ts_type));
        if (!offset || !ts || !key || !value) {
            Py_DECREF(row);
            return NULL;
        }
        tracked = !acyclic(A->topic, 0) || !acyclic(A->partition, 0);
    }
    if (!tracked && hdrs != S->empty) tracked = !acyclic(hdrs, 2);
    if (!tracked && PyObject_GC_IsTracked(row)) PyObject_GC_UnTrack(row);
    S->kdata = kdata;
    S->vdata = vdata;
    *offset_out = off;
    return row;
}

/* Decode records start:stop into `out` (a list: filled from index `at` when `fill`, else appended to). */
static int decode(decode_args *A, PyObject *out, Py_ssize_t at, int fill) {
    slice_t S;
    int rc = slice_open(&S, A);
    if (rc != 0) return rc < 0 ? -1 : 0;
    int64_t off;
    for (int64_t i = A->start; i < A->stop; i++) {
        PyObject *row = slice_row(&S, A, i, &off);
        if (row == NULL) goto fail;
        if (fill) {
            PyList_SET_ITEM(out, at + (i - A->start), row);
        } else {
            int err = PyList_Append(out, row);
            Py_DECREF(row);
            if (err < 0) goto fail;
        }
    }
    slice_close(&S);
    return 0;
fail:
    slice_close(&S);
    return -1;
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

/* ------------------------------------------------------------------------------------------------------
 * RowIter: the consumer's rows handed out one at a time, each built when it is asked for.
 *
 * consumer_row_iter(parts, topic, partition, row_type, key_deserializer, value_deserializer) -> RowIter over
 * the rows decode_rows would append for each part (body, header, start, stop, headers), in order: the same
 * rows, the same checks and errors, raised by the __next__ that reaches the part at fault. A row is built
 * from the batch body when __next__ asks for it (its memory is what the loop just freed, still in cache),
 * not for a whole poll in advance. The iterator holds the buffer of the part it is in until it moves past
 * it, is exhausted or close()d. A __next__ that raises (a deserializer's error, memory) leaves the iterator
 * before that row: the next call tries it again.
 * __length_hint__() is the number of rows not handed out yet; next_offset the offset after the last row
 * handed out (-1 before the first): the consumer's position once it has taken them. */

typedef struct {
    PyObject_HEAD
    PyObject *parts; /* a tuple of (body, header, start, stop, headers) tuples; NULL once done */
    Py_ssize_t part;  /* the next part to open */
    PyObject *topic, *partition, *row_type, *key_des, *value_des;
    decode_args A;    /* the open part's arguments: borrowed from `parts` and the fields above */
    slice_t S;
    int64_t i;        /* the open part's next row */
    Py_ssize_t left;  /* rows not handed out yet */
    int64_t next_offset;
    int busy;         /* in __next__ (a deserializer calling back into it is refused) */
} RowIter;

static void rowiter_release(RowIter *it) {
    slice_close(&it->S);
    Py_CLEAR(it->parts);
    it->left = 0;
}

static int rowiter_traverse(RowIter *it, visitproc visit, void *arg) {
    Py_VISIT(it->parts);
    Py_VISIT(it->topic);
    Py_VISIT(it->partition);
    Py_VISIT(it->row_type);
    Py_VISIT(it->key_des);
    Py_VISIT(it->value_des);
    return 0;
}

static int rowiter_clear(RowIter *it) {
    rowiter_release(it);
    Py_CLEAR(it->topic);
    Py_CLEAR(it->partition);
    Py_CLEAR(it->row_type);
    Py_CLEAR(it->key_des);
    Py_CLEAR(it->value_des);
    return 0;
}

static void rowiter_dealloc(RowIter *it) {
    PyObject_GC_UnTrack(it);
    rowiter_clear(it);
    Py_TYPE(it)->tp_free((PyObject *)it);
}

static PyTypeObject RowIterType;

/* consumer_row_iter(parts, topic, partition, row_type, key_deserializer, value_deserializer) -> RowIter */
static PyObject *py_consumer_row_iter(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "consumer_row_iter(parts, topic, partition, row_type, key_deserializer, "
                                         "value_deserializer)");
        return NULL;
    }
    if (!PyType_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError, "row_type must be a type");
        return NULL;
    }
    PyObject *parts = PySequence_Tuple(args[0]);
    if (parts == NULL) return NULL;
    Py_ssize_t left = 0;
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(parts); k++) {
        PyObject *p = PyTuple_GET_ITEM(parts, k);
        int64_t a, b;
        if (!PyTuple_CheckExact(p) || PyTuple_GET_SIZE(p) != 5) {
            PyErr_SetString(PyExc_TypeError, "parts must be (body, header, start, stop, headers) tuples");
            goto fail;
        }
        if (as_i64(PyTuple_GET_ITEM(p, 2), &a) < 0 || as_i64(PyTuple_GET_ITEM(p, 3), &b) < 0) goto fail;
        /* decode_rows refuses a range outside its batch when the part is reached; a count is only a hint */
        if (b > a && a >= 0 && b - a <= PY_SSIZE_T_MAX - left) left += (Py_ssize_t)(b - a);
    }
    RowIter *it = PyObject_GC_New(RowIter, &RowIterType);
    if (it == NULL) goto fail;
    memset((char *)it + sizeof(PyObject), 0, sizeof(RowIter) - sizeof(PyObject));
    it->parts = parts;
    it->topic = Py_NewRef(args[1]);
    it->partition = Py_NewRef(args[2]);
    it->row_type = Py_NewRef(args[3]);
    it->key_des = Py_NewRef(args[4]);
    it->value_des = Py_NewRef(args[5]);
    it->left = left;
    it->next_offset = -1;
    PyObject_GC_Track(it);
    return (PyObject *)it;
fail:
    Py_DECREF(parts);
    return NULL;
}

static PyObject *rowiter_next(RowIter *it) {
    if (it->busy) {
        PyErr_SetString(PyExc_ValueError, "RowIter already executing");
        return NULL;
    }
    it->busy = 1;
    PyObject *row = NULL;
    while (it->parts != NULL) {
        if (!it->S.open) {
            if (it->part >= PyTuple_GET_SIZE(it->parts)) {
                rowiter_release(it);
                break;
            }
            PyObject *p = PyTuple_GET_ITEM(it->parts, it->part);
            decode_args *A = &it->A;
            A->body = PyTuple_GET_ITEM(p, 0);
            A->header = PyTuple_GET_ITEM(p, 1);
            if (as_i64(PyTuple_GET_ITEM(p, 2), &A->start) < 0 || as_i64(PyTuple_GET_ITEM(p, 3), &A->stop) < 0) break;
            A->headers = PyTuple_GET_ITEM(p, 4);
            A->topic = it->topic;
            A->partition = it->partition;
            A->row_type = (PyTypeObject *)it->row_type;
            A->rows = 1;
            A->key_des = it->key_des;
            A->value_des = it->value_des;
            int rc = slice_open(&it->S, A);
            if (rc < 0) break;
            it->part++;
            it->i = A->start;
            continue; /* rc 1: an empty part, nothing held */
        }
        if (it->i >= it->A.stop) {
            slice_close(&it->S);
            continue;
        }
        int64_t off;
        row = slice_row(&it->S, &it->A, it->i, &off);
        if (row == NULL) break;
        it->i++;
        it->next_offset = off + 1;
        if (it->left > 0) it->left--;
        break;
    }
    it->busy = 0;
    return row;
}

static PyObject *rowiter_length_hint(RowIter *it, PyObject *unused) {
    return PyLong_FromSsize_t(it->parts == NULL ? 0 : it->left);
}

static PyObject *rowiter_close(RowIter *it, PyObject *unused) {
    if (it->busy) {
        PyErr_SetString(PyExc_ValueError, "RowIter already executing");
        return NULL;
    }
    rowiter_release(it);
    Py_RETURN_NONE;
}

static PyObject *rowiter_get_next_offset(RowIter *it, void *closure) {
    return PyLong_FromLongLong(it->next_offset);
}

static PyMethodDef rowiter_methods[] = {
    {"__length_hint__", (PyCFunction)rowiter_length_hint, METH_NOARGS, "Rows not handed out yet."},
    {"close", (PyCFunction)rowiter_close, METH_NOARGS, "Hand out no more rows (releases the part's buffer)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef rowiter_getset[] = {
    {"next_offset", (getter)rowiter_get_next_offset, NULL,
     "The offset after the last row handed out, -1 before the first.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject RowIterType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pylog._native.RowIter",
    .tp_basicsize = sizeof(RowIter),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Rows of consumer_row_iter(parts, ...), each built when __next__ asks for it (see native/decode.c).",
    .tp_dealloc = (destructor)rowiter_dealloc,
    .tp_traverse = (traverseproc)rowiter_traverse,
    .tp_clear = (inquiry)rowiter_clear,
    .tp_iter = PyObject_SelfIter,
    .tp_iternext = (iternextfunc)rowiter_next,
    .tp_methods = rowiter_methods,
    .tp_getset = rowiter_getset,
};

int pylog_decode_add_types(PyObject *m) { return PyModule_AddType(m, &RowIterType); }

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
    {"consumer_row_iter", (PyCFunction)(void (*)(void))py_consumer_row_iter, METH_FASTCALL,
     "consumer_row_iter(parts, topic, partition, row_type, key_deserializer, value_deserializer) -> RowIter: the "
     "rows decode_rows gives for each (body, header, start, stop, headers) part, built one at a time."},
    {NULL, NULL, 0, NULL},
};
