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
#define PYLOG_NATIVE_ABI 2

/* The method tables of the parts (each ends with a {NULL} sentinel). */
extern PyMethodDef pylog_crc_methods[];
extern PyMethodDef pylog_send_methods[];
/* Adds send.c's Sender type to the module. */
int pylog_send_add_types(PyObject *m);
extern PyMethodDef pylog_decode_methods[];
extern PyMethodDef pylog_encode_methods[];
extern PyMethodDef pylog_columns_methods[];

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
