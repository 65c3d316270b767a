/* Kafka RecordBatch v2 records <-> pylog columns: the compiled counterpart of pylog/server/recordbatch.py.
 *
 * - kafka_parse_records(section, count, base_timestamp): a batch's (decompressed) records section as
 *   (value_lengths, value_data, key_lengths | None, key_data | None, timestamps, headers | None), lengths
 *   and timestamps as little-endian int32 / int64 bytes (recordbatch.parse_records_pure).
 * - kafka_encode_slice(body, header, start, stop, headers, leader_epoch): records start:stop of a pylog
 *   batch (its decompressed body and BatchHeader, its headers list or None) as one uncompressed Kafka v2
 *   batch, CRC-32C included (recordbatch.encode_slice_pure).
 *
 * The section is hostile: the count is bounded by its bytes (a record takes at least 7) before anything is
 * allocated, every varint and length by the record's declared length, and that by the section. Errors are
 * pylog.errors.CorruptBatchError / InvalidBatchError with the pure path's messages, in its order. The pylog
 * body is bounded again by decode.c's pylog_layout (nothing the caller passes about positions is trusted). */
#include "common.h"
#include "crc32c.h"

#define K_HEADER_SIZE 61
#define K_CRC_START 21
#define K_MIN_RECORD 7
#define K_MAGIC 2
/* pylog's attribute bits (format.py); the first three are Kafka's too. */
#define ATTR_LOG_APPEND_TIME 0x08
#define ATTR_TRANSACTIONAL 0x10
#define ATTR_CONTROL 0x20
#define ATTR_HEADERS 0x100
#define SEQ_MOD 0x80000000LL

static PyObject *corrupt_batch, *invalid_batch; /* pylog.errors classes, imported on first use */

static int load_errors(void) {
    if (corrupt_batch != NULL) return 0;
    PyObject *mod = PyImport_ImportModule("pylog.errors");
    if (mod == NULL) return -1;
    corrupt_batch = PyObject_GetAttrString(mod, "CorruptBatchError");
    invalid_batch = PyObject_GetAttrString(mod, "InvalidBatchError");
    Py_DECREF(mod);
    if (corrupt_batch == NULL || invalid_batch == NULL) {
        Py_CLEAR(corrupt_batch);
        Py_CLEAR(invalid_batch);
        return -1;
    }
    return 0;
}

/* Raise CorruptBatchError (or InvalidBatchError when `invalid`) with a message built from fmt; returns -1. */
static int kerr(int invalid, const char *fmt, ...) {
    if (load_errors() < 0) return -1;
    va_list va;
    va_start(va, fmt);
    PyObject *msg = PyUnicode_FromFormatV(fmt, va);
    va_end(va);
    if (msg == NULL) return -1;
    PyErr_SetObject(invalid ? invalid_batch : corrupt_batch, msg);
    Py_DECREF(msg);
    return -1;
}

/* The zigzag varint at [*pp, end) of at most maxb bytes (5: 32 bits, 10: 64 bits): 0, -1 truncated, -2 malformed. */
static inline int rd_varint(const unsigned char **pp, const unsigned char *end, int maxb, int64_t *out) {
    const unsigned char *p = *pp;
    uint64_t v = 0;
    for (int k = 0; k < maxb; k++) {
        if (p >= end) return -1;
        unsigned b = *p++;
        if (k == 9 && (b & 0x7f) > 1) return -2; /* past 64 bits */
        v |= (uint64_t)(b & 0x7f) << (7 * k);
        if (!(b & 0x80)) {
            if (maxb == 5 && (v >> 32)) return -2;
            *out = (int64_t)((v >> 1) ^ (uint64_t)(-(int64_t)(v & 1)));
            *pp = p;
            return 0;
        }
    }
    return -2;
}

#define VARINT(var, maxb, limit)                                                                   \
    do {                                                                                           \
        int rc_ = rd_varint(&p, (limit), (maxb), &(var));                                          \
        if (rc_ < 0) {                                                                             \
            kerr(0, rc_ == -1 ? "record %lld: truncated" : "record %lld: malformed varint", (long long)i); \
            goto fail;                                                                             \
        }                                                                                          \
    } while (0)

