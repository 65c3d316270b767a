"""File-system faults on the write paths, and read-only stores.

A full disk, a read-only mount or missing permissions surface as PylogErrors that are also OSErrors
(``DiskFullError``, ``ReadOnlyStoreError``, ``StorePermissionError``) and say what to do; a store opened
with ``read_only=True`` writes nothing and refuses every write at once.

Real faults come from real file systems: a small tmpfs filled up, and one remounted read-only. Mounting
needs root; those tests are skipped where it is impossible. Tests run as root, whom permission bits do
not stop, so "writes nothing" is checked by comparing a full snapshot of the store's tree (names, sizes,
modification times, contents) before and after.
"""

from __future__ import annotations

import errno
import os
import pickle
import shutil
import signal
import stat
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

import pylog
from pylog.partition import internals
from pylog import DiskFullError, ReadOnlyStoreError, StorePermissionError, TopicPartition, UnknownStoreError
from pylog.storage.fileio import fault
from pylog.storage.filenames import TMP_SUFFIX, deleting_name

ROOT = Path(__file__).resolve().parent.parent


# ---------------------------------------------------------------------------------------------- helpers

@pytest.fixture
def tmpfs(tmp_path):
    """``mount(name, size)``: a fresh tmpfs of ``size`` at ``tmp_path / name``; unmounted afterwards."""
    mounted: list[Path] = []

    def mount(name: str, size: str = "4m") -> Path:
        where = tmp_path / name
        where.mkdir()
        if shutil.which("mount") is None:
            pytest.skip("no mount command")
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(where)],
                           capture_output=True, text=True)
        if r.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here (needs root): {r.stderr.strip()}")
        mounted.append(where)
        return where

    yield mount
    for where in reversed(mounted):
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def _remount_read_only(where: Path) -> None:
    subprocess.run(["mount", "-o", "remount,ro", str(where)], check=True, capture_output=True)


def _fill(where: Path) -> Path:
    """Fill the file system at ``where`` to the last byte with one file; returns it (delete it to free)."""
    filler = where / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        for chunk in (1 << 16, 4096, 1):
            try:
                while True:
                    os.write(fd, bytes(chunk))
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
    finally:
        os.close(fd)
    return filler


