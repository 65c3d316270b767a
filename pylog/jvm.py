"""The JVM reader of the pylog format for Spark: its jar, compiled on first use into a user cache.

The reader is Java (``pylog/java``, shipped as package data) compiled with the JDK's ``javac`` against the
jars the installed ``pyspark`` ships: no Maven, no download. It cannot be compiled at ``pip install`` time
(pip builds in an isolated environment without pyspark), so it is compiled the first time it is wanted
(:func:`ensure_jar`: ``pylog.spark.session()``, ``pylog spark-jar``) into
``$PYLOG_CACHE_DIR`` (default ``$XDG_CACHE_HOME/pylog``, else ``~/.cache/pylog``) as
``pylog-spark-<pyspark version>-<hash of the sources>.jar``.

Invariants:
- The jar's name changes with the pyspark version and with any byte of the Java sources, so a cached jar is
  never used against another pyspark or after an upgrade of pylog changed the reader.
- A jar appears in the cache only whole: it is written under a temporary name and renamed, so a process
  reading the cache sees the old state or the finished jar, even with two processes building at once.
- No JDK or no pyspark is not an error for pylog: :func:`ensure_jar` raises :class:`JvmReaderUnavailableError`
  saying what is missing, and callers fall back to the Python reader (with a warning), as the pure-Python
  path stands beside the compiled accelerator.
- Nothing here imports pyspark (its location and version come from the import system's metadata), so
  ``pylog --version`` stays fast.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import os
import shutil
import subprocess
import tempfile

from .errors import JvmReaderUnavailableError  # defined there with every error: importable from here too

__all__ = ["JvmReaderUnavailableError", "SOURCES", "PROVIDER", "source_hash", "cache_dir", "jar_path", "build",
           "ensure_jar", "describe"]

#: The Java sources of the reader (package data).
SOURCES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "java")
#: The reader's DataSource V2 provider class: what ``format("pylog")`` resolves to once the jar is loaded.
PROVIDER = "org.pylog.spark.PylogProvider"
_REGISTER = "META-INF/services/org.apache.spark.sql.sources.DataSourceRegister"
#: Bounds a build (javac on a loaded machine takes tens of seconds).
BUILD_TIMEOUT_S = 900


def _java_files() -> list[str]:
    return sorted(os.path.join(root, f) for root, _, files in os.walk(SOURCES) for f in files if f.endswith(".java"))


def source_hash() -> str:
    """12 hex digits of SHA-256 over the Java sources' relative names and bytes."""
    h = hashlib.sha256()
    for path in _java_files():
        h.update(os.path.relpath(path, SOURCES).encode() + b"\0")
        with open(path, "rb") as f:
            h.update(f.read() + b"\0")
    return h.hexdigest()[:12]


def _pyspark() -> tuple[str, str]:
    """The installed pyspark's version and ``jars`` directory."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise JvmReaderUnavailableError("pyspark is not installed: the JVM reader is compiled against its jars")
    jars = os.path.join(list(spec.submodule_search_locations)[0], "jars")
    if not os.path.isdir(jars):
        raise JvmReaderUnavailableError(f"pyspark has no jars directory ({jars})")
    try:
        version = importlib.metadata.version("pyspark")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    return version, jars


def cache_dir() -> str:
    """Where built jars are kept: ``$PYLOG_CACHE_DIR``, else ``$XDG_CACHE_HOME/pylog``, else ``~/.cache/pylog``."""
    explicit = os.environ.get("PYLOG_CACHE_DIR")
    if explicit:
        return os.path.abspath(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "pylog")


def jar_path() -> str:
    """The cached jar's path for the installed pyspark and these sources (it may not exist yet).

    :raises JvmReaderUnavailableError: no pyspark.
    """
    version, _ = _pyspark()
    return os.path.join(cache_dir(), f"pylog-spark-{version}-{source_hash()}.jar")


def _jdk() -> tuple[str, str]:
    javac, jar = shutil.which("javac"), shutil.which("jar")
    if not javac or not jar:
        raise JvmReaderUnavailableError("no JDK (javac and jar) on PATH, so the JVM reader is not built; Spark reads "
                                        "with the Python data source (install a JDK 17+, e.g. default-jdk-headless)")
    return javac, jar


def build(out: str) -> str:
    """Compile the reader into the jar ``out`` (replaced whole); returns ``out``.

    :raises JvmReaderUnavailableError: no JDK or no pyspark; or javac failed (its output in the message).
    """
    javac, jar = _jdk()
    _, jars = _pyspark()
    out = os.path.abspath(out)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="pylog-jvm-") as classes:
        try:
            subprocess.run([javac, "-nowarn", "-Xlint:none", "--release", "17", "-encoding", "UTF-8", "-d", classes,
                            "-cp", os.path.join(jars, "*"), *_java_files()],
                           check=True, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
            services = os.path.join(classes, *_REGISTER.split("/"))
            os.makedirs(os.path.dirname(services))
            with open(services, "w", encoding="utf-8") as f:
                f.write(PROVIDER + "\n")
            fd, tmp = tempfile.mkstemp(prefix=".pylog-spark-", suffix=".jar", dir=os.path.dirname(out))
            os.close(fd)
            try:
                subprocess.run([jar, "cf", tmp, "-C", classes, "."], check=True, capture_output=True, text=True,
                               timeout=BUILD_TIMEOUT_S)
                os.replace(tmp, out)
            finally:
                if os.path.exists(tmp):
                    os.unlink(tmp)
        except subprocess.CalledProcessError as exc:
            raise JvmReaderUnavailableError(f"the JVM reader did not compile ({exc.cmd[0]} exit {exc.returncode}):\n"
                                            f"{exc.stdout}{exc.stderr}") from None
        except subprocess.TimeoutExpired:
            raise JvmReaderUnavailableError(f"the JVM reader's build took over {BUILD_TIMEOUT_S} s") from None
    return out


def ensure_jar() -> str:
    """The cached jar's path, building it first when it is not there.

    :raises JvmReaderUnavailableError: it cannot be built here (no JDK, no pyspark, a failed compile).
    """
    path = jar_path()
    if not os.path.isfile(path):
        _jdk()
        build(path)
    return path


def describe() -> str:
    """One line for ``pylog --version``: whether Spark reads ``format("pylog")`` with the JVM reader."""
    try:
        path = jar_path()
    except JvmReaderUnavailableError as exc:
        return f"Spark reader: Python ({exc})"
    if os.path.isfile(path):
        return f"Spark reader: JVM ({path})"
    try:
        _jdk()
    except JvmReaderUnavailableError:
        return "Spark reader: Python (no JDK to build the JVM reader)"
    return "Spark reader: JVM, built on first use (pylog spark-jar builds it now)"
