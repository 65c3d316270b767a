/* Encoding record batches (pylog/storage/records/encode.py's accelerated path).
 *
 * column_lengths(items) and encode_columns(...) do, for the common inputs only, what column_parts and
 * encode_parts do in Python: the length column of a list of bytes, and one batch (header, timestamp deltas,
 * length columns, data, headers blob, CRC-32C) laid out in one output buffer from length columns and
 * lists of parts. The layout is docs/FORMAT.md's and pylog/storage/records/format.py's.
 *
 * Invariant: either function returns None for any input it does not handle exactly as the pure-Python code
 * would (an item that is not exactly bytes or bytearray, counts that disagree, lengths below -1, parts
 * that do not add up to their lengths, a field out of its struct range, a base offset whose batch would end
 * past int64 or start below 0, a batch over the format's limit),
 * and the caller then runs the pure-Python code, which encodes it or raises its error. So this code never
 * raises a pylog error of its own, and what it returns is byte for byte what the pure path returns
 * (tests/test_native_encode.py checks both on random and bad inputs). Python code never runs while it
 * reads the inputs (no __len__, no buffer export of foreign types), so nothing can change under it. */
#include "common.h"
#include "crc32c.h"

/* format.py's constants. */
#define HEADER_SIZE 64
#define LENGTH_PREFIX 12
#define CRC_START 17
#define CRC_POS 13
#define MAGIC 1
#define MAX_BATCH_SIZE 0x7fffffffLL
#define CODEC_MASK 0x07
#define ATTR_LOG_APPEND_TIME 0x08
#define ATTR_KEYS 0x40
#define ATTR_TIMESTAMPS 0x80
#define ATTR_HEADERS 0x100
#define KNOWN_ATTRS 0x3ff

/* The bytes of an exact bytes or bytearray object; 0 for anything else (the caller declines). */
static inline int raw_bytes(PyObject *o, const char **data, Py_ssize_t *len) {
    if (PyBytes_CheckExact(o)) {
        *data = PyBytes_AS_STRING(o);
        *len = PyBytes_GET_SIZE(o);
        return 1;
    }
    if (PyByteArray_CheckExact(o)) {
        *data = PyByteArray_AS_STRING(o);
        *len = PyByteArray_GET_SIZE(o);
        return 1;
    }
    return 0;
}

/* column_lengths(items) -> (lengths, nulls) | None: the int32 length column (-1 for None) of a list or
 * tuple of exact bytes/bytearray/None, as bytes, and how many items are None. */
static PyObject *py_column_lengths(PyObject *self, PyObject *items) {
    if (!PyList_CheckExact(items) && !PyTuple_CheckExact(items)) Py_RETURN_NONE;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(items);
    if (n > INT32_MAX / 4) Py_RETURN_NONE;
    PyObject **it = PySequence_Fast_ITEMS(items);
    PyObject *out = PyBytes_FromStringAndSize(NULL, n * 4);
    if (out == NULL) return NULL;
    unsigned char *p = (unsigned char *)PyBytes_AS_STRING(out);
    Py_ssize_t nulls = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *o = it[i];
        int32_t len;
        if (o == Py_None) {
            len = -1;
            nulls++;
        } else if (PyBytes_CheckExact(o)) {
            if (PyBytes_GET_SIZE(o) > INT32_MAX) goto decline;
            len = (int32_t)PyBytes_GET_SIZE(o);
        } else if (PyByteArray_CheckExact(o)) {
            if (PyByteArray_GET_SIZE(o) > INT32_MAX) goto decline;
            len = (int32_t)PyByteArray_GET_SIZE(o);
        } else {
            goto decline;
        }
        st_i32(p + 4 * i, len);
    }
    PyObject *res = Py_BuildValue("(Nn)", out, nulls);
    return res;
decline:
    Py_DECREF(out);
    Py_RETURN_NONE;
}

/* A C-contiguous buffer of `itemsize`-byte integers whose format code is `code` (or `alt`): its count in *n,
 * 0 on success, 1 to decline, -1 on error. */
