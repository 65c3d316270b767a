"""The peers of the benchmark suite, each behind one small adapter interface.

A *peer* is something a Python user could pick instead of pylog to keep an ordered stream of records on
this machine. The suite measures every peer through the same three operations, on the same payloads, in
the same batches:

- :meth:`Writer.append` a batch of records (a list of ``bytes``) to one stream;
- :meth:`Reader.poll` the next records of one stream in order, from the first one, waiting up to a
  timeout for at least one (``timeout=0`` reads what is there);
- :meth:`Peer.create` empty streams, :meth:`Peer.destroy` them, :meth:`Peer.footprint` their size.

A *stream* is a pylog partition, a file, an LMDB environment, a SQLite queue or a Redis stream; the
multi-process workloads give each process its own stream, as Kafka's benchmark gives each producer its
partitions.

Invariants every adapter keeps (the workloads check the ones they can: record counts and byte counts):
- A reader returns every record appended to its stream exactly once, in append order, whole.
- Nothing is fsynced: every peer keeps what it writes in the page cache (or, for Redis, in the server's
  memory and its append-only file without fsync), like pylog's default. This is stated per peer in
  :attr:`Peer.how`.
- Each adapter uses its library the way the library's documentation recommends for throughput: one
  transaction (LMDB ``putmulti``), one pipeline (Redis), one ``task_done()`` (persist-queue) or one
  ``write`` (plain file) per batch.
- Handles are opened by the process that uses them (:meth:`Peer.writer`, :meth:`Peer.reader`), never
  inherited across ``fork``: LMDB environments, SQLite connections and sockets are not fork-safe.
"""

from __future__ import annotations

import abc
import importlib.util
import os
import shutil
import socket
import sqlite3
import struct
import subprocess
import tempfile
import time
from importlib import metadata
from typing import Any, Callable, ClassVar, Sequence

import numpy as np

import pylog

#: A peer without a wake-up mechanism across processes is polled this often while tailing. It is the
#: floor of pylog's own polling fallback (``pylog.storage.log.waiting._POLL_MIN``), so no peer is slowed by a
#: coarser poll than pylog would use.
POLL_INTERVAL = 0.0002
TOPIC = "bench"


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def _dir_bytes(path: str) -> int:
    total = 0
    for base, _, files in os.walk(path):
        for name in files:
            try:
                total += os.stat(os.path.join(base, name)).st_blocks * 512  # allocated: indexes are sparse
            except FileNotFoundError:
                pass  # a file removed while walking (e.g. SQLite's WAL at close)
    return total


class Writer(abc.ABC):
    """Appends batches of records to one stream. Used by one thread of the process that opened it."""

    @abc.abstractmethod
    def append(self, values: Sequence[bytes]) -> None:
        """Append ``values`` (one batch) in order; visible to readers when this returns or after :meth:`flush`."""

    def flush(self) -> None:
        """Make every appended record visible to readers (no fsync: see the module docstring)."""

    @abc.abstractmethod
    def close(self) -> None:
        """Flush and release the handle."""


class Reader(abc.ABC):
    """Reads one stream in order from its first record. Used by one thread of the process that opened it."""

    @abc.abstractmethod
    def poll(self, max_records: int, timeout: float) -> list[bytes]:
        """The next at most ``max_records`` values after the last one returned.

        Waits up to ``timeout`` seconds for at least one when none is there; returns ``[]`` after that.
        """

    @abc.abstractmethod
    def close(self) -> None:
        """Release the handle."""


class _PollingReader(Reader):
    """A reader whose store cannot wake it: it looks again every POLL_INTERVAL until ``timeout``."""

    @abc.abstractmethod
    def _read(self, max_records: int) -> list[bytes]:
        """What is there now, without waiting."""

    def poll(self, max_records: int, timeout: float) -> list[bytes]:
        deadline = time.monotonic() + timeout
        while True:
            out = self._read(max_records)
            if out or time.monotonic() >= deadline:
                return out
            time.sleep(POLL_INTERVAL)


