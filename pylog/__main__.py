"""``python -m pylog`` and the ``pylog`` console script; the commands live in :mod:`pylog.cli`."""

from __future__ import annotations

import os
import sys

from .cli import ExitCode, main

__all__ = ["main", "ExitCode", "run"]


def run() -> None:
    """Console-script entry: ``main()`` with a quiet exit when the output pipe closes (``pylog ... | head``)
    and on Ctrl-C (exit 130, no traceback)."""
    try:
        code = main()
        sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the exit's own flush is quiet
        code = ExitCode.OK
    except KeyboardInterrupt:
        print(file=sys.stderr)
        code = ExitCode.INTERRUPTED
    sys.exit(code)


if __name__ == "__main__":
    run()