static int int_column(PyObject *obj, Py_buffer *view, Py_ssize_t *n, Py_ssize_t itemsize, char code, char alt) {
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        PyErr_Clear();
        return 1;
    }
    const char *f = view->format;
    if (f != NULL && (f[0] == '<' || f[0] == '=' || f[0] == '@')) f++;
    if (view->itemsize != itemsize || f == NULL || (f[0] != code && f[0] != alt) || f[1] != 0) {
        PyBuffer_Release(view);
        return 1;
    }
    *n = view->len / itemsize;
    return 0;
}

/* A C-contiguous buffer of int32 lengths (see int_column). */
static int int32_column(PyObject *obj, Py_buffer *view, Py_ssize_t *n) { return int_column(obj, view, n, 4, 'i', 'i'); }

/* Sum of the non-negative lengths and the smallest one of an int32 column. */
static void length_totals(const unsigned char *p, Py_ssize_t n, int64_t *total, int32_t *min, int32_t *max) {
    int64_t sum = 0;
    int32_t lo = INT32_MAX, hi = INT32_MIN;
    for (Py_ssize_t i = 0; i < n; i++) {
        int32_t v = ld_i32(p + 4 * i);
        sum += v > 0 ? v : 0;
        lo = v < lo ? v : lo;
        hi = v > hi ? v : hi;
    }
    *total = sum;
    *min = lo;
    *max = hi;
}

/* Copy the parts (exact bytes/bytearray, no None) into [*pos, end): 0 on success, 1 when one is of another
 * type or they hold more bytes than the room left. */
static int copy_parts(PyObject *parts, unsigned char **pos, const unsigned char *end) {
    Py_ssize_t m = PyList_GET_SIZE(parts);
    PyObject **it = PySequence_Fast_ITEMS(parts);
    unsigned char *p = *pos;
    for (Py_ssize_t i = 0; i < m; i++) {
        const char *data;
        Py_ssize_t len;
        if (!raw_bytes(it[i], &data, &len) || len > end - p) return 1;
        memcpy(p, data, (size_t)len);
        p += len;
    }
    *pos = p;
    return 0;
}

static int as_i64(PyObject *o, int64_t *out) {
    if (!PyLong_CheckExact(o)) return 1;
    int overflow;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow || (v == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return 1;
    }
    *out = (int64_t)v;
    return 0;
}

/* A batch header (format.py's layout) with its CRC left 0: seal_crc fills it in. */
static void pack_header(unsigned char *hdr, int64_t base, int64_t body_size, int64_t attrs, Py_ssize_t n,
                        int64_t first_ts, int64_t max_ts, int64_t pid, int64_t epoch, int64_t seq) {
    memset(hdr, 0, HEADER_SIZE);
    st_i64(hdr, base);
    st_u32(hdr + 8, (uint32_t)(HEADER_SIZE + body_size - LENGTH_PREFIX));
    hdr[12] = MAGIC;
    st_u16(hdr + 17, (uint16_t)attrs);
    st_i32(hdr + 19, (int32_t)(n - 1));
    st_i64(hdr + 23, first_ts);
    st_i64(hdr + 31, max_ts);
    st_i64(hdr + 39, pid);
    st_i16(hdr + 47, (int16_t)epoch);
    st_i32(hdr + 49, (int32_t)seq);
    st_i32(hdr + 53, (int32_t)n);
    st_u32(hdr + 57, (uint32_t)body_size);
}

/* The batch's CRC-32C (the header from CRC_START on, then the body), stored into the header; returned. No
 * Python object is touched: callers may run it without the GIL. */
static uint32_t seal_crc(unsigned char *hdr, const unsigned char *body, int64_t body_size) {
    uint32_t crc = pylog_crc32c(pylog_crc32c(0, hdr, 8), hdr + CRC_START, HEADER_SIZE - CRC_START);
    crc = pylog_crc32c(crc, body, (size_t)body_size);
    st_u32(hdr + CRC_POS, crc);
    return crc;
}