class Peer(abc.ABC):
    """One system under test: where its data lives and how to open writers and readers on it.

    Instances are created in the suite's process and reach worker processes by ``fork``; they hold only
    plain data (paths, a port), never an open handle.
    """

    #: Short name used in tables and plots.
    name: ClassVar[str]
    #: One sentence: which API the adapter calls, in which batches, with which durability settings.
    how: ClassVar[str]

    def __init__(self, root: str) -> None:
        self.root = os.path.join(root, self.name)

    @classmethod
    def unavailable(cls) -> str | None:
        """Why this peer cannot run here (a missing package or program), or None when it can."""
        return None

    @abc.abstractmethod
    def versions(self) -> dict[str, str]:
        """Versions of everything this peer runs (library, bindings, server)."""

    def create(self, streams: int) -> None:
        """Fresh, empty streams ``0 .. streams - 1`` (any earlier data of this peer is removed)."""
        self.destroy()
        os.makedirs(self.root)

    def destroy(self) -> None:
        """Remove this peer's data."""
        shutil.rmtree(self.root, ignore_errors=True)

    def footprint(self) -> int:
        """Bytes this peer's data takes (on disk; for Redis, in the server's memory)."""
        return _dir_bytes(self.root)

    @abc.abstractmethod
    def writer(self, stream: int) -> Writer:
        """Open a writer on ``stream``, in the calling process."""

    @abc.abstractmethod
    def reader(self, stream: int) -> Reader:
        """Open a reader on ``stream`` at its first record, in the calling process."""


class _PathPeer(Peer):
    """A peer whose stream ``s`` is one path under its root, made empty by :meth:`_make_empty` and opened by
    ``_writer_cls`` / ``_reader_cls``."""

    _writer_cls: ClassVar[Callable[[str], Writer]]
    _reader_cls: ClassVar[Callable[[str], Reader]]
    _suffix: ClassVar[str] = ""

    def create(self, streams: int) -> None:
        super().create(streams)
        for s in range(streams):
            self._make_empty(self._path(s))

    @abc.abstractmethod
    def _make_empty(self, path: str) -> None:
        """Create stream ``path``, empty."""

    def _path(self, stream: int) -> str:
        return os.path.join(self.root, f"{stream}{self._suffix}")

    def writer(self, stream: int) -> Writer:
        return self._writer_cls(self._path(stream))

    def reader(self, stream: int) -> Reader:
        return self._reader_cls(self._path(stream))


# ---------------------------------------------------------------------------------------------- pylog


class _PylogWriter(Writer):
    def __init__(self, path: str, stream: int) -> None:
        self._store = pylog.open(path, log_cleaner_enable=False)
        self._partition = self._store.topic(TOPIC).partition(stream)

    def append(self, values: Sequence[bytes]) -> None:
        self._partition.append_values(values)

    def close(self) -> None:
        self._store.close()


class _PylogReader(Reader):
    def __init__(self, path: str, stream: int) -> None:
        self._store = pylog.open(path, log_cleaner_enable=False)
        self._partition = self._store.topic(TOPIC).partition(stream)
        self._position = 0

    def poll(self, max_records: int, timeout: float) -> list[bytes]:
        p = self._partition
        records = p.read(self._position, max_records=max_records)
        if not records and timeout > 0 and p.wait_for_data(self._position, timeout):
            records = p.read(self._position, max_records=max_records)
        if not records:
            return []
        self._position = records[-1].offset + 1
        return [r.value for r in records]

    def close(self) -> None:
        self._store.close()


class PylogPeer(Peer):
    """pylog's partition API: ``Partition.append_values`` per batch, ``Partition.read`` as records."""

    name = "pylog"
    how = ("`Partition.append_values(batch)` per batch; `Partition.read(offset, max_records)` (one "
           "`Record` per record, CRC of every batch checked); tailing wakes through `wait_for_data`. Page "
           "cache, no fsync (pylog's default); cleaner thread off.")

    def versions(self) -> dict[str, str]:
        return {"pylog": pylog.__version__}

    def create(self, streams: int) -> None:
        super().create(streams)
        with pylog.open(self.root, log_cleaner_enable=False) as store:
            store.create_topic(TOPIC, partitions=streams)

    def writer(self, stream: int) -> Writer:
        return _PylogWriter(self.root, stream)

    def reader(self, stream: int) -> Reader:
        return _PylogReader(self.root, stream)


