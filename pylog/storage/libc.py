"""The C library's functions the standard library does not wrap (``fallocate``, ``syncfs``,
``sync_file_range``), through ctypes, from one handle to the C library.

Invariants:
- :func:`function` gives None where the function cannot be had (not Linux, no C library found, one too old to
  have it): its caller then does without, as it documents, and never fails for it.
- Every function it gives sets ``errno`` for :func:`ctypes.get_errno` (the handle is loaded with
  ``use_errno``). Each function's argument and result types are set by its one caller.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
from typing import Any, Sequence

__all__ = ["function"]


def _load() -> "ctypes.CDLL | None":
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    except OSError:
        return None


_C = _load()


def function(name: str, argtypes: Sequence[Any], restype: Any = ctypes.c_int) -> Any:
    """The C library's function ``name`` with these argument and result types, or None (see the invariants)."""
    if _C is None:
        return None
    try:
        fn = getattr(_C, name)
    except AttributeError:
        return None
    fn.argtypes = list(argtypes)
    fn.restype = restype
    return fn