/* BatchHeader's fields, in its order, as a tuple. */
static PyObject *header_fields(int64_t base, int64_t body_size, uint32_t crc, int64_t attrs, Py_ssize_t n,
                               int64_t first_ts, int64_t max_ts, int64_t pid, int64_t epoch, int64_t seq) {
    return Py_BuildValue("(LkiklLLLLhiik)", (long long)base,
                         (unsigned long)(HEADER_SIZE + body_size - LENGTH_PREFIX), MAGIC, (unsigned long)crc,
                         (long)attrs, (long long)(n - 1), (long long)first_ts, (long long)max_ts,
                         (long long)pid, (short)epoch, (int)seq, (int)n, (unsigned long)body_size);
}

/* encode_columns(vlens, vparts, klens, kparts, timestamps, hblob, base_offset, default_ts, attrs,
 *                producer_id, producer_epoch, base_sequence)
 *   -> (header bytes | None, body bytes, header fields) | None
 *
 * vlens/klens: int32 length columns (klens None: no keys); vparts/kparts: lists of the non-null items'
 * bytes; timestamps: None (every record at default_ts) or a list/tuple of ints and Nones (None: default_ts);
 * hblob: the msgpack headers section or None; attrs: codec, LogAppendTime and control bits. Offsets are
 * dense. The fields are BatchHeader's, in its order. With a codec other than none the body is returned
 * uncompressed, the header bytes as None and the CRC as 0: the caller compresses and packs the header. */
