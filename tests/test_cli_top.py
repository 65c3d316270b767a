"""``pylog top``: its numbers against what the test wrote, in batch mode in-process, and the live view driven in
a real terminal (tmux: the screen captured, q and Ctrl-C sent, the terminal's modes checked afterwards).

tmux comes from the distribution (.ci/run installs it); the live tests skip without it outside CI.
"""

from __future__ import annotations

import io
import os
import random
import re
import signal
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

import pylog
from pylog.__main__ import ExitCode, main
from pylog.cli.output import format_bytes
from pylog.cli.top_sources import (CleanerSample, GroupSample, RequestSample, Sample, ScrapeSource, StoreSource,
                                   TopicSample, sample_of, scrape_url)
from pylog.cli.top_view import SPARK_ASCII, SPARK_UNICODE, History, histogram_quantile, rate, render, sparkline
from pylog.structs import TopicPartition

from serverutil import start_cli_server
from storetools import kill_with_cleaner_published, wait_for


def _store(path: Path) -> None:
    """orders: 3 partitions, 1234 records (500 + 400 + 334); clicks: 77 records; group billing committed by hand
    on orders-0 at 100 and orders-1 at 400 (lag 400 + 0 = 400, min lead 100)."""
    with pylog.open(path, log_cleaner_enable=False) as store:
        orders = store.create_topic("orders", partitions=3)
        for number, n in enumerate((500, 400, 334)):
            orders.partition(number).append_values([b"order %d" % i for i in range(n)])
        store.create_topic("clicks").partition(0).append_values([b"click"] * 77)
        store.commit_offsets("billing", {TopicPartition("orders", 0): 100, TopicPartition("orders", 1): 400})


def _find(text: str, first: str) -> list[str]:
    """The cells of the last table row on the screen whose first cell is or starts with the word ``first`` ([]
    when there is none). Cells are apart by 3 spaces or more (a cell such as "1.2 KiB" holds single ones)."""
    rows = [re.split(r"\s{3,}", line.strip()) for line in text.splitlines() if line.split()[:1] == [first]]
    return rows[-1] if rows else []


def _row(text: str, first: str) -> list[str]:
    row = _find(text, first)
    assert row, f"no row {first!r} in:\n{text}"
    return row


# ------------------------------------------------------------------------------------- pure functions

def test_rate_is_none_for_a_counter_that_went_back_or_no_time():
    assert rate(10, 30, 2.0) == 10.0
    assert rate(30, 10, 2.0) is None
    assert rate(None, 10, 2.0) is None
    assert rate(10, 20, 0.0) is None


def test_sparkline_scales_to_the_window_maximum_and_keeps_its_width():
    assert sparkline([0, 4, 8], width=5) == "  ▁▅█"
    assert sparkline([0, 0], width=3) == " ▁▁"
    assert sparkline([None, 1.0], width=2, ramp="_#") == " #"
    assert len(sparkline(range(100), width=30)) == 30


def test_histogram_quantile_interpolates_like_prometheus():
    # 10 requests <= 0.1 s, 10 more <= 0.5 s: the median is the top of the first bucket, p75 halfway into the
    # second, and a rank in the +Inf bucket gives the highest finite bound (histogram_quantile's rules)
    buckets = [(0.1, 10.0), (0.5, 20.0), (float("inf"), 20.0)]
    assert histogram_quantile(0.5, buckets) == pytest.approx(0.1)
    assert histogram_quantile(0.75, buckets) == pytest.approx(0.3)
    assert histogram_quantile(0.99, [(0.1, 1.0), (float("inf"), 2.0)]) == pytest.approx(0.1)
    assert histogram_quantile(0.5, [(0.1, 0.0), (float("inf"), 0.0)]) is None


