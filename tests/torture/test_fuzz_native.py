"""The AddressSanitizer fuzz harness (tests/torture/fuzz_native.py) reads sanitizer reports right: a leak
counts against pylog._native only with a frame in it, and every ASan or UBSan error counts. The harness
itself runs from .ci/run (``python tests/torture/fuzz_native.py --short``), not from here: it builds its own
copy of the extension and takes 30-60 s."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

import fuzz_native  # noqa: E402


def test_reports_with_a_frame_in_the_extension_count_and_others_do_not():
    so = "/tmp/x/asan-lib/pylog/_native.cpython-311-x86_64-linux-gnu.so"
    stderr = (
        "=================================================================\n"
        "==1==ERROR: LeakSanitizer: detected memory leaks\n\n"
        "Direct leak of 8 byte(s) in 1 object(s) allocated from:\n"
        "    #0 0x1 in __interceptor_malloc asan_malloc_linux.cpp:69\n"
        "    #1 0x2 in PyMem_RawMalloc Objects/obmalloc.c:586\n\n"
        "Direct leak of 16 byte(s) in 1 object(s) allocated from:\n"
        "    #0 0x1 in __interceptor_malloc asan_malloc_linux.cpp:69\n"
        f"    #1 0x3 in py_decode ({so}+0x1234)\n\n"
        "Indirect leak of 96 byte(s) in 1 object(s) allocated from:\n"
        "    #1 0x4 in traceback_new Modules/_tracemalloc.c:452\n"
        "    #2 0x5 in py_crc32c native/crc_py.c:17\n\n"
        "SUMMARY: AddressSanitizer: 120 byte(s) leaked in 3 allocation(s).\n")
    rep = fuzz_native.read_reports(stderr, so)
    assert rep["leaks"] == 3
    assert len(rep["native_leaks"]) == 1 and "py_decode" in rep["native_leaks"][0]
    assert rep["errors"] == []
    rep = fuzz_native.read_reports("==7==ERROR: AddressSanitizer: heap-buffer-overflow on address 0x1\n"
                                   "native/views.c:10:5: runtime error: load of misaligned address\n", so)
    assert len(rep["errors"]) == 2