class _ClientWriter(Writer):
    def __init__(self, path: str, stream: int) -> None:
        self._store = pylog.open(path, log_cleaner_enable=False)
        self._producer = self._store.producer(acks=1)
        self._topic = _client_topic(stream)

    def append(self, values: Sequence[bytes]) -> None:
        send, topic = self._producer.send, self._topic
        for v in values:
            send(topic, v)

    def flush(self) -> None:
        self._producer.flush()

    def close(self) -> None:
        self._producer.close()
        self._store.close()


class _ClientReader(Reader):
    def __init__(self, path: str, stream: int) -> None:
        self._store = pylog.open(path, log_cleaner_enable=False)
        self._consumer = self._store.consumer(auto_offset_reset="earliest", enable_auto_commit=False)
        self._consumer.assign([pylog.TopicPartition(_client_topic(stream), 0)])

    def poll(self, max_records: int, timeout: float) -> list[bytes]:
        got = self._consumer.poll(timeout_ms=timeout * 1000, max_records=max_records)
        return [r.value for records in got.values() for r in records]

    def close(self) -> None:
        self._consumer.close()
        self._store.close()


def _client_topic(stream: int) -> str:
    return f"{TOPIC}-{stream}"


class PylogClientPeer(PylogPeer):
    """pylog's Kafka-style clients: ``producer.send()`` per record, ``consumer.poll()``."""

    name = "pylog-client"
    how = ("`store.producer(acks=1).send(topic, value)` one record at a time (the sender thread appends them "
           "in bulk), `flush()` at the end; `store.consumer().poll(max_records=...)` on an assigned partition. "
           "Each stream is a topic of one partition, so `send()` needs no `partition=` argument (with one it "
           "takes a slower path). Page cache, no fsync.")

    def create(self, streams: int) -> None:
        Peer.create(self, streams)
        with pylog.open(self.root, log_cleaner_enable=False) as store:
            for s in range(streams):
                store.create_topic(_client_topic(s))

    def writer(self, stream: int) -> Writer:
        return _ClientWriter(self.root, stream)

    def reader(self, stream: int) -> Reader:
        return _ClientReader(self.root, stream)


# ------------------------------------------------------------------------------------------ plain file

_LEN = struct.Struct("<I")


class _FileWriter(Writer):
    """Appends one batch as: record count (uint32), the records' lengths (uint32 each), the values.

    The lengths are counted in C (``map(len, ...)`` into a numpy array) and the batch joined once, so the
    only Python work per record is putting its value in the join: the least a writer of ``bytes`` does.
    """

    def __init__(self, path: str) -> None:
        self._f = open(path, "ab", buffering=0)

    def append(self, values: Sequence[bytes]) -> None:
        n = len(values)
        lengths = np.fromiter(map(len, values), dtype="<u4", count=n)
        parts = [_LEN.pack(n), lengths.tobytes()]
        parts.extend(values)
        self._f.write(b"".join(parts))

    def close(self) -> None:
        self._f.close()


class _FileReader(Reader):
    """Reads whole batches (a batch still being written is waited for), one slice per record."""

    _CHUNK = 4 << 20

    def __init__(self, path: str) -> None:
        self._fd = os.open(path, os.O_RDONLY)
        self._buf = b""
        self._at = 0  # parse position in _buf
        self._file_pos = 0  # bytes of the file already in _buf
        self._pending: list[bytes] = []  # values of the last parsed batch not returned yet

    def _fill(self) -> bool:
        data = os.pread(self._fd, self._CHUNK, self._file_pos)
        if not data:
            return False
        self._buf = self._buf[self._at:] + data
        self._at = 0
        self._file_pos += len(data)
        return True

    def _parse_batch(self) -> bool:
        buf, at = self._buf, self._at
        if at + 4 > len(buf):
            return False
        (n,) = _LEN.unpack_from(buf, at)
        body = at + 4 + 4 * n
        if body > len(buf):
            return False
        ends = np.frombuffer(buf, dtype="<u4", count=n, offset=at + 4).cumsum(dtype=np.int64) + body
        if n and ends[-1] > len(buf):
            return False  # the rest of the batch is not in the buffer (or not written yet)
        starts = [body, *ends[:-1].tolist()]
        self._pending = [buf[a:b] for a, b in zip(starts, ends.tolist())]
        self._at = int(ends[-1]) if n else body
        return True

    def poll(self, max_records: int, timeout: float) -> list[bytes]:
        deadline = time.monotonic() + timeout
        out: list[bytes] = []
        while len(out) < max_records:
            if not self._pending and not self._parse_batch():
                if self._fill():
                    continue
                if out or time.monotonic() >= deadline:
                    break
                time.sleep(POLL_INTERVAL)
                continue
            take = max_records - len(out)
            out.extend(self._pending[:take])
            del self._pending[:take]
        return out

    def close(self) -> None:
        os.close(self._fd)