def test_history_rates_request_latency_from_bucket_differences_and_drops_a_reset():
    h = History()
    inf = float("inf")
    h.add(Sample(at=0.0, requests={"Produce": RequestSample(100, 0, [(0.01, 100), (0.1, 100), (inf, 100)])}))
    assert h.requests["Produce"].values["rate"] is None  # one sample: no rate yet
    # 20 requests in 2 s, all between 10 and 100 ms: the window's quantiles, not the whole run's
    h.add(Sample(at=2.0, requests={"Produce": RequestSample(120, 2, [(0.01, 100), (0.1, 120), (inf, 120)])}))
    v = h.requests["Produce"].values
    assert (v["rate"], v["errors"]) == (10.0, 1.0)
    assert v["p50"] == pytest.approx(0.055) and v["p99"] == pytest.approx(0.0991)
    h.add(Sample(at=3.0, requests={"Produce": RequestSample(5, 0, [(0.01, 5), (0.1, 5), (inf, 5)])}))  # a restart
    assert h.requests["Produce"].values["rate"] is None and h.requests["Produce"].values["p99"] is None
    h.add(Sample(at=4.0, requests={"Produce": RequestSample(9, 0, [(0.01, 9), (inf, 9)])}))  # other buckets
    assert h.requests["Produce"].values["rate"] == 4.0 and h.requests["Produce"].values["p99"] is None


def test_history_drops_rows_of_topics_gone_and_gives_no_rate_for_a_log_end_that_went_back():
    h = History()
    h.add(Sample(at=0.0, topics={"a": TopicSample(1, 100, 0), "b": TopicSample(1, 5, 0)}))
    h.add(Sample(at=1.0, topics={"a": TopicSample(1, 40, 0)}))
    assert set(h.topics) == {"a"} and h.topics["a"].values["records_in"] is None


# ----------------------------------------------------------------------------------------- the store

def test_store_source_counts_appended_records_and_bytes_across_a_roll(tmp_path):
    with pylog.open(tmp_path, log_cleaner_enable=False) as writer:
        p = writer.create_topic("t", config={"segment.bytes": 4096}).partition(0)
        p.append_values([b"x" * 100] * 5)
        with StoreSource(str(tmp_path)) as source:
            first = source.sample().topics["t"]
            size_before = p.size_bytes()
            for _ in range(20):  # several rolls: 4 KiB segments
                p.append_values([b"y" * 100] * 5)
            assert len(p.segments) > 2
            second = source.sample().topics["t"]
            grown = p.size_bytes() - size_before
    assert (first.end_offset, second.end_offset) == (5, 105)
    assert first.bytes_in == 0 and second.bytes_in == grown > 0


def test_a_topic_deleted_and_created_again_under_the_view_gives_no_rate_then_its_new_one(tmp_path):
    _store(tmp_path)
    with StoreSource(str(tmp_path)) as source:
        history = History()
        history.add(source.sample())
        with pylog.open(tmp_path, log_cleaner_enable=False) as writer:
            writer.delete_topic("orders")
        history.add(source.sample())
        assert "orders" not in history.topics and set(history.topics) == {"clicks"}
        with pylog.open(tmp_path, log_cleaner_enable=False) as writer:
            writer.create_topic("orders").partition(0).append_values([b"again"] * 10)
        history.add(source.sample())
        assert history.topics["orders"].values["end"] == 10 and history.topics["orders"].values["records_in"] is None
        history.last.at -= 1.0  # a second later, as the next refresh would be
        history.add(source.sample())
        assert history.topics["orders"].values["records_in"] == pytest.approx(0.0, abs=1e-9)


def test_top_batch_mode_prints_offsets_lag_and_the_cleaner_of_a_live_process(tmp_path):
    _store(tmp_path)
    with pylog.open(tmp_path) as live:  # a process with its cleaner enabled: published under __cleaners/
        live.commit_offsets("[bold]audit", {TopicPartition("clicks", 0): 77})  # a name rich would take for markup
        wait_for(lambda: os.getpid() in {c.pid for c in live.cleaners()})
        dead = kill_with_cleaner_published(tmp_path)  # after: a store opening with its cleaner removes dead entries
        size = sum(p.size_bytes() for p in live.topic("orders").partitions)
        out = io.StringIO()
        assert main(["top", str(tmp_path), "--iterations", "2", "--interval", "0.05"], out) == ExitCode.OK
    frames = out.getvalue().split("\n\npylog top")
    assert len(frames) == 2
    text = frames[-1]
    assert _row(text, "orders")[1:4] == ["3", "1234", format_bytes(size)]
    assert re.search(r"disk \d+% used, [\d.]+ \w+ free", text.splitlines()[0]), text  # the store's file system
    assert _row(text, "clicks")[1:3] == ["1", "77"]
    assert _row(text, "billing")[1:5] == ["0", "2", "400", "100"]  # members, partitions, lag, min lead
    assert _row(text, "[bold]audit")[1:5] == ["0", "1", "0", "77"]
    assert text.index("billing") < text.index("[bold]audit")  # the group lagging most first
    cleaners = {cells[1]: cells[2:4] for cells in (line.split() for line in text.splitlines()) if cells[:1] == ["pid"]}
    assert cleaners[str(os.getpid())][0] == "alive"
    assert cleaners[str(dead)] == ["process", "dead"]
    assert "__consumer_offsets" not in text