/* kafka_parse_records(section, count, base_timestamp) -> (vlens, vdata, klens|None, kdata|None, ts, headers|None) */
static PyObject *py_kafka_parse_records(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "kafka_parse_records(section, count, base_timestamp)");
        return NULL;
    }
    /* Any int, as the reference takes it: a count no int64 holds cannot fit either (overflow set), and the
     * base timestamp counts modulo 2**64 (the reference wraps base + delta to int64). */
    int overflow = 0;
    long long count = PyLong_AsLongLongAndOverflow(args[1], &overflow);
    if (count == -1 && PyErr_Occurred()) return NULL;
    const uint64_t base_ts = PyLong_AsUnsignedLongLongMask(args[2]);
    if (base_ts == (uint64_t)-1 && PyErr_Occurred()) return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    PyObject *vlens = NULL, *klens = NULL, *tss = NULL, *vdata = NULL, *kdata = NULL, *headers = NULL, *empty = NULL;
    PyObject *result = NULL;
    const Py_ssize_t size = view.len;
    if (overflow || count < 1 || count > size / K_MIN_RECORD) {
        kerr(0, "%S records cannot fit in %zd bytes", args[1], size); /* str(count), as the f-string */
        goto fail;
    }
    const int64_t n = count;
    vlens = PyBytes_FromStringAndSize(NULL, 4 * n);
    klens = PyBytes_FromStringAndSize(NULL, 4 * n);
    tss = PyBytes_FromStringAndSize(NULL, 8 * n);
    vdata = PyBytes_FromStringAndSize(NULL, size); /* the values fit in the section: shrunk at the end */
    empty = PyTuple_New(0);
    if (!vlens || !klens || !tss || !vdata || !empty) goto fail;
    unsigned char *vl = (unsigned char *)PyBytes_AS_STRING(vlens), *kl = (unsigned char *)PyBytes_AS_STRING(klens);
    unsigned char *tp = (unsigned char *)PyBytes_AS_STRING(tss);
    unsigned char *vd = (unsigned char *)PyBytes_AS_STRING(vdata), *kd = NULL;
    Py_ssize_t vused = 0, kused = 0;
    const unsigned char *p = view.buf, *const end = p + size;
    int64_t i;
    for (i = 0; i < n; i++) {
        int64_t length, tsd, od, klen, vlen, hcount;
        VARINT(length, 5, end);
        if (length < 0 || length > end - p) {
            kerr(0, "record %lld: length %lld does not fit the %zd bytes left", (long long)i, (long long)length,
                 (Py_ssize_t)(end - p));
            goto fail;
        }
        const unsigned char *rend = p + length;
        if (p >= rend) {
            kerr(0, "record %lld: truncated", (long long)i);
            goto fail;
        }
        p++; /* attributes: unused in v2 */
        VARINT(tsd, 10, rend);
        VARINT(od, 5, rend);
        if (od != i) {
            kerr(1, "record %lld: offset delta %lld, expected %lld", (long long)i, (long long)od, (long long)i);
            goto fail;
        }
        VARINT(klen, 5, rend);
        if (klen < -1 || klen > rend - p) {
            kerr(0, "record %lld: key length %lld does not fit the record", (long long)i, (long long)klen);
            goto fail;
        }
        if (klen >= 0) {
            if (kd == NULL) {
                kdata = PyBytes_FromStringAndSize(NULL, size);
                if (kdata == NULL) goto fail;
                kd = (unsigned char *)PyBytes_AS_STRING(kdata);
            }
            memcpy(kd + kused, p, (size_t)klen);
            kused += (Py_ssize_t)klen;
            p += klen;
        }
        VARINT(vlen, 5, rend);
        if (vlen < -1 || vlen > rend - p) {
            kerr(0, "record %lld: value length %lld does not fit the record", (long long)i, (long long)vlen);
            goto fail;
        }
        if (vlen >= 0) {
            memcpy(vd + vused, p, (size_t)vlen);
            vused += (Py_ssize_t)vlen;
            p += vlen;
        }
        VARINT(hcount, 5, rend);
        if (hcount < 0 || hcount > (rend - p) / 2) {
            kerr(0, "record %lld: header count %lld does not fit the record", (long long)i, (long long)hcount);
            goto fail;
        }
        if (hcount) {
            PyObject *pairs = PyTuple_New((Py_ssize_t)hcount);
            if (pairs == NULL) goto fail;
            for (int64_t j = 0; j < hcount; j++) {
                int64_t hk, hv;
                int rc = rd_varint(&p, rend, 5, &hk);
                if (rc < 0) {
                    Py_DECREF(pairs);
                    kerr(0, rc == -1 ? "record %lld: truncated" : "record %lld: malformed varint", (long long)i);
                    goto fail;
                }
                if (hk < 0 || hk > rend - p) {
                    Py_DECREF(pairs);
                    kerr(hk < 0, hk < 0 ? "record %lld: header key length %lld"
                                        : "record %lld: header key length %lld does not fit the record",
                         (long long)i, (long long)hk);
                    goto fail;
                }
                PyObject *name = PyUnicode_DecodeUTF8((const char *)p, (Py_ssize_t)hk, "strict");
                if (name == NULL) {
                    Py_DECREF(pairs);
                    if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) goto fail;
                    PyErr_Clear();
                    kerr(1, "record %lld: header key is not UTF-8", (long long)i);
                    goto fail;
                }
                p += hk;
                rc = rd_varint(&p, rend, 5, &hv);
                if (rc < 0 || hv < -1 || hv > rend - p) {
                    Py_DECREF(name);
                    Py_DECREF(pairs);
                    if (rc < 0)
                        kerr(0, rc == -1 ? "record %lld: truncated" : "record %lld: malformed varint", (long long)i);
                    else
                        kerr(0, "record %lld: header value length %lld does not fit the record", (long long)i,
                             (long long)hv);
                    goto fail;
                }
                PyObject *value;
                if (hv >= 0) {
                    value = PyBytes_FromStringAndSize((const char *)p, (Py_ssize_t)hv);
                    p += hv;
                } else {
                    value = Py_NewRef(Py_None);
                }
                PyObject *pair = value ? PyTuple_Pack(2, name, value) : NULL;
                Py_DECREF(name);
                Py_XDECREF(value);
                if (pair == NULL) {
                    Py_DECREF(pairs);
                    goto fail;
                }
                PyTuple_SET_ITEM(pairs, (Py_ssize_t)j, pair);
            }
            if (headers == NULL) {
                headers = PyList_New((Py_ssize_t)n);
                if (headers == NULL) {
                    Py_DECREF(pairs);
                    goto fail;
                }
                for (int64_t k = 0; k < i; k++) PyList_SET_ITEM(headers, (Py_ssize_t)k, Py_NewRef(empty));
            }
            PyList_SET_ITEM(headers, (Py_ssize_t)i, pairs);
        } else if (headers != NULL) {
            PyList_SET_ITEM(headers, (Py_ssize_t)i, Py_NewRef(empty));
        }
        if (p != rend) {
            kerr(0, "record %lld: %zd bytes left over", (long long)i, (Py_ssize_t)(rend - p));
            goto fail;
        }
        st_i32(vl + 4 * i, (int32_t)vlen);
        st_i32(kl + 4 * i, (int32_t)klen);
        st_i64(tp + 8 * i, (int64_t)(base_ts + (uint64_t)tsd)); /* wraps, as the reference */
    }
    if (p != end) {
        kerr(0, "%zd bytes after the last of %S records", (Py_ssize_t)(end - p), args[1]);
        goto fail;
    }
    if (_PyBytes_Resize(&vdata, vused) < 0) goto fail;
    if (kdata != NULL && _PyBytes_Resize(&kdata, kused) < 0) goto fail;
    if (kdata == NULL) Py_CLEAR(klens);
    result = PyTuple_Pack(6, vlens, vdata, klens ? klens : Py_None, kdata ? kdata : Py_None, tss,
                          headers ? headers : Py_None);