static PyObject *py_encode_columns(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 12) {
        PyErr_SetString(PyExc_TypeError, "encode_columns takes 12 arguments");
        return NULL;
    }
    PyObject *vl_obj = args[0], *vparts = args[1], *kl_obj = args[2], *kparts = args[3], *ts_obj = args[4],
             *hblob = args[5];
    int64_t base, default_ts, attrs, pid, epoch, seq;
    if (as_i64(args[6], &base) || as_i64(args[7], &default_ts) || as_i64(args[8], &attrs) ||
        as_i64(args[9], &pid) || as_i64(args[10], &epoch) || as_i64(args[11], &seq))
        Py_RETURN_NONE;
    if (epoch < INT16_MIN || epoch > INT16_MAX || seq < INT32_MIN || seq > INT32_MAX || attrs < 0 ||
        attrs > KNOWN_ATTRS || !PyList_CheckExact(vparts) || !PyList_CheckExact(kparts) ||
        (hblob != Py_None && !PyBytes_CheckExact(hblob)))
        Py_RETURN_NONE;

    PyObject *result = NULL;
    Py_buffer vview = {0}, kview = {0};
    int have_v = 0, have_k = 0;
    Py_ssize_t n, nk = 0;
    int r = int32_column(vl_obj, &vview, &n);
    if (r) goto decline_or_fail;
    have_v = 1;
    if (n < 1 || n > INT32_MAX / 4) goto decline;
    /* Offsets a reader refuses (check_header): the pure path raises its InvalidRecordError. */
    if (base < 0 || base > INT64_MAX - (n - 1)) goto decline;
    if (kl_obj != Py_None) {
        r = int32_column(kl_obj, &kview, &nk);
        if (r) goto decline_or_fail;
        have_k = 1;
        if (nk != n) goto decline;
    }
    const unsigned char *vl = vview.buf, *kl = have_k ? kview.buf : NULL;
    int64_t vbytes, kbytes = 0;
    int32_t vmin, vmax, kmin = 0, kmax = 0;
    length_totals(vl, n, &vbytes, &vmin, &vmax);
    if (have_k) length_totals(kl, n, &kbytes, &kmin, &kmax);
    if (vmin < -1 || kmin < -1) goto decline;
    int keys = have_k && kmax != -1; /* all keys null: no key column */
    if (!keys && PyList_GET_SIZE(kparts) != 0) goto decline;

    /* Timestamps: one value for all (no column) or deltas from the first (int64, wrapping like numpy). */
    int64_t first_ts = default_ts, max_ts = default_ts;
    int ts_column = 0;
    PyObject **tsi = NULL;
    if (ts_obj != Py_None) {
        if (!PyList_CheckExact(ts_obj) && !PyTuple_CheckExact(ts_obj)) goto decline;
        if (PySequence_Fast_GET_SIZE(ts_obj) != n) goto decline;
        tsi = PySequence_Fast_ITEMS(ts_obj);
        for (Py_ssize_t i = 0; i < n; i++) {
            int64_t t = default_ts;
            if (tsi[i] != Py_None && as_i64(tsi[i], &t)) goto decline;
            if (i == 0) {
                first_ts = max_ts = t;
            } else {
                if (t != first_ts) ts_column = 1;
                if (t > max_ts) max_ts = t;
            }
        }
    }

    Py_ssize_t hlen = hblob == Py_None ? 0 : PyBytes_GET_SIZE(hblob);
    int64_t fixed = 4 * (int64_t)n * (1 + keys + 2 * ts_column);
    int64_t body_size = fixed + vbytes + kbytes + hlen;
    if (HEADER_SIZE + body_size > MAX_BATCH_SIZE) goto decline;
    attrs |= (keys ? ATTR_KEYS : 0) | (ts_column ? ATTR_TIMESTAMPS : 0) | (hblob != Py_None ? ATTR_HEADERS : 0);

    PyObject *body = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)body_size);
    if (body == NULL) goto fail;
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(body), *p = out;
    if (ts_column) {
        for (Py_ssize_t i = 0; i < n; i++) {
            int64_t t = default_ts;
            if (tsi[i] != Py_None) as_i64(tsi[i], &t); /* checked above */
            st_i64(p, (int64_t)((uint64_t)t - (uint64_t)first_ts));
            p += 8;
        }
    }
    if (keys) {
        memcpy(p, kl, 4 * (size_t)n);
        p += 4 * n;
    }
    memcpy(p, vl, 4 * (size_t)n);
    p += 4 * n;
    /* Keys' then values' data: only their total must match (as in the pure path, which joins them). */
    const unsigned char *data_end = p + kbytes + vbytes;
    if (copy_parts(kparts, &p, data_end) || copy_parts(vparts, &p, data_end) || p != data_end) {
        Py_DECREF(body);
        goto decline;
    }
    if (hlen) memcpy(p, PyBytes_AS_STRING(hblob), (size_t)hlen);

    unsigned char hdr[HEADER_SIZE];
    pack_header(hdr, base, body_size, attrs, n, first_ts, max_ts, pid, epoch, seq);
    uint32_t crc = 0;
    PyObject *hdr_obj;
    if ((attrs & CODEC_MASK) == 0) {
        if (body_size >= 65536) {
            /* The body is a new object no other thread can see yet. */
            Py_BEGIN_ALLOW_THREADS
            crc = seal_crc(hdr, out, body_size);
            Py_END_ALLOW_THREADS
        } else {
            crc = seal_crc(hdr, out, body_size);
        }
        hdr_obj = PyBytes_FromStringAndSize((const char *)hdr, HEADER_SIZE);
        if (hdr_obj == NULL) {
            Py_DECREF(body);
            goto fail;
        }
    } else {
        hdr_obj = Py_NewRef(Py_None);
    }
    PyObject *fields = header_fields(base, body_size, crc, attrs, n, first_ts, max_ts, pid, epoch, seq);
    if (fields == NULL) {
        Py_DECREF(hdr_obj);
        Py_DECREF(body);
        goto fail;
    }
    result = Py_BuildValue("(NNN)", hdr_obj, body, fields);
    goto done;
decline_or_fail:
    if (r < 0) goto fail;
decline:
    result = Py_NewRef(Py_None);
    goto done;
fail:
    result = NULL;
done:
    if (have_v) PyBuffer_Release(&vview);
    if (have_k) PyBuffer_Release(&kview);
    return result;
}

/* One batch of encode_batches: records [start, stop) and what the first pass found about them. */
typedef struct {
    Py_ssize_t start, stop;
    int64_t body_size, first_ts, max_ts, attrs;
    int keys, ts_column;
} run_t;

