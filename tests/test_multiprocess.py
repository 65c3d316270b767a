"""Several processes on one store: the single-writer lock, and readers tailing a writer in another process.

Children are separate Python interpreters (``subprocess``, ``python -c``), so no file descriptor or lock is
inherited from the test process. Every wait has a timeout and every child is killed in a ``finally``.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import numpy as np
import pytest

import pylog
import pylog.storage.log.writer_lock

from childproc import Child

TOPIC = "t"


# ----------------------------------------------------------------------------- child process helpers


def make_topic(root: str, **config) -> None:
    with pylog.open(root) as store:
        store.create_topic(TOPIC, partitions=1, config=config or None)


# ----------------------------------------------------------------------------- (a) the writer lock

# argv: root, lock_timeout_ms. Tries to append one record; prints the outcome, the time it took and how
# many times it tried the lock (pylog.storage.log.writer_lock's try_flock, counted; the real one does the work). The
# first refused try prints "refused": from then on the child waits for the lock.
_TRY_WRITE = """
    import sys, time, pylog, pylog.storage.log.writer_lock
    root, timeout_ms = sys.argv[1], int(sys.argv[2])
    tries = 0
    real_try_flock = pylog.storage.log.writer_lock.try_flock

    def counted(fd):
        global tries
        tries += 1
        got = real_try_flock(fd)
        if not got and tries == 1:
            print("refused", flush=True)
        return got

    pylog.storage.log.writer_lock.try_flock = counted
    with pylog.open(root, lock_timeout_ms=timeout_ms) as store:
        p = store.topic("t").partition(0)
        print("seen", p.log_end_offset, len(p.read(0)), flush=True)   # reading needs no lock
        t0 = time.monotonic()
        try:
            first = p.append_values([b"from-child"])
        except pylog.PartitionLockedError:
            print("locked", time.monotonic() - t0, tries, flush=True)
        else:
            p.flush()
            print("wrote", first, time.monotonic() - t0, tries, flush=True)
"""

# argv: root. Appends, says so, then holds the lock until killed or told to close.
_HOLD_LOCK = """
    import sys, pylog
    store = pylog.open(sys.argv[1])
    p = store.topic("t").partition(0)
    first = p.append_values([b"holder-%d" % i for i in range(10)])
    p.flush()
    print("holding", first, flush=True)
    sys.stdin.readline()
    store.close()
    print("closed", flush=True)
