"""Copy a store directory while it is open: the files a crash at this moment would leave.

The store's background sync thread may replace a checkpoint during the copy: either version is what a crash
at that moment leaves, and a temp file that vanishes mid-copy is one the crash did not leave.
"""

from __future__ import annotations

import os
import shutil


def _copy_if_there(src: str, dst: str) -> None:
    try:
        shutil.copy2(src, dst)
    except FileNotFoundError:
        pass


def crash_copy(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
    shutil.copytree(src, dst, copy_function=_copy_if_there)