/* Whether parts (a list) holds one exact bytes/bytearray per non-null item of the n lengths, in order, each
 * as long as its length says (the caller checked the count). */
static int parts_match(const unsigned char *lens, Py_ssize_t n, PyObject *parts) {
    PyObject **it = PySequence_Fast_ITEMS(parts);
    Py_ssize_t k = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        int32_t len = ld_i32(lens + 4 * i);
        if (len < 0) continue;
        const char *data;
        Py_ssize_t have;
        if (!raw_bytes(it[k++], &data, &have) || have != len) return 0;
    }
    return 1;
}

/* Copy the data of the items of a length column's [start, stop) (one part per non-null item, from
 * parts[*next] on) to *pos: 0 on success, 1 when a part is not exact bytes/bytearray or not as long as its
 * length says, or the parts run out. */
static int copy_items(const unsigned char *lens, Py_ssize_t start, Py_ssize_t stop, PyObject **parts,
                      Py_ssize_t nparts, Py_ssize_t *next, unsigned char **pos) {
    unsigned char *p = *pos;
    Py_ssize_t k = *next;
    for (Py_ssize_t i = start; i < stop; i++) {
        int32_t len = ld_i32(lens + 4 * i);
        if (len < 0) continue;
        const char *data;
        Py_ssize_t have;
        if (k >= nparts || !raw_bytes(parts[k], &data, &have) || have != len) return 1;
        memcpy(p, data, (size_t)len);
        p += len;
        k++;
    }
    *pos = p;
    *next = k;
    return 0;
}

/* encode_batches(vlens, vparts, klens, kparts, timestamps, stops, base_offset, default_ts, attrs,
 *                producer_id, producer_epoch, base_sequence, max_bytes) -> (data, [header fields...]) | None
 *
 * Every batch of one append call in one pass: records [0, stops[0]), [stops[0], stops[1]) ... as
 * consecutive uncompressed batches, laid out one after the other in one bytes object (what a writer
 * writes with one write), each as encode_columns would encode that run (the first at base_offset, each
 * next one at the offset after the previous; sequence numbers base_sequence + the run's start, modulo
 * 2**31, with producer_id >= 0, else -1). vparts/kparts hold one exact bytes/bytearray per non-null item,
 * each as long as its length says; timestamps: None (every record at default_ts) or an int64 column
 * (ignored with LogAppendTime in attrs, as encode_parts ignores them).
 * No headers, no codec. None (the caller encodes batch by batch) for any other input, and for a batch
 * over max_bytes or the format's limit. */