"""


def _watch_lock_refusals(monkeypatch) -> threading.Event:
    """An event set when this process's next writer-lock try (pylog.storage.log.writer_lock's try_flock, the real one
    doing the work) finds the lock taken: from then on that append waits for the lock."""
    refused = threading.Event()
    real = pylog.storage.log.writer_lock.try_flock

    def watched(fd):
        got = real(fd)
        if not got:
            refused.set()
        return got
    monkeypatch.setattr(pylog.storage.log.writer_lock, "try_flock", watched)
    return refused


def test_second_writer_in_another_process_is_refused(tmp_path):
    root = str(tmp_path / "s")
    make_topic(root)
    with pylog.open(root) as store:
        p = store.topic(TOPIC).partition(0)
        p.append_values([b"a", b"b"])
        p.flush()
        assert p.is_writer
        child = Child(_TRY_WRITE, root, "0", cwd=str(tmp_path))
        try:
            assert child.expect("seen", 30).split() == ["2", "2"]
            child.expect("refused", 60)
            tries = int(child.expect("locked", 60).split()[1])
            assert tries == 1, f"lock_timeout_ms=0 should fail at once, it tried {tries} times"
            assert child.wait(30) == 0
        finally:
            child.kill()
        # Still the writer, and nothing of the child's got in.
        assert p.append_values([b"c"]) == 2
        assert [r.value for r in p.read(0)] == [b"a", b"b", b"c"]


def test_second_writer_waits_for_lock_then_succeeds(tmp_path):
    root = str(tmp_path / "s")
    make_topic(root)
    store = pylog.open(root)
    try:
        p = store.topic(TOPIC).partition(0)
        p.append_values([b"a", b"b", b"c"])
        child = Child(_TRY_WRITE, root, "20000", cwd=str(tmp_path))
        try:
            child.expect("seen", 30)
            child.expect("refused", 60)  # the child is now waiting on the lock
            assert child.proc.poll() is None
            assert child.lines.empty(), "the child got past the lock while it was held"
            store.close()  # flushes and releases the lock
            out = child.expect("wrote", 60).split()
            assert int(out[0]) == 3, "the waiting writer must continue after the first writer's records"
            assert int(out[2]) >= 2, f"the child took the lock at its first try ({out[2]}): it never waited"
            assert child.wait(30) == 0
        finally:
            child.kill()
    finally:
        store.close()
    with pylog.open(root) as store:
        p = store.topic(TOPIC).partition(0)
        assert [r.value for r in p.read(0)] == [b"a", b"b", b"c", b"from-child"]
        assert p.check() == []


def test_second_writer_times_out(tmp_path):
    root = str(tmp_path / "s")
    make_topic(root)
    with pylog.open(root) as store:
        p = store.topic(TOPIC).partition(0)
        p.append_values([b"a"])
        child = Child(_TRY_WRITE, root, "400", cwd=str(tmp_path))
        try:
            child.expect("seen", 30)
            child.expect("refused", 60)
            waited, tries = child.expect("locked", 60).split()
            # The timeout itself is what is tested: at least 400 ms of trying (no upper bound: a loaded
            # machine may add any delay; that it gave up at all is the proof it did not wait forever).
            assert float(waited) >= 0.39 and int(tries) >= 2, f"waited {waited}s, {tries} tries, for 400 ms"
            assert child.wait(30) == 0
        finally:
            child.kill()
        assert p.log_end_offset == 1


def test_writer_in_child_blocks_parent_until_killed(tmp_path):
    """The lock is an OS lock: a writer that dies (SIGKILL, no cleanup) releases it."""
    root = str(tmp_path / "s")
    make_topic(root)
    child = Child(_HOLD_LOCK, root, cwd=str(tmp_path))
    try:
        assert child.expect("holding", 30) == "0"
        with pylog.open(root) as store:
            p = store.topic(TOPIC).partition(0)
            with pytest.raises(pylog.PartitionLockedError):
                p.append_values([b"parent"])
            assert not p.is_writer
            assert len(p.read(0)) == 10  # reading is fine meanwhile
        with pylog.open(root, lock_timeout_ms=300) as store:
            t0 = time.monotonic()
            with pytest.raises(pylog.PartitionLockedError):
                store.topic(TOPIC).partition(0).append_values([b"parent"])
            assert time.monotonic() - t0 >= 0.29
        os.kill(child.proc.pid, signal.SIGKILL)
        child.wait(30)
    finally:
        child.kill()
    with pylog.open(root) as store:
        p = store.topic(TOPIC).partition(0)
        assert p.append_values([b"parent"]) == 10
        assert p.check() == []


def test_child_writer_released_on_clean_close(tmp_path, monkeypatch):
    root = str(tmp_path / "s")
    make_topic(root)
    child = Child(_HOLD_LOCK, root, cwd=str(tmp_path))
    try:
        child.expect("holding", 30)
        with pylog.open(root, lock_timeout_ms=600_000) as store:
            p = store.topic(TOPIC).partition(0)
            refused = _watch_lock_refusals(monkeypatch)
            # The child is told to close once this process's append has found the lock taken.
            threading.Thread(target=lambda: refused.wait(60) and child.send("close"), daemon=True).start()
            assert p.append_values([b"parent"]) == 10  # waits for the child to close
            assert refused.is_set(), "the append never found the lock taken: it did not wait"
            child.expect("closed", 30)
            assert child.wait(30) == 0
    finally:
        child.kill()


def test_second_store_handle_in_same_process_is_refused(tmp_path, monkeypatch):
    root = str(tmp_path / "s")
    make_topic(root)
    s1 = pylog.open(root)
    s2 = pylog.open(root)
    s3 = pylog.open(root, lock_timeout_ms=20000)
    try:
        p1 = s1.topic(TOPIC).partition(0)
        p2 = s2.topic(TOPIC).partition(0)
        p3 = s3.topic(TOPIC).partition(0)
        assert p1.append_values([b"one"]) == 0
        with pytest.raises(pylog.PartitionLockedError):
            p2.append_values([b"two"])
        assert not p2.is_writer
        assert p2.read(0)[0].value == b"one"  # but it reads
        # With a timeout, the third handle waits until the first one closes (from another thread, once the
        # third handle has found the lock taken).
        refused = _watch_lock_refusals(monkeypatch)
        closer = threading.Thread(target=lambda: refused.wait(60) and s1.close(), daemon=True)
        closer.start()
        try:
            assert p3.append_values([b"three"]) == 1
        finally:
            closer.join(60)
        assert refused.is_set(), "the third handle never found the lock taken: it did not wait"
        with pytest.raises(pylog.PartitionLockedError):
            p2.append_values([b"two"])  # now the third handle holds it
        s3.close()
        assert p2.append_values([b"two"]) == 2
        assert [r.value for r in p2.read(0)] == [b"one", b"three", b"two"]
        assert p2.check() == []
    finally:
        s1.close()
        s2.close()
        s3.close()


# ----------------------------------------------------------------------------- (b) tailing readers

# Value of offset o: 8 bytes little-endian o, then (o % 9) bytes of (o & 0xff): 8-16 bytes, all derived.
_WRITER = """
    import sys, time, struct, pylog
    root, total, batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    pads = [b""] * 9
    with pylog.open(root) as store:
        p = store.topic("t").partition(0)
        print("ready", flush=True)
        sys.stdin.readline()
        t0 = time.monotonic()
        o = p.log_end_offset
        pack = struct.Struct("<Q").pack
        while o < total:
            n = min(batch, total - o)
            values = [pack(i) + bytes((i & 0xff,)) * (i % 9) for i in range(o, o + n)]
            keys = [b"k%d" % (i % 7) for i in range(o, o + n)] if (o // batch) % 5 == 0 else None
            first = p.append_values(values, keys=keys)
            assert first == o, (first, o)
            o += n
            if (o // batch) % 100 == 0:
                p.flush()
        p.flush()
        print("done", time.monotonic() - t0, len(p.segments), flush=True)
"""

# A reader in its own process: opened before the writer starts, tails to ``total`` and checks everything.
_READER = """
    import sys, time, json
    import numpy as np
    import pylog
    root, total, mode, timeout = sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4])

    def check_columns(cols, start):
        n = len(cols)
        offs = np.arange(start, start + n, dtype=np.int64)
        assert np.array_equal(cols.offsets, offs), f"offsets at {start} not dense/in order"
        assert np.array_equal(cols.value_lengths, 8 + offs % 9), f"value lengths at {start}"
        data = np.frombuffer(cols.value_data, np.uint8)
        starts = cols.value_offsets[:-1]
        head = data[starts[:, None] + np.arange(8)].copy().view("<u8").ravel()
        assert np.array_equal(head, offs.astype(np.uint64)), f"value contents at {start}"
        rec = np.repeat(np.arange(n), cols.value_lengths)
        within = np.arange(len(data)) - starts[rec]
        pad = within >= 8
        assert np.array_equal(data[pad], (offs[rec[pad]] & 0xff).astype(np.uint8)), f"padding at {start}"

    def check_records(recs, start):
        for i, r in enumerate(recs):
            o = start + i
            assert r.offset == o, (r.offset, o)
            assert r.value == o.to_bytes(8, "little") + bytes((o & 0xff,)) * (o % 9), f"value at {o}"

    with pylog.open(root) as store:
        p = store.topic("t").partition(0)
        print("ready", p.log_end_offset, len(p.segments), flush=True)
        deadline = time.monotonic() + timeout
        t0 = None
        off = 0
        reads = waits = 0
        segs_seen = set()
        while off < total:
            if time.monotonic() > deadline:
                print("timeout", off, flush=True)
                sys.exit(2)
            if mode == "columns":
                cols = p.read_columns(off, max_records=100_000)
                n = len(cols)
                if n:
                    check_columns(cols, off)
            else:
                recs = p.read(off, max_records=5000)
                n = len(recs)
                if n:
                    check_records(recs, off)
            if n == 0:
                waits += 1
                p.wait_for_data(off, 0.5)
                continue
            if t0 is None:
                t0 = time.monotonic()
            reads += 1
            off += n
            segs_seen.update(s.base_offset for s in p.segments)
        # Nothing beyond the end, and the log end agrees.
        assert off == total
        assert p.log_end_offset == total, p.log_end_offset
        assert len(p.read(total)) == 0
        print("done", json.dumps({"elapsed": time.monotonic() - (t0 or time.monotonic()), "reads": reads,
                                  "waits": waits, "segments": len(segs_seen)}), flush=True)