def test_an_80_column_screen_cuts_the_sparklines_never_the_numbers():
    inf = float("inf")
    h = History()
    for at, end in ((0.0, 0), (1.0, 1_234_567)):
        h.add(Sample(at=at, header=["connections 12", "event loop busy 35%"],
                     topics={"orders.europe.v2": TopicSample(12, end, end * 250, end, end * 250)},
                     groups={"billing-aggregator": GroupSample(3, 12, 987_654, -12)},
                     requests={"OffsetCommit": RequestSample(at * 1000, 0, [(0.001, at * 900), (inf, at * 1000)])},
                     cleaners=[CleanerSample("pid 4194304", False, "alive", 12345.6, 1.8e9, 123456, 12, 0.99)]))
    for width, sparklines in ((120, True), (80, True), (60, False)):
        out = io.StringIO()
        Console(file=out, width=width).print(render(h, "127.0.0.1:9308", 1.0, width=width))
        text = out.getvalue()
        assert "…" not in text and max(map(len, text.splitlines())) <= width, text
        assert "1,234,567" in _row(text, "orders.europe.v2"), text
        assert "987654" in _row(text, "billing-aggregator"), text
        assert _row(text, "pid")[:2] == ["pid 4194304", "process dead"]
        assert _row(text, "OffsetCommit")[-2 if sparklines else -1] == "1.0"  # the p99, whole
        assert ("█" in text) == sparklines, text
        for first in ("orders.europe.v2", "billing-aggregator", "OffsetCommit", "pid"):
            row = " ".join(_row(text, first))  # every number in the tables is one of the values, whole
            for cell in re.findall(r"(?<![\w.,:-])-?[\d,.]+(?![\w.,:])", row):
                assert cell in {"12", "1234567", "1,234,567", "294.3", "3", "987654", "-12", "1,000", "0.0", "0.6",
                                "1.0", "4194304", "123456", "0.99", "12345.6"}, (cell, row)


def test_a_short_screen_keeps_the_cleaners_and_shows_the_busiest_topics_and_most_lagging_groups():
    h = History()
    for at in (0.0, 1.0):
        h.add(Sample(at=at, topics={f"topic-{i:03d}": TopicSample(1, int(at * i * 10), 0) for i in range(50)},
                     groups={f"group-{i}": GroupSample(1, 1, i, 0) for i in range(10)},
                     cleaners=[CleanerSample("pid 7", True, "dead", 1.0, None, 1, 0)]))
    out = io.StringIO()
    Console(file=out, width=100, height=24).print(render(h, "x", 1.0, width=100, height=24))
    text = out.getvalue()
    assert len(text.splitlines()) <= 24, text
    assert _row(text, "pid")[:2] == ["pid 7", "thread dead"]  # a dead cleaner is never scrolled away
    topics = [line.split()[0] for line in text.splitlines() if line.strip().startswith("topic-")]
    assert topics == ["topic-049", "topic-048", "topic-047"] and "(+47 more)" in text
    assert "group-9" in text and "(+8 more)" in text


def test_top_refuses_a_path_that_is_not_a_store_one_source_or_a_bad_interval(tmp_path, capsys):
    assert main(["top", str(tmp_path / "nothing")], io.StringIO()) == ExitCode.ERROR
    assert "not a pylog store" in capsys.readouterr().err
    assert main(["top"], io.StringIO()) == ExitCode.ERROR
    _store(tmp_path / "store")
    for interval in ("0", "-1", "nan", "inf"):
        assert main(["top", str(tmp_path / "store"), "--interval", interval], io.StringIO()) == ExitCode.ERROR
    assert "--interval must be" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # not a number: argparse's usage error
        main(["top", str(tmp_path / "store"), "--interval", "soon"], io.StringIO())


# ------------------------------------------------------------------------- a server, scraped (--bootstrap)

@pytest.fixture
def metrics_endpoint(server):
    """``server``'s metrics on a free 127.0.0.1 port, as ``pylog serve --metrics-port`` serves them."""
    prometheus = pytest.importorskip("pylog.prometheus")
    with prometheus.start_http_server(prometheus.registry(server=server)) as endpoint:
        yield endpoint


