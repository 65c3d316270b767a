/* pylog._native: the compiled accelerator of pylog's hot paths.
 *
 * The pure-Python code is the reference: every function here gives the same results, raises the same
 * pylog errors and writes the same bytes as its Python counterpart (tests/test_native_*.py check it on
 * random and hostile inputs). pylog/accel.py decides whether this module is used (PYLOG_PURE_PYTHON=1
 * forces pure Python) and checks ABI_VERSION against what it expects.
 *
 * Each part lives in its own .c file with its own method table; parts that need state (types, imported
 * Python objects) have an init function called below. */
#include "common.h"
#include "crc32c.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "pylog._native assumes a little-endian machine; install with the pure-Python path"
#endif

static PyMethodDef *const tables[] = {
    pylog_crc_methods,
    pylog_send_methods,
    pylog_decode_methods,
    pylog_encode_methods,
    pylog_columns_methods,
    pylog_kafka_methods,
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "pylog._native", "pylog's compiled accelerator (see pylog/accel.py).", -1, NULL,
};

PyMODINIT_FUNC PyInit__native(void) {
    pylog_crc32c_init();
    PyObject *m = PyModule_Create(&moduledef);
    if (m == NULL) return NULL;
    for (size_t i = 0; i < sizeof(tables) / sizeof(tables[0]); i++) {
        if (PyModule_AddFunctions(m, tables[i]) < 0) goto fail;
    }
    if (pylog_send_add_types(m) < 0) goto fail;
    if (pylog_decode_add_types(m) < 0) goto fail;
    if (PyModule_AddIntConstant(m, "ABI_VERSION", PYLOG_NATIVE_ABI) < 0) goto fail;
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