def _tree(root: Path) -> dict[str, tuple]:
    """Everything about a directory tree a write could change: per entry its type, mode, size,
    modification time (ns) and, for files, the contents."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            content = None
            if stat.S_ISREG(st.st_mode):
                with open(path, "rb") as f:
                    content = f.read()
            out[os.path.relpath(path, root)] = (stat.S_IFMT(st.st_mode), st.st_mode, st.st_size, st.st_mtime_ns,
                                                content)
    st = os.lstat(root)
    out["."] = (stat.S_IFMT(st.st_mode), st.st_mode, st.st_size, st.st_mtime_ns, None)
    return out


def _values(p: pylog.Partition) -> list[bytes]:
    out: list[bytes] = []
    while len(out) < p.log_end_offset - p.log_start_offset:
        out.extend(r.value for r in p.read(p.log_start_offset + len(out)))
    return out


def _make_store(path: Path) -> None:
    """A store with two topics, a group with committed offsets, a group member that died (its member
    file and state left behind) and a topic deletion a crash interrupted: a writing open would tidy up."""
    with pylog.open(path, segment_bytes=4096) as store:
        store.create_topic("events", 2)
        store.create_topic("users", 1, config={"cleanup.policy": "compact"})
        for i in range(300):
            store.topic("events").partition(i % 2).append_values([b"e%d" % i], keys=[b"k%d" % (i % 7)])
        store.topic("users").partition(0).append_values([b"u%d" % i for i in range(20)],
                                                        keys=[b"k%d" % (i % 5) for i in range(20)])
        with store.consumer("events", group_id="billing", auto_offset_reset="earliest") as c:
            got = 0
            while got < 100:
                got += sum(len(v) for v in c.poll(timeout_ms=1000, max_records=100 - got).values())
            c.commit()
        store.commit_offsets("audit", {TopicPartition("events", 0): 7})
    leftover = path / deleting_name("old", "0123" * 8)  # named as delete_topic names it (a uuid4 hex token)
    leftover.mkdir()
    (leftover / "junk").write_bytes(b"x")


# ---------------------------------------------------------------------------------------------- a full disk

def test_appending_to_a_full_disk_raises_disk_full_and_appends_nothing(tmpfs):
    where = tmpfs("small", "4m")
    store = pylog.open(where / "s", log_cleaner_enable=False)
    p = store.create_topic("t", config={"index.interval.bytes": 64}).partition(0)
    filler = where / "filler"
    filler.write_bytes(bytes(256 << 10))  # freed below, so that the retry has room
    sent = 0
    with pytest.raises(DiskFullError) as info:
        while True:
            p.append_values([b"%08d" % (sent + i) + bytes(300) for i in range(10)])
            sent += 10
    err = info.value
    assert isinstance(err, pylog.PylogError) and isinstance(err, OSError)
    assert err.errno == errno.ENOSPC
    assert isinstance(err.__cause__, OSError) and err.__cause__.errno == errno.ENOSPC
    assert "free space" in str(err) and f"nothing from offset {sent} on was appended" in str(err)
    assert "takes appends again" in str(err)
    assert p.log_end_offset == sent
    seg = p.segments[-1]
    assert os.stat(seg.log_path).st_size == seg.size  # no partial batch on disk
    os.unlink(filler)
    assert p.append_values([b"after"]) == sent  # the partition took appends again
    store.close()
    with pylog.open(where / "s", log_cleaner_enable=False) as store:
        p = store.topic("t").partition(0)
        assert p.check() == []
        values = _values(p)
        assert values[:sent] == [b"%08d" % i + bytes(300) for i in range(sent)] and values[sent:] == [b"after"]


def test_creating_a_topic_on_a_full_disk_raises_disk_full_and_creates_no_topic(tmpfs):
    where = tmpfs("small", "1m")
    with pylog.open(where / "s", log_cleaner_enable=False) as store:
        filler = _fill(where)
        with pytest.raises(DiskFullError) as info:
            store.create_topic("t", 2)
        assert info.value.errno == errno.ENOSPC and "the topic was not created" in str(info.value)
        assert "t" not in store and store.topics() == []
        assert not [n for _, _, names in os.walk(where / "s") for n in names if n.endswith(TMP_SUFFIX)]
        os.unlink(filler)
        store.create_topic("t", 2).partition(1).append_values([b"x"])


def test_a_producer_on_a_full_disk_fails_its_futures_with_disk_full(tmpfs):
    where = tmpfs("small", "2m")
    with pylog.open(where / "s", log_cleaner_enable=False) as store:
        store.create_topic("t")
        store.topic("t").partition(0).append_values([b"first"])
        store.topic("t").partition(0).flush()
        with store.producer(linger_ms=0) as producer:
            filler = _fill(where)
            future = producer.send("t", value=bytes(8192), partition=0)
            with pytest.raises(DiskFullError) as info:
                future.get(timeout=60)
            assert isinstance(info.value, pylog.PylogError) and info.value.errno == errno.ENOSPC
            os.unlink(filler)
            assert producer.send("t", value=b"after", partition=0).get(timeout=60).offset == 1


_SIGBUS_CHILD = """
import os, sys
import pylog
root = sys.argv[1]
store = pylog.open(os.path.join(root, "s"), log_cleaner_enable=False)
p = store.create_topic("t", config={"index.interval.bytes": 1}).partition(0)
p.append_values([b"x"])
oi = p.segments[-1].indexes()[0]
# Every batch gets an offset index entry (4 bytes after a 64-byte header): entry 1008 is the first of the
# second page of the file, a page of the preallocated hole that has no blocks yet.
while oi.count < 1007:
    p.append_values([b"x"])
