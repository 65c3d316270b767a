"""The ``pylog`` command line: look inside a store and check it.

    pylog topics STORE            topics, partitions, segments, log start/end offsets, sizes
    pylog verify STORE [TOPIC]    full integrity check of every segment and index; exit 1 on any problem

``main(argv) -> int`` is the whole program (tested in-process); exit codes are :class:`ExitCode`.
Verification opens partitions as a reader (no lock, nothing written), so it is safe on a live store.
"""

from __future__ import annotations

import argparse
import os
import sys
from enum import IntEnum
from typing import Sequence, TextIO

from . import __version__
from .errors import PylogError
from .filenames import STORE_FILE
from .log import Store

__all__ = ["main", "ExitCode"]


class ExitCode(IntEnum):
    OK = 0
    PROBLEMS = 1  # verify found damage
    USAGE = 2  # bad arguments (argparse's own code)
    ERROR = 3  # the store could not be read


def _topics(store: Store, out: TextIO) -> ExitCode:
    names = store.topics()
    if not names:
        print(f"no topics in {store.path}", file=out)
    for name in names:
        topic = store.topic(name)
        overrides = topic.config.overrides
        print(f"{name}  partitions={topic.num_partitions}"
              + (f"  config={overrides}" if overrides else ""), file=out)
        for p in topic.partitions:
            print(f"  {p.number}: offsets [{p.log_start_offset}, {p.log_end_offset})  segments={len(p.segments)}"
                  f"  bytes={p.size_bytes()}", file=out)
    return ExitCode.OK


def _verify(store: Store, topic_names: Sequence[str], out: TextIO) -> ExitCode:
    problems = 0
    for name in topic_names or store.topics():
        for p in store.topic(name).partitions:
            found = p.check()
            problems += len(found)
            status = "ok" if not found else f"{len(found)} problem(s)"
            print(f"{name}-{p.number}: {len(p.segments)} segments, offsets [{p.log_start_offset}, "
                  f"{p.log_end_offset}): {status}", file=out)
            for line in found:
                print(f"  {line}", file=out)
    print("verify: " + ("no problems" if not problems else f"{problems} problem(s)"), file=out)
    return ExitCode.OK if not problems else ExitCode.PROBLEMS


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Run the command line with ``argv`` (default ``sys.argv[1:]``); returns the exit code."""
    out = out or sys.stdout
    parser = argparse.ArgumentParser(prog="pylog", description="Look inside a pylog store.")
    parser.add_argument("--version", action="version", version=f"pylog {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    t = sub.add_parser("topics", help="list topics with their partitions, offsets and sizes")
    t.add_argument("store")
    v = sub.add_parser("verify", help="check every segment and index; exit 1 on any problem")
    v.add_argument("store")
    v.add_argument("topics", nargs="*", help="only these topics (default: all)")
    args = parser.parse_args(argv)
    if not os.path.isfile(os.path.join(args.store, STORE_FILE)):  # never create a store by looking at it
        print(f"pylog: {args.store} is not a pylog store (no {STORE_FILE})", file=sys.stderr)
        return ExitCode.ERROR
    try:
        with Store(args.store) as store:
            if args.command == "topics":
                return _topics(store, out)
            return _verify(store, args.topics, out)
    except PylogError as exc:
        print(f"pylog: {exc}", file=sys.stderr)
        return ExitCode.ERROR


def run() -> None:
    """Console-script entry: ``main()`` with a quiet exit when the output pipe closes (``pylog ... | head``)."""
    try:
        code = main()
        sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = ExitCode.OK
    sys.exit(code)


if __name__ == "__main__":
    run()
