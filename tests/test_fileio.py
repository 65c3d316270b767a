"""pylog.storage.fileio: atomic replacement, checked framing, metadata documents, error mapping, flock."""

from __future__ import annotations

import errno
import os

import msgpack
import pytest
from hypothesis import given, strategies as st

from pylog.errors import (CorruptRecordError, DiskFullError, PylogError, ReadOnlyStoreError, StorageError,
                          StorePermissionError, TooManyOpenFilesError)
from pylog.storage import fileio
from pylog.storage.fileio import (atomic_write, checked, decode_doc, encode_doc, fault, read_checked, try_flock,
                                  unchecked, write_all, write_checked, write_faults)


def _fail_nth(monkeypatch, name: str, n: int) -> None:
    """Make the ``n``-th call of ``os.<name>`` raise EIO (a crash there, as far as the file is concerned)."""
    real = getattr(os, name)
    calls = [0]

    def failing(*args, **kwargs):
        calls[0] += 1
        if calls[0] == n:
            raise OSError(errno.EIO, "injected", args[0] if isinstance(args[0], str) else None)
        return real(*args, **kwargs)

    monkeypatch.setattr(os, name, failing)


# Every system call atomic_write makes, in order: a failure at any of them is a crash at that step.
_STEPS = [("open", 1), ("writev", 1), ("fsync", 1), ("close", 1), ("replace", 1), ("fsync", 2)]


@pytest.mark.parametrize("name,n", _STEPS, ids=[f"{n}-{k}" for n, k in _STEPS])
def test_atomic_write_leaves_old_or_new_content_after_a_crash_at_any_step(tmp_path, monkeypatch, name, n):
    path = str(tmp_path / "file")
    atomic_write(path, b"old content")
    with monkeypatch.context() as m:
        _fail_nth(m, name, n)
        # The directory's fsync (after the rename) raises its OSError unconverted: see the xfail below.
        with pytest.raises(OSError) as info:
            atomic_write(path, b"new content, longer than the old")
        if (name, n) != ("fsync", 2):
            assert isinstance(info.value, StorageError)
            assert isinstance(info.value.__cause__, OSError) and info.value.__cause__.errno == errno.EIO
    with open(path, "rb") as f:
        assert f.read() in (b"old content", b"new content, longer than the old")
    # Before the rename the old content stays, and no temporary file is left behind to fill the disk.
    if (name, n) != ("fsync", 2) and name != "replace":
        assert open(path, "rb").read() == b"old content"
    if name != "close":
        assert os.listdir(tmp_path) == ["file"]


def test_atomic_write_whose_directory_fsync_fails_raises_a_pylog_error(tmp_path, monkeypatch):
    path = str(tmp_path / "file")
    _fail_nth(monkeypatch, "fsync", 2)
    with pytest.raises(StorageError) as info:
        atomic_write(path, b"new")
    assert "may not survive a power loss" in str(info.value)
    with open(path, "rb") as f:
        assert f.read() == b"new"  # the rename happened; only its durability is in doubt


def test_atomic_write_on_a_full_disk_is_disk_full_and_keeps_the_old_file(tmp_path, monkeypatch):
    path = str(tmp_path / "meta")
    atomic_write(path, b"v1")

    def full(fd, parts):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "writev", full)
    with pytest.raises(DiskFullError) as info:
        atomic_write(path, b"v2")
    assert "keeps its previous content" in str(info.value)
    assert info.value.errno == errno.ENOSPC
    monkeypatch.undo()
    assert open(path, "rb").read() == b"v1"
    assert os.listdir(tmp_path) == ["meta"]


def test_atomic_write_creates_a_missing_file_and_replaces_an_existing_one(tmp_path):
    path = str(tmp_path / "f")
    atomic_write(path, b"one", durable=False)
    assert open(path, "rb").read() == b"one"
    atomic_write(path, b"")
    assert open(path, "rb").read() == b""


def test_atomic_write_into_a_missing_directory_leaves_file_not_found_as_it_is(tmp_path):
    with pytest.raises(FileNotFoundError):
        atomic_write(str(tmp_path / "gone" / "f"), b"x")


@pytest.mark.parametrize("code,cls", [
    (errno.ENOSPC, DiskFullError), (errno.EDQUOT, DiskFullError), (errno.EROFS, ReadOnlyStoreError),
    (errno.EACCES, StorePermissionError), (errno.EPERM, StorePermissionError), (errno.EIO, StorageError),
    (errno.EFBIG, StorageError), (errno.EMFILE, TooManyOpenFilesError), (errno.ENFILE, TooManyOpenFilesError),
])
def test_fault_maps_each_write_refusal_to_its_pylog_error_saying_what_to_do(code, cls):
    exc = OSError(code, os.strerror(code), "/store/t/0/x.log")
    err = fault(exc, "appending to t-0", "nothing was appended", "reopen the store")
    assert type(err) is cls and isinstance(err, PylogError)
    assert err.__cause__ is exc and err.errno == code and err.filename == "/store/t/0/x.log"
    text = str(err)
    assert text.startswith("appending to t-0: ") and "nothing was appended" in text
    assert "To go on:" in text and text.endswith("then reopen the store.")


@pytest.mark.parametrize("exc", [FileNotFoundError(errno.ENOENT, "gone"), OSError(errno.EBADF, "bad fd"),
                                 ValueError("not an OSError"), DiskFullError("already converted")])
def test_fault_leaves_other_errors_as_they_are(exc):
    assert fault(exc, "doing", "state") is exc