# One batch that leaves room in the log file's last page, so the next small batch needs no new log block.
p.append_values([b"z" * ((200 - p.segments[-1].size % 4096 - 69) % 4096 + 1)])
assert oi.count == 1008 and p.segments[-1].size % 4096 < 1000, (oi.count, p.segments[-1].size)
fd = os.open(os.path.join(root, "filler"), os.O_WRONLY | os.O_CREAT)
for chunk in (4096, 1):
    try:
        while True:
            os.write(fd, bytes(chunk))
    except OSError:
        pass
end = p.log_end_offset
for attempt in range(2):  # a reservation that failed is tried again: the second append must not SIGBUS
    try:
        p.append_values([b"y"])
        print("appended")
    except pylog.DiskFullError as exc:
        assert p.log_end_offset == end
        print("DiskFullError", exc.errno)
"""


def test_a_full_disk_at_an_index_page_boundary_fails_the_append_instead_of_killing_the_process(tmpfs):
    """A store into a page of the index's preallocated hole that has no blocks, on a full file system,
    raises SIGBUS: the writer must reserve the page (and fail with ENOSPC) before writing the batch."""
    where = tmpfs("small", "4m")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(_SIGBUS_CHILD), str(where)], capture_output=True,
                       text=True, env=env, timeout=300)
    assert r.returncode == 0, f"child died with {r.returncode} (SIGBUS is -{int(signal.SIGBUS)}): " \
                              f"{r.stderr[-2000:]}"
    assert r.stdout.split() == ["DiskFullError", str(errno.ENOSPC)] * 2


def test_a_time_index_stalled_at_a_page_boundary_reserves_its_next_page_once_not_per_append(tmp_path, monkeypatch):
    """TimeIndex.append skips a timestamp that does not exceed its last entry, so its count stops. If it
    stops where the next entry would start a page, every append that finds an index entry due asked the
    file system for that page's blocks again (an open, a posix_fallocate and a close per append)."""
    from pylog.index import _HEADER_SIZE
    calls = []
    real = os.posix_fallocate
    monkeypatch.setattr(os, "posix_fallocate", lambda fd, off, n: (calls.append(off), real(fd, off, n))[1])
    with pylog.open(str(tmp_path), log_cleaner_enable=False) as store:
        p = store.create_topic("t", config={"index.interval.bytes": 1}).partition(0)
        ts = 1_000_000
        p.append_values([b"x" * 50], timestamps=[ts])
        seg = p.segments[-1]
        oi, ti = seg.indexes()
        width = ti.A.itemsize
        # An entry is written one batch late (with the largest timestamp before that batch): append with
        # rising timestamps until the entry after the next is the first of a page of column A; the next
        # (for ts) goes in with the append after, and from there the time index stalls.
        while (_HEADER_SIZE + (ti.count + 1) * width) % os.sysconf("SC_PAGE_SIZE") >= width:
            ts += 1
            p.append_values([b"x" * 50], timestamps=[ts])
        p.append_values([b"x" * 50], timestamps=[ts])
        stalled, before_oi = ti.count, oi.count
        assert (_HEADER_SIZE + stalled * width) % os.sysconf("SC_PAGE_SIZE") == 0
        del calls[:]
        appends = 3000
        for _ in range(appends):
            p.append_values([b"x" * 50], timestamps=[ts])
        assert p.segments[-1] is seg and ti.count == stalled
        # The offset index still gets an entry per append: a reservation per new page of each of its two
        # columns, plus the time index's next page (each of its columns) once.
        oi_pages = 2 * ((oi.count - before_oi) * oi.A.itemsize // os.sysconf("SC_PAGE_SIZE") + 2)
        assert len(calls) <= oi_pages + 2, (len(calls), appends)


def test_a_call_of_many_batches_written_at_once_reserves_every_index_page_its_entries_start(tmp_path, monkeypatch):
    """The batches of one append call that go into one segment are written with one writev, their index
    entries after it: the pages those entries start (several, here) get their blocks before the write."""
    from pylog.index import _HEADER_SIZE
    page = os.sysconf("SC_PAGE_SIZE")
    reserved: list[int] = []
    real = os.posix_fallocate
    monkeypatch.setattr(os, "posix_fallocate", lambda fd, off, n: (reserved.append(off), real(fd, off, n))[1])
    with pylog.open(str(tmp_path), log_cleaner_enable=False) as store:
        # One record per batch (max.message.bytes), an index entry per batch.
        p = store.create_topic("t", config={"index.interval.bytes": 1, "max.message.bytes": 200}).partition(0)
        p.append_values([b"x" * 100] * 3000, timestamps=list(range(1, 3001)))
        seg = p.segments[-1]
        assert seg.base_offset == 0 and p.log_end_offset == 3000
        oi, ti = seg.indexes()
        for index in (oi, ti):
            assert index.count >= 2990
            a, b = index.A.itemsize, index.B.itemsize
            for column_start, width in ((_HEADER_SIZE, a), (_HEADER_SIZE + index.capacity * a, b)):
                first, last = column_start, column_start + (index.count - 1) * width
                pages = range(first - first % page, last - last % page + 1, page)
                assert len(pages) > 1
                assert set(pages) <= set(reserved), (index.path, sorted(set(pages) - set(reserved)))


# ---------------------------------------------------------------------------------------------- read-only mounts

def test_a_writer_on_a_read_only_file_system_gets_read_only_store_error(tmpfs):
    where = tmpfs("media", "8m")
    _make_store(where / "s")
    _remount_read_only(where)
    with pylog.open(where / "s") as store:  # a writing open of an existing store still reads
        p = store.topic("events").partition(0)
        assert len(_values(p)) == 150
        with pytest.raises(ReadOnlyStoreError) as info:
            p.append_values([b"x"])
        err = info.value
        assert not isinstance(err, StorePermissionError)
        assert err.errno == errno.EROFS and isinstance(err.__cause__, OSError)
        assert "read_only=True" in str(err) and "remount" in str(err)
        with pytest.raises(ReadOnlyStoreError):
            store.create_topic("new")
        with pytest.raises(ReadOnlyStoreError):
            store.delete_topic("users")
        with pytest.raises(ReadOnlyStoreError):
            store.alter_topic_config("events", {"retention.ms": 1000})
        with pytest.raises(ReadOnlyStoreError):
            store.new_producer_id()
    with pytest.raises(ReadOnlyStoreError) as info:
        pylog.open(where / "fresh")  # creating a store there
    assert info.value.errno == errno.EROFS


def test_a_group_join_on_a_read_only_file_system_raises_read_only_store_error(tmpfs):
    # A writing open of a store on read-only media: joining a group creates member files (OSError EROFS
    # escaped the consumer's subscribe before).
    where = tmpfs("media", "8m")
    _make_store(where / "s")
    _remount_read_only(where)
    with pylog.open(where / "s") as store:
        consumer = store.consumer(group_id="billing", enable_auto_commit=False)
        with pytest.raises(ReadOnlyStoreError, match="joining group 'billing'") as info:
            consumer.subscribe(["events"])
            consumer.poll(timeout_ms=1000)
        assert info.value.errno == errno.EROFS and "did not join" in str(info.value)
        assert store.describe_consumer_group("billing").members == []
        consumer.close()


def test_a_read_only_open_on_a_read_only_file_system_reads_consumes_and_describes(tmpfs):
    where = tmpfs("media", "8m")
    _make_store(where / "s")
    _remount_read_only(where)
    with pylog.open(where / "s", read_only=True) as store:
        assert store.topics() == ["__consumer_offsets", "events", "users"]
        assert len(_values(store.topic("events").partition(1))) == 150
        assert store.consumer_groups() == ["audit", "billing"]
        assert store.describe_consumer_group("billing").members == []
        lag = store.group_lag("billing")
        assert sum(x.committed for x in lag.values()) == 100 and all(x.lag + x.committed == 150 for x in lag.values())
        with store.consumer(group_id="billing", enable_auto_commit=False, auto_offset_reset="earliest") as c:
            c.assign([TopicPartition("events", 0), TopicPartition("events", 1)])
            got = []
            while len(got) < 200:
                got.extend(r for rs in c.poll(timeout_ms=1000).values() for r in rs)
            assert len(got) == 200  # from the committed offsets on
        with pytest.raises(ReadOnlyStoreError):
            store.topic("events").partition(0).append_values([b"x"])


# ---------------------------------------------------------------------------------------------- read_only=True

def test_a_read_only_open_writes_nothing(tmp_path):
    path = tmp_path / "s"
    _make_store(path)
    subprocess.run(["chmod", "-R", "a-w", str(path)], check=True)
    before = _tree(path)
    with pylog.open(path, read_only=True) as store:
        assert store.read_only and store.topics() == ["__consumer_offsets", "events", "users"]
        for name in store.topics():
            for p in store.topic(name).partitions:
                _values(p)
                assert p.check() == []
                p.offset_for_timestamp(0)
                assert not p.wait_for_data(p.log_end_offset, 0.01)
        assert store.committed_offsets("audit") == {TopicPartition("events", 0): pylog.OffsetAndMetadata(7, "")}
        store.describe_consumer_group("billing")
        store.group_lag("billing")
        store.consumer_groups()
        store.cleaner_status()
        store.cleaners()
        store.check_health()
        with store.consumer("events", auto_offset_reset="earliest") as c:  # no group
            got = 0
            while got < 300:
                got += sum(len(rs) for rs in c.poll(timeout_ms=1000).values())
            c.seek_to_beginning()
            c.poll(timeout_ms=100)
        with store.consumer(group_id="billing", enable_auto_commit=False) as c:
            c.assign([TopicPartition("events", 0)])
            assert c.committed(TopicPartition("events", 0)) is not None
            c.poll(timeout_ms=100)
        store.flush()
    assert _tree(path) == before


def test_a_read_only_open_refuses_every_write_at_once(tmp_path):
    path = tmp_path / "s"
    _make_store(path)
    before = _tree(path)
    tp = TopicPartition("events", 0)
    with pylog.open(path, read_only=True) as store:
        p = store.topic("events").partition(0)
        attempts = {
            "create_topic": lambda: store.create_topic("new"),
            "delete_topic": lambda: store.delete_topic("users"),
            "alter_topic_config": lambda: store.alter_topic_config("events", {"retention.ms": 1}),
            "add_partitions": lambda: store.topic("events").add_partitions(5),
            "producer": lambda: store.producer(),
            "new_producer_id": lambda: store.new_producer_id(),
            "append": lambda: p.append_values([b"x"]),
            "append_columns": lambda: p.append([pylog.Record(value=b"x")]),
            "roll": lambda: p.roll(),
            "partition retention": lambda: p.enforce_retention(),
            "partition delete_records": lambda: p.delete_records(1),
            "repair": lambda: p.repair(),
            "wait_to_write": lambda: p.wait_to_write(0),
            "try_become_writer": lambda: p.try_become_writer(),
            "handover_wanted": lambda: internals(p).handover_wanted(),
            "enforce_retention": lambda: store.enforce_retention(),
            "delete_records": lambda: store.delete_records("events", 0, 1),
            "compact": lambda: store.compact("users"),
            "commit_offsets": lambda: store.commit_offsets("billing", {tp: 1}),
            "delete_consumer_group": lambda: store.delete_consumer_group("billing"),
            "group consumer with auto-commit": lambda: store.consumer(group_id="g"),
            "group subscribe": lambda: store.consumer(group_id="g", enable_auto_commit=False).subscribe(["events"]),
            "group commit": lambda: _assign_and_commit(store, tp),
        }
        for what, attempt in attempts.items():
            with pytest.raises(ReadOnlyStoreError) as info:
                attempt()
            assert "read_only=True" in str(info.value), what
            assert info.value.errno is None, what  # refused by pylog, nothing was tried
        assert not p.is_writer and len(_values(p)) == 150
    assert _tree(path) == before


def _assign_and_commit(store: pylog.Store, tp: TopicPartition) -> None:
    c = store.consumer(group_id="billing", enable_auto_commit=False)
    c.assign([tp])
    c.poll(timeout_ms=10)
    c.commit()


def test_a_read_only_open_of_a_missing_store_raises_unknown_store_and_creates_nothing(tmp_path):
    with pytest.raises(UnknownStoreError, match="no pylog store"):
        pylog.open(tmp_path / "nope", read_only=True)
    assert not (tmp_path / "nope").exists()
    (tmp_path / "empty").mkdir()
    with pytest.raises(UnknownStoreError, match="no pylog store"):
        pylog.open(tmp_path / "empty", read_only=True)
    assert os.listdir(tmp_path / "empty") == []


def test_a_read_only_reader_sees_a_live_writers_appends(tmp_path):
    path = tmp_path / "s"
    with pylog.open(path, log_cleaner_enable=False) as writer:
        w = writer.create_topic("t").partition(0)
        w.append_values([b"a"])
        with pylog.open(path, read_only=True) as reader:
            r = reader.topic("t").partition(0)
            assert _values(r) == [b"a"]
            woken = []
            waiter = threading.Thread(target=lambda: woken.append(r.wait_for_data(1, 60)))
            waiter.start()
            w.append_values([b"b"])
            waiter.join(90)
            assert woken == [True] and _values(r) == [b"a", b"b"]
            assert not os.path.exists(os.path.join(r.directory, "notify")) or not internals(r).notifier.mapped


# ---------------------------------------------------------------------------------------------- the mapping

@pytest.mark.parametrize("code, cls", [(errno.ENOSPC, DiskFullError), (errno.EDQUOT, DiskFullError),
                                       (errno.EROFS, ReadOnlyStoreError), (errno.EACCES, StorePermissionError),
                                       (errno.EPERM, StorePermissionError)])
def test_each_write_refusal_maps_to_its_error_and_keeps_errno_cause_and_pickles(code, cls):
    exc = OSError(code, os.strerror(code), "/store/t/0/x.log")
    err = fault(exc, "appending to t-0", "nothing was appended")
    assert type(err) is cls and isinstance(err, pylog.StorageError) and isinstance(err, OSError)
    assert (err.errno, err.strerror, err.filename, err.__cause__) == (code, os.strerror(code), exc.filename, exc)
    assert str(err).startswith("appending to t-0: ") and "nothing was appended" in str(err)
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is cls and str(back) == str(err) and back.errno == code


def test_other_os_errors_are_left_as_they_are():
    for exc in (FileNotFoundError(errno.ENOENT, "gone"), OSError(errno.EINTR, "Interrupted")):
        assert fault(exc, "x", "y") is exc


@pytest.mark.parametrize("code", [errno.EIO, errno.EFBIG, errno.EMFILE, errno.ENFILE])
def test_device_errors_and_exhausted_limits_become_storage_errors_that_say_what_to_do(code):
    cause = OSError(code, os.strerror(code), "/s/t/0/00000000000000000000.log")
    err = fault(cause, "appending to t-0", "nothing was appended")
    kind = pylog.TooManyOpenFilesError if code in (errno.EMFILE, errno.ENFILE) else pylog.StorageError
    assert type(err) is kind and isinstance(err, pylog.StorageError) and err.errno == code and err.__cause__ is cause
    assert "appending to t-0" in str(err) and "To go on:" in str(err) and err.filename == cause.filename