fail:
    Py_XDECREF(vlens);
    Py_XDECREF(klens);
    Py_XDECREF(tss);
    Py_XDECREF(vdata);
    Py_XDECREF(kdata);
    Py_XDECREF(headers);
    Py_XDECREF(empty);
    PyBuffer_Release(&view);
    return result;
}

/* ------------------------------------------------------------------------------------------- encoding */

static inline uint64_t zz(int64_t v) { return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63); }
static inline Py_ssize_t vsize(int64_t v) {
    uint64_t u = zz(v);
    Py_ssize_t s = 1;
    while (u >= 0x80) {
        u >>= 7;
        s++;
    }
    return s;
}
static inline unsigned char *put_varint(unsigned char *o, int64_t v) {
    uint64_t u = zz(v);
    while (u >= 0x80) {
        *o++ = (unsigned char)((u & 0x7f) | 0x80);
        u >>= 7;
    }
    *o++ = (unsigned char)u;
    return o;
}
static inline unsigned char *put_be64(unsigned char *o, int64_t v) {
    uint64_t u = __builtin_bswap64((uint64_t)v);
    memcpy(o, &u, 8);
    return o + 8;
}
static inline unsigned char *put_be32(unsigned char *o, int32_t v) {
    uint32_t u = __builtin_bswap32((uint32_t)v);
    memcpy(o, &u, 4);
    return o + 4;
}
static inline unsigned char *put_be16(unsigned char *o, int16_t v) {
    uint16_t u = __builtin_bswap16((uint16_t)v);
    memcpy(o, &u, 2);
    return o + 2;
}

