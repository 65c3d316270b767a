"""Helpers for the tests of ``pylog serve``: a TCP proxy that can cut connections, ``wait_until``, and reading
raw Kafka frames from a socket (the ``store`` and ``server`` fixtures are in tests/conftest.py).

Everything binds to 127.0.0.1 and stops by itself (daemon threads, sockets closed on ``close()``).
"""

from __future__ import annotations

import re
import socket
import struct
import subprocess
import sys
import threading
import time
from typing import Any, Callable

__all__ = ["CuttingProxy", "wait_until", "recv_exact", "recv_frame", "kafka_batch", "start_cli_server"]


def start_cli_server(path: Any, *args: str, preexec_fn: Callable[[], None] | None = None
                     ) -> tuple[subprocess.Popen, str, list[str]]:
    """``pylog serve PATH --port 0 ARGS`` in its own process: ``(process, bootstrap servers, its log lines)``,
    once it listens. Its stderr is read on from a daemon thread into the list, so the pipe never fills."""
    proc = subprocess.Popen([sys.executable, "-m", "pylog", "serve", str(path), "--port", "0", *args],
                            stderr=subprocess.PIPE, text=True, preexec_fn=preexec_fn)
    assert proc.stderr is not None
    lines: list[str] = []
    for line in proc.stderr:
        lines.append(line)
        m = re.search(r"listening on ([\d.]+):(\d+)", line)
        if m:
            threading.Thread(target=lambda: lines.extend(proc.stderr or ()), daemon=True).start()
            return proc, f"{m.group(1)}:{m.group(2)}", lines
    proc.wait(10)
    raise AssertionError("pylog serve did not start:\n" + "".join(lines))


def kafka_batch(values: list[bytes], producer_id: int = -1, epoch: int = -1, base_sequence: int = -1,
                transactional: bool = False) -> bytes:
    """An uncompressed Kafka v2 record batch of ``values`` (no keys, no headers), written without pylog's
    encoder, CRC-32C computed: what a produce request's ``records`` holds; ``transactional`` sets the
    batch's transactional bit."""
    import crc32c

    from pylog.server.recordbatch import _put_varint
    body = bytearray()
    for i, v in enumerate(values):
        rec = bytearray(b"\x00")
        _put_varint(rec, 0)
        _put_varint(rec, i)
        _put_varint(rec, -1)
        _put_varint(rec, len(v))
        rec += v
        _put_varint(rec, 0)
        _put_varint(body, len(rec))
        body += rec
    n = len(values)
    tail = struct.pack(">hiqqqhii", 0x10 if transactional else 0, n - 1, 1_700_000_000_000, 1_700_000_000_000,
                       producer_id, epoch, base_sequence, n) + body
    return struct.pack(">qiibI", 0, len(tail) + 9, 0, 2, crc32c.crc32c(tail)) + tail


def recv_exact(sock: socket.socket, n: int) -> bytes | None:
    """Exactly ``n`` bytes from ``sock``, or None when the peer closed first."""
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def recv_frame(sock: socket.socket) -> bytes | None:
    """One Kafka frame's payload (after its 4-byte size), or None when the peer closed first."""
    head = recv_exact(sock, 4)
    if head is None:
        return None
    return recv_exact(sock, struct.unpack(">i", head)[0])


def wait_until(pred, timeout: float = 20.0, step: float = 0.02, what: str = "condition"):
    """Poll ``pred()`` until it is truthy (returns it) or ``timeout`` seconds pass (AssertionError)."""
    deadline = time.monotonic() + timeout
    while True:
        got = pred()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(step)


class CuttingProxy:
    """Forwards 127.0.0.1:``port`` to ``target``; :meth:`cut` drops every open connection at once (the client
    sees its broker connection reset, as when a network path breaks), and new connections are accepted again.
    Cut while a producer has requests in flight, some were appended by the server and never acknowledged: an
    idempotent producer retries them, and the server must not append them twice.
    """

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self._lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._lsock.bind(("127.0.0.1", 0))
        self._lsock.listen(64)
        self.port = self._lsock.getsockname()[1]
        self._conns: list[tuple[socket.socket, socket.socket]] = []
        self._lock = threading.Lock()
        self._closed = False
        self.cuts = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                c, _ = self._lsock.accept()
            except OSError:
                return
            try:
                s = socket.create_connection(self.target, timeout=5)
            except OSError:
                c.close()
                continue
            s.settimeout(None)
            with self._lock:
                self._conns.append((c, s))
            threading.Thread(target=self._pump, args=(c, s, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(s, c, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, to_server: bool) -> None:
        try:
            while True:
                data = src.recv(1 << 16)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def cut(self) -> None:
        """Reset every open connection."""
        with self._lock:
            conns, self._conns = self._conns, []
            self.cuts += 1
        for pair in conns:
            for sock in pair:
                try:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                    # close() alone does not end a recv() blocked in a pump thread, and the socket lives (no
                    # reset) until that recv returns: a client waiting for an answer would wait for its request
                    # timeout. shutdown(SHUT_RD) wakes the recv; the close then resets (linger 0).
                    sock.shutdown(socket.SHUT_RD)
                except OSError:
                    pass
                sock.close()

    def close(self) -> None:
        self._closed = True
        self._lsock.close()
        self.cut()

