"""Topic configs Kafka clients set through ``pylog serve`` (librdkafka's regression tests 0081 and 0092):
every Kafka ``compression.type`` is accepted (gzip, snappy and zstd are stored lz4 compressed, pylog's one
codec) and ``message.format.version``, which Kafka 3.x accepts and ignores, is accepted and ignored."""

from __future__ import annotations

import time

import pytest

from pylog.storage.records import CODEC_LZ4, CODEC_NONE

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Producer  # noqa: E402
from confluent_kafka.admin import (  # noqa: E402
    AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic,
)

QUIET = {"log_level": 3}


def _admin(server) -> AdminClient:
    return AdminClient({"bootstrap.servers": server.bootstrap_servers, **QUIET})


def _create(server, name: str, config: dict) -> None:
    admin = _admin(server)  # kept until the answer: a destroyed client fails its futures
    admin.create_topics([NewTopic(name, num_partitions=1, replication_factor=1, config=config)])[name].result(30)


def _alter(server, res: ConfigResource, incremental: bool = False) -> None:
    admin = _admin(server)
    (admin.incremental_alter_configs if incremental else admin.alter_configs)([res])[res].result(30)


def _round_trip(server, topic: str, values: list[bytes]) -> list[bytes]:
    p = Producer({"bootstrap.servers": server.bootstrap_servers, **QUIET})
    for v in values:
        p.produce(topic, v)
    assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": server.bootstrap_servers, "group.id": topic, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, **QUIET})
    got: list[bytes] = []
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + 30
        while len(got) < len(values) and time.monotonic() < deadline:
            for m in c.consume(100, 0.5):
                assert m.error() is None, m.error()
                got.append(m.value())
    finally:
        c.close()
    return got


def _stored_codecs(server, topic: str) -> set[int]:
    part = server.store.topic(topic).partition(0)
    return {view.header.codec for view, _, _ in part.read_slices(0, 1_000_000, 1 << 30)}


@pytest.mark.parametrize("codec", ["zstd", "gzip", "snappy"])
def test_topic_with_a_kafka_codec_as_compression_type_is_created_and_stored_lz4(server, codec):
    _create(server, f"c-{codec}", {"compression.type": codec})
    values = [b"record %d " % i * 20 for i in range(200)]
    assert _round_trip(server, f"c-{codec}", values) == values
    assert _stored_codecs(server, f"c-{codec}") == {CODEC_LZ4}
    assert server.store.topic(f"c-{codec}").config["compression.type"] == codec


def test_compression_type_can_be_altered_to_zstd_and_back_to_uncompressed(server):
    _create(server, "alter-codec", {})
    res = ConfigResource(ConfigResource.Type.TOPIC, "alter-codec", incremental_configs=[
        ConfigEntry("compression.type", "zstd", incremental_operation=AlterConfigOpType.SET)])
    _alter(server, res, incremental=True)
    assert server.store.topic("alter-codec").config["compression.type"] == "zstd"
    res = ConfigResource(ConfigResource.Type.TOPIC, "alter-codec", set_config={"compression.type": "uncompressed"})
    _alter(server, res)
    values = [b"plain %d" % i * 10 for i in range(50)]
    assert _round_trip(server, "alter-codec", values) == values
    assert _stored_codecs(server, "alter-codec") == {CODEC_NONE}


def test_unknown_compression_type_is_still_refused(server):
    with pytest.raises(ck.KafkaException, match="brotli"):
        _create(server, "brotli", {"compression.type": "brotli"})


def test_message_format_version_is_accepted_and_ignored_as_kafka_3_does(server):
    """librdkafka's 0092 sets it to a v1 message format on a topic and goes on producing v2 batches."""
    _create(server, "msgver", {"message.format.version": "0.10.0.0", "retention.ms": "3600000"})
    topic = server.store.topic("msgver")
    assert topic.config.overrides == {"retention.ms": 3600000}
    res = ConfigResource(ConfigResource.Type.TOPIC, "msgver", set_config={"message.format.version": "0.10.0.0",
                                                                           "retention.ms": "7200000"})
    _alter(server, res)
    res = ConfigResource(ConfigResource.Type.TOPIC, "msgver", incremental_configs=[
        ConfigEntry("message.format.version", "2.8", incremental_operation=AlterConfigOpType.SET)])
    _alter(server, res, incremental=True)
    assert server.store.topic("msgver").config.overrides == {"retention.ms": 7200000}
    assert _round_trip(server, "msgver", [b"a", b"b"]) == [b"a", b"b"]