/* The UTF-8 key, value bytes (NULL for None) of header pair `pair`, or -1 with TypeError. */
static int header_pair(PyObject *pair, const char **k, Py_ssize_t *klen, PyObject **value) {
    if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2 || !PyUnicode_Check(PyTuple_GET_ITEM(pair, 0)) ||
        !(PyTuple_GET_ITEM(pair, 1) == Py_None || PyBytes_Check(PyTuple_GET_ITEM(pair, 1)))) {
        PyErr_SetString(PyExc_TypeError, "headers must be tuples of (str, bytes | None) pairs");
        return -1;
    }
    *k = PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(pair, 0), klen);
    if (*k == NULL) return -1;
    *value = PyTuple_GET_ITEM(pair, 1) == Py_None ? NULL : PyTuple_GET_ITEM(pair, 1);
    return 0;
}

static int as_i64(PyObject *o, int64_t *out) {
    long long v = PyLong_AsLongLong(o);
    if (v == -1 && PyErr_Occurred()) return -1;
    *out = v;
    return 0;
}

/* kafka_encode_slice(body, header, start, stop, headers, leader_epoch) -> bytes */
static PyObject *py_kafka_encode_slice(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "kafka_encode_slice(body, header, start, stop, headers, leader_epoch)");
        return NULL;
    }
    PyObject *hd = args[1], *hlist = args[4];
    if (!PyTuple_Check(hd) || PyTuple_GET_SIZE(hd) != 13) {
        PyErr_SetString(PyExc_TypeError, "header must be a BatchHeader");
        return NULL;
    }
    int64_t base_offset, attrs, last_delta, first_ts, max_ts_h, pid, epoch, seq, n, start, stop, leader_epoch;
    if (as_i64(PyTuple_GET_ITEM(hd, 0), &base_offset) < 0 || as_i64(PyTuple_GET_ITEM(hd, 4), &attrs) < 0 ||
        as_i64(PyTuple_GET_ITEM(hd, 5), &last_delta) < 0 || as_i64(PyTuple_GET_ITEM(hd, 6), &first_ts) < 0 ||
        as_i64(PyTuple_GET_ITEM(hd, 7), &max_ts_h) < 0 || as_i64(PyTuple_GET_ITEM(hd, 8), &pid) < 0 ||
        as_i64(PyTuple_GET_ITEM(hd, 9), &epoch) < 0 || as_i64(PyTuple_GET_ITEM(hd, 10), &seq) < 0 ||
        as_i64(PyTuple_GET_ITEM(hd, 11), &n) < 0 || as_i64(args[2], &start) < 0 || as_i64(args[3], &stop) < 0 ||
        as_i64(args[5], &leader_epoch) < 0)
        return NULL;
    if (start >= stop) {
        PyErr_Format(PyExc_ValueError, "empty slice %lld:%lld", (long long)start, (long long)stop);
        return NULL;
    }
    if (start < 0 || stop > n) {
        PyErr_Format(PyExc_ValueError, "records %lld:%lld of a batch of %lld", (long long)start, (long long)stop,
                     (long long)n);
        return NULL;
    }
    /* A BatchView's header holds these in their widths (check_header keeps base_offset + last delta within
     * int64); a tuple passed directly need not: refuse rather than wrap the arithmetic below or truncate. */
    if (leader_epoch < INT32_MIN || leader_epoch > INT32_MAX) {
        PyErr_Format(PyExc_OverflowError, "leader epoch %lld does not fit in int32", (long long)leader_epoch);
        return NULL;
    }
    if (epoch < INT16_MIN || epoch > INT16_MAX || seq < INT32_MIN || seq > INT32_MAX) {
        PyErr_Format(PyExc_OverflowError, "producer epoch %lld or base sequence %lld outside int16 / int32",
                     (long long)epoch, (long long)seq);
        return NULL;
    }
    /* The buffer first: from Python 3.12 a class's __buffer__ runs Python code, which could shrink the headers
     * list after its size was checked. Nothing below runs Python code (no GC-tracked allocation either). */
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    PyObject *out = NULL;
    int with_headers = (attrs & ATTR_HEADERS) != 0;
    if (with_headers ? !(PyList_Check(hlist) && PyList_GET_SIZE(hlist) == n) : hlist != Py_None) {
        PyErr_SetString(PyExc_TypeError, "headers must be the batch's list of header tuples, or None without them");
        goto done;
    }
    layout_t L;
    if (pylog_layout(&L, view.buf, view.len, n, (long)attrs, last_delta, Py_None, Py_None) < 0) goto done;
    const unsigned char *body = L.body;
    const int log_append = (attrs & ATTR_LOG_APPEND_TIME) != 0;