class FilePeer(_PathPeer):
    """The physical baseline: length-prefixed records appended to a plain file, one write per batch."""

    name = "file"
    how = ("Per batch, one unbuffered `write` of the record count, every record's 4-byte length (counted into a "
           "numpy array) and the values, joined once; read with 4 MiB `pread`s, the lengths as a numpy array "
           "and one slice per record; tailing polls every 0.2 ms. No checksums, no index, no offsets. Page "
           "cache, no fsync.")

    _writer_cls = _FileWriter
    _reader_cls = _FileReader
    _suffix = ".log"

    def versions(self) -> dict[str, str]:
        return {}  # Python's own file I/O: the report gives the Python version

    def _make_empty(self, path: str) -> None:
        open(path, "wb").close()


# ----------------------------------------------------------------------------------------------- LMDB

_KEY = struct.Struct(">Q")  # big-endian sequence numbers sort in append order


def _lmdb_open(path: str, readonly: bool = False) -> Any:
    import lmdb
    # sync/metasync off: commits reach the page cache, not the disk (pylog's default durability). The map
    # is address space, not memory or disk: the file grows with the data.
    return lmdb.open(path, map_size=64 << 30, sync=False, metasync=False, readonly=readonly, max_dbs=0,
                     lock=True)


class _LmdbWriter(Writer):
    def __init__(self, path: str) -> None:
        self._env = _lmdb_open(path)
        with self._env.begin() as txn:
            self._next = txn.stat()["entries"]

    def append(self, values: Sequence[bytes]) -> None:
        pack, first = _KEY.pack, self._next
        with self._env.begin(write=True) as txn:
            txn.cursor().putmulti([(pack(first + i), v) for i, v in enumerate(values)], append=True)
        self._next = first + len(values)

    def close(self) -> None:
        self._env.close()


class _LmdbReader(_PollingReader):
    def __init__(self, path: str) -> None:
        self._env = _lmdb_open(path)
        self._next = 0

    def _read(self, max_records: int) -> list[bytes]:
        out: list[bytes] = []
        with self._env.begin() as txn:  # a new read transaction sees the latest commit
            cur = txn.cursor()
            if cur.set_range(_KEY.pack(self._next)):
                for v in cur.iternext(keys=False, values=True):
                    out.append(v)
                    if len(out) == max_records:
                        break
        self._next += len(out)
        return out

    def close(self) -> None:
        self._env.close()


class LmdbPeer(_PathPeer):
    """LMDB: one environment per stream, 8-byte big-endian sequence keys."""

    name = "lmdb"
    how = ("One environment per stream; one write transaction per batch with `Cursor.putmulti(items, "
           "append=True)` (LMDB's bulk-load path for keys in order); read with a cursor from `set_range`; "
           "tailing polls every 0.2 ms. `sync=False, metasync=False`: page cache, no fsync.")

    @classmethod
    def unavailable(cls) -> str | None:
        if importlib.util.find_spec("lmdb") is None:
            return "the `lmdb` package is not installed (`pip install -e '.[bench]'`)"
        return None

    def versions(self) -> dict[str, str]:
        import lmdb
        return {"lmdb (py-lmdb)": lmdb.__version__, "LMDB": ".".join(map(str, lmdb.version()))}

    _writer_cls = _LmdbWriter
    _reader_cls = _LmdbReader

    def _make_empty(self, path: str) -> None:
        _lmdb_open(path).close()


# -------------------------------------------------------------------------------------- persist-queue


class _RawBytes:
    """A persist-queue serializer that stores ``bytes`` as they are (the default pickles them)."""

    @staticmethod
    def dumps(value: bytes) -> bytes:
        return value

    @staticmethod
    def loads(value: bytes) -> bytes:
        return value


