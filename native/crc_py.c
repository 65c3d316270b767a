/* crc32c(data, value=0): the CRC-32C of a bytes-like object, the same function as the `crc32c` package's.
 * Exposed for the differential tests and for callers that checksum outside a batch. */
#include "common.h"
#include "crc32c.h"

/* Below this many bytes the checksum (~1 us) costs less than letting other threads run and taking the GIL
 * back: a batch header's 8-byte piece, a small batch. */
#define RELEASE_GIL_FROM 4096

static PyObject *py_crc32c(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs < 1 || nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "crc32c(data, value=0)");
        return NULL;
    }
    unsigned long value = 0;
    if (nargs == 2) {
        value = PyLong_AsUnsignedLong(args[1]);
        if (value == (unsigned long)-1 && PyErr_Occurred()) return NULL;
        if (value > 0xffffffffUL) {
            PyErr_SetString(PyExc_ValueError, "crc32c: value must fit in 32 bits");
            return NULL;
        }
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    uint32_t crc;
    if (view.len < RELEASE_GIL_FROM) {
        crc = pylog_crc32c((uint32_t)value, view.buf, (size_t)view.len);
    } else {
        Py_BEGIN_ALLOW_THREADS
        crc = pylog_crc32c((uint32_t)value, view.buf, (size_t)view.len);
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(crc);
}

PyMethodDef pylog_crc_methods[] = {
    {"crc32c", (PyCFunction)(void (*)(void))py_crc32c, METH_FASTCALL,
     "crc32c(data, value=0) -> int: CRC-32C of data continuing from value."},
    {NULL, NULL, 0, NULL},
};
