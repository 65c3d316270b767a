"""Node.js Kafka clients against ``pylog serve``: kafkajs 2.2.4 (installed from the npm registry into
tests/node by ``npm ci --prefix tests/node``, as .ci/run does), driven through tests/node/kafkajs_client.js
as a subprocess with a deadline. The server binds to 127.0.0.1 on a free port.

Confluent's @confluentinc/kafka-javascript is not among them: its npm package downloads a prebuilt
librdkafka binding from GitHub, or builds librdkafka after downloading zlib, OpenSSL, zstd and curl sources
from outside the npm registry, which CI cannot reach (docs/TESTING.md). Its librdkafka core is the one
confluent-kafka (Python) uses, which the other server tests run.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

import pylog
from pylog import TopicPartition

NODE_DIR = Path(__file__).with_name("node")
SCRIPT = NODE_DIR / "kafkajs_client.js"


def _node() -> str:
    node = shutil.which("node")
    if node is None or not (NODE_DIR / "node_modules" / "kafkajs").is_dir():
        pytest.skip("Node.js and kafkajs are needed (npm ci --prefix tests/node)")
    return node


def kafkajs(server, *args: str, timeout_ms: int = 30_000, check: bool = True) -> list[dict]:
    """Run one action of kafkajs_client.js against ``server``; its JSON lines. ``check``: the action
    must succeed (exit status 0)."""
    cmd = [_node(), str(SCRIPT), server.bootstrap_servers, *args, "--timeout-ms", str(timeout_ms)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_ms / 1000 + 30)
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    if check and proc.returncode != 0:
        raise AssertionError(f"kafkajs {args[0]} failed ({proc.returncode}): {lines[-3:]}\n{proc.stderr[-3000:]}")
    return lines


def _records(lines: list[dict]) -> list[tuple[int, int, str]]:
    return [(x["partition"], x["offset"], x["value"]) for x in lines if "offset" in x]


def test_kafkajs_group_recovers_when_its_committed_offset_fell_below_the_log_start(store, server):
    """DeleteRecords moves the log start past the group's commit: kafkajs' fetch gets OFFSET_OUT_OF_RANGE,
    it commits -2 (earliest) and reads its offsets back to find where to resume. The -2 must come back
    (it used to be dropped: kafkajs fetched the stale commit again and looped, consuming nothing)."""
    kafkajs(server, "produce", "t", "10")
    store.commit_offsets("g", {TopicPartition("t", 0): 3})
    kafkajs(server, "delete-records", "t", "0", "6")
    got = kafkajs(server, "consume", "t", "g", "4", "--from-beginning")
    assert _records(got) == [(0, o, f"v{o}") for o in range(6, 10)]
    assert store.committed_offsets("g")[TopicPartition("t", 0)].offset == 10


def test_kafkajs_reset_offsets_takes_effect(store, server):
    """admin.resetOffsets commits -2 (earliest) for every partition of an empty group: it is stored, read
    back by OffsetFetch, and the group's next kafkajs consumer starts again from the log start (kafkajs
    resolves a negative commit with its subscription's fromBeginning, as against Kafka). It used to keep
    the old commit, so the consumer read nothing."""
    kafkajs(server, "produce", "t", "5")
    assert len(_records(kafkajs(server, "consume", "t", "g", "5", "--from-beginning"))) == 5
    assert store.committed_offsets("g")[TopicPartition("t", 0)].offset == 5
    kafkajs(server, "reset-offsets", "t", "g", "earliest")
    assert store.committed_offsets("g")[TopicPartition("t", 0)].offset == -2
    (fetched,) = [x["offsets"] for x in kafkajs(server, "fetch-offsets", "t", "g") if "offsets" in x]
    assert fetched == [{"topic": "t", "partitions": [{"partition": 0, "offset": "-2", "metadata": None}]}]
    assert _records(kafkajs(server, "consume", "t", "g", "5", "--from-beginning")) == \
        [(0, o, f"v{o}") for o in range(5)]
    # A pylog consumer of the group, after another reset, treats the -2 as no position (auto_offset_reset).
    kafkajs(server, "reset-offsets", "t", "g", "earliest")
    with store.consumer("t", group_id="g", auto_offset_reset="earliest", enable_auto_commit=False) as c:
        assert c.committed(TopicPartition("t", 0)) is None


def test_kafkajs_sets_a_groups_offsets_from_a_timestamp_lookup_and_resets_them_to_latest(store, server):
    """kafkajs' admin.fetchTopicOffsetsByTimestamp (ListOffsets by time) then admin.setOffsets: the group's
    next consumer starts at the first record of the second produce; resetOffsets to latest commits -1, which
    is read back (kafkajs then starts a consumer without fromBeginning at the log end)."""
    kafkajs(server, "produce", "t", "6")
    kafkajs(server, "produce", "t", "3")  # another process: its records are stamped later than the first six
    at = store.topic("t").partition(0).read(6, max_records=1)[0].timestamp
    (offsets,) = [x["offsets"] for x in kafkajs(server, "offsets-by-timestamp", "t", str(at)) if "offsets" in x]
    assert offsets == [{"partition": 0, "offset": "6"}]
    kafkajs(server, "set-offsets", "t", "g", "0:6")
    assert store.committed_offsets("g")[TopicPartition("t", 0)].offset == 6
    assert _records(kafkajs(server, "consume", "t", "g", "3", "--from-beginning")) == [(0, 6, "v0"), (0, 7, "v1"),
                                                                                       (0, 8, "v2")]
    kafkajs(server, "reset-offsets", "t", "g", "latest")
    (fetched,) = [x["offsets"] for x in kafkajs(server, "fetch-offsets", "t", "g") if "offsets" in x]
    assert fetched == [{"topic": "t", "partitions": [{"partition": 0, "offset": "-1", "metadata": None}]}]


def test_kafkajs_transactional_producer_commits_and_aborts(store, server):
    """kafkajs' transaction API against pylog serve (it used to be refused with
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED): a committed transaction's records are read by a read_committed
    reader, an aborted one's only by a read_uncommitted reader, and the control markers by neither."""
    store.create_topic("t", 1)
    got = kafkajs(server, "transactional-producer", "tx-js", "t")
    assert got == [{"error": None, "outcome": "commit", "errorCodes": [0]},
                   {"error": None, "outcome": "abort", "errorCodes": [0]}]
    p = store.topic("t").partitions[0]
    committed = [r.value for r in p.read(0, 100, isolation_level="read_committed")]
    everything = [r.value for r in p.read(0, 100, isolation_level="read_uncommitted")]
    assert committed == [b"c0", b"c1"]
    assert everything == [b"c0", b"c1", b"a0", b"a1"]
    # The server is still serving: a plain producer works after the transactions.
    (produced,) = kafkajs(server, "produce", "t", "1")
    assert produced["produced"][0]["errorCode"] == 0