def test_top_bootstrap_shows_what_a_kafka_client_produced_the_requests_and_the_lag(store, server, metrics_endpoint):
    kafka = pytest.importorskip("kafka")
    store.create_topic("orders", partitions=2)
    producer = kafka.KafkaProducer(bootstrap_servers=f"127.0.0.1:{server.port}", linger_ms=0)
    try:
        for i in range(300):
            producer.send("orders", b"order %d" % i, partition=i % 2)
        producer.flush(timeout=60)
    finally:
        producer.close(timeout=10)
    store.commit_offsets("billing", {TopicPartition("orders", 0): 50, TopicPartition("orders", 1): 150})
    out = io.StringIO()
    argv = ["top", "--bootstrap", f"127.0.0.1:{metrics_endpoint.port}", "--iterations", "2", "--interval", "0.1"]
    assert main(argv, out) == ExitCode.OK
    text = out.getvalue().split("\n\npylog top")[-1]
    assert _row(text, "orders")[1:3] == ["2", "300"]
    assert _row(text, "billing")[2:5] == ["2", "100", "50"]  # partitions, lag (100 + 0), min lead
    assert _row(text, "Produce")[2] == "0.0"  # errors/s
    assert "connections" in text and "problem" not in text
    sample = ScrapeSource(scrape_url(f"127.0.0.1:{metrics_endpoint.port}"), "test").sample()
    orders, produce = sample.topics["orders"], sample.requests["Produce"]
    assert orders.bytes_in > 300 * len(b"order 0") and (orders.records_out, orders.bytes_out) == (0, 0)
    assert produce.count >= 1 and produce.errors == 0 and produce.buckets[-1] == (float("inf"), produce.count)


def test_top_bootstrap_shows_an_endpoint_that_does_not_answer_as_a_problem(tmp_path):
    import socket
    with socket.socket() as s:  # a port nothing listens on (bound, never listening)
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        out = io.StringIO()
        assert main(["top", "--bootstrap", f"127.0.0.1:{port}", "--iterations", "1"], out) == ExitCode.OK
    assert f"problem: scraping http://127.0.0.1:{port}/metrics" in out.getvalue()


def test_mutated_expositions_give_a_sample_or_a_problem_line_never_an_exception(store):
    """A scraped answer is hostile input: 1,000 mutations of a real exposition (a store's gauges and a request
    histogram) through parsing, rates and drawing; each gives a sample, or an empty one naming the problem."""
    prometheus = pytest.importorskip("pylog.prometheus")
    _store(Path(store.path))
    text = prometheus.exposition(prometheus.registry(store)).decode()
    text += ('# TYPE pylog_server_request_duration_seconds histogram\n'
             'pylog_server_request_duration_seconds_bucket{api="Produce",le="0.1"} 3\n'
             'pylog_server_request_duration_seconds_bucket{api="Produce",le="+Inf"} 4\n'
             'pylog_server_request_duration_seconds_count{api="Produce"} 4\n'
             'pylog_server_request_duration_seconds_sum{api="Produce"} 0.2\n'
             '# TYPE pylog_server_requests_total counter\npylog_server_requests_total{api="Produce"} 4\n')
    assert sample_of(text, "x").topics["orders"].end_offset == 1234
    rnd = random.Random(29)
    console = Console(file=io.StringIO(), width=120)
    outcomes = {"sample": 0, "problem": 0}
    for _ in range(1000):
        data = bytearray(text.encode())
        for _ in range(rnd.randint(1, 5)):
            at = rnd.randrange(len(data))
            if rnd.random() < 0.5:
                data[at] = rnd.choice(b'{}",=# \n\\0123456789.eE+-NaInf')
            else:
                del data[at:at + rnd.randint(1, 40)]
        history = History()
        for _ in range(2):  # twice: the second sample makes rates and quantiles
            sample = sample_of(data.decode("utf-8", "replace"), "x")
            history.add(sample)
        console.print(render(history, "x", 1.0))
        outcomes["problem" if sample.problems else "sample"] += 1
    assert outcomes["sample"] > 50 and outcomes["problem"] > 50, outcomes


def test_scrape_url_takes_host_port_or_a_url():
    assert scrape_url("127.0.0.1:9308") == "http://127.0.0.1:9308/metrics"
    assert scrape_url("http://h:1/m") == "http://h:1/m"
    for bad in ("9308", "host:", "host:99999", "host:x"):
        with pytest.raises(ValueError):
            scrape_url(bad)


