"""The ``pylog`` command line: look inside a store, move records in and out, check and maintain it.

    pylog topics [list|create|delete|describe] STORE ...   topics, partitions, offsets, sizes, config
    pylog produce STORE TOPIC                              records from stdin, one per line (text or JSON)
    pylog consume STORE TOPIC                              print records; --group, --follow, --format json
    pylog dump PATH.log...                                 batch by batch, checking each (kafka-dump-log)
    pylog verify [STORE] [TOPIC...]                        full integrity check; exit 1 on any problem
    pylog groups [list|describe|reset-offsets|delete] STORE ...   consumer groups, lag, lead, owners
    pylog transactions STORE                               transactional ids: state, producer, age, partitions
    pylog retention STORE [TOPIC] | compact STORE TOPIC | delete-records STORE TOPIC PARTITION OFFSET
    pylog restore s3://BUCKET/PREFIX DIR | verify-remote s3://BUCKET/PREFIX   tiered storage: a store from its bucket
    pylog health STORE                                     maintenance and lag checks; exit 1 when unhealthy
    pylog bench producer|consumer|latency STORE            Kafka's perf tests: records/s, MB/s, percentiles
    pylog serve STORE                                      Kafka's wire protocol (--metrics-port: Prometheus)
    pylog metrics STORE --port PORT                        Prometheus exporter of the store (/metrics, /health)
    pylog top STORE | --bootstrap HOST:PORT                live view: throughput, lag, latency, cleaners (q quits)
    pylog spark-jar                                        Spark's JVM reader: the jar's path (built on first use)

``main(argv, out) -> int`` is the whole program (tested in-process): records, tables and reports go to
``out``; errors, counts and progress bars to stderr. Exit codes are :class:`ExitCode`. Each command lives
in its own module (``register(subparsers)`` adds it; its parser's ``run(args, out)`` runs it).
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence, TextIO

from .. import __version__, jvm
from ..accel import describe
from ..errors import PylogError
from . import (bench, clients, dump, groups, health, maintenance, metrics, remote, serve, spark, top, topics,
               transactions)
from .base import CommandError, ExitCode

__all__ = ["main", "ExitCode", "build_parser"]

#: The command modules, in the order ``pylog --help`` lists them.
_COMMANDS = (topics, clients, dump, maintenance, remote, groups, transactions, health, top, bench, serve, metrics,
             spark)
#: Commands with actions, and the action a first argument that is not one stands for (the older forms
#: ``pylog topics STORE`` and ``pylog groups STORE [GROUP...]``).
_DEFAULT_ACTIONS = {"topics": (topics.ACTIONS, "list"), "groups": (groups.ACTIONS, "describe")}


#: One example per command, shown at the end of its ``--help`` (keys: the words after ``pylog``).
EXAMPLES = {
    "topics": "pylog topics ./data",
    "topics list": "pylog topics list ./data --all",
    "topics create": "pylog topics create ./data orders --partitions 3 --config cleanup.policy=compact",
    "topics delete": "pylog topics delete ./data orders",
    "topics describe": "pylog topics describe ./data orders",
    "produce": "printf 'k1\\tv1\\nk2\\tv2\\n' | pylog produce ./data orders --key-separator '\\t'",
    "consume": "pylog consume ./data orders --from earliest --print-offset --max-messages 10",
    "dump": "pylog dump ./data/orders/0/00000000000000000000.log --records",
    "verify": "pylog verify ./data orders",
    "retention": "pylog retention ./data orders",
    "compact": "pylog compact ./data orders --partition 0",
    "delete-records": "pylog delete-records ./data orders 0 1000",
    "repair": "pylog repair ./data orders 0",
    "restore": "pylog restore s3://backups/orders-store ./restored",
    "verify-remote": "pylog verify-remote s3://backups/orders-store orders --full",
    "groups": "pylog groups ./data",
    "groups list": "pylog groups list ./data",
    "groups describe": "pylog groups describe ./data billing",
    "groups reset-offsets": "pylog groups reset-offsets ./data billing --to-earliest --topic orders --execute",
    "groups delete": "pylog groups delete ./data billing",
    "transactions": "pylog transactions ./data --open",
    "health": "pylog health ./data",
    "bench": "pylog bench producer ./data --records 1000000",
    "bench producer": "pylog bench producer ./data --records 1000000 --acks all",
    "bench consumer": "pylog bench consumer ./data --records 1000000 --partitions 4",
    "bench latency": "pylog bench latency ./data --records 1000",
    "serve": "pylog serve ./data --port 9092",
    "metrics": "pylog metrics ./data --port 9308",
    "top": "pylog top ./data",
    "spark-jar": "pylog spark-jar --out ./pylog-spark.jar",
}


def _add_examples(parser: argparse.ArgumentParser, words: tuple[str, ...] = ()) -> None:
    """Put each command's example (:data:`EXAMPLES`) at the end of its ``--help``, recursively."""
    if words:
        parser.epilog = "example:\n  " + EXAMPLES[" ".join(words)]
        parser.formatter_class = argparse.RawDescriptionHelpFormatter
    for action in parser._actions:  # noqa: SLF001 - argparse names its subcommands nowhere else
        if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
            for name, sub in action.choices.items():
                _add_examples(sub, words + (name,))


def build_parser() -> argparse.ArgumentParser:
    # Raw: argparse would wrap the --version line at the terminal's width, splitting "Spark reader: JVM (<jar>)"
    parser = argparse.ArgumentParser(prog="pylog", description="Look inside a pylog store, move records in and "
                                                               "out, check and maintain it.",
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"pylog {__version__}, {describe()}; {jvm.describe()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in _COMMANDS:
        module.register(sub)
    _add_examples(parser)
    return parser


def with_default_action(argv: list[str]) -> list[str]:
    """``argv`` with each command group's default action filled in where the user named none (so that
    ``pylog topics STORE`` means ``pylog topics list STORE``); the docs' command lines are checked through it."""
    for i, arg in enumerate(argv):
        if arg.startswith("-"):
            continue
        if arg in _DEFAULT_ACTIONS and i + 1 < len(argv):
            actions, default = _DEFAULT_ACTIONS[arg]
            nxt = argv[i + 1]
            if nxt not in actions and not nxt.startswith("-"):
                return argv[:i + 1] + [default] + argv[i + 1:]
        return argv
    return argv


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Run the command line with ``argv`` (default ``sys.argv[1:]``), printing to ``out`` (default stdout);
    returns the exit code. Bad arguments raise ``SystemExit(2)`` (argparse's usage error)."""
    out = out or sys.stdout
    args = build_parser().parse_args(with_default_action(list(sys.argv[1:] if argv is None else argv)))
    try:
        return args.run(args, out)
    except CommandError as exc:
        print(f"pylog: {exc}", file=sys.stderr)
        return exc.code
    except PylogError as exc:
        print(f"pylog: {exc}", file=sys.stderr)
        return ExitCode.ERROR
    except BrokenPipeError:
        raise  # the reader of our output went away: run() exits quietly
    except OSError as exc:  # a missing file, a permission, a full disk
        print(f"pylog: {exc}", file=sys.stderr)
        return ExitCode.ERROR
