"""Which implementation of pylog's hot paths is live: the compiled accelerator or pure Python.

pylog ships an optional C extension, ``pylog._native`` (sources in ``native/``, declared in
pyproject.toml). :data:`native` is that module when it is built, importable, of the ABI version this code
expects and not switched off by ``PYLOG_PURE_PYTHON=1``; otherwise None, and every caller runs its
pure-Python code. :data:`ACCELERATED` says which (``pylog.ACCELERATED``; ``pylog --version`` and
``pylog health`` print it) and :data:`REASON` why.

Invariants:
- The choice is made once, at import, for the whole process: a caller never mixes paths within a run.
- The pure-Python code is the reference. Both paths give equal results, raise the same
  :class:`~pylog.errors.PylogError` subclasses and write the same bytes (tests/test_native_*.py check it
  on random and hostile inputs), so the choice changes speed only.
- A build that does not load or that has another ABI version (a stale in-place build) is never used: pylog
  runs in pure Python and :data:`REASON` says why, rather than failing to import.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

__all__ = ["ACCELERATED", "REASON", "PURE_PYTHON_ENV", "native", "describe"]

#: Set to a non-empty value other than ``0`` to force the pure-Python path.
PURE_PYTHON_ENV = "PYLOG_PURE_PYTHON"
#: The ``ABI_VERSION`` of ``pylog._native`` this code is written against (native/common.h).
_EXPECTED_ABI = 3

native: ModuleType | None = None
REASON: str
if os.environ.get(PURE_PYTHON_ENV, "") not in ("", "0"):
    REASON = f"{PURE_PYTHON_ENV} is set"
else:
    try:
        # By name: `from . import _native` would read, to import-linter, as an import of the package itself.
        _loaded = importlib.import_module("pylog._native")
    except ImportError as exc:
        REASON = f"the compiled extension is not available ({exc}); reinstall with a C compiler to build it"
    else:
        abi = getattr(_loaded, "ABI_VERSION", None)
        if abi != _EXPECTED_ABI:
            REASON = (f"the compiled extension has ABI version {abi}, this pylog expects {_EXPECTED_ABI} "
                      "(a stale build): reinstall pylog to rebuild it")
        else:
            native = _loaded
            REASON = "compiled extension pylog._native loaded"

#: True when the compiled accelerator is live, False when pylog runs in pure Python.
ACCELERATED: bool = native is not None


def describe() -> str:
    """One line for ``--version`` and ``health``: which path is live, and why when it is pure Python."""
    if ACCELERATED:
        return "accelerated (compiled extension)"
    return f"pure Python ({REASON})"