# ---------------------------------------------------------------------------- a real terminal (tmux)

class Terminal:
    """A tmux server of the test's own (its socket under tmp_path), one 120x40 window running ``command``
    then ``stty -a``, then a shell's wait: the pane lives on after the command, so the terminal's state it left
    (screen, cursor, keyboard modes) can be read."""

    def __init__(self, tmp_path: Path, command: str) -> None:
        self.socket = str(tmp_path / "tmux.sock")
        env = dict(os.environ)  # the same pylog as this process imports (PYTHONPATH, or the installed one)
        env.pop("TMUX", None)  # a test run from inside tmux still starts a server of its own
        # the shell shares the command's process group, so Ctrl-C reaches it too: a trap (reset to the default
        # in the command, unlike an ignored signal) keeps it alive to report
        script = f"trap : INT; {command}; echo EXIT=$?; stty -a; echo TERMINAL-CHECKED; exec sleep 120"
        self._tmux("-f", os.devnull, "new-session", "-d", "-x", "120", "-y", "40", "sh", "-c", script, env=env)

    def _tmux(self, *args: str, env: dict[str, str] | None = None) -> str:
        return subprocess.run(["tmux", "-S", self.socket, *args], check=True, capture_output=True, text=True,
                              timeout=30, env=env).stdout

    def screen(self) -> str:
        """The visible screen, or after the alternate screen was left, the normal one with its history."""
        alternate = self.state("#{alternate_on}") == "1"
        return self._tmux("capture-pane", "-p", *(() if alternate else ("-S", "-")))

    def state(self, fmt: str) -> str:
        return self._tmux("display-message", "-p", fmt).strip()

    def send(self, *keys: str) -> None:
        self._tmux("send-keys", *keys)

    def wait_for_screen(self, predicate, timeout: float = 60.0) -> str:
        def check():
            text = self.screen()
            return text if predicate(text) else None
        text = wait_for(check, timeout=timeout, step=0.1)
        assert text, f"the screen never showed what was expected; it shows:\n{self.screen()}"
        return text

    def close(self) -> None:
        subprocess.run(["tmux", "-S", self.socket, "kill-server"], capture_output=True, timeout=30)


@pytest.fixture
def terminal(tmp_path):
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed (apt-get install tmux; .ci/run does)")
    made: list[Terminal] = []

    def start(command: str) -> Terminal:
        made.append(Terminal(tmp_path, command))
        return made[-1]
    yield start
    for t in made:
        t.close()


def _top_command(store: Path) -> str:
    return f"{sys.executable} -m pylog top {store} --interval 0.3"


def _assert_terminal_restored(term: Terminal, screen: str) -> None:
    modes = screen[screen.index("EXIT=0"):]
    assert " icanon " in modes and " echo " in modes, f"the keyboard was left in cbreak mode:\n{modes}"
    assert term.state("#{alternate_on}") == "0", "the alternate screen is still on"
    assert term.state("#{cursor_flag}") == "1", "the cursor is still hidden"


def test_live_view_shows_the_store_follows_new_records_and_quits_on_q(tmp_path, terminal):
    store = tmp_path / "store"
    _store(store)
    term = terminal(_top_command(store))
    screen = term.wait_for_screen(lambda s: "billing" in s and "RECORDS/S" in s)
    assert _row(screen, "orders")[1:3] == ["3", "1234"]
    assert _row(screen, "billing")[3] == "400"
    assert term.state("#{alternate_on}") == "1" and term.state("#{pane_dead}") == "0"
    # records appended while it runs: the log end follows, with a rate, and the group's lag grows by as many
    with pylog.open(store, log_cleaner_enable=False) as writer:
        writer.topic("orders").partition(0).append_values([b"more"] * 1000)
    term.wait_for_screen(lambda s: _find(s, "orders")[2:3] == ["2234"] and _find(s, "billing")[3:4] == ["1400"])
    # the burst's rate is the top of the sparkline; the rate afterwards is 0
    tops = (SPARK_UNICODE[-1], SPARK_ASCII[-1])  # a terminal whose locale is not UTF-8 gets the ASCII ramp
    term.wait_for_screen(lambda s: _find(s, "orders")[4:5] == ["0.0"]  # records/s
                         and any(c in "".join(_find(s, "orders")[6:]) for c in tops))
    term.send("q")
    screen = term.wait_for_screen(lambda s: "TERMINAL-CHECKED" in s)
    assert "EXIT=0" in screen and "Traceback" not in screen
    _assert_terminal_restored(term, screen)