static PyObject *py_encode_batches(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 13) {
        PyErr_SetString(PyExc_TypeError, "encode_batches takes 13 arguments");
        return NULL;
    }
    PyObject *vl_obj = args[0], *vparts = args[1], *kl_obj = args[2], *kparts = args[3], *ts_obj = args[4],
             *stops = args[5];
    int64_t base, default_ts, attrs, pid, epoch, seq, max_bytes;
    if (as_i64(args[6], &base) || as_i64(args[7], &default_ts) || as_i64(args[8], &attrs) ||
        as_i64(args[9], &pid) || as_i64(args[10], &epoch) || as_i64(args[11], &seq) ||
        as_i64(args[12], &max_bytes))
        Py_RETURN_NONE;
    if (epoch < INT16_MIN || epoch > INT16_MAX || seq < INT32_MIN || seq > INT32_MAX || attrs < 0 ||
        attrs > KNOWN_ATTRS || (attrs & CODEC_MASK) != 0 || !PyList_CheckExact(vparts) ||
        !PyList_CheckExact(kparts) || !PyList_CheckExact(stops) || PyList_GET_SIZE(stops) < 1)
        Py_RETURN_NONE;

    PyObject *result = NULL, *data = NULL, *fields = NULL;
    Py_buffer vview = {0}, kview = {0}, tview = {0};
    int have_v = 0, have_k = 0, have_t = 0;
    run_t *runs = NULL;
    Py_ssize_t n, nk = 0, nt = 0, nruns = PyList_GET_SIZE(stops);
    int r = int32_column(vl_obj, &vview, &n);
    if (r) goto decline_or_fail;
    have_v = 1;
    if (n < 1 || n > INT32_MAX / 4 || base < 0 || base > INT64_MAX - (n - 1)) goto decline;
    if (kl_obj != Py_None) {
        r = int32_column(kl_obj, &kview, &nk);
        if (r) goto decline_or_fail;
        have_k = 1;
        if (nk != n) goto decline;
    }
    if (ts_obj != Py_None && !(attrs & ATTR_LOG_APPEND_TIME)) { /* LogAppendTime: every record at default_ts */
        if (int_column(ts_obj, &tview, &nt, 8, 'q', 'l')) goto decline;
        have_t = 1;
        if (nt != n) goto decline;
    }
    const unsigned char *vl = vview.buf, *kl = have_k ? kview.buf : NULL, *tc = have_t ? tview.buf : NULL;
    runs = PyMem_Malloc((size_t)nruns * sizeof(run_t));
    if (runs == NULL) {
        PyErr_NoMemory();
        goto fail;
    }

    /* First pass: each run's bounds, sections and size; the data parts' count. */
    int64_t total = 0;
    Py_ssize_t start = 0, vitems = 0, kitems = 0;
    for (Py_ssize_t b = 0; b < nruns; b++) {
        int64_t stop;
        if (as_i64(PyList_GET_ITEM(stops, b), &stop) || stop <= start || stop > n) goto decline;
        run_t *R = &runs[b];
        Py_ssize_t m = (Py_ssize_t)stop - start;
        int64_t vbytes, kbytes = 0;
        int32_t vmin, vmax, kmin = 0, kmax = -1;
        length_totals(vl + 4 * start, m, &vbytes, &vmin, &vmax);
        if (have_k) length_totals(kl + 4 * start, m, &kbytes, &kmin, &kmax);
        if (vmin < -1 || kmin < -1) goto decline;
        for (Py_ssize_t i = start; i < stop; i++) {
            vitems += ld_i32(vl + 4 * i) >= 0;
            if (have_k) kitems += ld_i32(kl + 4 * i) >= 0;
        }
        R->start = start;
        R->stop = (Py_ssize_t)stop;
        R->keys = kmax != -1; /* all keys null (or none given): no key column */
        R->first_ts = R->max_ts = default_ts;
        R->ts_column = 0;
        if (have_t) {
            R->first_ts = R->max_ts = ld_i64(tc + 8 * start);
            for (Py_ssize_t i = start + 1; i < stop; i++) {
                int64_t t = ld_i64(tc + 8 * i);
                if (t != R->first_ts) R->ts_column = 1;
                if (t > R->max_ts) R->max_ts = t;
            }
        }
        R->body_size = 4 * (int64_t)m * (1 + R->keys + 2 * R->ts_column) + vbytes + kbytes;
        if (HEADER_SIZE + R->body_size > MAX_BATCH_SIZE || HEADER_SIZE + R->body_size > max_bytes) goto decline;
        R->attrs = attrs | (R->keys ? ATTR_KEYS : 0) | (R->ts_column ? ATTR_TIMESTAMPS : 0);
        total += HEADER_SIZE + R->body_size;
        if (total > PY_SSIZE_T_MAX / 2) goto decline;
        start = (Py_ssize_t)stop;
    }
    if (start != n || vitems != PyList_GET_SIZE(vparts) || kitems != PyList_GET_SIZE(kparts)) goto decline;
    /* Every part as long as its length says, before the output is sized by the lengths (2**30 claimed over
     * a few bytes must not allocate a GiB first). */
    if (!parts_match(vl, n, vparts) || (have_k && !parts_match(kl, n, kparts))) goto decline;

    /* Second pass: the batches laid out, CRCs left for the third. */
    data = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)total);
    if (data == NULL) goto fail;
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(data), *p = out;
    PyObject **vi = PySequence_Fast_ITEMS(vparts), **ki = PySequence_Fast_ITEMS(kparts);
    Py_ssize_t vnext = 0, knext = 0;
    for (Py_ssize_t b = 0; b < nruns; b++) {
        run_t *R = &runs[b];
        Py_ssize_t m = R->stop - R->start;
        int64_t bseq = pid < 0 ? -1 : (((seq + R->start) % 0x80000000LL) + 0x80000000LL) % 0x80000000LL;
        pack_header(p, base + R->start, R->body_size, R->attrs, m, R->first_ts, R->max_ts, pid, epoch, bseq);
        unsigned char *q = p + HEADER_SIZE;
        if (R->ts_column) {
            for (Py_ssize_t i = R->start; i < R->stop; i++) {
                st_i64(q, (int64_t)((uint64_t)ld_i64(tc + 8 * i) - (uint64_t)R->first_ts));
                q += 8;
            }
        }
        if (R->keys) {
            memcpy(q, kl + 4 * R->start, 4 * (size_t)m);
            q += 4 * m;
        }
        memcpy(q, vl + 4 * R->start, 4 * (size_t)m);
        q += 4 * m;
        if (have_k && copy_items(kl, R->start, R->stop, ki, PyList_GET_SIZE(kparts), &knext, &q)) goto decline;
        if (copy_items(vl, R->start, R->stop, vi, PyList_GET_SIZE(vparts), &vnext, &q)) goto decline;
        p = q;
    }

    /* Third pass: the CRCs, without the GIL (the data is a new object no other thread can see yet). */
    Py_BEGIN_ALLOW_THREADS
    p = out;
    for (Py_ssize_t b = 0; b < nruns; b++) {
        seal_crc(p, p + HEADER_SIZE, runs[b].body_size);
        p += HEADER_SIZE + runs[b].body_size;
    }
    Py_END_ALLOW_THREADS

    fields = PyList_New(nruns);
    if (fields == NULL) goto fail;
    p = out;
    for (Py_ssize_t b = 0; b < nruns; b++) {
        run_t *R = &runs[b];
        PyObject *f = header_fields(ld_i64(p), R->body_size, ld_u32(p + CRC_POS), R->attrs, R->stop - R->start,
                                    R->first_ts, R->max_ts, pid, epoch, ld_i32(p + 49));
        if (f == NULL) goto fail;
        PyList_SET_ITEM(fields, b, f);
        p += HEADER_SIZE + R->body_size;
    }
    result = Py_BuildValue("(NN)", data, fields);
    data = fields = NULL;
    goto done;
