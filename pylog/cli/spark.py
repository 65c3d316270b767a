"""``pylog spark-jar``: the path of Spark's JVM reader of the pylog format, built first when needed.

Prints the jar's path (one line) for ``spark-submit --jars`` or ``spark.jars`` on a cluster, where
``pylog.spark.session()`` does not start the session. The jar is compiled on first use against the installed
pyspark into the user cache (:mod:`pylog.jvm`; ``PYLOG_CACHE_DIR``), or into ``--out``. Without a JDK it fails
saying so (exit 3): Spark then reads ``format("pylog")`` with the Python data source.
"""

from __future__ import annotations

import argparse
from typing import Any, TextIO

from .. import jvm
from .base import ExitCode

__all__ = ["register"]


def register(sub: Any) -> None:
    s = sub.add_parser("spark-jar", help="print the path of Spark's JVM reader jar (built on first use)",
                       description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    s.add_argument("--out", metavar="JAR", help="build the jar here (replacing it) instead of the user cache")
    s.set_defaults(run=_run)


def _run(args: argparse.Namespace, out: TextIO) -> ExitCode:
    print(jvm.build(args.out) if args.out else jvm.ensure_jar(), file=out)
    return ExitCode.OK