"""


def test_reader_processes_tail_writer_process_1m_records(tmp_path):
    total = 1_000_000
    root = str(tmp_path / "s")
    make_topic(root, **{"segment.bytes": 4 << 20})
    cwd = str(tmp_path)
    children = []
    try:
        # Readers open the store before the writer has written anything (no segment file exists yet).
        col_reader = Child(_READER, root, str(total), "columns", "150", cwd=cwd)
        children.append(col_reader)
        row_reader = Child(_READER, root, str(total), "records", "150", cwd=cwd)
        children.append(row_reader)
        writer = Child(_WRITER, root, str(total), "1000", cwd=cwd)
        children.append(writer)
        assert col_reader.expect("ready", 60).split() == ["0", "0"]
        assert row_reader.expect("ready", 60).split() == ["0", "0"]
        writer.expect("ready", 60)
        t0 = time.monotonic()
        writer.send("go")
        w_elapsed, w_segments = writer.expect("done", 150).split()
        w_done = time.monotonic() - t0
        col = json.loads(col_reader.expect("done", 150))
        col_done = time.monotonic() - t0
        row = json.loads(row_reader.expect("done", 150))
        row_done = time.monotonic() - t0
        assert writer.wait(30) == 0
        assert col_reader.wait(30) == 0
        assert row_reader.wait(30) == 0
    finally:
        for c in children:
            c.kill()
    print(f"\n1M tail: writer {float(w_elapsed):.2f}s ({w_segments} segments, done at {w_done:.2f}s); "
          f"columnar reader done at {col_done:.2f}s ({col['reads']} reads, {col['waits']} waits, "
          f"{col['segments']} segments); row reader done at {row_done:.2f}s ({row['reads']} reads, "
          f"{row['waits']} waits)")
    assert int(w_segments) >= 3, "the writer should have rolled several segments"
    assert col["segments"] == int(w_segments)
    assert col["waits"] > 0 or row["waits"] > 0, "readers never caught up with the writer: not a tail test"
    with pylog.open(root) as store:
        p = store.topic(TOPIC).partition(0)
        assert p.log_end_offset == total
        assert p.check() == []


_STEP_WRITER = """
    import sys, pylog
    root = sys.argv[1]
    with pylog.open(root) as store:
        p = store.topic("t").partition(0)
        for line in sys.stdin:
            cmd, _, arg = line.strip().partition(" ")
            if cmd == "append":
                n = int(arg)
                o = p.log_end_offset
                while n > 0:
                    k = min(n, 100)
                    p.append_values([b"%d:" % i + b"x" * 50 for i in range(o, o + k)])
                    o += k
                    n -= k
                p.flush()
                print("at", p.log_end_offset, len(p.segments), flush=True)
            elif cmd == "quit":
                break
    print("closed", flush=True)