def test_fault_converts_an_inner_conversion_again_from_its_cause():
    inner = fault(OSError(errno.ENOSPC, "full"), "replacing f", "it keeps its previous content")
    outer = fault(inner, "creating topic t", "the topic was not created")
    assert isinstance(outer, DiskFullError) and outer is not inner
    assert str(outer).startswith("creating topic t: ") and "replacing f" not in str(outer)


def test_write_faults_raises_the_pylog_error_of_a_refusal_in_the_block():
    with pytest.raises(ReadOnlyStoreError):
        with write_faults("deleting topic t", "the topic is still there"):
            raise OSError(errno.EROFS, "Read-only file system")
    with pytest.raises(FileNotFoundError):
        with write_faults("deleting topic t", "the topic is still there"):
            raise FileNotFoundError(errno.ENOENT, "gone")


def test_write_all_writes_every_part_when_writev_is_short(tmp_path, monkeypatch):
    real = os.writev

    def short(fd, parts):  # the kernel may write less than asked
        return real(fd, [bytes(parts[0])[:3]])

    monkeypatch.setattr(os, "writev", short)
    fd = os.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT)
    try:
        assert write_all(fd, [b"hello ", memoryview(b"world"), bytearray(b"!")]) == 12
    finally:
        os.close(fd)
    assert open(tmp_path / "f", "rb").read() == b"hello world!"


@pytest.mark.parametrize("chunk", [0, 1, 10, 100, 1 << 20])
def test_write_all_writes_more_parts_than_one_writev_takes_and_in_chunks(tmp_path, monkeypatch, chunk):
    from pylog.storage.fileio import IOV_MAX
    real = os.writev
    calls: list[int] = []
    monkeypatch.setattr(os, "writev", lambda fd, parts: (calls.append(len(parts)), real(fd, parts))[1])
    parts = [bytes([i % 256]) * (i % 7) for i in range(IOV_MAX * 2 + 5)]
    fd = os.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT)
    try:
        assert write_all(fd, parts, chunk) == sum(map(len, parts))
    finally:
        os.close(fd)
    assert open(tmp_path / "f", "rb").read() == b"".join(parts)
    assert max(calls) <= IOV_MAX
    if chunk == 10:
        assert len(calls) > len(parts) // 5  # a writev per 10 bytes or so (parts of 0-6 bytes)


@given(st.binary(max_size=200))
def test_checked_framing_round_trips_any_body(body):
    assert unchecked(checked(body), "p", "thing") == body


@given(st.binary(max_size=100), st.data())
def test_checked_framing_with_a_flipped_bit_is_a_corrupt_record_error(body, data):
    raw = bytearray(checked(body))
    bit = data.draw(st.integers(0, len(raw) * 8 - 1))
    raw[bit // 8] ^= 1 << (bit % 8)
    with pytest.raises(CorruptRecordError):
        unchecked(bytes(raw), "p", "thing")


@pytest.mark.parametrize("raw", [b"", b"\x00", b"abc"])
def test_unchecked_shorter_than_a_checksum_is_a_corrupt_record_error(raw):
    with pytest.raises(CorruptRecordError):
        unchecked(raw, "p", "thing")


def test_read_checked_of_a_missing_file_is_none_and_reads_back_what_was_written(tmp_path):
    path = str(tmp_path / "state")
    assert read_checked(path, 100, "state") is None
    write_checked(path, b"body")
    assert read_checked(path, 100, "state") == b"body"


def test_read_checked_past_its_limit_is_a_corrupt_record_error_not_a_huge_read(tmp_path):
    path = str(tmp_path / "state")
    write_checked(path, b"x" * 1000)
    with pytest.raises(CorruptRecordError):
        read_checked(path, 64, "state")


@given(st.dictionaries(st.text(max_size=5), st.one_of(st.integers(-2**63, 2**63 - 1), st.text(max_size=5),
                                                      st.binary(max_size=5), st.none()), max_size=5))
def test_encode_doc_round_trips_a_document(doc):
    assert decode_doc(b"TEST", 3, encode_doc(b"TEST", 3, doc), "p", "doc") == doc


@pytest.mark.parametrize("body", [
    b"", b"TES", b"XXXX\x03" + msgpack.packb({}), b"TEST\x04" + msgpack.packb({}), b"TEST\x03\xc1",
    b"TEST\x03" + msgpack.packb({}) + b"\x00", b"TEST\x03\x81\x80\x01",  # a map as a map key
    b"TEST\x03" + b"\x91" * 100_000,  # nested beyond the recursion limit
], ids=["empty", "short", "magic", "version", "bad-msgpack", "trailing", "map-key", "deep"])
def test_decode_doc_of_hostile_bytes_is_a_corrupt_record_error(body):
    with pytest.raises(CorruptRecordError):
        decode_doc(b"TEST", 3, body, "p", "doc")


def test_try_flock_is_false_while_another_open_file_holds_the_lock(tmp_path):
    path = tmp_path / "lock"
    path.touch()
    a, b = os.open(path, os.O_RDWR), os.open(path, os.O_RDWR)
    try:
        assert try_flock(a)
        assert not try_flock(b)
        os.close(a)
        a = -1
        assert try_flock(b)
    finally:
        for fd in (a, b):
            if fd >= 0:
                os.close(fd)


def test_fsync_dir_of_a_missing_directory_raises_file_not_found(tmp_path):
    fileio.fsync_dir(str(tmp_path))
    with pytest.raises(FileNotFoundError):
        fileio.fsync_dir(str(tmp_path / "missing"))
