"""``pylog serve`` on the command line: it serves Kafka clients, stops cleanly on SIGTERM with everything
acknowledged on disk, and refuses what it cannot serve with one line and exit code 3."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys

import pytest

import pylog

kafka = pytest.importorskip("kafka")

pytestmark = pytest.mark.slow


def _start(path, *args, lines=None):
    """(the ``pylog serve`` process, its bootstrap address); ``lines`` (a list) gets its log lines up to then."""
    proc = subprocess.Popen([sys.executable, "-m", "pylog", "serve", str(path), "--port", "0", *args],
                            stderr=subprocess.PIPE, text=True)
    lines = [] if lines is None else lines
    for line in proc.stderr:
        lines.append(line)
        m = re.search(r"listening on ([\d.]+):(\d+)", line)
        if m:
            return proc, f"{m.group(1)}:{m.group(2)}"
    proc.wait(10)
    raise AssertionError("pylog serve did not start:\n" + "".join(lines))


def test_sigterm_stops_cleanly_with_everything_acknowledged_on_disk(tmp_path):
    path = tmp_path / "store"
    proc, bootstrap = _start(path)
    try:
        producer = kafka.KafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=5)
        futures = [producer.send("events", b"%d" % i, key=b"k") for i in range(2000)]
        producer.flush(timeout=30)
        acked = [f.get(timeout=10) for f in futures]
        producer.close()
        proc.send_signal(signal.SIGTERM)
        rest = proc.stderr.read()
        assert proc.wait(30) == 0, rest
        assert "stopped" in rest
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert [m.offset for m in acked] == list(range(2000))
    with pylog.open(path, read_only=True) as store:
        p = store.topic("events").partition(0)
        assert [r.value for r in p.read(0, max_records=5000)] == [b"%d" % i for i in range(2000)]
        assert p.check() == []
    verify = subprocess.run([sys.executable, "-m", "pylog", "verify", str(path)], capture_output=True, text=True)
    assert verify.returncode == 0, verify.stdout + verify.stderr


def test_a_port_in_use_a_file_and_a_directory_of_other_files_are_refused_in_one_line(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        out = subprocess.run([sys.executable, "-m", "pylog", "serve", str(tmp_path / "s"), "--port", str(port)],
                             capture_output=True, text=True, timeout=60)
    assert out.returncode == 3
    assert "pylog:" in out.stderr and "Traceback" not in out.stderr, out.stderr
    afile = tmp_path / "not-a-store"
    afile.write_text("hello")
    out = subprocess.run([sys.executable, "-m", "pylog", "serve", str(afile), "--port", "0"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 3 and "not a pylog store" in out.stderr and "Traceback" not in out.stderr, out.stderr
    other = tmp_path / "photos"
    other.mkdir()
    (other / "holiday.jpg").write_bytes(b"jpeg")
    out = subprocess.run([sys.executable, "-m", "pylog", "serve", str(other), "--port", "0"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 3 and "left alone" in out.stderr, out.stderr
    assert sorted(p.name for p in other.iterdir()) == ["holiday.jpg"]  # no store was made of it


def test_a_second_sigterm_does_not_wait_for_a_client_that_stopped_reading(tmp_path):
    """A consumer that asked for 40 MB and reads nothing holds its connection's answer; the first SIGTERM waits
    for it (up to the shutdown timeout), a second one closes it at once, and the stop stays clean."""
    import time

    from pylog.server.protocol import encode_request
    path = tmp_path / "store"
    with pylog.open(path) as store:
        store.create_topic("big")
        store.topic("big").partition(0).append_values([b"x" * 100_000] * 400)  # 40 MB
    proc, bootstrap = _start(path)
    host, port = bootstrap.split(":")
    try:
        sock = socket.create_connection((host, int(port)))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        body = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 50 << 20, "isolation_level": 0,
                "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
                "topics": [{"topic": "big", "partitions": [{"partition": 0, "fetch_offset": 0, "log_start_offset": -1,
                                                            "partition_max_bytes": 50 << 20}]}]}
        sock.sendall(encode_request(1, 11, 1, "slow", body))
        time.sleep(1.0)  # the server is writing the answer, blocked on the client's full socket
        proc.send_signal(signal.SIGTERM)
        time.sleep(1.0)
        assert proc.poll() is None  # still waiting for the request under way (shutdown_timeout_s is 10 s)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(5) == 0
        assert time.monotonic() - t0 < 5
        sock.close()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    with pylog.open(path, read_only=True) as store:
        assert store.topic("big").partition(0).log_end_offset == 400


def test_num_partitions_flag_sets_the_partition_count_of_auto_created_and_countless_topics(tmp_path):
    """librdkafka's regression suite assumes a broker whose auto-created topics have 4 partitions (Kafka's
    ``num.partitions``); CreateTopics with -1 partitions gets the same count."""
    path = tmp_path / "store"
    proc, bootstrap = _start(path, "--num-partitions", "4")
    try:
        producer = kafka.KafkaProducer(bootstrap_servers=bootstrap)
        assert producer.partitions_for("auto") == {0, 1, 2, 3}
        producer.close()
        admin = kafka.KafkaAdminClient(bootstrap_servers=bootstrap)
        admin.create_topics([kafka.admin.NewTopic("countless", num_partitions=-1, replication_factor=-1)])
        admin.close()
    finally:
        _stop_cleanly(proc)
    with pylog.open(path, read_only=True) as store:
        assert store.topic("auto").num_partitions == 4
        assert store.topic("countless").num_partitions == 4


def test_serve_freezes_its_start_up_objects_out_of_the_cyclic_gc(tmp_path):
    """The modules, classes and functions imported at start-up (tens of thousands of objects) are frozen
    (``gc.freeze``) before serving: a full collection walks only what the server made since (it took 10-25 ms
    of the event loop on a loaded machine otherwise, and landed in one benchmark round and not another)."""
    lines = []
    proc, _ = _start(tmp_path / "store", "--metrics-port", "0", "--log-level", "DEBUG", lines=lines)
    try:
        counts = [int(m.group(1)) for m in (re.search(r"(\d+) start-up objects frozen", line) for line in lines) if m]
        assert counts and counts[0] > 10_000, "".join(lines)
    finally:
        _stop_cleanly(proc)


def _stop_cleanly(proc):
    """SIGTERM ``proc`` (a ``pylog serve``): it exits 0; killed if it does not."""
    try:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
