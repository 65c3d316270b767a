"""``pylog metrics STORE --port PORT``: a Prometheus exporter for a store that applications use embedded.

Serves ``http://HOST:PORT/metrics`` (default host 127.0.0.1) until SIGTERM or Ctrl-C, and ``/health`` for
probes. What it exports is what the store's files tell, read at each scrape: every partition's log start and
end offsets, size and segment count; every group's committed offsets, lag and lead, generation and live
members; the cleaners every process publishes under ``__cleaners/`` (alive, heartbeat, last run, totals,
dirty ratios). Counters of traffic (bytes and records in and out, requests) are counted inside the processes
that do the work: export those from the application (``pylog.prometheus.register(store)``) or from
``pylog serve --metrics-port``. The store is opened read-only: no cleaner, no writer lock, nothing written.
Needs the ``metrics`` extra. docs/OPERATIONS.md lists the metrics.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from typing import Any, TextIO

from .. import prometheus
from .base import ExitCode, non_negative, open_store_for_scans

__all__ = ["register"]


def register(sub: Any) -> None:
    m = sub.add_parser("metrics", help="export the store's metrics to Prometheus (/metrics, /health) until stopped",
                       description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    m.add_argument("store")
    m.add_argument("--port", type=non_negative, default=9308,
                   help="port of the HTTP endpoint (default 9308; 0 picks a free one, printed)")
    m.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    m.set_defaults(run=_run)


def _run(args: argparse.Namespace, out: TextIO) -> ExitCode:
    prometheus.require()
    stop = threading.Event()
    # Read-only (no cleaner, nothing written), and every descriptor but a reserve for the partitions: a scrape
    # touches every partition, and a budget smaller than the store would make each scrape close and reopen them.
    with open_store_for_scans(args.store) as store:
        reg = prometheus.registry(store)
        with prometheus.start_http_server(reg, args.port, args.host, prometheus.store_health(store)) as endpoint:
            print(f"pylog metrics: serving {endpoint.url} for {store.path}", file=out, flush=True)
            previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
            try:
                while not stop.wait(1.0):
                    pass
            except KeyboardInterrupt:
                pass
            finally:
                signal.signal(signal.SIGTERM, previous)
    print("pylog metrics: stopped", file=sys.stderr)
    return ExitCode.OK
