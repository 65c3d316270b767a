"""The accelerator switch (pylog/accel.py): which path is live, how to force pure Python, and the CRC both
paths share. Tests of each accelerated function against its pure-Python reference live in
tests/test_native_*.py next to this one."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pylog
from pylog import accel
from pylog.storage.records import format as record_format

needs_native = pytest.mark.skipif(accel.native is None, reason=f"compiled extension not live: {accel.REASON}")


def _run(code: str, **env: str) -> str:
    full = {**os.environ, **env}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full, check=True).stdout


def test_pylog_pure_python_forces_the_fallback_in_a_new_process():
    out = _run("import pylog, pylog.accel as a; print(pylog.ACCELERATED, a.native is None, a.REASON)",
               PYLOG_PURE_PYTHON="1")
    assert out.split()[:2] == ["False", "True"]
    assert "PYLOG_PURE_PYTHON" in out


def test_pylog_pure_python_zero_means_unset():
    out = _run("import pylog, pylog.accel as a; print(pylog.ACCELERATED == (a.native is not None))",
               PYLOG_PURE_PYTHON="0")
    assert out.strip() == "True"


def test_version_and_health_say_which_path_is_live(tmp_path):
    env = {**os.environ, "PYLOG_PURE_PYTHON": "1"}
    version = subprocess.run([sys.executable, "-m", "pylog", "--version"], capture_output=True, text=True, env=env)
    assert "pure Python" in version.stdout and "PYLOG_PURE_PYTHON" in version.stdout
    pylog.open(str(tmp_path / "s")).close()
    health = subprocess.run([sys.executable, "-m", "pylog", "health", str(tmp_path / "s")], capture_output=True,
                            text=True, env=env)
    assert "pure Python" in health.stdout.splitlines()[0]
    if accel.ACCELERATED:
        version = subprocess.run([sys.executable, "-m", "pylog", "--version"], capture_output=True, text=True)
        assert "accelerated" in version.stdout


@needs_native
def test_the_extension_reports_the_abi_this_pylog_expects():
    assert accel.native.ABI_VERSION == accel._EXPECTED_ABI == 3


@needs_native
@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=70_000), start=st.integers(0, 2**32 - 1), cut=st.integers(0, 70_000))
def test_native_crc32c_equals_the_crc32c_package(data, start, cut):
    # Lengths around the 3 x 256 and 3 x 8192 block sizes and unaligned starts take every branch.
    piece = memoryview(data)[cut % (len(data) + 1):]
    assert accel.native.crc32c(piece, start) == crc32c.crc32c(piece, start)


@needs_native
def test_native_crc32c_over_the_three_stream_block_sizes():
    data = os.urandom(3 * 8192 * 2 + 3 * 256 * 2 + 17)
    for size in (0, 1, 7, 8, 767, 768, 769, 24575, 24576, 24577, len(data)):
        for skew in (0, 1, 3):
            piece = data[skew:skew + size]
            assert accel.native.crc32c(piece) == crc32c.crc32c(piece), (size, skew)


def _crc32c_bitwise(data: bytes, value: int = 0) -> int:
    # The definition, a bit at a time (reflected polynomial 0x82F63B78): a reference independent of both C
    # implementations.
    crc = value ^ 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 & -(crc & 1))
    return crc ^ 0xFFFFFFFF


@needs_native
def test_native_crc32c_at_random_lengths_and_alignments_equals_the_reference():
    # Lengths up to 200 KiB (several 3 x 8192 rounds, the prefetching loop's reach past the end of the buffer)
    # from every alignment within a cache line, continuing from a random value half the time.
    rng = random.Random(26)
    data = rng.randbytes(200 * 1024 + 64)
    for _ in range(400):
        skew = rng.randrange(64)
        size = rng.choice((rng.randrange(1024), rng.randrange(24 * 1024, 80 * 1024), rng.randrange(200 * 1024)))
        start = rng.choice((0, rng.randrange(1 << 32)))
        piece = memoryview(data)[skew:skew + size]
        assert accel.native.crc32c(piece, start) == crc32c.crc32c(piece, start), (skew, size, start)


@needs_native
def test_native_crc32c_and_the_package_agree_with_the_bitwise_definition():
    rng = random.Random(7)
    for size in (0, 1, 2, 7, 8, 9, 63, 64, 65, 255, 256, 257, 1000):
        data = rng.randbytes(size)
        start = rng.randrange(1 << 32)
        expect = _crc32c_bitwise(data, start)
        assert accel.native.crc32c(data, start) == crc32c.crc32c(data, start) == expect, size
    assert _crc32c_bitwise(b"123456789") == 0xE3069283  # the CRC-32C check value


def test_the_record_layer_checksums_with_the_live_path():
    expect = crc32c.crc32c if accel.native is None else accel.native.crc32c
    assert record_format.CRC32C is expect


@needs_native
def test_native_crc32c_rejects_what_is_not_bytes_like():
    with pytest.raises(TypeError):
        accel.native.crc32c("text")
    with pytest.raises(ValueError):
        accel.native.crc32c(b"x", 1 << 40)


@pytest.mark.slow
def test_install_without_a_compiler_still_succeeds_in_pure_python(tmp_path):
    """pyproject.toml marks the extension optional: a failed build warns and the install goes on."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    src = tmp_path / "src"
    shutil.copytree(root, src, ignore=shutil.ignore_patterns(".git", ".venv", "build", "*.so", "__pycache__",
                                                             "*.egg-info", ".hypothesis", "tests", "benchmarks"))
    target = tmp_path / "site"
    env = {**os.environ, "CC": "/bin/false"}
    env.pop("PYLOG_PURE_PYTHON", None)
    # No build isolation and no index: the test environment's setuptools builds it, nothing is downloaded.
    built = subprocess.run([sys.executable, "-m", "pip", "install", "-v", "--no-build-isolation", "--no-deps",
                            "--no-index", "--target", str(target), str(src)], capture_output=True, text=True,
                           env=env)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    assert 'building extension "pylog._native" failed' in built.stdout + built.stderr
    assert not list(target.glob("pylog/_native*"))
    out = subprocess.run([sys.executable, "-c", "import pylog, pylog.accel as a; print(pylog.__file__); "
                          "print(pylog.ACCELERATED); print(a.REASON)"], capture_output=True, text=True,
                         env={**env, "PYTHONPATH": str(target)}, cwd=str(tmp_path), check=True).stdout.splitlines()
    assert out[0].startswith(str(target))
    assert out[1] == "False"
    assert "not available" in out[2]