"""


def test_reader_opened_before_rolls_sees_new_segments(tmp_path):
    root = str(tmp_path / "s")
    make_topic(root, **{"segment.bytes": 16 * 1024, "index.interval.bytes": 512})
    child = Child(_STEP_WRITER, root, cwd=str(tmp_path))

    def check(recs, start):
        for i, r in enumerate(recs):
            assert r.offset == start + i
            assert r.value == b"%d:" % (start + i) + b"x" * 50

    try:
        with pylog.open(root) as store:
            p = store.topic(TOPIC).partition(0)  # opened before the writer wrote anything
            assert p.log_end_offset == 0
            assert p.read(0) == []
            assert p.wait_for_data(0, 0.05) is False

            child.send("append 100")
            end, nsegs = map(int, child.expect("at", 30).split())
            assert (end, nsegs) == (100, 1)
            assert p.wait_for_data(0, 10)
            recs = p.read(0, max_records=1000)
            check(recs, 0)
            assert len(recs) == 100  # the reader is now in the middle of the (then) active segment
            assert len(p.segments) == 1

            child.send("append 5000")  # ~330 KB: the active segment is sealed and ~20 new ones roll
            end, nsegs = map(int, child.expect("at", 30).split())
            assert end == 5100 and nsegs >= 15
            assert p.log_end_offset == 5100
            off = 100
            while off < 5100:
                recs = p.read(off, max_records=700)
                assert recs, f"nothing at {off}"
                check(recs, off)
                off += len(recs)
            cols = p.read_columns(0)
            assert np.array_equal(cols.offsets, np.arange(5100))
            assert len(p.segments) == nsegs
            assert p.check() == []

            # More after the writer closes cleanly (indexes of the active segment sealed and renamed).
            child.send("append 1000")
            assert child.expect("at", 30).split()[0] == "6100"
            child.send("quit")
            child.expect("closed", 30)
            assert child.wait(30) == 0
            assert p.log_end_offset == 6100
            check(p.read(5100, max_records=2000), 5100)
            assert len(p.read_columns(0)) == 6100
            assert p.check() == []
    finally:
        child.kill()
