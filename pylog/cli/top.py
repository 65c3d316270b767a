"""``pylog top STORE`` / ``pylog top --bootstrap HOST:PORT``: a live terminal view of a store or a server.

Every ``--interval`` seconds (1 by default) it samples the store (:class:`~pylog.cli.top_sources.StoreSource`)
or scrapes a ``pylog serve --metrics-port`` endpoint, and redraws throughput per topic (records/s, bytes/s),
lag per consumer group, request latency per API (a server), and the cleaners' state, each with a sparkline
of its recent history (:mod:`pylog.cli.top_view`).

On a terminal it draws on the alternate screen (like ``top``: plain text and colours, no mouse, so it works
over SSH) and ends on ``q`` or Ctrl-C with exit code 0. When the output is not a terminal it is ``top``'s
batch mode: one plain frame per refresh, ``--iterations`` of them (default: until interrupted).

Invariants:
- The terminal is given back as it was found, however the view ends (``q``, Ctrl-C, SIGTERM, an error): the
  keyboard's mode (termios) is restored in a ``finally``, and rich leaves the alternate screen and shows the
  cursor again when its ``Live`` display stops.
- It only reads: the store is opened read-only (no lock, no thread, no file created), a server only scraped.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import select
import signal
import sys
import termios
import time
import tty
from typing import Any, Callable, Iterator, Protocol, TextIO

from .base import CommandError, ExitCode, positive
from .output import rich_console
from .top_sources import HAVE_PARSER, Sample, ScrapeSource, StoreSource, scrape_url
from .top_view import HAVE_RICH, SPARK_ASCII, SPARK_UNICODE, History, render

if HAVE_RICH:  # else _top refuses to run (top_view says why rich is optional)
    from rich.console import Console
    from rich.live import Live

__all__ = ["register"]

#: The keys that end the view.
_QUIT_KEYS = b"qQ"


class _Source(Protocol):
    label: str

    def sample(self) -> Sample: ...


def register(sub: Any) -> None:
    t = sub.add_parser("top", help="live view: throughput per topic, lag per group, request latency, cleaners",
                       description=__doc__.split("\n\n", 1)[1].split("\n\nInvariants")[0],
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    t.add_argument("store", nargs="?", help="the store to watch (or --bootstrap)")
    t.add_argument("--bootstrap", metavar="HOST:PORT",
                   help="scrape http://HOST:PORT/metrics instead: the metrics port of `pylog serve --metrics-port "
                        "PORT` (request latency shows only there) or of `pylog metrics STORE --port PORT`")
    t.add_argument("--interval", type=float, default=1.0, metavar="S", help="seconds between refreshes (default 1)")
    t.add_argument("--iterations", type=positive, metavar="N", help="stop after N refreshes (default: until q or "
                                                                     "Ctrl-C)")
    t.add_argument("--all", action="store_true", help="show pylog's internal topics too (__consumer_offsets)")
    t.set_defaults(run=_top)


def _on_sigterm(signum: int, frame: Any) -> None:
    """SIGTERM: end the view as q and Ctrl-C do (the same unwinding, the terminal restored on the way)."""
    raise KeyboardInterrupt


def _top(args: argparse.Namespace, out: TextIO) -> ExitCode:
    if not HAVE_RICH:
        raise CommandError("pylog top draws with rich: pip install 'pylog-embedded[metrics]' (or `pip install rich`)")
    if not (math.isfinite(args.interval) and 0 < args.interval <= 3600):
        raise CommandError(f"--interval must be more than 0 and at most 3600 seconds, got {args.interval}")
    if (args.store is None) == (args.bootstrap is None):
        raise CommandError("name a STORE or --bootstrap HOST:PORT (one of them)")
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        with _source(args) as source:
            console = rich_console(out)  # a terminal: the live view; anything else: batch mode
            if console is not None:
                _live(source, args, console)
            else:
                _batch(source, args, out)
    except KeyboardInterrupt:
        pass  # the normal end of a live view
    finally:
        signal.signal(signal.SIGTERM, previous)
    return ExitCode.OK


def _source(args: argparse.Namespace) -> Any:
    if args.store is not None:
        return StoreSource(args.store, args.all)
    if not HAVE_PARSER:
        raise CommandError("pylog top --bootstrap reads Prometheus' format with prometheus-client: "
                           "pip install 'pylog-embedded[metrics]'")
    try:
        url = scrape_url(args.bootstrap)
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    return contextlib.nullcontext(ScrapeSource(url, args.bootstrap, timeout=max(5.0, args.interval)))


def _frames(source: _Source, args: argparse.Namespace, wait: Callable[[float], bool]) -> Iterator[History]:
    """Sample, yield, wait until the next refresh is due; ends after ``--iterations`` or when ``wait`` says."""
    history = History()
    due = time.monotonic()
    n = 0
    while True:
        history.add(source.sample())
        yield history
        n += 1
        if args.iterations is not None and n >= args.iterations:
            return
        due += args.interval
        now = time.monotonic()
        if due < now:  # sampling took longer than the interval: go on from now, do not catch up
            due = now
        if wait(due - now):
            return


def _batch(source: _Source, args: argparse.Namespace, out: TextIO) -> None:
    width = int(os.environ.get("COLUMNS", "") or 160)
    console = Console(file=out, width=width, color_system=None, highlight=False, emoji=False)
    ramp = SPARK_UNICODE if (getattr(out, "encoding", "") or "").lower().startswith("utf") else SPARK_ASCII
    for i, history in enumerate(_frames(source, args, _sleep)):
        if i:
            print(file=out)
        console.print(render(history, source.label, args.interval, ramp, width))
        out.flush()


def _sleep(seconds: float) -> bool:
    time.sleep(seconds)
    return False


def _live(source: _Source, args: argparse.Namespace, console: Any) -> None:
    ramp = SPARK_UNICODE if console.encoding.lower().startswith("utf") else SPARK_ASCII
    with _Keyboard(sys.stdin) as keys, Live(console=console, screen=True, auto_refresh=False,
                                           redirect_stdout=False, redirect_stderr=False) as live:
        for history in _frames(source, args, keys.wait_for_quit):
            width, height = console.size  # read again at every refresh: the terminal may have been resized
            live.update(render(history, source.label, args.interval, ramp, width, height), refresh=True)


class _Keyboard:
    """The terminal's keys, one at a time without echo (cbreak mode: Ctrl-C still sends SIGINT); the mode it
    found is restored on exit. Without a terminal on stdin there are no keys: waiting is sleeping."""

    def __init__(self, stream: Any) -> None:
        self.fd: int | None = None
        self._saved: Any = None
        try:
            fd = stream.fileno()
        except (AttributeError, ValueError, OSError):
            return
        if os.isatty(fd):
            self.fd = fd

    def __enter__(self) -> "_Keyboard":
        if self.fd is not None:
            self._saved = termios.tcgetattr(self.fd)
            tty.setcbreak(self.fd)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.fd is not None and self._saved is not None:
            termios.tcsetattr(self.fd, termios.TCSADRAIN, self._saved)

    def wait_for_quit(self, seconds: float) -> bool:
        """Wait up to ``seconds``; True when a quit key was pressed."""
        end = time.monotonic() + seconds
        while True:
            left = end - time.monotonic()
            if left <= 0:
                return False
            if self.fd is None:
                time.sleep(left)
                return False
            ready, _, _ = select.select([self.fd], [], [], left)
            if ready:
                data = os.read(self.fd, 64)
                if not data or any(k in data for k in _QUIT_KEYS):
                    return True  # q, or the terminal went away (end of file)