def _sqlite_queue(path: str) -> Any:
    import persistqueue
    q: Any = persistqueue.SQLiteQueue(path, auto_commit=False, serializer=_RawBytes)
    # persist-queue opens its connection in WAL mode with SQLite's default synchronous=FULL, which fsyncs
    # the WAL at every commit; OFF leaves writes in the page cache, pylog's default durability.
    q._putter.execute("PRAGMA synchronous=OFF")
    q._getter.execute("PRAGMA synchronous=OFF")
    return q


class _SqliteWriter(Writer):
    def __init__(self, path: str) -> None:
        self._q = _sqlite_queue(path)

    def append(self, values: Sequence[bytes]) -> None:
        put = self._q.put
        for v in values:
            put(v)
        self._q.task_done()

    def close(self) -> None:
        self._q.close()


class _SqliteReader(_PollingReader):
    # persist-queue's blocking get() waits on a threading.Event set by put() in the same process only
    # (checking again every 10 s), so a reader in another process polls.
    def __init__(self, path: str) -> None:
        import persistqueue
        self._q = _sqlite_queue(path)
        self._empty = persistqueue.Empty

    def _read(self, max_records: int) -> list[bytes]:
        out: list[bytes] = []
        get = self._q.get
        try:
            while len(out) < max_records:
                out.append(get(block=False))
        except self._empty:
            pass
        if out:
            self._q.task_done()  # one commit per batch: removes what was read, as the docs advise
        return out

    def close(self) -> None:
        self._q.close()


class SqliteQueuePeer(_PathPeer):
    """persist-queue's ``SQLiteQueue``: a SQLite table in WAL mode used as a FIFO queue."""

    name = "sqlite"
    how = ("persist-queue `SQLiteQueue(path, auto_commit=False)` (WAL mode, its default), values stored as "
           "given (a pass-through serializer instead of pickle), `put()` per record and `task_done()` per "
           "batch as its docs advise for batches; `get(block=False)` per record and `task_done()` per batch "
           "(reading removes, as in any work queue); tailing polls every 0.2 ms. `PRAGMA synchronous=OFF`: "
           "page cache, no fsync.")

    @classmethod
    def unavailable(cls) -> str | None:
        if importlib.util.find_spec("persistqueue") is None:
            return "the `persist-queue` package is not installed (`pip install -e '.[bench]'`)"
        return None

    def versions(self) -> dict[str, str]:
        return {"persist-queue": _version("persist-queue"), "SQLite": sqlite3.sqlite_version}

    _writer_cls = _SqliteWriter
    _reader_cls = _SqliteReader

    def _make_empty(self, path: str) -> None:
        _sqlite_queue(path).close()


# ---------------------------------------------------------------------------------------------- Redis