decline_or_fail:
    if (r < 0) goto fail;
decline:
    result = Py_NewRef(Py_None);
    goto done;
fail:
    result = NULL;
done:
    Py_XDECREF(data);
    Py_XDECREF(fields);
    PyMem_Free(runs);
    if (have_v) PyBuffer_Release(&vview);
    if (have_k) PyBuffer_Release(&kview);
    if (have_t) PyBuffer_Release(&tview);
    return result;
}

PyMethodDef pylog_encode_methods[] = {
    {"column_lengths", (PyCFunction)py_column_lengths, METH_O,
     "column_lengths(items) -> (int32 lengths as bytes, None count) | None when not all bytes/bytearray/None."},
    {"encode_columns", (PyCFunction)(void (*)(void))py_encode_columns, METH_FASTCALL,
     "encode_columns(vlens, vparts, klens, kparts, timestamps, hblob, base_offset, default_ts, attrs, "
     "producer_id, producer_epoch, base_sequence) -> (header | None, body, fields) | None (use pure Python)."},
    {"encode_batches", (PyCFunction)(void (*)(void))py_encode_batches, METH_FASTCALL,
     "encode_batches(vlens, vparts, klens, kparts, timestamps, stops, base_offset, default_ts, attrs, producer_id, "
     "producer_epoch, base_sequence, max_bytes) -> (data, [header fields]) | None (encode batch by batch)."},
    {NULL, NULL, 0, NULL},
};
