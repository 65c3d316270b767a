/* join_buffers(parts): b"".join(parts) for the large data columns of read_columns
 * (pylog/storage/records/views.py, RecordColumns.concat_views).
 *
 * Why: a read_columns result is fresh memory the process has not touched (glibc hands large blocks back to
 * the kernel when they are freed), and on this kind of VM faulting it in 4 KiB page by page costs more than
 * copying into it. Asking for transparent huge pages on the block before the first write (madvise
 * MADV_HUGEPAGE, on the 2 MiB-aligned part of blocks of 4 MiB and more) makes that one fault per 2 MiB. The
 * result is the same bytes object b"".join returns; madvise is advice, and where the kernel ignores it
 * (THP off, another OS) nothing changes but the speed.
 *
 * Every part is held as an exported buffer (PyBUF_SIMPLE) for the whole copy, so a mapping it views cannot
 * be closed under it, and the copy runs without the GIL. */
#include "common.h"
#if defined(__linux__)
#include <sys/mman.h>
#endif

#define HUGE_MIN (4 << 20)
#define HUGE_PAGE ((uintptr_t)2 << 20)
#define NOGIL_MIN (1 << 20)

static void advise_huge(char *p, Py_ssize_t len) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (len < HUGE_MIN) return;
    uintptr_t a = ((uintptr_t)p + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
    uintptr_t b = ((uintptr_t)p + (uintptr_t)len) & ~(HUGE_PAGE - 1);
    if (b > a) (void)madvise((void *)a, b - a, MADV_HUGEPAGE); /* advice only: an error changes nothing */
#else
    (void)p;
    (void)len;
#endif
}

static PyObject *py_join_buffers(PyObject *self, PyObject *parts) {
    if (!PyList_CheckExact(parts)) {
        PyErr_SetString(PyExc_TypeError, "join_buffers takes a list of bytes-like objects");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(parts);
    Py_buffer *views = PyMem_Calloc(n ? (size_t)n : 1, sizeof(Py_buffer));
    if (views == NULL) return PyErr_NoMemory();
    Py_ssize_t got = 0, total = 0;
    PyObject *out = NULL;
    for (; got < n; got++) {
        if (PyObject_GetBuffer(PyList_GET_ITEM(parts, got), &views[got], PyBUF_SIMPLE) < 0) goto done;
        if (views[got].len > PY_SSIZE_T_MAX - total) {
            got++;
            PyErr_SetString(PyExc_OverflowError, "join_buffers: joined size does not fit");
            goto done;
        }
        total += views[got].len;
    }
    out = PyBytes_FromStringAndSize(NULL, total);
    if (out == NULL) goto done;
    char *p = PyBytes_AS_STRING(out);
    advise_huge(p, total);
    if (total >= NOGIL_MIN) {
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t i = 0; i < n; i++) {
            memcpy(p, views[i].buf, (size_t)views[i].len);
            p += views[i].len;
        }
        Py_END_ALLOW_THREADS
    } else {
        for (Py_ssize_t i = 0; i < n; i++) {
            memcpy(p, views[i].buf, (size_t)views[i].len);
            p += views[i].len;
        }
    }
done:
    for (Py_ssize_t i = 0; i < got; i++) PyBuffer_Release(&views[i]);
    PyMem_Free(views);
    return out;
}

PyMethodDef pylog_columns_methods[] = {
    {"join_buffers", (PyCFunction)py_join_buffers, METH_O,
     "join_buffers(parts: list) -> bytes: b''.join(parts), into memory advised to use huge pages when large."},
    {NULL, NULL, 0, NULL},
};