def _free_port() -> int:
    """A TCP port on the loopback interface that the OS says is free now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    """A private ``redis-server`` on 127.0.0.1, in its own temporary directory, for one suite run.

    Persistence matches pylog's default: an append-only file written on every event-loop turn and never
    fsynced (``appendonly yes``, ``appendfsync no``), no RDB snapshots. Automatic AOF rewrites are off so
    no background rewrite lands inside a measurement; :meth:`reset` empties the data and the file between
    measurements instead. Use as a context manager; the server is stopped on exit.
    """

    def __init__(self, scratch: str) -> None:
        self.dir = tempfile.mkdtemp(prefix="redis-", dir=scratch)
        self.port = 0
        self._proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> "RedisServer":
        import redis
        for _ in range(5):  # the port may be taken between asking and binding: try another
            self.port = _free_port()
            self._proc = subprocess.Popen(
                ["redis-server", "--bind", "127.0.0.1", "--port", str(self.port), "--dir", self.dir,
                 "--save", "", "--appendonly", "yes", "--appendfsync", "no", "--auto-aof-rewrite-percentage",
                 "0", "--protected-mode", "yes", "--daemonize", "no", "--logfile", "redis.log"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            client = redis.Redis(host="127.0.0.1", port=self.port)
            deadline = time.monotonic() + 10
            while self._proc.poll() is None and time.monotonic() < deadline:
                try:
                    client.ping()
                    client.close()
                    return self
                except redis.ConnectionError:
                    time.sleep(0.05)
            self._stop()
        raise RuntimeError(f"redis-server did not start (see {self.dir}/redis.log)")

    def __exit__(self, *exc: Any) -> None:
        self._stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._proc = None

    def client(self) -> Any:
        import redis
        return redis.Redis(host="127.0.0.1", port=self.port)

    def reset(self) -> None:
        """Empty the data set and rewrite the append-only file (to nothing), waiting for the rewrite."""
        c = self.client()
        c.flushall()
        c.bgrewriteaof()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            info = c.info("persistence")
            if not info["aof_rewrite_in_progress"] and not info["aof_rewrite_scheduled"]:
                break
            time.sleep(0.02)
        c.close()


class _RedisWriter(Writer):
    def __init__(self, server: RedisServer, stream: int) -> None:
        self._client = server.client()
        self._key = f"{TOPIC}:{stream}"

    def append(self, values: Sequence[bytes]) -> None:
        pipe = self._client.pipeline(transaction=False)
        xadd, key = pipe.xadd, self._key
        for v in values:
            xadd(key, {b"v": v})
        pipe.execute()

    def close(self) -> None:
        self._client.close()


class _RedisReader(Reader):
    def __init__(self, server: RedisServer, stream: int) -> None:
        self._client = server.client()
        self._key = f"{TOPIC}:{stream}"
        self._last = b"0-0"

    def poll(self, max_records: int, timeout: float) -> list[bytes]:
        block = max(1, int(timeout * 1000)) if timeout > 0 else None  # XREAD BLOCK 0 would wait forever
        got = self._client.xread({self._key: self._last}, count=max_records, block=block)
        if not got:
            return []
        entries = got[0][1]
        self._last = entries[-1][0]
        return [fields[b"v"] for _, fields in entries]

    def close(self) -> None:
        self._client.close()


class RedisPeer(Peer):
    """Redis Streams on a private local server: XADD pipelined, XREAD (BLOCK when tailing)."""

    name = "redis"
    how = ("Redis Streams on a private `redis-server` over loopback TCP (redis-py with hiredis): one "
           "pipeline (no MULTI) of `XADD` per batch; `XREAD COUNT n` from the last ID, with `BLOCK` when "
           "tailing. `appendonly yes`, `appendfsync no`, no RDB snapshots: written to the page cache, never "
           "fsynced, like pylog (with `appendonly no` Redis would keep the data in memory only).")

    def __init__(self, root: str, server: RedisServer | None = None) -> None:
        super().__init__(root)
        self.server = server

    @classmethod
    def unavailable(cls) -> str | None:
        if importlib.util.find_spec("redis") is None:
            return "the `redis` package is not installed (`pip install -e '.[bench]'`)"
        if shutil.which("redis-server") is None:
            return "no `redis-server` on PATH (`apt-get install redis-server`)"
        return None

    def _server(self) -> RedisServer:
        if self.server is None:
            raise RuntimeError("RedisPeer needs a running RedisServer")
        return self.server

    def versions(self) -> dict[str, str]:
        import redis
        import redis.utils
        c = self._server().client()
        try:
            server = c.info("server")["redis_version"]
        finally:
            c.close()
        return {"redis-py": redis.__version__, "hiredis": _version("hiredis") if redis.utils.HIREDIS_AVAILABLE
                else "not used", "redis-server": server}

    def create(self, streams: int) -> None:
        super().create(streams)
        self._server().reset()

    def destroy(self) -> None:
        super().destroy()
        if self.server is not None and self.server.port:
            self.server.reset()

    def footprint(self) -> int:
        c = self._server().client()
        try:
            return int(c.info("memory")["used_memory"]) + _dir_bytes(self._server().dir)
        finally:
            c.close()

    def writer(self, stream: int) -> Writer:
        return _RedisWriter(self._server(), stream)

    def reader(self, stream: int) -> Reader:
        return _RedisReader(self._server(), stream)


#: Every peer, in the order of the report's tables. pylog first: ratios are against it.
PEERS: tuple[type[Peer], ...] = (PylogPeer, PylogClientPeer, FilePeer, LmdbPeer, SqliteQueuePeer, RedisPeer)
