"""Build the pylog format's JVM reader (a Spark DataSource V2 connector) into a jar, with ``javac`` and ``jar``.

    python jvm/build.py --out DIR/pylog-spark.jar

Compiles ``jvm/src`` against the jars the installed ``pyspark`` package ships (no Maven, no download) and
writes the jar. Exit status 2, with one line saying what is missing, when there is no JDK or no pyspark:
the JVM reader is optional, as the C accelerator is, and the Python reader stays the reference and fallback.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def pyspark_jars() -> str | None:
    """The ``jars`` directory of the installed pyspark, or None."""
    try:
        import pyspark
    except ImportError:
        return None
    path = os.path.join(os.path.dirname(pyspark.__file__), "jars")
    return path if os.path.isdir(path) else None


def build(out: str) -> str:
    """Compile and package the connector into ``out``; returns ``out``. Raises RuntimeError saying what is missing."""
    javac, jar = shutil.which("javac"), shutil.which("jar")
    if not javac or not jar:
        raise RuntimeError("no JDK (javac and jar) on PATH: the JVM reader is not built; the Python reader runs")
    jars = pyspark_jars()
    if jars is None:
        raise RuntimeError("pyspark is not installed: the JVM reader is compiled against its jars")
    sources = sorted(os.path.join(root, f) for root, _, files in os.walk(os.path.join(HERE, "src"))
                     for f in files if f.endswith(".java"))
    with tempfile.TemporaryDirectory(prefix="pylog-jvm-") as classes:
        subprocess.run([javac, "-nowarn", "-Xlint:none", "--release", "17", "-encoding", "UTF-8", "-d", classes,
                        "-cp", os.path.join(jars, "*"), *sources], check=True)
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        tmp = out + ".tmp"
        subprocess.run([jar, "cf", tmp, "-C", classes, "."], check=True)
        os.replace(tmp, out)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="the jar to write")
    args = parser.parse_args()
    try:
        print(build(args.out))
    except RuntimeError as exc:
        print(f"pylog jvm: {exc}", file=sys.stderr)
        return 2
    except subprocess.CalledProcessError as exc:
        print(f"pylog jvm: the build failed ({exc})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
