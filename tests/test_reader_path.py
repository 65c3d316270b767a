"""The read path of a reader in another process than the writer: its record of the batches it checked at
the log end, kept index mappings, and a directory listed only when something says it changed.

Writers are forked children driven over a pipe, so the parent's reader only ever sees their files. Every
wait has a timeout and every child is killed in a ``finally``.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import time
import traceback

import pytest

import pylog
from pylog.storage.filenames import list_segment_bases
from pylog.storage.records import encode_batch
from pylog.segment import Segment

from storetools import read_all, wait_for

TOPIC = "t"
_FORK = multiprocessing.get_context("fork")


def _key(offset: int) -> bytes:
    return b"k%d" % (offset % 40)


def _value(offset: int, generation: int = 0) -> bytes:
    return b"g%d:%d:" % (generation, offset) + b"v" * (offset * 7 % 50)


class Writer:
    """A forked child that opens the store as the writer and runs the commands the parent sends."""

    def __init__(self, root: str, generation: int = 0, seed: int = 0) -> None:
        self.conn, child_conn = _FORK.Pipe()
        self.proc = _FORK.Process(target=_writer_main, args=(root, child_conn, generation, seed), daemon=True)
        self.proc.start()
        child_conn.close()

    def call(self, *cmd: object, timeout: float = 60) -> tuple:
        self.conn.send(cmd)
        return self.reply(timeout)

    def reply(self, timeout: float = 60) -> tuple:
        if not self.conn.poll(timeout):
            pytest.fail(f"writer said nothing for {timeout}s (exit code {self.proc.exitcode})")
        answer = self.conn.recv()
        assert answer[0] != "error", answer[1]
        return answer

    def kill(self) -> None:
        if self.proc.is_alive():
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.join(10)
        self.conn.close()


def _writer_main(root: str, conn, generation: int, seed: int) -> None:
    code = 0
    try:
        rng = random.Random(seed)
        store = pylog.open(root, log_cleaner_enable=False)
        p = store.topic(TOPIC).partition(0)
        while True:
            cmd, *args = conn.recv()
            try:
                if cmd == "append":  # n records in batches of 1-12, with short pauses: a reader tails them
                    o, n = p.log_end_offset, args[0]
                    while n:
                        k = min(n, rng.randint(1, 12))
                        p.append_values([_value(i, generation) for i in range(o, o + k)],
                                        keys=[_key(i) for i in range(o, o + k)])
                        o, n = o + k, n - k
                        if rng.random() < 0.2:
                            time.sleep(rng.uniform(0, 0.001))
                    p.flush()
                    conn.send(("at", p.log_end_offset, [s.base_offset for s in p.segments]))
                elif cmd == "compact":
                    r = store.compact(TOPIC)[0]
                    conn.send(("compacted", r.records_read - r.records_written))
                elif cmd == "retention":
                    conn.send(("retention", len(store.enforce_retention(TOPIC)[0].deleted_segments)))
                elif cmd == "tear":  # a batch written only in part (or damaged) at the end; then wait for SIGKILL
                    conn.send(("torn", _tear(p, args[0], rng)))
                elif cmd == "quit":
                    store.close()
                    conn.send(("closed",))
                    break
            except Exception:
                conn.send(("error", traceback.format_exc()))
    except BaseException:
        traceback.print_exc()
        code = 3
    finally:
        os._exit(code)


def _tear(p: pylog.Partition, mode: str, rng: random.Random) -> int:
    """Append bytes of a batch that never completed to the active segment, as a writer killed mid-write
    (or a damaged one) leaves them; returns how many."""
    end = p.log_end_offset
    batch = encode_batch([_value(i, 99) for i in range(end, end + 5)], keys=[_key(i) for i in range(end, end + 5)],
                         base_offset=end)
    if mode == "prefix":
        junk = batch[:rng.randrange(1, len(batch))]
    elif mode == "crc":  # whole, but one body byte flipped
        i = rng.randrange(len(batch) - 10, len(batch))
        junk = batch[:i] + bytes([batch[i] ^ 0xFF]) + batch[i + 1:]
    elif mode == "zeros":
        junk = bytes(rng.randint(1, 300))
    else:
        junk = rng.randbytes(rng.randint(1, 300))
    fd = os.open(p.segments[-1].log_path, os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, junk)
    finally:
        os.close(fd)
    return len(junk)


def make_topic(root: str, **config) -> None:
    with pylog.open(root) as store:
        store.create_topic(TOPIC, partitions=1, config=config)


class Tail:
    """A reader at the log end that checks each record as it comes: offsets dense and never repeated."""

    def __init__(self, p: pylog.Partition, rng: random.Random, pos: int = 0) -> None:
        self.p = p
        self.rng = rng
        self.pos = pos
        self.seen = 0
        #: (first offset, generation): the writer generation whose values the log holds from there on.
        self.generations: list[tuple[int, int]] = [(0, 0)]

    def written_from(self, offset: int, generation: int) -> None:
        """Offsets from ``offset`` on are (re)written by ``generation``: call before it writes them."""
        self.generations = [g for g in self.generations if g[0] < offset] + [(offset, generation)]

    def step(self) -> None:
        """Wait briefly for data, then read a few records one way or another."""
        p = self.p
        p.wait_for_data(self.pos, 0.02)
        n = self.rng.choice((1, 1, 2, 5, 50))
        if self.rng.random() < 0.5:
            got = [(r.offset, r.key, r.value) for r in p.read(self.pos, max_records=n)]
        else:
            cols = p.read_columns(self.pos, max_records=n)
            got = list(zip(cols.offsets.tolist(), cols.keys(), cols.values()))
        for offset, key, value in got:
            assert offset == self.pos, f"offset {offset} read at {self.pos}"
            want = _value(offset, max(g for g in self.generations if g[0] <= offset)[1])
            assert (key, value) == (_key(offset), want), f"record {offset} is {(key, value)!r}, written {want!r}"
            self.pos += 1
            self.seen += 1

    def until(self, end: int, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while self.pos < end:
            assert time.monotonic() < deadline, f"reader stuck at {self.pos}, the log ends at {end}"
            self.step()


def assert_view_matches_directory(p: pylog.Partition) -> None:
    segs = p.segments
    assert [s.base_offset for s in segs] == list_segment_bases(p.directory)
    assert all(s.same_file() for s in segs), "a segment of the reader's view was replaced on disk"


# ----------------------------------------------------------------------------- tailing through maintenance


def test_reader_process_tails_writer_through_rolls_retention_and_compaction(tmp_path):
    root = str(tmp_path / "s")
    make_topic(root, **{"segment.bytes": 4096, "index.interval.bytes": 256, "cleanup.policy": "compact,delete",
                        "retention.bytes": 12_000, "min.cleanable.dirty.ratio": 0.01,
                        "min.compaction.lag.ms": 0})
    # How much each round appends is drawn up front, not from the tail's generator (whose draws depend on
    # how many reads fit in an append): which retention passes delete segments is then fixed by the seed.
    # Seed 7: passes before the last one delete, so the view checks below cover a raised log start.
    sizes_rng = random.Random(7)
    sizes = [sizes_rng.randint(150, 400) for _ in range(12)]
    writer = Writer(root, seed=8)
    try:
        with pylog.open(root, log_cleaner_enable=False) as store:
            p = store.topic(TOPIC).partition(0)  # opened before anything was written
            tail = Tail(p, random.Random(9))
            removed = deleted = 0
            starts = []
            for round_ in range(12):
                writer.conn.send(("append", sizes[round_]))
                while not writer.conn.poll():  # read while the writer appends and rolls
                    tail.step()
                _, end, bases = writer.reply()
                tail.until(end)
                assert p.log_end_offset == end
                assert len(bases) >= 2
                if round_:
                    # A roll followed the maintenance below, and reading past it made the reader look at
                    # the directory: its view is the directory's, swapped and deleted segments included.
                    assert_view_matches_directory(p)
                    with pylog.open(root, log_cleaner_enable=False) as fresh:
                        fp = fresh.topic(TOPIC).partition(0)
                        assert p.log_start_offset == fp.log_start_offset
                        starts.append(fp.log_start_offset)
                        expected = read_all(fp, fp.log_start_offset)
                    assert read_all(p, p.log_start_offset) == expected
                    assert p.check() == []
                if round_ % 3 != 2:
                    removed += writer.call("compact")[1]
                if round_ % 3 != 0:
                    deleted += writer.call("retention")[1]
            assert tail.seen == end  # every record exactly once (Tail checks order and content)
            assert removed > 0 and deleted > 0, (removed, deleted)
            assert starts[-1] > 0  # the reader followed a raised log start within the loop
            # The last retention pass came after the reader's last look: it learns of it by asking.
            with pylog.open(root, log_cleaner_enable=False) as fresh:
                want = fresh.topic(TOPIC).partition(0).log_start_offset
            assert want > starts[-1]  # (seed 7: the last pass deletes segments too)
            assert wait_for(lambda: p.log_start_offset == want), (p.log_start_offset, want)
            with pytest.raises(pylog.OffsetOutOfRangeError):
                p.read(want - 1)
        writer.call("quit")
    finally:
        writer.kill()


def test_reader_asking_only_for_the_log_start_learns_of_retention_in_another_process(tmp_path):
    """``beginning_offsets`` and a consumer's reset to earliest ask a partition for its log start and
    nothing else: a reader handle must see a start the writer process raised, not the one it first saw."""
    root = str(tmp_path / "s")
    make_topic(root, **{"segment.bytes": 4096, "index.interval.bytes": 256, "retention.bytes": 8192})
    writer = Writer(root, seed=3)
    try:
        with pylog.open(root, log_cleaner_enable=False) as store:
            p = store.topic(TOPIC).partition(0)
            assert p.log_start_offset == 0
            bases = writer.call("append", 600)[2]
            assert len(bases) > 3
            assert writer.call("retention")[1] > 0
            with pylog.open(root, log_cleaner_enable=False) as fresh:
                want = fresh.topic(TOPIC).partition(0).log_start_offset
            assert want > 0
            assert wait_for(lambda: p.log_start_offset == want), (p.log_start_offset, want)
            assert store.topic(TOPIC).beginning_offsets() == {0: want}
        writer.call("quit")
    finally:
        writer.kill()


# ----------------------------------------------------------------------------- a writer killed mid-write


def test_reader_survives_writers_killed_after_torn_writes(tmp_path):
    root = str(tmp_path / "s")
    make_topic(root, **{"segment.bytes": 8192, "index.interval.bytes": 256})
    rng = random.Random(11)
    with pylog.open(root, log_cleaner_enable=False) as store:
        p = store.topic(TOPIC).partition(0)
        tail = Tail(p, rng)
        end = 0
        for generation, mode in enumerate(("prefix", "crc", "zeros", "garbage", "prefix", "crc", "prefix")):
            tail.written_from(end, generation)
            writer = Writer(root, generation, seed=generation)  # recovers what the last one left
            try:
                writer.conn.send(("append", rng.randint(20, 200)))
                while not writer.conn.poll():
                    tail.step()
                end = writer.reply()[1]
                tail.until(end)
                torn = writer.call("tear", mode)[1]
                assert torn > 0
                # The torn bytes are not a batch: nothing past them, nothing of them.
                for _ in range(3):
                    assert p.log_end_offset == end
                    assert p.read(end) == []
                    tail.step()
                assert tail.pos == end
                assert os.path.getsize(p.segments[-1].log_path) > p.segments[-1].size
            finally:
                writer.kill()
        # The last torn tail is cut by the next writer's recovery, which writes those offsets anew.
        tail.written_from(end, 100)
        writer = Writer(root, 100, seed=100)
        try:
            _, final, _ = writer.call("append", 50)
            tail.until(final)
            assert tail.seen == final
            writer.call("quit")
        finally:
            writer.kill()
        with pylog.open(root, log_cleaner_enable=False) as fresh:
            assert read_all(p, 0) == read_all(fresh.topic(TOPIC).partition(0), 0)
        assert p.check() == []


@pytest.mark.parametrize("look_while_short", [True, False])
def test_reader_whose_log_is_cut_below_what_it_read_never_goes_back(tmp_path, look_while_short):
    """A power loss on a shared file system can cut bytes a reader on another machine already checked:
    the reader must not hand out the new records' offsets twice, nor anything that is not in the log."""
    root = str(tmp_path / "s")
    make_topic(root, **{"segment.bytes": 1 << 20, "index.interval.bytes": 256})
    rng = random.Random(5)
    with pylog.open(root, log_cleaner_enable=False) as store:
        p = store.topic(TOPIC).partition(0)
        tail = Tail(p, rng)
        writer = Writer(root, 0, seed=1)
        try:
            _, end, _ = writer.call("append", 300)
            tail.until(end)
        finally:
            writer.kill()
        seg = p.segments[-1]
        other = Segment.open(seg.directory, seg.base_offset, 1 << 20, 256)
        batches = [(pos, h.base_offset) for pos, h in other.batch_headers()]
        other.close()
        cut_pos, cut_offset = batches[len(batches) // 2]
        os.truncate(seg.log_path, cut_pos)
        if look_while_short:
            assert p.log_end_offset == cut_offset  # (the log end moves back with the log itself)
            with pytest.raises(pylog.OffsetOutOfRangeError):
                p.read(end)
        # The next writer writes the lost offsets again, with other values and other batch bounds, past
        # the old end.
        writer = Writer(root, 1, seed=2)
        try:
            _, final, _ = writer.call("append", end - cut_offset + 200)
            writer.call("quit")
        finally:
            writer.kill()
        tail.written_from(cut_offset, 1)
        tail.until(final)  # from the old end on: each offset once, with the values now in the log
        assert tail.seen == final
        with pylog.open(root, log_cleaner_enable=False) as fresh:
            assert read_all(p, cut_offset) == read_all(fresh.topic(TOPIC).partition(0), cut_offset)