#define OD(i) (L.od_pos >= 0 ? (int64_t)ld_i32(body + L.od_pos + 4 * (i)) : (int64_t)(i))
#define TS(i)                                                                                                  \
    (log_append ? max_ts_h                                                                                     \
                : (L.ts_pos < 0 ? first_ts                                                                     \
                                : (int64_t)((uint64_t)first_ts + (uint64_t)ld_i64(body + L.ts_pos + 8 * (i)))))
#define KLEN(i) (L.k_pos >= 0 ? ld_i32(body + L.k_pos + 4 * (i)) : -1)
#define VLEN(i) ld_i32(body + L.v_pos + 4 * (i))
    const int64_t od0 = OD(start), base_ts = TS(start);
    if (base_offset > INT64_MAX - OD(stop - 1)) { /* deltas are >= 0 (pylog_layout): only the top can overflow */
        PyErr_Format(PyExc_OverflowError, "base offset %lld + offset delta %lld exceeds int64", (long long)base_offset,
                     (long long)OD(stop - 1));
        goto done;
    }
    int64_t max_ts = base_ts;
    /* Pass 1: the exact size (record lengths are varints ahead of each record) and the largest timestamp. */
    Py_ssize_t total = 0;
    for (int64_t i = start; i < stop; i++) {
        int64_t ts = TS(i);
        if (ts > max_ts) max_ts = ts;
        int32_t kl = KLEN(i), vl = VLEN(i);
        Py_ssize_t rec = 1 + vsize((int64_t)((uint64_t)ts - (uint64_t)base_ts)) + vsize(OD(i) - od0) + vsize(kl) +
                         (kl > 0 ? kl : 0) + vsize(vl) + (vl > 0 ? vl : 0);
        PyObject *row = with_headers ? PyList_GET_ITEM(hlist, (Py_ssize_t)i) : NULL;
        if (row != NULL && !PyTuple_Check(row)) {
            PyErr_SetString(PyExc_TypeError, "headers must be tuples of (str, bytes | None) pairs");
            goto done;
        }
        Py_ssize_t hc = row ? PyTuple_GET_SIZE(row) : 0;
        rec += vsize(hc);
        for (Py_ssize_t j = 0; j < hc; j++) {
            const char *k = NULL;
            Py_ssize_t klen = 0;
            PyObject *v = NULL;
            if (header_pair(PyTuple_GET_ITEM(row, j), &k, &klen, &v) < 0) goto done;
            Py_ssize_t hv = v ? PyBytes_GET_SIZE(v) : -1;
            rec += vsize(klen) + klen + vsize(hv) + (hv > 0 ? hv : 0);
        }
        total += vsize(rec) + rec;
    }
    if (total > 0x7fffffffLL - (K_HEADER_SIZE - 12)) {
        PyErr_SetString(PyExc_OverflowError, "slice too large for one Kafka batch");
        goto done;
    }
    out = PyBytes_FromStringAndSize(NULL, K_HEADER_SIZE + total);
    if (out == NULL) goto done;
    unsigned char *o0 = (unsigned char *)PyBytes_AS_STRING(out), *o = o0;
    int64_t seq_out = seq >= 0 ? (seq + (OD(start))) % SEQ_MOD : seq;
    o = put_be64(o, base_offset + od0);
    o = put_be32(o, (int32_t)(K_HEADER_SIZE - 12 + total));
    o = put_be32(o, (int32_t)leader_epoch);
    *o++ = K_MAGIC;
    o += 4; /* crc, below */
    o = put_be16(o, (int16_t)(attrs & (ATTR_LOG_APPEND_TIME | ATTR_TRANSACTIONAL | ATTR_CONTROL)));
    o = put_be32(o, (int32_t)(OD(stop - 1) - od0));
    o = put_be64(o, base_ts);
    o = put_be64(o, max_ts);
    o = put_be64(o, pid);
    o = put_be16(o, (int16_t)epoch);
    o = put_be32(o, (int32_t)seq_out);
    o = put_be32(o, (int32_t)(stop - start));
    const unsigned char *kd = L.k_pos >= 0 ? body + L.k_data + pylog_data_start(body + L.k_pos, L.k_uniform, start)
                                           : NULL;
    const unsigned char *vd = body + L.v_data + pylog_data_start(body + L.v_pos, L.v_uniform, start);
    /* Pass 2: write (the headers were type-checked in pass 1; their UTF-8 is cached in the str objects). */
    for (int64_t i = start; i < stop; i++) {
        int64_t tsd = (int64_t)((uint64_t)TS(i) - (uint64_t)base_ts), od = OD(i) - od0;
        int32_t kl = KLEN(i), vl = VLEN(i);
        PyObject *row = with_headers ? PyList_GET_ITEM(hlist, (Py_ssize_t)i) : NULL;
        Py_ssize_t hc = row ? PyTuple_GET_SIZE(row) : 0;
        Py_ssize_t rec = 1 + vsize(tsd) + vsize(od) + vsize(kl) + (kl > 0 ? kl : 0) + vsize(vl) + (vl > 0 ? vl : 0) +
                         vsize(hc);
        for (Py_ssize_t j = 0; j < hc; j++) {
            const char *k = NULL;
            Py_ssize_t klen = 0;
            PyObject *v = NULL;
            header_pair(PyTuple_GET_ITEM(row, j), &k, &klen, &v);
            Py_ssize_t hv = v ? PyBytes_GET_SIZE(v) : -1;
            rec += vsize(klen) + klen + vsize(hv) + (hv > 0 ? hv : 0);
        }
        o = put_varint(o, rec);
        *o++ = 0;
        o = put_varint(o, tsd);
        o = put_varint(o, od);
        o = put_varint(o, kl);
        if (kl > 0) {
            memcpy(o, kd, (size_t)kl);
            o += kl;
            kd += kl;
        }
        o = put_varint(o, vl);
        if (vl > 0) {
            memcpy(o, vd, (size_t)vl);
            o += vl;
            vd += vl;
        }
        o = put_varint(o, hc);
        for (Py_ssize_t j = 0; j < hc; j++) {
            const char *k = NULL;
            Py_ssize_t klen = 0;
            PyObject *v = NULL;
            header_pair(PyTuple_GET_ITEM(row, j), &k, &klen, &v);
            o = put_varint(o, klen);
            memcpy(o, k, (size_t)klen);
            o += klen;
            Py_ssize_t hv = v ? PyBytes_GET_SIZE(v) : -1;
            o = put_varint(o, hv);
            if (hv > 0) {
                memcpy(o, PyBytes_AS_STRING(v), (size_t)hv);
                o += hv;
            }
        }
    }
    uint32_t crc = pylog_crc32c(0, o0 + K_CRC_START, (size_t)(K_HEADER_SIZE + total - K_CRC_START));
    put_be32(o0 + 17, (int32_t)crc);
#undef OD
#undef TS
#undef KLEN
#undef VLEN
done:
    PyBuffer_Release(&view);
    return out;
}

PyMethodDef pylog_kafka_methods[] = {
    {"kafka_parse_records", (PyCFunction)(void (*)(void))py_kafka_parse_records, METH_FASTCALL,
     "kafka_parse_records(section, count, base_timestamp) -> (value_lengths, value_data, key_lengths | None, "
     "key_data | None, timestamps, headers | None): a Kafka v2 records section as pylog columns."},
    {"kafka_encode_slice", (PyCFunction)(void (*)(void))py_kafka_encode_slice, METH_FASTCALL,
     "kafka_encode_slice(body, header, start, stop, headers, leader_epoch) -> bytes: records start:stop of a "
     "pylog batch as one uncompressed Kafka v2 batch."},
    {NULL, NULL, 0, NULL},
};
