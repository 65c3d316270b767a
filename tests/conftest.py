"""Test-wide settings: tests write nothing outside temporary directories.

Hypothesis keeps caches in ./.hypothesis and pytest-benchmark creates ./.benchmarks at start-up; both are
pointed at a temporary directory that is removed when the run ends, and Hypothesis's example database is
off.
"""

from __future__ import annotations

import shutil
import tempfile

import pytest
from hypothesis import configuration, settings

settings.register_profile("pylog", database=None, deadline=None)
settings.load_profile("pylog")

_STATE_DIR = tempfile.mkdtemp(prefix="pylog-test-state-")
configuration.set_hypothesis_home_dir(_STATE_DIR + "/hypothesis")


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config.option, "benchmark_storage"):
        config.option.benchmark_storage = "file://" + _STATE_DIR + "/benchmarks"


def pytest_unconfigure(config: pytest.Config) -> None:
    shutil.rmtree(_STATE_DIR, ignore_errors=True)
