"""pylog.jvm: where Spark's JVM reader's jar is cached, when it is rebuilt, and what happens without a JDK.

No Spark here (tests/test_spark_jvm.py builds and runs the jar): these look at names and the fallback only.
"""

from __future__ import annotations

import io
import shutil

import pytest

from pylog import jvm
from pylog.cli import main
from pylog.errors import JvmReaderUnavailableError

pytest.importorskip("pyspark")


def test_jar_name_changes_with_the_java_sources_and_lives_in_the_cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("PYLOG_CACHE_DIR", str(tmp_path / "cache"))
    before = jvm.jar_path()
    assert before.startswith(str(tmp_path / "cache"))
    sources = tmp_path / "java"
    shutil.copytree(jvm.SOURCES, sources)
    one = next(sources.rglob("Batch.java"))
    one.write_text(one.read_text() + "\n// changed\n")
    monkeypatch.setattr(jvm, "SOURCES", str(sources))
    after = jvm.jar_path()
    assert after != before and after.rsplit("-", 1)[0] == before.rsplit("-", 1)[0]   # same pyspark, other hash


def test_without_a_jdk_the_jar_is_not_built_and_the_python_reader_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv("PYLOG_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(JvmReaderUnavailableError, match="no JDK"):
        jvm.ensure_jar()
    assert not (tmp_path / "cache").exists()
    assert jvm.describe().startswith("Spark reader: Python (no JDK")
    err = io.StringIO()
    assert main(["spark-jar"], out=err) == 3


def test_version_line_names_the_jar_unwrapped_on_a_narrow_terminal(tmp_path, monkeypatch, capsys):
    # argparse wrapped the --version text at the terminal's width: "Spark reader: JVM" and "(<jar>)" ended on
    # two lines, so `pylog --version | grep "Spark reader: JVM ("` found nothing.
    monkeypatch.setenv("PYLOG_CACHE_DIR", str(tmp_path / "a-long-cache-directory-name" / "pylog"))
    monkeypatch.setenv("COLUMNS", "40")
    with pytest.raises(SystemExit):
        main(["--version"])
    printed = capsys.readouterr().out
    assert printed.count("\n") == 1 and printed.rstrip("\n").endswith(jvm.describe()), printed
