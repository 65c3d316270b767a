"""Client quotas (pylog.clients.quotas): Kafka's windowed byte-rate throttling, on synthetic clocks.

Run: ``python -m pytest tests/test_quotas.py -q``

No test sleeps or reads the wall clock: every manager gets a fake clock whose ``sleep`` moves it forward.
"""

from __future__ import annotations

import math
import random

import pytest

import pylog
from pylog.clients.quotas import CONSUME, PRODUCE, QuotaManager, throttle_delay
from pylog.store import quota_manager


class FakeClock:
    """Seconds that only move when someone sleeps (or the test advances them)."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def _manager(num: int = 11, size: float = 1.0) -> tuple[QuotaManager, FakeClock]:
    clock = FakeClock()
    return QuotaManager(num, size, clock=clock, sleep=clock.sleep), clock


@pytest.fixture
def store(tmp_path):
    with pylog.open(str(tmp_path), log_cleaner_enable=False) as s:
        clock = FakeClock()
        quota_manager(s).clock = clock
        quota_manager(s).sleep = clock.sleep
        yield s


def test_delay_formula_is_kafkas():
    # X = (O - T) / T * W: the article's example, 100 MB over a 5 s window against 10 MB/s, waits 5 s.
    assert throttle_delay(observed=100 / 5, limit=10, window=5) == 5.0
    assert throttle_delay(150, 100, 30) == 15.0
    assert throttle_delay(100, 100, 30) == 0.0 and throttle_delay(10, 100, 30) == 0.0
    # The delay solves O * W / (W + X) == T.
    o, t, w = 1234.0, 1000.0, 11.0
    x = throttle_delay(o, t, w)
    assert math.isclose(o * w / (w + x), t)


def test_record_returns_the_delay_over_a_window_padded_to_n_minus_1_samples():
    m, clock = _manager(11, 1.0)
    m.set_quota("c", PRODUCE, 1000)
    # 5000 bytes at once: the window counts as 10 full samples (Kafka's padding), 500 B/s: no delay.
    assert m.record("c", PRODUCE, 5000) == 0.0
    clock.now += 0.5
    # 15000 bytes over a window of 10.5 s is 1428.6 B/s: wait until 15000 B / 1000 B/s = 15 s.
    delay = m.record("c", PRODUCE, 10_000)
    assert math.isclose(delay, 15.0 - 10.5)
    assert math.isclose(m.observed_rate("c", PRODUCE), 15_000 / 10.5)
    # Once every sample is older than 11 samples x 1 s, the window forgets them.
    clock.now += 11
    assert m.observed_rate("c", PRODUCE) == 0.0
    assert m.record("c", PRODUCE, 100) == 0.0


def test_window_rolls_over_sample_by_sample():
    m, clock = _manager(3, 1.0)  # 3 samples of 1 s: at most 2 s of padding, forgotten after 3 s
    m.set_quota("c", CONSUME, 100)
    t0 = clock.now
    assert math.isclose(m.record("c", CONSUME, 300), (150 - 100) / 100 * 2.0)  # 300 B over 2 s (padded)
    clock.now = t0 + 0.5
    assert math.isclose(m.observed_rate("c", CONSUME), 300 / 2.5)  # still the first sample
    clock.now = t0 + 1.0  # the first sample is complete: this record starts the second
    assert math.isclose(m.record("c", CONSUME, 100), (200 - 100) / 100 * 2.0)
    clock.now = t0 + 3.0  # the first sample (started at t0) is 3 s old: forgotten; the second remains
    assert math.isclose(m.observed_rate("c", CONSUME), 100 / 2.0)
    clock.now = t0 + 4.0
    assert m.observed_rate("c", CONSUME) == 0.0
    # Many samples later the window still holds at most 3 of them.
    for i in range(20):
        clock.now = t0 + 10 + i
        m.record("c", CONSUME, 10)
    assert math.isclose(m.observed_rate("c", CONSUME), 30 / (2 + 0.0))


def test_a_client_without_a_quota_is_a_dict_miss():
    def no_clock() -> float:
        raise AssertionError("a client without a quota must not read the clock")

    m = QuotaManager(clock=no_clock, sleep=lambda s: pytest.fail("no sleep without a quota"))
    assert m.record("nobody", PRODUCE, 10 ** 9) == 0.0
    assert m.throttle("nobody", CONSUME, 10 ** 9) == 0.0
    assert m.record(None, PRODUCE, 1) == 0.0  # a producer without client_id
    assert not m.active("nobody", PRODUCE)
    with pytest.raises(ValueError):
        m.record("nobody", "fetch", 1)


def test_throttle_sleeps_the_delay():
    m, clock = _manager(11, 1.0)
    m.set_quota("c", CONSUME, 1000)
    assert m.throttle("c", CONSUME, 20_000) == pytest.approx(10.0)  # 20 s of budget, 10 s of window
    assert clock.slept == [pytest.approx(10.0)]
    assert m.quota("c", CONSUME) == 1000.0 and m.quota("c", PRODUCE) is None


def test_quota_settings_are_validated():
    m, _ = _manager()
    for bad in (0, -1, float("nan"), float("inf"), True, "10"):
        with pytest.raises(pylog.InvalidConfigError):
            m.set_quota("c", PRODUCE, bad)
    with pytest.raises(TypeError):
        m.set_quota(7, PRODUCE, 10)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        m.set_quota("c", "fetch", 10)
    with pytest.raises(pylog.InvalidConfigError):
        QuotaManager(window_num=0)
    with pytest.raises(pylog.InvalidConfigError):
        QuotaManager(window_size_s=0)


def test_store_set_quota_replaces_a_clients_quotas(store):
    store.set_quota("a", producer_byte_rate=1000)
    store.set_quota("b", producer_byte_rate=10, consumer_byte_rate=20.5)
    assert store.quotas() == {"a": {"producer_byte_rate": 1000.0},
                              "b": {"producer_byte_rate": 10.0, "consumer_byte_rate": 20.5}}
    store.set_quota("a", consumer_byte_rate=5)  # the producer quota it does not name goes
    assert store.quotas()["a"] == {"consumer_byte_rate": 5.0}
    with pytest.raises(pylog.InvalidConfigError):
        store.set_quota("b", producer_byte_rate=-1)
    assert store.quotas()["b"] == {"producer_byte_rate": 10.0, "consumer_byte_rate": 20.5}  # unchanged
    store.set_quota("b")
    assert "b" not in store.quotas()


def test_two_producers_with_one_client_id_share_one_budget(store):
    store.create_topic("t")
    store.set_quota("shared", producer_byte_rate=1000)  # 11 samples of 1 s: 10 000 bytes pass at once
    clock = quota_manager(store).clock
    opts = dict(linger_ms=600_000, batch_size=1 << 30)  # drains only by flush(), in this thread
    with store.producer(client_id="shared", **opts) as p1, store.producer(client_id="shared", **opts) as p2, \
            store.producer(client_id="other", **opts) as other:
        for _ in range(8):
            p1.send("t", b"x" * 1000)
        p1.flush()
        assert clock.slept == [] and p1.metrics()["produce-throttle-time-max"] == 0.0
        # The other client id has its own (absent) quota: not delayed by the first client's traffic.
        for _ in range(8):
            other.send("t", b"x" * 1000)
        other.flush()
        assert clock.slept == []
        # 8000 more bytes under the same client id: 16 000 bytes over a 10 s window is 1600 B/s, so the
        # second producer waits 16 s - 10 s = 6 s. With a budget each, it would not wait at all.
        for _ in range(7):
            p2.send("t", b"x" * 1000)
        p2.send("t", b"x" * 990, key=b"k" * 8, headers=[("h", b"v")])  # value + key + headers: 1000 bytes
        p2.flush()
        assert clock.slept == [pytest.approx(6.0)]
        metrics = p2.metrics()
        assert metrics["produce-throttle-time-max"] == pytest.approx(6000.0)
        assert metrics["produce-throttle-time-avg"] == pytest.approx(6000.0)  # one drain, 6 s
        assert p1.metrics()["produce-throttle-time-max"] == 0.0
    assert store.topic("t").partition(0).log_end_offset == 24  # throttled, never refused


def test_a_throttled_producer_takes_about_bytes_over_rate(store):
    store.create_topic("t", partitions=2)
    quota_manager(store).configure_window(11, 0.1)  # a 1 s window: 1 s of traffic passes without delay
    clock = quota_manager(store).clock
    rate = 10_000
    store.set_quota("slow", producer_byte_rate=rate)
    start = clock.now
    total = 0
    with store.producer(client_id="slow", linger_ms=600_000, batch_size=1 << 30) as producer:
        futures = []
        for i in range(200):
            value = b"v" * 1000
            futures.append(producer.send("t", value, key=b"%d" % (i % 7)))
            total += len(value) + len(b"%d" % (i % 7))
            if i % 10 == 9:
                producer.flush()  # one drain (a produce request) per 10 records
        elapsed = clock.now - start
        assert all(f.get(0).offset >= 0 for f in futures)
        metrics = producer.metrics()
    expected = total / rate  # 200 KB at 10 KB/s: 20 s, less the window's allowance
    assert expected - 11 * 0.1 <= elapsed <= expected + 0.5, (elapsed, expected)
    assert metrics["produce-throttle-time-max"] > 0
    assert metrics["produce-throttle-time-avg"] == pytest.approx(elapsed / 20 * 1000)  # 20 drains
    # Without a quota, the same producer is never delayed.
    store.set_quota("slow")
    before = len(clock.slept)
    with store.producer(client_id="slow", linger_ms=600_000) as producer:
        for _ in range(100):
            producer.send("t", b"v" * 1000)
        producer.flush()
        assert producer.metrics()["produce-throttle-time-max"] == 0.0
    assert len(clock.slept) == before


def test_consumer_side_call_records_and_sleeps(store):
    store.set_quota("reader", consumer_byte_rate=500)
    clock = quota_manager(store).clock
    assert quota_manager(store).throttle("reader", CONSUME, 4000) == 0.0  # 4000 B over 10 s: 400 B/s
    assert quota_manager(store).throttle("reader", CONSUME, 4000) == pytest.approx(16 - 10)
    assert clock.slept == [pytest.approx(6.0)]
    assert quota_manager(store).throttle("writer", CONSUME, 10 ** 9) == 0.0  # no quota: not throttled


def test_the_running_window_total_matches_a_recount_of_its_samples():
    """The window keeps its byte total and oldest start as it goes (O(1) a record); after every record the
    delay is the one Kafka's formula gives from the samples counted afresh."""
    rng = random.Random(24)
    m, clock = _manager(num=5, size=1.0)
    m.set_quota("c", PRODUCE, 1000.0)
    samples: list[list[float]] = []  # [start, bytes], the model of Kafka's SampledStat
    for _ in range(3000):
        clock.now += rng.choice((0.0, 0.001, 0.05, 0.3, 0.9, 2.5, 7.0))
        nbytes = rng.choice((0, 1, 100, 5000))
        now = clock.now
        if not samples or now - samples[-1][0] >= 1.0:
            samples.append([now, 0.0])
            samples = samples[-5:]
        samples[-1][1] += nbytes
        for s in samples:
            if now - s[0] >= 5.0:
                s[0], s[1] = now, 0.0
        elapsed = now - min(s[0] for s in samples)
        full = int(elapsed // 1.0)
        if full < 4:
            elapsed += (4 - full) * 1.0
        span = max(elapsed, 0.001)
        want = throttle_delay(sum(s[1] for s in samples) / span, 1000.0, span)
        assert m.record("c", PRODUCE, nbytes) == pytest.approx(want, rel=1e-9, abs=1e-9)
