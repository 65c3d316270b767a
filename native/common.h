/* Shared declarations of pylog's compiled accelerator (pylog._native). Every part is a .c file with a
 * method table and, where it needs one, an init function; module.c puts them together. */
#ifndef PYLOG_COMMON_H
#define PYLOG_COMMON_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* Bumped whenever a function's signature or meaning changes: pylog/accel.py refuses a build whose ABI it
 * does not know (a stale in-place build), and runs pure Python instead. */
#define PYLOG_NATIVE_ABI 3

/* The method tables of the parts (each ends with a {NULL} sentinel). */
extern PyMethodDef pylog_crc_methods[];
extern PyMethodDef pylog_send_methods[];
/* Adds send.c's Sender type to the module. */
int pylog_send_add_types(PyObject *m);
extern PyMethodDef pylog_decode_methods[];
/* Adds decode.c's RowIter type to the module. */
int pylog_decode_add_types(PyObject *m);
extern PyMethodDef pylog_encode_methods[];
extern PyMethodDef pylog_columns_methods[];
extern PyMethodDef pylog_kafka_methods[];

/* Where the sections of a pylog batch body are (byte positions into it), as views.batch_layout_pure works
 * them out; filled by decode.c's pylog_layout, which checks every bound (CorruptRecordError otherwise). */
typedef struct {
    const unsigned char *body;
    Py_ssize_t size;
    int64_t n;
    Py_ssize_t od_pos, ts_pos, k_pos, v_pos; /* -1: column absent */
    int64_t k_bytes, v_bytes;
    int32_t k_uniform, v_uniform; /* the length every item has, or -1 */
    Py_ssize_t k_data, v_data, h_pos; /* h_pos -1: no headers section */
} layout_t;
int pylog_layout(layout_t *L, const unsigned char *body, Py_ssize_t size, int64_t n, long attrs, int64_t last_delta,
                 PyObject *path, PyObject *position);
/* Where item `start` of a column (lengths at `lengths`, all `uniform` long or -1) starts in its data. */
Py_ssize_t pylog_data_start(const unsigned char *lengths, int32_t uniform, int64_t start);

/* Little-endian loads and stores (the format is little-endian; so is every machine pylog builds on, and a
 * big-endian build refuses itself in module.c). */
static inline int32_t ld_i32(const unsigned char *p) { int32_t v; memcpy(&v, p, 4); return v; }
static inline uint32_t ld_u32(const unsigned char *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static inline int64_t ld_i64(const unsigned char *p) { int64_t v; memcpy(&v, p, 8); return v; }
static inline uint16_t ld_u16(const unsigned char *p) { uint16_t v; memcpy(&v, p, 2); return v; }
static inline int16_t ld_i16(const unsigned char *p) { int16_t v; memcpy(&v, p, 2); return v; }
static inline void st_i32(unsigned char *p, int32_t v) { memcpy(p, &v, 4); }
static inline void st_u32(unsigned char *p, uint32_t v) { memcpy(p, &v, 4); }
static inline void st_i64(unsigned char *p, int64_t v) { memcpy(p, &v, 8); }
static inline void st_u16(unsigned char *p, uint16_t v) { memcpy(p, &v, 2); }
static inline void st_i16(unsigned char *p, int16_t v) { memcpy(p, &v, 2); }

#endif
