"""pylog.config: Kafka names, defaults, parsing and rejection of bad settings."""

from __future__ import annotations

import pytest

from pylog import InvalidConfigError, TopicConfig
from pylog.config import SETTINGS, split_store_options


def test_defaults_are_kafkas():
    cfg = TopicConfig()
    assert cfg["segment.bytes"] == 1 << 30
    assert cfg["index.interval.bytes"] == 4096
    assert cfg["cleanup.policy"] == ("delete",)
    assert cfg.segment_bytes == 1 << 30
    assert not cfg.compact


def test_overrides_beat_store_defaults_and_strings_parse():
    cfg = TopicConfig({"segment.bytes": "2048", "cleanup.policy": "compact,delete"}, {"segment.bytes": 4096,
                                                                                     "retention.ms": 5})
    assert cfg["segment.bytes"] == 2048 and cfg["retention.ms"] == 5
    assert cfg.compact and cfg.is_override("segment.bytes") and not cfg.is_override("retention.ms")
    assert cfg.overrides == {"segment.bytes": 2048, "cleanup.policy": ("compact", "delete")}


@pytest.mark.parametrize("overrides", [
    {"segment.byte": 1},
    {"segment.bytes": -1},
    {"segment.bytes": "big"},
    {"segment.bytes": True},
    {"cleanup.policy": "shred"},
    {"compression.type": "brotli"},
    {"min.cleanable.dirty.ratio": 2},
    {"message.timestamp.type": "Now"},
    {"min.compaction.lag.ms": 10, "max.compaction.lag.ms": 5},
])
def test_bad_settings_are_rejected_by_name(overrides):
    with pytest.raises(InvalidConfigError):
        TopicConfig(overrides)


def test_store_options_split_topic_defaults_from_store_settings():
    topic, store = split_store_options({"segment_bytes": 4096, "lock_timeout_ms": 10})
    assert topic == {"segment.bytes": 4096}
    assert store["lock.timeout.ms"] == 10
    with pytest.raises(InvalidConfigError):
        split_store_options({"nonsense": 1})


def test_every_setting_is_documented():
    assert all(s.doc for s in SETTINGS.values())


@pytest.mark.parametrize("name, value", [
    ("min.cleanable.dirty.ratio", float("nan")),  # NaN is neither below the minimum nor above the maximum
    ("min.cleanable.dirty.ratio", "nan"),
    ("retention.ms", 1 << 70),  # no maximum of its own, but settings are Java longs
    ("segment.ms", 1e300),
])
def test_non_finite_and_beyond_long_values_are_rejected(name, value):
    with pytest.raises(InvalidConfigError):
        TopicConfig({name: value})
