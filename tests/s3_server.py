"""A real S3 API on 127.0.0.1 for the tiered storage tests: moto's server (``moto[server]``, the stand-in
s3fs's own tests use), which enforces conditional writes (If-None-Match / If-Match) and byte ranges.

The fixtures are registered in tests/conftest.py. ``s3_endpoint`` starts one server per test module in a thread of the test process (child processes reach
it over loopback too) and stops it when the module's tests are done. Each test gets a bucket of its own
(``remote_settings``), so tests never see each other's objects. Credentials are fixed test values set in
the environment for the module's lifetime (children inherit them); ~/.aws is never read.
"""

from __future__ import annotations

import os
import uuid
from typing import Iterator

import pytest

#: The fixed test credentials (set in the environment while a module's server runs; the Spark session gives
#: them to its Python workers).
S3_TEST_ENV = _ENV = {"AWS_ACCESS_KEY_ID": "pylog-test", "AWS_SECRET_ACCESS_KEY": "pylog-test", "AWS_REGION": "us-east-1",
        "AWS_CONFIG_FILE": os.devnull, "AWS_SHARED_CREDENTIALS_FILE": os.devnull}


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    """``http://127.0.0.1:<port>`` of a moto S3 server running for this module's tests."""
    moto_server = pytest.importorskip("moto.server", reason="moto[server] is in the test extra")
    saved = {k: os.environ.get(k) for k in _ENV}
    os.environ.update(_ENV)
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        yield f"http://{host}:{port}"
    finally:
        server.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture
def remote_settings(s3_endpoint: str) -> dict[str, object]:
    """Remote storage settings naming a new, empty bucket (prefix ``store``) on the module's server."""
    bucket = f"pylog-{uuid.uuid4().hex[:16]}"
    raw_client(s3_endpoint).create_bucket(Bucket=bucket)
    return {"remote.storage.location": f"s3://{bucket}/store", "remote.storage.endpoint.url": s3_endpoint,
            "remote.storage.request.timeout.ms": 10_000, "remote.storage.max.attempts": 2}


def raw_client(endpoint: str):
    """A plain boto3 client on the server, for what a test does behind pylog's back (damage, races)."""
    boto3 = pytest.importorskip("boto3", reason="boto3 is in the test extra (and the s3 extra)")
    return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")


class FaultProxy:
    """An HTTP proxy on 127.0.0.1 in front of the S3 server that answers the next ``faults`` requests itself
    with ``status`` (503 SlowDown by default: S3's throttling answer) and forwards the rest: the bucket
    failing the way a real one does, for the retry and error tests. With ``lose_puts``, the next that many
    successful PUTs are forwarded (they take effect) but answered with ``status``, as if the answer was lost
    on the way (a retry's answer, a 412, passes). With ``pass_first``, that many requests are forwarded
    before the faults begin.
    Counts the requests it sees, and keeps each one's method, path and headers (``seen``).

    Use as a context manager; it stops (and its thread ends) on exit.
    """

    def __init__(self, endpoint: str, faults: int, status: int = 503, code: str = "SlowDown",
                 lose_puts: int = 0, pass_first: int = 0) -> None:
        import http.client  # noqa: PLC0415 - test helper, kept beside its one use
        import threading  # noqa: PLC0415
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer  # noqa: PLC0415
        from urllib.parse import urlsplit  # noqa: PLC0415

        target = urlsplit(endpoint)
        proxy = self
        self.faults, self.requests, self.lose_puts, self.pass_first = faults, 0, lose_puts, pass_first
        self.seen: list[tuple[str, str, dict[str, str]]] = []
        self._lock = threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def _any(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with proxy._lock:
                    proxy.requests += 1
                    proxy.seen.append((self.command, self.path, {k.lower(): v for k, v in self.headers.items()}))
                    fail = proxy.faults > 0 and proxy.requests > proxy.pass_first
                    proxy.faults -= fail
                if fail:
                    self._error()
                    return
                data, answer = self._forward(body)
                with proxy._lock:
                    lose = self.command == "PUT" and answer.status == 200 and proxy.lose_puts > 0
                    proxy.lose_puts -= lose
                if lose:
                    self._error()
                    return
                self.send_response(answer.status)
                for k, v in answer.getheaders():
                    if k.lower() not in ("content-length", "transfer-encoding", "connection", "date", "server"):
                        self.send_header(k, v)
                # A HEAD's answer announces the object's length and carries no body.
                self.send_header("Content-Length", answer.getheader("Content-Length", "0") if self.command == "HEAD"
                                 else str(len(data)))
                self.end_headers()
                self.wfile.write(b"" if self.command == "HEAD" else data)

            def _error(self) -> None:
                error = (f"<?xml version='1.0' encoding='UTF-8'?><Error><Code>{code}</Code>"
                         f"<Message>injected by the test</Message></Error>").encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/xml")
                self.send_header("Content-Length", str(len(error)))
                self.end_headers()
                self.wfile.write(b"" if self.command == "HEAD" else error)

            def _forward(self, body: bytes):
                conn = http.client.HTTPConnection(target.hostname, target.port, timeout=30)
                try:
                    conn.request(self.command, self.path, body=body,
                                 headers={k: v for k, v in self.headers.items() if k.lower() != "host"})
                    answer = conn.getresponse()
                    return answer.read(), answer
                finally:
                    conn.close()

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _any

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> "FaultProxy":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)


#: The program of :class:`MotoProcess`: a moto S3 server on 127.0.0.1 that prints its port, then lives until
#: its stdin closes (its parent ended, however it ended) or its lifetime is up, whichever comes first.
_SERVER_PROGRAM = """
import os, sys, threading
from moto.server import ThreadedMotoServer
lifetime = float(sys.argv[1])
server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
server.start()
print("%s:%d" % server.get_host_and_port(), flush=True)
threading.Timer(lifetime, lambda: os._exit(0)).start()
sys.stdin.read()
os._exit(0)
"""


class MotoProcess:
    """A moto S3 server in a process of its own, for scripts that fork (tests/torture/tiered_torture.py: a
    server's threads in the forking process would be copied into every child mid-request). It binds to
    127.0.0.1 and ends when this object closes, when the process that started it ends (its stdin closes),
    or after ``lifetime`` seconds. The fixed test credentials (:data:`S3_TEST_ENV`) are put in ``os.environ``
    so the clients of this process and of its children reach it. Use as a context manager."""

    def __init__(self, lifetime: float) -> None:
        import subprocess  # noqa: PLC0415 - test helper, kept beside its one use
        import sys  # noqa: PLC0415

        os.environ.update(_ENV)
        self._proc = subprocess.Popen([sys.executable, "-c", _SERVER_PROGRAM, str(lifetime)],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                      text=True)  # its stderr: a log line per request
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline().strip()
        if not line:
            self._proc.wait(10)
            raise RuntimeError(f"the moto server did not start (exit code {self._proc.returncode})")
        self.endpoint = f"http://{line}"

    def bucket(self) -> str:
        """A new, empty bucket's name."""
        name = f"pylog-{uuid.uuid4().hex[:16]}"
        raw_client(self.endpoint).create_bucket(Bucket=name)
        return name

    def close(self) -> None:
        if self._proc.poll() is None:
            assert self._proc.stdin is not None
            self._proc.stdin.close()
            try:
                self._proc.wait(10)
            except Exception:  # noqa: BLE001 - it did not end by itself: end it
                self._proc.kill()
                self._proc.wait(10)

    def __enter__(self) -> "MotoProcess":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
