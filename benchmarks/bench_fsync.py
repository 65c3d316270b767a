"""What making N partitions durable costs on this disk (issue 25): fdatasync of N distinct files one after
another, the same from a pool of threads at once, and one ``syncfs`` of their file system.

Usage::

    python benchmarks/bench_fsync.py                       # N = 1, 4, 16, 64, 256, 500; 2 KiB per file; 5 rounds
    python benchmarks/bench_fsync.py --files 500 --rounds 20 --threads 16 --bytes 2048 --dir /some/fs

Each round appends ``--bytes`` to each of N files (kept open, as a partition's active segment is), then makes
them durable in one of three ways, interleaved round by round so that a loaded machine hurts each alike:

- ``seq``: ``os.fdatasync`` of each file in turn (what one thread flushing partition after partition does);
- ``pool``: the same fdatasyncs from ``--threads`` threads at once (pylog's group commit before the store-wide
  path: ext4 joins concurrent fsyncs into one journal commit, but each still pays its own kernel work);
- ``syncfs``: one ``syncfs(2)`` of the files' file system (every dirty page of that file system, including
  other programs' files, is written back and one journal commit with a cache flush made);
- ``syncfs+check``: the same, then ``sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WAIT_AFTER)`` of each file:
  it reports that file's own writeback error, as fdatasync would, without a journal commit or a cache flush
  (what pylog's group commit does, :mod:`pylog.storage.group_commit`).

``--prealloc`` compares instead ``seq`` and ``pool`` on files whose blocks are reserved ahead of the appends
(``seq+reserved``, ``pool+reserved``: :func:`pylog.storage.prealloc.reserve_ahead` before each append, as an active
segment that is fsynced while active does) with the same on files that are not, each method on files of its own;
it adds the voluntary context switches per fdatasync (each a wait, mostly for the disk).

Reported per method and N: the median wall time per round (ms) and the median CPU time of this process per round
(user + system, ms; the kernel work of fdatasync is system time of the calling thread), with ``uptime``'s load
averages. The first round of each method is dropped (it opens and extends the files). Nothing asserts.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import ctypes
import ctypes.util
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from pylog.storage import prealloc  # noqa: E402 - the reservation pylog.segment makes

_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)


def syncfs(fd: int) -> None:
    if _libc.syncfs(fd) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def check_written(fd: int) -> None:
    if _libc.sync_file_range(fd, ctypes.c_int64(0), ctypes.c_int64(0), 4) != 0:  # SYNC_FILE_RANGE_WAIT_AFTER
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def write_all(fds: list[int], chunk: bytes, reserved: dict[int, int] | None = None) -> None:
    for fd in fds:
        if reserved is not None:  # as pylog.segment does before an append (pylog.storage.prealloc)
            reserved[fd] = prealloc.reserve_ahead(fd, reserved.get(fd, 0), os.lseek(fd, 0, os.SEEK_END), len(chunk))
        os.write(fd, chunk)


def one_round(method: str, fds: list[int], chunk: bytes, pool: concurrent.futures.ThreadPoolExecutor,
              dir_fd: int, reserved: dict[int, int] | None = None) -> tuple[float, float, float]:
    write_all(fds, chunk, reserved if method.endswith("+reserved") else None)
    c0, t0, w0 = time.process_time(), time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw
    if method.startswith("seq"):
        for fd in fds:
            os.fdatasync(fd)
    elif method.startswith("pool"):
        list(pool.map(os.fdatasync, fds))
    else:
        syncfs(dir_fd)
        if method == "syncfs+check":
            for fd in fds:
                check_written(fd)
    waits = (resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw - w0) / len(fds)
    return (time.perf_counter() - t0) * 1e3, (time.process_time() - c0) * 1e3, waits


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", type=int, nargs="*", default=[1, 4, 16, 64, 256, 500])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=16)
    ap.add_argument("--bytes", type=int, default=2048, help="appended to each file per round")
    ap.add_argument("--dir", help="where the files go (default: a temporary directory)")
    ap.add_argument("--prealloc", action="store_true", help="fdatasync with and without blocks reserved ahead")
    args = ap.parse_args(argv)
    root = tempfile.mkdtemp(prefix="pylog-bench-fsync-", dir=args.dir)
    chunk = b"x" * args.bytes
    methods = ("seq", "seq+reserved", "pool", "pool+reserved") if args.prealloc else \
        ("seq", "pool", "syncfs", "syncfs+check")
    print(f"kernel {os.uname().release}; {args.bytes} B appended per file per round; {args.rounds} rounds; "
          f"pool of {args.threads} threads; load {os.getloadavg()}")
    print(f"{'files':>6} {'method':>13} {'wall ms':>9} {'cpu ms':>8} {'wall/file us':>13} {'waits/file':>10}")
    pool = concurrent.futures.ThreadPoolExecutor(args.threads)
    dir_fd = os.open(root, os.O_RDONLY)
    try:
        for n in args.files:
            # With --prealloc each method has files of its own (a file with blocks reserved stays so).
            sets = {m: [os.open(os.path.join(root, f"{n}-{m if args.prealloc else ''}-{i}.log"),
                                os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644) for i in range(n)]
                    for m in (methods if args.prealloc else methods[:1])}
            reserved: dict[int, int] = {}
            try:
                times: dict[str, list[tuple[float, float, float]]] = {m: [] for m in methods}
                for r in range(args.rounds + 1):
                    for m in methods:
                        res = one_round(m, sets.get(m) or sets[methods[0]], chunk, pool, dir_fd, reserved)
                        if r:
                            times[m].append(res)
                for m in methods:
                    wall = statistics.median(t[0] for t in times[m])
                    cpu = statistics.median(t[1] for t in times[m])
                    waits = statistics.median(t[2] for t in times[m])
                    print(f"{n:>6} {m:>13} {wall:>9.2f} {cpu:>8.2f} {wall * 1e3 / n:>13.1f} {waits:>10.2f}", flush=True)
            finally:
                for fds in sets.values():
                    for fd in fds:
                        os.close(fd)
    finally:
        os.close(dir_fd)
        pool.shutdown()
        shutil.rmtree(root, ignore_errors=True)
    print(f"load {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