def test_live_view_ends_cleanly_on_ctrl_c(tmp_path, terminal):
    store = tmp_path / "store"
    _store(store)
    term = terminal(_top_command(store))
    term.wait_for_screen(lambda s: "orders" in s and "Consumer groups" in s)
    term.send("C-c")
    screen = term.wait_for_screen(lambda s: "TERMINAL-CHECKED" in s)
    assert "EXIT=0" in screen and "Traceback" not in screen and "KeyboardInterrupt" not in screen
    _assert_terminal_restored(term, screen)


def test_live_view_ends_cleanly_on_sigterm(tmp_path, terminal):
    store = tmp_path / "store"
    _store(store)
    term = terminal(_top_command(store))
    term.wait_for_screen(lambda s: "orders" in s and "Consumer groups" in s)
    shell = int(term.state("#{pane_pid}"))
    children = Path(f"/proc/{shell}/task/{shell}/children").read_text().split()
    assert len(children) == 1, children  # the shell runs pylog top and nothing else
    os.kill(int(children[0]), signal.SIGTERM)
    screen = term.wait_for_screen(lambda s: "TERMINAL-CHECKED" in s)
    assert "EXIT=0" in screen and "Traceback" not in screen
    _assert_terminal_restored(term, screen)


def test_live_view_of_pylog_serve_shows_request_latency_while_a_kafka_client_produces(tmp_path, terminal):
    """`pylog serve --metrics-port` in a process of its own, `pylog top --bootstrap` in a tmux pane, kafka-python
    producing: the Produce row shows requests/s and p50 <= p99, and the topic's log end what was sent."""
    kafka = pytest.importorskip("kafka")
    pytest.importorskip("prometheus_client")
    with pylog.open(tmp_path / "store", log_cleaner_enable=False) as store:
        store.create_topic("orders")
    proc, bootstrap, lines = start_cli_server(tmp_path / "store", "--metrics-port", "0")
    try:
        url = wait_for(lambda: next((m.group(1) for m in map(re.compile(r"metrics on (http://\S+)").search, lines)
                                     if m), None), timeout=30)
        assert url, "".join(lines)
        term = terminal(f"{sys.executable} -m pylog top --bootstrap {url} --interval 0.3")
        term.wait_for_screen(lambda s: "Cleaners" in s and "connections" in s)
        producer = kafka.KafkaProducer(bootstrap_servers=bootstrap, linger_ms=0)
        try:
            sent = 0

            def produced_and_drawn(screen: str) -> bool:
                nonlocal sent
                for _ in range(20):  # keep producing until a refresh has seen Produce requests answered
                    producer.send("orders", b"order %d" % sent)
                    sent += 1
                producer.flush(timeout=30)
                row = _find(screen, "Produce")
                return len(row) > 4 and row[1] != "0.0" and row[4] != "-"  # requests/s, p99
            term.wait_for_screen(produced_and_drawn)
        finally:
            producer.close(timeout=10)
        produce = _row(term.wait_for_screen(lambda s: _find(s, "orders")[2:3] == [str(sent)]), "Produce")
        requests_per_s, errors_per_s, p50_ms, p99_ms = (float(c.replace(",", "")) for c in produce[1:5])
        assert requests_per_s > 0 and errors_per_s == 0 and 0 < p50_ms <= p99_ms
        term.send("q")
        screen = term.wait_for_screen(lambda s: "TERMINAL-CHECKED" in s)
        assert "EXIT=0" in screen
        _assert_terminal_restored(term, screen)
    finally:
        proc.terminate()
        proc.wait(30)


@pytest.mark.slow
def test_bench_top_runs_and_prints_its_figures():
    done = subprocess.run([sys.executable, str(Path(__file__).resolve().parent.parent / "benchmarks" / "bench_top.py"),
                           "--topics", "1", "--refreshes", "2"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert re.fullmatch(r"pylog top, 100 partitions, a group committed on all: refresh [\d.]+ ms CPU, floor [\d.]+ "
                        r"ms \(ratio [\d.]+\); [\d.]+% of a core at one refresh a second; load [\d.]+\n", done.stdout)
