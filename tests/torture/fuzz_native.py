"""Fuzz the compiled accelerator (pylog._native) built with AddressSanitizer: no memory error, no undefined
behaviour, no leak, no allocation larger than the inputs justify, and only PylogError out of hostile bytes.

What it does:

1. Builds ``pylog._native`` from the checkout's ``native/`` sources, as pyproject.toml's ``ext-modules``
   table lists them (sources, depends, compile arguments: a new C file is picked up), with
   ``-fsanitize=address -fno-omit-frame-pointer -g -O1`` (plus ``-fsanitize=undefined
   -fno-sanitize-recover=all`` when this gcc builds and loads it), into a temporary directory. That
   directory gets a ``pylog/`` of symlinks to the checkout's package (minus any ``_native*.so`` built in
   place), so the child below imports the checkout's Python code with the ASan build next to it.
2. Runs children: a Python with libasan preloaded (``LD_PRELOAD=$(gcc -print-file-name=libasan.so)``),
   ``PYTHONMALLOC=malloc`` (ASan sees every Python object's memory too), ``ASAN_OPTIONS`` with
   ``detect_leaks=1``, ``allocator_may_return_null=0`` and ``max_allocation_size_mb`` (any single
   allocation above :data:`MAX_ALLOCATION_MB` aborts with a report: the inputs are a few KB, so a bigger
   one is a length field believed). Each child asserts ``pylog.ACCELERATED`` and that ``pylog._native`` is
   the ASan build before its first input.
3. In the children, mutated inputs (bit flips, overwrites, truncation, extension, length and count fields
   set to lies, and most of the time the CRC RE-COMPUTED so the mutation reaches the deeper checks; the
   mutations are tests/torture/fuzz.py's) go through the accelerated public entry points, whatever C is
   behind them:

   - ``batch``: ``BatchView.from_buffer`` + ``records()``/``headers()``/``offsets()``/``timestamps()``,
     ``RecordColumns.concat_views`` + ``to_records()``, ``checked_prefix`` over buffers of several batches;
   - ``index``: mutated offset and time index files opened and looked up (pylog/index.py);
   - ``segment``: a partition's segment and index files mutated, the store opened, every record read
     (``Partition.read``, ``read_columns``, ``offset_for_timestamp``), then recovered by becoming the writer;
   - ``api``: the encoder (``encode_parts``/``encode_batch``/``encode_columns``), the partitioner
     (``murmur2``, ``partition_for_key``, ``murmur2_many``) and ``Producer.send`` with hostile arguments:
     wrong types, sequences whose ``len()`` lies, length columns summing past their data,
     offsets and timestamps out of range. Each input's outcome (the result's CRC or the exception class) must
     equal the pure-Python reference's, computed by one more child with ``PYLOG_PURE_PYTHON=1`` (the
     child that also runs the ``kafka`` kind's reference);
   - ``native``: direct calls of every function ``pylog._native`` exports with hostile arguments, for the
     functions this script knows (:data:`NATIVE_ARGS`); any other is listed as skipped, with a note.
     ``kafka_parse_records`` and ``kafka_encode_slice`` on arguments of their documented types must give
     what the pure-Python reference (``recordbatch.parse_records_pure`` / ``encode_slice_pure``) gives, the
     same PylogError class and message included; ``encode_batches`` (a call's batches at once), when it
     accepts, what ``encode_parts_pure`` makes of each run;
   - ``kafka``: Kafka v2 batches pylog's own encoder built (``recordbatch.encode_slices``, no compression),
     mutated in their records (bit flips, varint boundaries, hostile and over-long varints, record counts,
     truncation, chunks, splices, timestamps at the int64 limits) with length and CRC mostly recomputed,
     through ``recordbatch.decode_batches``; and ``encode_slices`` over valid and mutated pylog batches with
     any slice and leader epoch (a slice without offset gaps must decode back to its records). Every outcome,
     columns or error class and message, must equal the pure-Python child's (see :class:`KafkaKind`).

   Outcomes: ``accepted`` (a result), ``rejected:<class>`` (a PylogError subclass), for ``api`` and
   ``native`` also ``caller_error:<class>`` (TypeError/ValueError/OverflowError/BufferError on arguments of
   a type outside the function's contract); violations: ``foreign`` (any other exception), ``hang`` (over
   :data:`TIME_LIMIT_S`), ``mismatch`` (``api`` or ``kafka`` differs from the pure-Python reference).
4. Leaks: LeakSanitizer's report at each child's exit is read, and only leaks with a frame in the ASan build
   of ``pylog._native`` count (CPython itself leaves many at exit); any such leak fails the run. One more
   child (unwinding every allocation exactly, ``fast_unwind_on_malloc=0``) runs the same inputs of each
   kind for :data:`LEAK_ROUNDS` rounds under ``tracemalloc``: traced memory must not grow from round to round
   (a reference leaked in C keeps its object, and a round of the same inputs leaks it again).

Any ASan or UBSan report, a child that dies, a leak in the extension or a violation fails the run with an
AssertionError naming the seed, and for an input ``--repro KIND:SEED:INDEX``, which reruns that input in an
ASan child and shows the report. Usage::

    python tests/torture/fuzz_native.py --short    # CI: ~30-60 s, a few thousand inputs per kind
    python tests/torture/fuzz_native.py --full     # >= 1,000,000 inputs
    python tests/torture/fuzz_native.py --full --seed 7 --only batch,api
    python tests/torture/fuzz_native.py --repro batch:7:1234

``run(mode, workdir, seed)`` returns the counts and raises AssertionError on any finding.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import mmap
import os
import random
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import tomllib
import traceback
import zlib
from collections import Counter
from typing import Any, Callable

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

#: Inputs per kind in full mode (>= 1,000,000 in all); short mode runs 1/SHORT_DIVISOR of each (at least 50).
FULL_COUNTS = {"batch": 720_000, "index": 90_000, "segment": 20_000, "api": 120_000, "native": 60_000,
               "kafka": 200_000}
SHORT_DIVISOR = 200
WORKERS = 2
#: Seconds one input may take under ASan before it counts as a hang.
TIME_LIMIT_S = 60
#: No single allocation may be larger (ASan's max_allocation_size_mb): inputs are at most tens of KB.
MAX_ALLOCATION_MB = 64
#: The tracemalloc leak check: inputs per kind, rounds, and the growth allowed per input per round.
LEAK_INPUTS = {"batch": 300, "index": 40, "segment": 10, "api": 300, "native": 200, "kafka": 300}
LEAK_ROUNDS = 8
LEAK_BYTES_PER_INPUT = 4
LEAK_FLOOR = 512

VIOLATIONS = ("foreign", "hang", "mismatch")
#: Kinds whose every outcome is compared with a pure-Python child's (PYLOG_PURE_PYTHON=1) on the same inputs.
DIFF_KINDS = ("api", "kafka")
CALLER_ERRORS = (TypeError, ValueError, OverflowError, BufferError, struct.error)


# ------------------------------------------------------------------------------------------------- build

def _sanitizer_flags(ubsan: bool) -> list[str]:
    flags = ["-fsanitize=address", "-fno-omit-frame-pointer", "-g", "-O1"]
    if ubsan:
        flags += ["-fsanitize=undefined", "-fno-sanitize-recover=all"]
    return flags


def extensions_from_pyproject(path: str = os.path.join(REPO, "pyproject.toml")) -> list[dict]:
    """pyproject.toml's ``[tool.setuptools] ext-modules`` entries as ``Extension`` keyword arguments (paths
    absolute, optimisation flags dropped: the sanitizer flags set their own)."""
    with open(path, "rb") as f:
        table = tomllib.load(f)["tool"]["setuptools"]["ext-modules"]
    out = []
    for entry in table:
        kw = {k.replace("-", "_"): v for k, v in entry.items() if k != "optional"}
        for key in ("sources", "depends", "include_dirs"):
            if key in kw:
                kw[key] = [os.path.join(REPO, p) for p in kw[key]]
        kw["extra_compile_args"] = [a for a in kw.get("extra_compile_args", []) if not a.startswith("-O")]
        out.append(kw)
    return out


_BUILD_SCRIPT = """
import json, sys
from setuptools import Extension, setup
exts, flags, lib, tmp = json.loads(sys.argv[1])
setup(name="pylog-asan-build", py_modules=[], script_args=["-q", "build_ext", "--build-lib", lib, "--build-temp", tmp],
      ext_modules=[Extension(**dict(e, extra_compile_args=e.get("extra_compile_args", []) + flags,
                                    extra_link_args=e.get("extra_link_args", []) + flags)) for e in exts])
"""


def build(workdir: str) -> dict:
    """Build pylog._native with ASan (and UBSan when it works) under ``workdir``; returns ``{"lib": the
    directory to put first on sys.path, "so": the module's path, "flags": ..., "ubsan": bool}``."""
    exts = extensions_from_pyproject()
    notes = []
    for ubsan in (True, False):
        lib = os.path.join(workdir, "asan-lib" + ("-ubsan" if ubsan else ""))
        tmp = os.path.join(workdir, "asan-tmp" + ("-ubsan" if ubsan else ""))
        flags = _sanitizer_flags(ubsan)
        env = dict(os.environ)
        for var in ("CFLAGS", "LDFLAGS", "LD_PRELOAD"):
            env.pop(var, None)
        proc = subprocess.run([sys.executable, "-c", _BUILD_SCRIPT, json.dumps([exts, flags, lib, tmp])],
                              cwd=workdir, env=env, capture_output=True, text=True)
        sos = [os.path.join(r, f) for r, _, fs in os.walk(lib) for f in fs if f.startswith("_native") and
               f.endswith(".so")]
        if proc.returncode == 0 and len(sos) == 1:
            info = {"lib": lib, "so": sos[0], "flags": flags, "ubsan": ubsan}
            _link_package(lib)
            if not ubsan or _loads(info):
                info["notes"] = notes
                return info
            notes.append("UBSan build does not load under the preloaded libasan: ASan only")
            continue
        notes.append(f"build with {' '.join(flags)} failed:\n{proc.stdout[-2000:]}{proc.stderr[-4000:]}")
        if not ubsan:
            break
    raise AssertionError("could not build pylog._native with AddressSanitizer:\n" + "\n".join(notes))


def _link_package(lib: str) -> None:
    """``lib/pylog/``: symlinks to every entry of the checkout's package except in-place builds of the
    extension, next to the ASan build that setuptools put there."""
    src = os.path.join(REPO, "pylog")
    dst = os.path.join(lib, "pylog")
    os.makedirs(dst, exist_ok=True)
    for name in os.listdir(src):
        if name.startswith("_native") or name == "__pycache__" or os.path.exists(os.path.join(dst, name)):
            continue
        os.symlink(os.path.join(src, name), os.path.join(dst, name))


def libasan() -> str:
    path = subprocess.run(["gcc", "-print-file-name=libasan.so"], capture_output=True, text=True,
                          check=True).stdout.strip()
    if not os.path.isabs(path) or not os.path.exists(path):
        raise AssertionError(f"gcc does not know where libasan.so is (got {path!r}): install gcc's libasan")
    return os.path.realpath(path)


def child_env(info: dict, exact_unwind: bool = False) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYLOG_PURE_PYTHON", "PYTHONSAFEPATH")}
    env.update({
        "LD_PRELOAD": libasan(),
        "PYTHONMALLOC": "malloc",
        "PYTHONPATH": info["lib"],
        "ASAN_OPTIONS": ":".join([
            "detect_leaks=1", "allocator_may_return_null=0", f"max_allocation_size_mb={MAX_ALLOCATION_MB}",
            "quarantine_size_mb=64", "malloc_context_size=30", "detect_stack_use_after_return=0",
            "handle_abort=1", "print_summary=1", "exitcode=23",  # 23: a report, not a Python error (1)
            f"fast_unwind_on_malloc={0 if exact_unwind else 1}"]),
        "LSAN_OPTIONS": "max_leaks=0",
        "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1",
    })
    return env


def _loads(info: dict) -> bool:
    code = ("import pylog, pylog._native as n, sys; assert pylog.ACCELERATED, pylog.accel.REASON; "
            f"assert n.__file__ == {info['so']!r}, n.__file__; n.crc32c(b'x')")
    env = child_env(info)
    env["ASAN_OPTIONS"] += ":detect_leaks=0"
    # -P: no current directory first on sys.path (a checkout's own pylog/ would shadow the build's).
    return subprocess.run([sys.executable, "-P", "-c", code], env=env, capture_output=True,
                          cwd=os.path.dirname(info["lib"])).returncode == 0


# ---------------------------------------------------------------------------------------- reading reports

_REPORT = re.compile(r"^(?:==\d+==)?ERROR: (AddressSanitizer|LeakSanitizer)[^\n]*$|^[^\n]*: runtime error: [^\n]*$",
                     re.M)


def read_reports(stderr: str, so_path: str) -> dict:
    """ASan/UBSan errors and LeakSanitizer leak reports in a child's stderr: ``{"errors": [text...],
    "leaks": n, "native_leaks": [text...]}`` (leaks with a frame in ``so_path``)."""
    errors, native_leaks, leaks = [], [], 0
    for m in _REPORT.finditer(stderr):
        line = m.group(0)
        if "LeakSanitizer" in line and "detected memory leaks" in line:
            continue
        if "AddressSanitizer" in line or "runtime error" in line or "LeakSanitizer" in line:
            errors.append(stderr[m.start():m.start() + 6000])
    leak_part = stderr[stderr.find("ERROR: LeakSanitizer: detected memory leaks"):] \
        if "ERROR: LeakSanitizer: detected memory leaks" in stderr else ""
    names = {so_path, os.path.basename(so_path)}
    for block in re.split(r"\n(?=(?:Direct|Indirect) leak of )", leak_part)[1:]:
        leaks += 1
        if "_tracemalloc.c" in block:  # tracemalloc's own tables (the leak round's), whoever allocated
            continue
        if any(n in block for n in names) or "native/" in block:
            native_leaks.append(block[:4000])
    return {"errors": errors, "leaks": leaks, "native_leaks": native_leaks}


# ------------------------------------------------------------------------------------------ parent: run

def _counts(mode: str, only: list[str] | None) -> dict[str, int]:
    return {k: (v if mode == "full" else max(50, v // SHORT_DIVISOR)) for k, v in FULL_COUNTS.items()
            if only is None or k in only}


def _spawn(info: dict, spec: dict, workdir: str, tag: str, env: dict) -> tuple[subprocess.Popen, str, str]:
    spec = dict(spec, result=os.path.join(workdir, f"{tag}.json"), progress=os.path.join(workdir, f"{tag}.progress"))
    err = open(os.path.join(workdir, f"{tag}.stderr"), "w+")
    proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--child", json.dumps(spec)], env=env,
                            cwd=workdir, stdout=err, stderr=err)
    err.close()
    return proc, spec["result"], spec["progress"]


def run(mode: str, workdir: str, seed: int | None = None, only: list[str] | None = None,
        workers: int = WORKERS) -> dict:
    """Build, fuzz every kind (``only``: some), check leaks; returns ``{kind: {outcome: count}}`` plus
    ``"_total"``, ``"_seed"``, ``"_seconds"``, ``"_leaks"`` (LSan reports at exit, all from CPython) and
    ``"_leak_growth"`` (tracemalloc bytes per round per kind).

    :raises AssertionError: naming the seed (and input) of every finding: an ASan/UBSan report, a child that
        died, a leak with a frame in the extension, traced memory growing across rounds, a foreign
        exception, a hang, or an ``api`` outcome that differs from the pure-Python reference.
    """
    if mode not in ("full", "short"):
        raise ValueError(mode)
    seed = random.randrange(1 << 30) if seed is None else seed
    t0 = time.monotonic()
    info = build(workdir)
    for note in info["notes"]:
        print("note:", note.splitlines()[0], flush=True)
    print(f"built {info['so']} with {' '.join(info['flags'])} in {time.monotonic() - t0:.1f} s", flush=True)
    counts = _counts(mode, only)
    jobs: list[tuple[str, dict, dict]] = []
    for w in range(workers):
        jobs.append((f"worker{w}", {"role": "fuzz", "counts": counts, "seed": seed, "worker": w, "workers": workers,
                                    "so": info["so"], "mode": mode}, child_env(info)))
    leak_inputs = {k: (v if mode == "full" else max(5, v // 4)) for k, v in LEAK_INPUTS.items() if k in counts}
    jobs.append(("leaks", {"role": "leaks", "counts": leak_inputs, "seed": seed, "so": info["so"], "mode": mode,
                           "rounds": LEAK_ROUNDS}, child_env(info)))
    # The same inputs once more with every allocation's stack unwound exactly (10x slower): this Python is
    # built without frame pointers, so only then do LeakSanitizer's stacks reach pylog._native's frames.
    jobs.append(("exact", {"role": "leaks", "counts": leak_inputs, "seed": seed, "so": info["so"], "mode": mode,
                           "rounds": 1}, child_env(info, exact_unwind=True)))
    diff_counts = {k: counts[k] for k in DIFF_KINDS if k in counts}
    if diff_counts:
        ref_env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "PYTHONMALLOC", "PYTHONSAFEPATH")}
        ref_env.update({"PYLOG_PURE_PYTHON": "1", "PYTHONPATH": info["lib"]})
        jobs.append(("reference", {"role": "reference", "counts": diff_counts, "seed": seed, "worker": 0,
                                   "workers": 1, "so": None, "mode": mode}, ref_env))
    result: dict[str, Counter] = {k: Counter() for k in counts}
    findings: list[str] = []
    diff_sigs: dict[str, dict[str, str]] = {k: {} for k in diff_counts}
    ref_sigs: dict[str, dict[str, str]] = {}
    leak_growth: dict = {}
    skipped: set = set()
    kind_seconds: dict[str, float] = {}
    lsan_total = 0
    running = []
    pending = list(jobs)
    while pending or running:
        while pending and len(running) < workers:  # the machine is shared: at most `workers` children at once
            tag, spec, env = pending.pop(0)
            running.append((tag, *_spawn(info, spec, workdir, tag, env)))
        done = [r for r in running if r[1].poll() is not None]
        if not done:
            time.sleep(0.2)  # polling children's exit (not synchronisation of shared state)
            continue
        for tag, proc, result_path, progress_path in done:
            running.remove((tag, proc, result_path, progress_path))
            with open(os.path.join(workdir, f"{tag}.stderr"), errors="replace") as f:
                stderr = f.read()
            rep = read_reports(stderr, info["so"])
            lsan_total += rep["leaks"]
            where = _last_input(progress_path)
            for e in rep["errors"]:
                findings.append(f"{tag}: sanitizer report while running {where}:\n{e}")
            for leak in rep["native_leaks"]:
                findings.append(f"{tag}: leak with a frame in pylog._native:\n{leak}")
            if not os.path.exists(result_path):
                if not rep["errors"]:
                    findings.append(f"{tag}: child died (exit {proc.returncode}) while running {where}:\n"
                                    f"{stderr[-6000:]}")
                continue
            with open(result_path) as f:
                got = json.load(f)
            skipped.update(got.get("skipped", []))
            if tag == "reference":
                ref_sigs = got["sigs"]
                continue
            if tag == "exact":
                continue
            if tag == "leaks":
                leak_growth = got["growth"]
                kind_seconds.update({f"leaks/{k}": v for k, v in got["seconds"].items()})
                findings.extend(got["findings"])
                continue
            for k, c in got["counts"].items():
                result[k].update(c)
            for k, v in got["sigs"].items():
                diff_sigs[k].update(v)
            for k, v in got["seconds"].items():
                kind_seconds[k] = round(kind_seconds.get(k, 0) + v, 1)
            for kind, s, i, outcome, detail in got["bad"]:
                findings.append(f"{kind}:{s}:{i} {outcome}: {detail}")
            if mode == "full":
                print(f"  [{time.monotonic() - t0:7.0f} s] {tag} done", flush=True)
    for kind, sigs in diff_sigs.items():
        ref = ref_sigs.get(kind)
        if not ref:
            findings.append(f"the pure-Python reference child gave no result for {kind}")
            continue
        diff = [i for i in sorted(sigs, key=int) if sigs[i] != ref.get(i)]
        if diff:
            result[kind]["mismatch"] += len(diff)
        for i in diff[:5]:
            findings.append(f"{kind}:{seed}:{i} mismatch: accelerated {sigs[i]:.300}, pure Python {ref.get(i)!s:.300}")
    for kind in ("batch", "index", "segment", "api", "kafka"):  # the mutations reach the parsers, past the CRCs
        c = result.get(kind)
        if c and sum(c.values()) >= 50 and (not c.get("accepted") or not any(k.startswith("rejected:") for k in c)):
            findings.append(f"{kind}: every input was accepted or every one rejected ({dict(c)}): the mutations "
                            "do not reach the checks they are for")
    out: dict = {k: dict(v) for k, v in result.items()}
    out["_total"] = sum(sum(v.values()) for v in result.values())
    out["_seed"] = seed
    out["_seconds"] = round(time.monotonic() - t0, 1)
    out["_leaks"] = lsan_total
    out["_leak_growth"] = leak_growth
    out["_skipped"] = sorted(skipped)
    out["_kind_seconds"] = kind_seconds
    out["_ubsan"] = info["ubsan"]
    if findings:
        raise AssertionError(f"fuzz_native findings (seed {seed}; reproduce an input with "
                             f"python {os.path.relpath(__file__, REPO)} --repro KIND:SEED:INDEX):\n"
                             + "\n".join(f"- {x}" for x in findings[:20]))
    return out


def _last_input(progress_path: str) -> str:
    try:
        with open(progress_path, "rb") as f:
            raw = f.read(64).rstrip(b"\0 ").decode()
    except OSError:
        return "(startup)"
    return f"input {raw} (reproduce: --repro {raw})" if raw else "(startup)"


def summary(result: dict) -> str:
    lines = []
    for kind in FULL_COUNTS:
        if kind not in result:
            continue
        c = result[kind]
        bad = sum(c.get(k, 0) for k in VIOLATIONS)
        parts = ", ".join(f"{k} {v}" for k, v in sorted(c.items()))
        lines.append(f"{kind:8s} {sum(c.values()):9d} inputs, {bad} violations  ({parts})")
    for name in result.get("_skipped", []):
        lines.append(f"note: pylog._native.{name} has no argument generator here: not called directly")
    lines.append(f"tracemalloc growth per round (bytes, same inputs each round): {result['_leak_growth']}")
    lines.append(f"child CPU-side seconds per kind (summed over children): {result['_kind_seconds']}")
    lines.append(f"TOTAL {result['_total']} inputs, 0 ASan/UBSan reports{' (UBSan on)' if result['_ubsan'] else ''}, "
                 f"0 leaks in pylog._native ({result['_leaks']} LSan reports at exit, all CPython's), "
                 f"seed {result['_seed']}, {result['_seconds']} s")
    return "\n".join(lines)


# =================================================================================== child: the inputs
# Everything below runs in the children, which import pylog (the checkout's, next to the ASan build).

def _child_imports() -> None:
    global pylog, PylogError, fuzz, np, records, views, partitioner, recordbatch
    sys.path.insert(1, HERE)
    import numpy as np  # noqa: F811
    import pylog  # noqa: F811
    from pylog import PylogError  # noqa: F811
    from pylog.clients import partitioner  # noqa: F811
    from pylog.storage import records  # noqa: F811
    from pylog.storage.records import views  # noqa: F811
    from pylog.server import recordbatch  # noqa: F811
    import fuzz  # noqa: F811  (tests/torture/fuzz.py: the mutations and decoders shared with the pure fuzzer)


class Kind:
    """One kind of input: ``make(rng)`` draws an input, ``feed(data)`` runs it and returns a signature of
    the result (for the differential ``api`` kind) or None. ``typed(data)``: whether a TypeError-like
    exception is a violation (arguments of the documented types) or the caller's error."""

    name = ""
    #: Whether a PylogError's message is part of the signature compared with the pure-Python child's.
    messages = False

    def __init__(self, work: str) -> None:
        self.work = work
        os.makedirs(work, exist_ok=True)

    def make(self, rng: random.Random) -> Any:
        raise NotImplementedError

    def feed(self, data: Any) -> str | None:
        raise NotImplementedError

    def typed(self, data: Any) -> bool:
        return True

    def close(self) -> None:
        pass


class BatchKind(Kind):
    name = "batch"

    def __init__(self, work: str) -> None:
        super().__init__(work)
        self.dec = fuzz.BatchDecoder(work)

    def make(self, rng: random.Random) -> Any:
        return rng.randrange(len(self.dec.seeds)), self.dec.make(rng)

    def feed(self, data: Any) -> None:
        other, raw = data
        try:
            self.dec.feed(raw)
        finally:
            # The mutated batch between valid ones: the walk must stop at it (or pass it when still valid).
            good = self.dec.seeds[other]
            for buf in (raw, good + raw + good, raw + good):
                records.checked_prefix(buf, 0, len(buf), -1)
                records.checked_prefix(buf, len(good), len(buf) - 1, 5)
            view = records.BatchView.from_buffer(good)
            n = view.count
            try:
                mutated = records.BatchView.from_buffer(raw)
            except PylogError:
                mutated = None
            if mutated is not None:  # columns from a valid batch and the (still valid) mutated one
                cols = records.RecordColumns.concat_views([(view, 0, n), (mutated, 0, mutated.count)], "t", 3)
                cols.to_records()
                cols.values()
                cols.keys()
                both = [(view, 0, n), (mutated, 0, mutated.count)]
                if views.consumer_row_iter is not None:  # rows built one at a time: the list path's rows
                    rows = list(views.consumer_row_iter(both, "t", 3, tuple))
                    if rows != views.consumer_rows(both, "t", 3, tuple):
                        raise AssertionError("consumer_row_iter's rows differ from consumer_rows'")
        return None


class IndexKind(Kind):
    name = "index"

    def __init__(self, work: str) -> None:
        super().__init__(work)
        self.dec = fuzz.IndexDecoder(work)

    def make(self, rng: random.Random) -> Any:
        return self.dec.make(rng)

    def feed(self, data: Any) -> None:
        self.dec.feed(data)
        return None


class SegmentKind(Kind):
    name = "segment"

    def __init__(self, work: str) -> None:
        super().__init__(work)
        self.dec = fuzz.SegmentDecoder(work)
        self.dec.seeds = self.dec.make_seeds()

    def make(self, rng: random.Random) -> Any:
        return self.dec.make(rng)

    def feed(self, data: Any) -> None:
        self.dec.feed(data)
        return None


class Lying:
    """A sequence whose ``len()`` claims ``claimed`` items and which holds ``real`` of them."""

    def __init__(self, items: list, claimed: int) -> None:
        self.items = items
        self.claimed = claimed

    def __len__(self) -> int:
        return self.claimed

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return self.items[i]
        return self.items[i]

    def __iter__(self) -> Any:
        return iter(self.items)

    def __repr__(self) -> str:
        return f"Lying({self.items!r}, claimed={self.claimed})"


#: The range of each integer EncodeOptions field (its width in the batch header); outside it, the caller's error.
OPTION_RANGES = {"base_offset": (0, (1 << 63) - 1), "default_timestamp": (-(1 << 63), (1 << 63) - 1),
                 "producer_id": (-(1 << 63), (1 << 63) - 1), "producer_epoch": (-(1 << 15), (1 << 15) - 1),
                 "base_sequence": (-(1 << 31), (1 << 31) - 1)}


class ApiKind(Kind):
    """Hostile arguments to the encoder, the partitioner and Producer.send: every input is a call, its
    outcome compared with the pure-Python reference's (same call, same draws)."""

    name = "api"

    def __init__(self, work: str) -> None:
        super().__init__(work)
        self.store = pylog.open(os.path.join(work, "store"), log_cleaner_enable=False)
        self.store.create_topic("t", 4)
        self.producer = self.store.producer(linger_ms=0)

    def close(self) -> None:
        with contextlib.suppress(PylogError):
            self.producer.close()
        self.store.close()

    # -------------------------------------------------------------------------------- hostile arguments
    def item(self, rng: random.Random, typed: list) -> Any:
        r = rng.randrange(20)
        if r < 9:
            return bytes(rng.randrange(256) for _ in range(rng.choice((0, 1, 3, 4, 5, 8, 13, 100))))
        if r == 9:
            return None
        if r == 10:
            return bytearray(rng.randbytes(rng.randrange(9)))
        if r == 11:
            step = rng.choice((1, 2))
            if step == 2:  # not contiguous: outside "bytes-like" as the encoder takes it (see the module doc)
                typed[0] = False
            return memoryview(rng.randbytes(rng.randrange(1, 17)))[::step]
        if r == 12:
            return memoryview(rng.randbytes(8)).cast(rng.choice(("I", "Q", "h", "B")))  # wide items
        if r == 13:
            return np.frombuffer(rng.randbytes(8), rng.choice(("u1", "i4", "i8")))
        typed[0] = False
        return rng.choice(("text", "", 5, 1.5, -1, (1 << 80), [b"a"], (b"a",), object(), True))

    def column(self, rng: random.Random, n: int, typed: list) -> Any:
        items = [self.item(rng, typed) for _ in range(n)]
        r = rng.random()
        if r < 0.1:
            # A len() that lies by a little: a lie of 2**40 makes the pure-Python reference allocate what
            # len() claims (np.fromiter with that count), a contract the caller broke, not hostile bytes.
            typed[0] = False  # a sequence breaking its own protocol
            return Lying(items, rng.choice((n + 1, max(0, n - 1), n + 1000)))
        if r < 0.2:
            return tuple(items)
        return items

    def int_value(self, rng: random.Random) -> int:
        return rng.choice(fuzz.INTERESTING_INTS + [1 << 64, -(1 << 64), 1 << 100, 1_700_000_000_000])

    def lengths(self, rng: random.Random, n: int, data_len: int) -> Any:
        r = rng.random()
        dtype = "<i4" if r < 0.8 else rng.choice(("<i8", "<f8", "<u4", "<i2"))
        if rng.random() < 0.5:  # an honest split of the data
            cuts = sorted(rng.randrange(data_len + 1) for _ in range(max(0, n - 1)))
            lens = [b - a for a, b in zip([0] + cuts, cuts + [data_len], strict=True)][:n]
        else:
            lens = [rng.choice((-2, -1, 0, 1, 7, data_len, (1 << 31) - 1, 1 << 30)) for _ in range(n)]
        arr = np.array(lens, dtype="<i8").astype(dtype)
        if rng.random() < 0.05:
            arr = arr[::-1]  # a negative stride
        return arr

    def make(self, rng: random.Random) -> Any:
        typed = [True]
        n = rng.choice((0, 1, 1, 2, 3, 5, 17, 100))
        which = rng.randrange(10)
        opts: dict = {"default_timestamp": 1_700_000_000_000}
        for field in ("base_offset", "default_timestamp", "codec", "producer_id", "producer_epoch", "base_sequence",
                      "log_append_time", "control"):
            if rng.random() < 0.08:
                # Never None: default_timestamp=None means "now", which the pure-Python reference child
                # reads at another moment (the full run's 20 mismatches of seed 16 were that).
                v = opts[field] = self.int_value(rng) if rng.random() < 0.9 else rng.choice(("x", 1.5))
                low, high = OPTION_RANGES.get(field, (None, None))
                if not isinstance(v, int) or (
                        low is not None and isinstance(v, int) and not low <= v <= high):
                    typed[0] = False  # an option of the wrong type or outside its field's range
        if rng.random() < 0.3:
            opts["codec"] = 1
        if which < 4:  # encode_batch / encode_parts from lists
            values = self.column(rng, n, typed) if rng.random() < 0.97 else None
            keys = self.column(rng, n + (rng.random() < 0.05), typed) if rng.random() < 0.5 else None
            ts = None
            if rng.random() < 0.5:
                ts = [rng.choice((1_700_000_000_000 + rng.randrange(1000), self.int_value(rng)))
                      for _ in range(n + (rng.random() < 0.05))]
                if any(not -(1 << 63) <= t < 1 << 63 for t in ts):
                    typed[0] = False  # a timestamp no int64 holds
                if rng.random() < 0.1:
                    ts[0:1] = [rng.choice((None, 1.5, "x"))] if ts else []
                    typed[0] = False
            headers = None
            if rng.random() < 0.3:
                headers = [[(rng.choice(("h", "", "é" * 3)), self.item(rng, typed)) for _ in range(rng.randrange(3))]
                           for _ in range(n)]
                if rng.random() < 0.1:
                    headers = [rng.choice(([("h",)], [(b"k", b"v")], "x", [1], None)) for _ in range(n)]
                    typed[0] = False
            deltas = None
            if rng.random() < 0.15:
                deltas = np.array(sorted(rng.sample(range(3 * n + 3), n)) if rng.random() < 0.7 else
                                  [self.int_value(rng) % (1 << 63) for _ in range(n)], dtype="<i8")
                if n and rng.random() < 0.7:
                    deltas -= deltas[0]
            call = ("parts" if which < 2 else "batch", values, keys, ts, headers, deltas, opts)
        elif which < 6:  # encode_columns
            data = rng.randbytes(rng.choice((0, 3, 40, 1000)))
            vl = self.lengths(rng, n, len(data))
            kdata = rng.randbytes(rng.choice((0, 5))) if rng.random() < 0.4 else None
            kl = self.lengths(rng, n + (rng.random() < 0.05), len(kdata)) if kdata is not None else None
            vdata: Any = data if rng.random() < 0.8 else rng.choice(([data[:1], data[1:]], bytearray(data),
                                                                     memoryview(data)))
            ts = None
            if rng.random() < 0.4:
                ts = np.array([1_700_000_000_000 + i for i in range(n)], dtype="<i8").astype(
                    rng.choice(("<i8", "<i8", "<f8", "<i4")))
            call = ("columns", vl, vdata, kl, kdata, ts, opts)
        elif which < 8:  # the partitioner
            key = self.item(rng, typed)
            if key is None:
                typed[0] = False  # murmur2 hashes bytes; a null key is the producer's business
            if rng.random() < 0.3:
                data = rng.randbytes(rng.choice((0, 7, 64)))
                call = ("murmur2_many", self.lengths(rng, n, len(data)), data)
            else:
                call = ("murmur2", key, rng.choice((1, 4, 7, 0, -1, 1 << 31, (1 << 31) - 1)))
        else:  # Producer.send
            call = ("send", self.item(rng, typed) if rng.random() < 0.95 else None,
                    self.item(rng, typed) if rng.random() < 0.6 else None,
                    rng.choice((None, 0, 3, 4, -1, 1 << 40)) if rng.random() < 0.3 else None,
                    rng.choice((None, 1_700_000_000_000, -5, 1 << 63, 1.5)) if rng.random() < 0.3 else None)
            if isinstance(call[4], float):
                typed[0] = False
        return typed[0], call

    def typed(self, data: Any) -> bool:
        return data[0]

    def feed(self, data: Any) -> str:
        call = data[1]
        op = call[0]
        if op in ("parts", "batch"):
            _, values, keys, ts, headers, deltas, opts = call
            if op == "parts":
                parts, _ = records.encode_parts(values, keys, ts, headers, offset_deltas=deltas, **opts)
                out = b"".join(parts)
            else:
                out = records.encode_batch(values, keys, ts, headers, offset_deltas=deltas, **opts)
            return f"ok:{len(out)}:{zlib.crc32(out):08x}"
        if op == "columns":
            _, vl, vdata, kl, kdata, ts, opts = call
            out = records.encode_columns(vl, vdata, kl, kdata, ts, **opts)
            return f"ok:{len(out)}:{zlib.crc32(out):08x}"
        if op == "murmur2":
            _, key, nparts = call
            h = partitioner.murmur2(key)
            p = partitioner.partition_for_key(key, nparts)
            return f"ok:{h}:{p}"
        if op == "murmur2_many":
            _, lens, buf = call
            got = partitioner.murmur2_many(lens, buf)
            return f"ok:{zlib.crc32(np.asarray(got, dtype='<i8').tobytes()):08x}"
        _, value, key, part, ts = call
        fut = self.producer.send("t", value=value, key=key, partition=part, timestamp_ms=ts)
        self.producer.flush()
        md = fut.get(timeout=10)
        # An unkeyed record without a partition goes where the sticky partitioner's random draw says.
        return f"ok:{md.partition}" if key is not None or part is not None else "ok"


def _pylog_data(rng: random.Random, n: int) -> dict:
    """Keyword arguments of ``records.encode_batch`` for ``n`` random records (codec none; timestamps, keys,
    headers, offset-delta gaps, LogAppendTime and producer fields sometimes)."""
    values = [None if rng.random() < 0.1 else rng.randbytes(rng.choice((0, 1, 5, 40, 200))) for _ in range(n)]
    keys = None
    if rng.random() < 0.5:
        keys = [None if rng.random() < 0.3 else rng.randbytes(rng.choice((0, 1, 4, 70))) for _ in range(n)]
    ts = None
    if rng.random() < 0.5:
        extremes = (0, -1, (1 << 63) - 1, -(1 << 63), 1 << 62)
        ts = [rng.choice(extremes) if rng.random() < 0.1 else 1_700_000_000_000 + rng.randrange(-5000, 5000)
              for _ in range(n)]
    headers = None
    if rng.random() < 0.4:
        headers = [[(rng.choice(("h", "", "é", "\u20ac" * 3, "k" * 70)), None if rng.random() < 0.3 else
                     rng.randbytes(rng.choice((0, 3, 130)))) for _ in range(rng.choice((0, 0, 1, 2, 5)))]
                   for _ in range(n)]
    deltas = None
    if n > 1 and rng.random() < 0.15:
        deltas = np.cumsum([0] + [rng.choice((1, 1, 2, 1000)) for _ in range(n - 1)]).astype("<i4")
    pid = rng.choice((-1, -1, 0, 7, 1 << 50))
    return dict(values=values, keys=keys, timestamps=ts, headers=headers, offset_deltas=deltas,
                base_offset=rng.choice((0, 5, rng.randrange(1 << 40))), default_timestamp=1_700_000_000_000,
                log_append_time=rng.random() < 0.1, producer_id=pid, producer_epoch=-1 if pid < 0 else rng.randrange(5),
                base_sequence=-1 if pid < 0 else rng.choice((0, 9, (1 << 31) - 2)))


def _pylog_view(rng: random.Random, n: int) -> Any:
    kw = _pylog_data(rng, n)
    return records.BatchView.from_buffer(records.encode_batch(kw.pop("values"), kw.pop("keys"), kw.pop("timestamps"),
                                                              kw.pop("headers"), **kw))


def _varint(v: int) -> bytes:
    """Kafka's zigzag varint of ``v`` (any int: taken modulo 2**64, so up to 10 bytes)."""
    u = ((v << 1) ^ (v >> 63)) & 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while u >= 0x80:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)
    return bytes(out)


def _hostile_varint(rng: random.Random, section_len: int) -> bytes:
    r = rng.random()
    if r < 0.7:
        v = rng.choice(fuzz.INTERESTING_INTS + [-2, -3, section_len, section_len + 1, section_len - 1, 1 << 35,
                                                (1 << 31) - 1, -(1 << 31) - 1, 3, 4, 5, 6, 7, 8])
        return _varint(v + rng.choice((0, 0, 1, -1)))
    if r < 0.85:  # over-long: continuation bytes then a zero (or a terminator carrying bits past 32 / 64)
        return b"\x80" * rng.randint(1, 10) + bytes([rng.choice((0, 1, 2, 0x7F))])
    return b"\xff" * rng.randint(1, 12) + (b"" if rng.random() < 0.5 else b"\x01")


def _kafka_fix(b: bytearray, length: bool, crc: bool) -> bytearray:
    if length and len(b) >= 12:
        struct.pack_into(">i", b, 8, len(b) - 12)
    if crc and len(b) >= 21:
        import crc32c as crc_pkg
        struct.pack_into(">I", b, 17, crc_pkg.crc32c(bytes(b[21:])))
    return b


class KafkaKind(Kind):
    """Kafka v2 batches both ways through native/kafka.c, each outcome compared with a pure-Python child's
    (messages included):

    - ``decode``: valid uncompressed Kafka batches built by pylog's own encoder (``encode_slices`` over random
      pylog batches and slices), one to three back to back, one of them mutated in its records section (bit
      flips, bytes set to varint boundaries, varints replaced by hostile or over-long ones, record count and
      last offset delta set to lies, records truncated, chunks cut or duplicated, records spliced from another
      batch, base timestamp at the int64 limits) or its header, batch length and CRC mostly recomputed so the
      record parser is reached; through ``recordbatch.decode_batches``. The signature covers every column.
    - ``encode``: ``encode_slices`` over pylog batches (valid ones, or tests/torture/fuzz.py's mutated ones
      that ``BatchView`` still accepts) with random slices (empty and out of range too) and leader epochs;
      what comes out of a batch without offset gaps must decode back to the same records.
    """

    name = "kafka"
    messages = True

    def __init__(self, work: str) -> None:
        super().__init__(work)
        # fuzz.py's batch mutations over seeds of fixed timestamps (its own seeds take "now" for some batches:
        # the pure-Python child, drawing the same inputs later, would get other bytes).
        self.pylog_mutator = fuzz.BatchDecoder(work)
        rng = random.Random(19)
        seeds = []
        for i in range(24):
            kw = _pylog_data(rng, rng.choice((1, 2, 3, 10, 50)))
            seeds.append(records.encode_batch(kw.pop("values"), kw.pop("keys"), kw.pop("timestamps"),
                                              kw.pop("headers"), codec=i % 2, **kw))
        self.pylog_mutator.seeds = seeds

    def make(self, rng: random.Random) -> Any:
        if rng.random() < 0.75:
            return ("decode",) + self.make_decode(rng)
        return ("encode",) + self.make_encode(rng)

    def kafka_batch(self, rng: random.Random) -> bytearray:
        n = rng.choice((1, 1, 2, 3, 5, 17, 60))
        view = _pylog_view(rng, n)
        a = 0 if rng.random() < 0.5 else rng.randrange(n)
        b = n if rng.random() < 0.5 else rng.randint(a + 1, n)
        return bytearray(recordbatch.encode_slices([(view, a, b)], rng.choice((0, 0, 5, -1))))

    def make_decode(self, rng: random.Random) -> tuple:
        batches = [self.kafka_batch(rng) for _ in range(rng.choice((1, 1, 1, 2, 3)))]
        t = rng.randrange(len(batches))
        b = batches[t]
        hs = recordbatch.HEADER_SIZE
        for _ in range(rng.choice((1, 1, 1, 2, 3))):
            sec = max(0, len(b) - hs)
            m = rng.randrange(12)
            if m in (4, 8, 9, 10) and len(b) < hs:  # a header field of a batch cut shorter than its header
                m = 11
            if m == 0 and sec:  # bit flips in the records
                for _ in range(rng.randint(1, 4)):
                    i = hs + rng.randrange(sec)
                    b[i] ^= 1 << rng.randrange(8)
            elif m == 1 and sec:  # a byte at a varint boundary
                b[hs + rng.randrange(sec)] = rng.choice((0x00, 0x01, 0x02, 0x03, 0x7F, 0x80, 0x81, 0xFE, 0xFF))
            elif m in (2, 3) and sec:  # a varint (1-3 bytes, or none: inserted) replaced by a hostile one
                i = hs + rng.randrange(sec + 1)
                b[i:i + rng.choice((0, 1, 1, 1, 2, 3))] = _hostile_varint(rng, sec)
            elif m == 4:  # the record count (and mostly the last offset delta with it) set to a lie
                count = struct.unpack_from(">i", b, 57)[0]
                v = rng.choice((0, -1, count + 1, count - 1, count * 2, sec // 7, sec // 7 + 1, (1 << 31) - 1,
                                -(1 << 31), 1 << 20))
                struct.pack_into(">I", b, 57, v % (1 << 32))
                if rng.random() < 0.8:
                    struct.pack_into(">I", b, 23, (v - 1) % (1 << 32))
            elif m == 5 and sec:  # records truncated
                del b[hs + rng.randrange(sec):]
            elif m == 6 and sec:  # a chunk of records cut or duplicated
                i = hs + rng.randrange(sec)
                k = rng.randint(1, 16)
                if rng.random() < 0.5:
                    del b[i:i + k]
                else:
                    b[i:i] = b[i:i + k]
            elif m == 7:  # records spliced from another batch
                other = self.kafka_batch(rng)
                i, j = sorted(hs + rng.randrange(sec + 1) for _ in range(2))
                k, q = sorted(hs + rng.randrange(len(other) - hs + 1) for _ in range(2))
                b[i:j] = other[k:q]
            elif m == 8:  # base timestamp at the int64 limits (record timestamps wrap)
                struct.pack_into(">q", b, 27, rng.choice(((1 << 63) - 1, -(1 << 63), (1 << 63) - 2, -1, 0)))
            elif m == 9:  # a header field: attributes (codec, control bits), magic, producer fields
                off, width = rng.choice(((21, 2), (16, 1), (43, 8), (51, 2), (53, 4), (35, 8), (12, 4)))
                v = rng.choice(fuzz.INTERESTING_INTS + [1, 2, 3, 4, 5, 7, 0x20, 0x10])
                b[off:off + width] = (v % (1 << (8 * width))).to_bytes(width, "big")
            elif m == 10:  # the batch length set to a lie (kept unless not recomputed below)
                struct.pack_into(">i", b, 8, rng.choice((0, -1, 48, 49, len(b) - 13, len(b) - 11, (1 << 31) - 1)))
            else:  # generic mutations anywhere in the batch
                b[:] = fuzz.mutate_bytes(rng, bytes(b))
        _kafka_fix(b, length=rng.random() < 0.85, crc=rng.random() < 0.9)
        data = b"".join(batches)
        if rng.random() < 0.05:
            data = data[:rng.randrange(len(data) + 1)]
        max_size = 1 << 20 if rng.random() < 0.95 else rng.randrange(max(1, len(b)))
        return bytes(data), max_size

    def make_encode(self, rng: random.Random) -> tuple:
        if rng.random() < 0.5:
            n = rng.choice((1, 2, 3, 5, 17, 60))
            kw = _pylog_data(rng, n)
            raw = records.encode_batch(kw.pop("values"), kw.pop("keys"), kw.pop("timestamps"), kw.pop("headers"),
                                       **kw)
        else:
            raw = self.pylog_mutator.make(rng)
        r = rng.random()
        a: Any
        if r < 0.8:  # a slice inside the batch, as fractions of its count (the count is known only in feed)
            a, b = sorted((rng.random(), rng.random()))
            a, b = ("frac", a), ("frac", b)
        else:
            a, b = rng.choice((-1, 0, 1, 2, 1 << 31)), rng.choice((-1, 0, 1, 3, 1000, 1 << 40))
        epoch = rng.choice((0, 0, 0, 3, -1, (1 << 31) - 1)) if rng.random() < 0.98 else rng.choice((1 << 31, 1 << 70))
        return raw, a, b, epoch

    def typed(self, data: Any) -> bool:
        if data[0] != "encode":
            return True
        _, _, a, b, epoch = data
        # A slice outside the batch (ValueError) or an epoch no int32 holds (OverflowError): the caller's error.
        return isinstance(a, tuple) and isinstance(b, tuple) and -(1 << 31) <= epoch < 1 << 31

    def feed(self, data: Any) -> str:
        if data[0] == "decode":
            _, raw, max_size = data
            out = recordbatch.decode_batches(raw, max_size)
            return "ok:" + ",".join(_kafka_batch_sig(kb) for kb in out)
        _, raw, a, b, epoch = data
        view = records.BatchView.from_buffer(raw)
        n = view.count
        if isinstance(a, tuple):
            a, b = int(a[1] * n), max(int(a[1] * n) + 1, int(b[1] * n + 1))
            b = min(b, n)
        out = recordbatch.encode_slices([(view, a, b)], epoch)  # a caller's error: run_one's caller_error
        if out and view.offset_deltas is None and 0 <= a < b <= n:
            # What pylog serves must read back: the same records (no gaps: offset deltas are the indexes).
            [kb] = recordbatch.decode_batches(out, 1 << 30)
            want = view.records(start=a, stop=b)
            got = list(zip(kb.timestamps.tolist(), _split(kb.value_data, kb.value_lengths),
                           [None] * len(kb) if kb.key_lengths is None else _split(kb.key_data, kb.key_lengths),
                           kb.headers or [()] * len(kb), strict=True))
            if kb.base_offset != want[0].offset or got != [(r.timestamp, r.value, r.key, tuple(r.headers))
                                                           for r in want]:
                raise AssertionError(f"records {a}:{b} encoded to Kafka do not decode back to themselves")
        return f"ok:{len(out)}:{zlib.crc32(out):08x}"


def _split(data: Any, lengths: Any) -> list:
    out, pos = [], 0
    for n in lengths.tolist():
        if n < 0:
            out.append(None)
        else:
            out.append(bytes(data[pos:pos + n]))
            pos += n
    return out


def _kafka_batch_sig(kb: Any) -> str:
    """Every field and column of a decoded KafkaBatch, as one CRC."""
    fields = (kb.base_offset, kb.partition_leader_epoch, kb.attributes, kb.last_offset_delta, kb.base_timestamp,
              kb.max_timestamp, kb.producer_id, kb.producer_epoch, kb.base_sequence, kb.record_count, kb.size,
              kb.key_lengths is None, kb.key_data is None, kb.headers)
    crc = zlib.crc32(repr(fields).encode())
    for col in (kb.value_lengths, kb.value_data, kb.key_lengths, kb.key_data, kb.timestamps):
        if col is not None:
            crc = zlib.crc32(memoryview(col).cast("B"), crc)
    return f"{kb.record_count}/{crc:08x}"


#: Argument generators for the functions of pylog._native this script knows: name -> (rng, typed) -> args,
#: and the reference check of a result (None: any result is fine). A function not listed is skipped with a note.
def _crc_args(rng: random.Random, typed: list) -> tuple:
    # Long ones too: the three-stream loops (3 x 256 and 3 x 8192 bytes) and their prefetches past the end.
    data: Any = rng.randbytes(rng.choice((0, 1, 3, 7, 8, 15, 16, 63, 64, 100, 1000, 5000, 24576 + rng.randrange(64),
                                          rng.randrange(65536, 70000))))
    r = rng.random()
    if r < 0.1:
        data = memoryview(data)[rng.randrange(len(data) + 1):]
    elif r < 0.13:
        data = memoryview(data)[rng.randrange(64):]  # every alignment within a cache line
    elif r < 0.15:
        data = bytearray(data)
    elif r < 0.2:
        data = np.frombuffer(data[:len(data) // 8 * 8], "<u8")
    elif r < 0.25:
        data = memoryview(data)[::2]  # not contiguous
        typed[0] = False
    elif r < 0.3:
        data = rng.choice(("text", 5, None, [b"a"]))
        typed[0] = False
    args: tuple = (data,)
    if rng.random() < 0.5:
        v = rng.choice((0, 1, 0xFFFFFFFF, rng.randrange(1 << 32), 1 << 32, -1, 1 << 64, "x", None))
        if not (isinstance(v, int) and 0 <= v < 1 << 32):
            typed[0] = False
        args += (v,)
    if rng.random() < 0.03:
        args += (0,)
        typed[0] = False
    return args


def _crc_reference(args: tuple, got: Any) -> None:
    import crc32c as crc_pkg
    expect = crc_pkg.crc32c(memoryview(args[0]).cast("B"), *args[1:])
    if got != expect:
        raise AssertionError(f"crc32c{args!r:.200} = {got}, the crc32c package says {expect}")


def _kparse_args(rng: random.Random, typed: list) -> tuple:
    """kafka_parse_records(section, count, base_timestamp): a records section of a Kafka batch pylog encoded,
    maybe mutated, with counts and base timestamps of any int (the reference takes any), of other types
    (the caller's error) and sections of several buffer types."""
    n = rng.choice((1, 2, 3, 9))
    view = _pylog_view(rng, n)
    kafka = recordbatch.encode_slices([(view, 0, n)])
    section: Any = kafka[recordbatch.HEADER_SIZE:]
    if rng.random() < 0.6:
        section = fuzz.mutate_bytes(rng, section)
    count: Any = n if rng.random() < 0.5 else rng.choice(
        fuzz.INTERESTING_INTS + [1 << 64, -(1 << 64), 1 << 100, True, False, len(section) // 7, n + 1, n - 1])
    base_ts: Any = rng.choice((0, 1_700_000_000_000, (1 << 63) - 1, -(1 << 63), 1 << 64, -(1 << 100), 1 << 63))
    r = rng.random()
    if r < 0.1:
        section = bytearray(section)
    elif r < 0.2:
        section = memoryview(section)[rng.randrange(len(section) + 1):]
    elif r < 0.25:
        section = memoryview(section)[::2]  # not contiguous
        typed[0] = False
    elif r < 0.3:
        section = rng.choice(("text", None, 5, [b"a"]))
        typed[0] = False
    if rng.random() < 0.03:
        count = rng.choice((1.0, "1", None))
        typed[0] = False
    if rng.random() < 0.03:
        base_ts = rng.choice((1.5, "0", None))
        typed[0] = False
    return section, count, base_ts


def _kparse_reference(args: tuple, got: Any) -> None:
    try:
        expect = recordbatch.parse_records_pure(*args)
    except PylogError as exc:
        raise AssertionError(f"kafka_parse_records{args!r:.300} accepted, the reference raised {exc!r}") from None
    if got != expect:
        raise AssertionError(f"kafka_parse_records{args!r:.300} = {got!r:.300}, the reference says {expect!r:.300}")


class _Str(str):
    pass


class _Bytes(bytes):
    pass


def _kencode_args(rng: random.Random, typed: list) -> tuple:
    """kafka_encode_slice(body, header, start, stop, headers, leader_epoch): a valid pylog batch's arguments
    (``typed``: the result must be encode_slice_pure's bytes), or hostile ones: header fields set to lies or
    out of their widths, bodies cut, extended or flipped, headers lists of the wrong length or types, keys
    that are not UTF-8-encodable, slices out of range, epochs past int32."""
    n = rng.choice((1, 2, 3, 9))
    view = _pylog_view(rng, n)
    body: Any = view.body
    header: Any = view.header
    hlist: Any = view.headers()
    a = rng.randrange(n)
    b = rng.randint(a + 1, n)
    epoch: Any = rng.choice((0, 5, -1))
    for _ in range(rng.choice((0, 0, 1, 1, 2))):
        typed[0] = False
        m = rng.randrange(9)
        if m == 0 and isinstance(header, tuple) and len(header) == 13:
            h = list(header)
            h[rng.randrange(13)] = rng.choice(fuzz.INTERESTING_INTS + [1 << 64, -(1 << 70)])
            header = tuple(h)
        elif m == 1 and not isinstance(body, (str, type(None))):
            body = fuzz.mutate_bytes(rng, bytes(body))
        elif m == 2:
            a, b = rng.choice((-1, 0, 1, n, n + 1, 1 << 40)), rng.choice((-1, 0, 1, n, n + 1, 1 << 63))
        elif m == 3:
            epoch = rng.choice(((1 << 31), -(1 << 31) - 1, 1 << 64, 1.5, None))
        elif m == 4:
            hlist = rng.choice((None, [], [()] * (n + 1), [()] * n, [[]] * n, [(("k",),)] * n, [((b"k", b"v"),)] * n,
                                [(("k", "v"),)] * n, [(("\ud800", None),)] * n, [((_Str("k"), _Bytes(b"v")),)] * n,
                                [(("k", None),) * 1000] * n, "x" * n, tuple([()] * n)))
        elif m == 5 and not isinstance(body, (str, type(None))):
            body = rng.choice((bytearray(body), memoryview(bytes(body)), memoryview(bytes(body) * 2)[::2], "x", None))
        elif m == 6:
            if isinstance(header, tuple):
                header = rng.choice((header[:12], list(header), header + (0,), None, header[:4] + ("x",) + header[5:]))
        elif m == 7:  # another batch's header or headers with this body
            other = _pylog_view(rng, rng.choice((1, n, 2 * n)))
            if rng.random() < 0.5:
                header = other.header
            else:
                hlist = other.headers()
        elif not isinstance(body, (str, type(None))):
            body = bytes(body)[:rng.randrange(len(body) + 1)]
    return (body, header, a, b, hlist, epoch) if typed[0] is False else (view, a, b, epoch)


def _kencode_call(*args: Any) -> Any:
    if len(args) == 4:  # the documented arguments: a view's own
        return recordbatch.encode_slice_native(*args)
    return pylog.accel.native.kafka_encode_slice(*args)


def _kencode_reference(args: tuple, got: Any) -> None:
    if len(args) == 4:
        try:
            expect = recordbatch.encode_slice_pure(*args)
        except PylogError as exc:
            raise AssertionError(f"kafka_encode_slice of {args[1:]} accepted, the reference raised {exc!r}") from None
        if got != expect:
            raise AssertionError(f"kafka_encode_slice of {args[1:]} = {got!r:.200}, the reference: {expect!r:.200}")


def _rowiter_args(rng: random.Random, typed: list) -> tuple:
    """consumer_row_iter(parts, topic, partition, row_type, key_deserializer, value_deserializer): parts of
    valid pylog batches (``typed``: the rows must be decode_rows' rows, part by part), or hostile ones: bodies
    cut, flipped or extended, lying headers, ranges outside the batch, parts of the wrong shape, a parts
    sequence that is not one, rows types that are not tuples, deserializers that raise or are not callable."""
    parts: Any = []
    for _ in range(rng.choice((1, 1, 2, 3))):
        n = rng.choice((1, 2, 3, 9))
        view = _pylog_view(rng, n)
        a = rng.randrange(n + 1)
        parts.append((view.body, view.header, a, rng.randint(a, n), view.headers()))
    row_type: Any = tuple
    kd: Any = None
    vd: Any = None
    for _ in range(rng.choice((0, 0, 1, 2))):
        typed[0] = False
        # An earlier round may have made ``parts`` something that is not a sequence (m == 4): no index then.
        k = rng.randrange(len(parts)) if isinstance(parts, (list, tuple)) and parts else 0
        # An earlier round may also have replaced this part by one of the wrong shape (m == 3).
        body, header, a, b, hlist = parts[k] if isinstance(parts, list) and parts and isinstance(parts[k], tuple) \
            and len(parts[k]) == 5 else (b"", None, 0, 0, None)
        m = rng.randrange(8)
        if m == 0 and isinstance(header, tuple) and len(header) == 13:
            h = list(header)
            h[rng.randrange(13)] = rng.choice(fuzz.INTERESTING_INTS + [1 << 64, -(1 << 70)])
            parts[k] = (body, tuple(h), a, b, hlist)
        elif m == 1 and isinstance(parts, list) and parts:
            parts[k] = (fuzz.mutate_bytes(rng, bytes(body)), header, a, b, hlist)
        elif m == 2 and isinstance(parts, list) and parts:
            parts[k] = (body, header, rng.choice((-1, 0, 1, 9, 10, 1 << 40)), rng.choice((-1, 0, 1, 10, 1 << 63)),
                        hlist)
        elif m == 3 and isinstance(parts, list) and parts:
            parts[k] = rng.choice(((body, header, a, b), [body, header, a, b, hlist], None, "x",
                                   (body, header, "0", b, hlist), (body, header, a, b, rng.choice(([], "x", ())))))
        elif m == 4:
            parts = rng.choice((None, 5, "parts", tuple(parts) if isinstance(parts, (list, tuple)) else ()))
        elif m == 5:
            row_type = rng.choice((list, dict, ConsumerRecordLike, "tuple", None))
        elif m == 6:
            def raising(b: bytes) -> Any:
                raise ValueError("deserializer")
            kd, vd = rng.choice(((raising, None), (None, raising), (5, None), (None, "x")))
    return parts, "t", rng.choice((0, 3, -1)), row_type, kd, vd


class ConsumerRecordLike(tuple):
    """A tuple subclass with a field of its own (its __dict__): not a row type decode_rows accepts."""


def _rowiter_call(*args: Any) -> Any:
    it = pylog.accel.native.consumer_row_iter(*args)
    rows = []
    for _ in range(3):  # a row that raises is tried again: the same error each time
        try:
            rows.extend(it)
            break
        except ValueError as exc:
            if str(exc) != "deserializer":
                raise
    it.close()
    return rows


def _rowiter_reference(args: tuple, got: Any) -> None:
    parts, topic, partition, row_type, kd, vd = args
    expect: list = []
    for body, header, a, b, hlist in parts:
        pylog.accel.native.decode_rows(expect, body, header, a, b, topic, partition, row_type, hlist, kd, vd)
    if got != expect:
        raise AssertionError(f"consumer_row_iter rows {got!r:.300} differ from decode_rows' {expect!r:.300}")


def _ebatches_args(rng: random.Random, typed: list) -> tuple:
    """encode_batches(vlens, vparts, klens, kparts, timestamps, stops, base_offset, default_ts, attrs, producer_id,
    producer_epoch, base_sequence, max_bytes): an append call's records cut into runs, as a producer's drain
    gives them, or with lies: lengths past their parts (2**30 over a few bytes), parts of other types or
    counts, runs out of order or past the records, fields out of range, columns of other dtypes."""
    n = rng.choice((1, 2, 3, 7, 40))
    values = [None if rng.random() < 0.1 else rng.randbytes(rng.choice((0, 1, 5, 100))) for _ in range(n)]
    keys = None if rng.random() < 0.4 else [None if rng.random() < 0.3 else rng.randbytes(rng.choice((0, 8)))
                                            for _ in range(n)]
    vlens: Any = np.array([-1 if v is None else len(v) for v in values], np.int32)
    vparts: Any = [v for v in values if v is not None]
    klens: Any = None if keys is None else np.array([-1 if k is None else len(k) for k in keys], np.int32)
    kparts: Any = [] if keys is None else [k for k in keys if k is not None]
    stops: Any = sorted(rng.sample(range(1, n), rng.randrange(min(n - 1, 5) + 1))) + [n] if n > 1 else [n]
    ts: Any = rng.choice((None, np.full(n, 1_700_000_000_000, np.int64),
                          np.array([rng.randrange(-(1 << 63), 1 << 63) for _ in range(n)], np.int64)))
    fields: list[Any] = [rng.choice((0, rng.randrange(1 << 62))), rng.randrange(1 << 45), rng.choice((0, 0x08, 0x10)),
                         rng.choice((-1, rng.randrange(1 << 62))), rng.choice((-1, 0, 32767)),
                         rng.choice((0, rng.randrange(1 << 31))), rng.choice((1 << 20, 200, 64))]
    for _ in range(rng.choice((0, 0, 1, 2))):
        m = rng.randrange(9)
        if m == 0 and isinstance(vlens, np.ndarray) and len(vlens):
            vlens = vlens.copy()
            vlens[rng.randrange(len(vlens))] = rng.choice((-2, 1 << 30, 0x7FFFFFFF, 7))
        elif m == 1 and isinstance(vparts, list):
            vparts = list(vparts) + [rng.choice((b"x", "x", None, 5, bytearray(b"yy")))]
        elif m == 2 and isinstance(vparts, list) and vparts:
            vparts = list(vparts)
            vparts[rng.randrange(len(vparts))] = rng.choice((b"", "text", memoryview(b"abc"), None, bytearray(3)))
        elif m == 3:
            stops = rng.choice(([0, n], [n, n], [n + 1], [], [-1, n], ["1", n], [n, 1], (n,), None))
        elif m == 4 and isinstance(vlens, np.ndarray):
            vlens = rng.choice((vlens.astype(np.int64), vlens.tolist(), b"\x01\x00\x00", vlens[::2], None))
        elif m == 5:
            ts = rng.choice((np.zeros(n + 1, np.int64), np.zeros(n, np.int32), [0] * n, "ts"))
        elif m == 6:
            fields[rng.randrange(len(fields))] = rng.choice((-(1 << 63), 1 << 63, 1 << 40, -5, 0x3FF, 7, "x", None))
        elif m == 7 and isinstance(klens, np.ndarray):
            klens = klens[: max(0, n - 1)]
        elif m == 8:
            kparts = rng.choice((None, (b"a",), [b"a" * 9]))
    return (vlens, vparts, klens, kparts, ts, stops, *fields)


def _ebatches_reference(args: tuple, got: Any) -> None:
    """An accepted call's batches must be what the pure encoder makes of each run."""
    if got is None:
        return
    vlens, vparts, klens, kparts, ts, stops, base, default_ts, attrs, pid, epoch, seq, _max_bytes = args
    values = _items(vlens, vparts)
    keys = None if klens is None else _items(klens, kparts)
    expect, heads, start = b"", [], 0
    for stop in stops:
        try:
            parts, h = records.encode.encode_parts_pure(
                values[start:stop], None if keys is None else keys[start:stop],
                None if ts is None else ts[start:stop], base_offset=base, default_timestamp=default_ts,
                log_append_time=bool(attrs & 0x08), transactional=bool(attrs & 0x10), producer_id=pid,
                producer_epoch=epoch, base_sequence=-1 if pid < 0 else (seq + start) % (1 << 31))
        except PylogError as exc:
            raise AssertionError(f"encode_batches{args!r:.300} accepted records [{start}, {stop}), which the pure "
                                 f"encoder refuses: {exc!r}") from None
        expect += b"".join(parts)
        heads.append(tuple(h))
        start, base = stop, h.next_offset
    data, fields = got
    if data != expect or [tuple(f) for f in fields] != heads:
        raise AssertionError(f"encode_batches{args!r:.300} differs from the pure encoder's batches")


def _items(lens: Any, parts: list) -> list:
    it = iter(parts)
    return [None if n < 0 else next(it) for n in lens.tolist()]


NATIVE_ARGS: dict[str, tuple[Callable[[random.Random, list], tuple], Callable[[tuple, Any], None] | None]] = {
    "consumer_row_iter": (_rowiter_args, _rowiter_reference),
    "crc32c": (_crc_args, _crc_reference),
    "encode_batches": (_ebatches_args, _ebatches_reference),
    "kafka_parse_records": (_kparse_args, _kparse_reference),
    "kafka_encode_slice": (_kencode_args, _kencode_reference),
}
#: Functions called through a wrapper (the documented arguments of kafka_encode_slice are a BatchView's).
NATIVE_CALLS: dict[str, Callable[..., Any]] = {"kafka_encode_slice": _kencode_call,
                                              "consumer_row_iter": _rowiter_call}
#: Functions whose PylogErrors must also equal the reference's (class and message) on typed arguments.
NATIVE_ERROR_REFERENCES: dict[str, Callable[..., Any]] = {
    "kafka_parse_records": lambda *a: recordbatch.parse_records_pure(*a),
    "kafka_encode_slice": lambda *a: recordbatch.encode_slice_pure(*a) if len(a) == 4 else None,
}


class NativeKind(Kind):
    """Direct calls of every function pylog._native exports that NATIVE_ARGS knows how to call."""

    name = "native"

    def __init__(self, work: str) -> None:
        super().__init__(work)
        from pylog import accel
        mod = accel.native
        self.funcs = {}
        self.skipped = []
        if mod is None:
            return
        for name in sorted(dir(mod)):
            obj = getattr(mod, name)
            if name.startswith("_") or not callable(obj) or isinstance(obj, type):
                continue
            if name in NATIVE_ARGS:
                self.funcs[name] = obj
            else:
                self.skipped.append(name)

    def make(self, rng: random.Random) -> Any:
        if not self.funcs:
            return True, None, ()
        name = rng.choice(sorted(self.funcs))
        typed = [True]
        args = NATIVE_ARGS[name][0](rng, typed)
        return typed[0], name, args

    def typed(self, data: Any) -> bool:
        return data[0]

    def feed(self, data: Any) -> None:
        typed, name, args = data
        if name is None:
            return None
        try:
            got = NATIVE_CALLS.get(name, self.funcs[name])(*args)
        except PylogError as exc:
            ref = NATIVE_ERROR_REFERENCES.get(name)
            if ref is not None and typed:
                try:
                    ref(*args)
                except PylogError as want:
                    if (type(want), str(want)) == (type(exc), str(exc)):
                        raise
                    raise AssertionError(f"{name}: {type(exc).__name__}: {exc}; the reference raised "
                                         f"{type(want).__name__}: {want}") from None
                raise AssertionError(f"{name}: {type(exc).__name__}: {exc}; the reference accepted") from None
            raise
        check = NATIVE_ARGS[name][1]
        if check is not None and (typed or name not in NATIVE_ERROR_REFERENCES):
            check(args, got)
        return None


KINDS: dict[str, type[Kind]] = {c.name: c for c in (BatchKind, IndexKind, SegmentKind, ApiKind, NativeKind,
                                                     KafkaKind)}
assert set(KINDS) == set(FULL_COUNTS)


class Hang(BaseException):
    """Raised by the child's alarm: an input took longer than TIME_LIMIT_S."""


def _on_alarm(signum: int, frame: Any) -> None:
    raise Hang()


def _input_rng(seed: int, kind: str, index: int) -> random.Random:
    return random.Random(f"native:{seed}:{kind}:{index}")


def run_one(kind: Kind, seed: int, index: int) -> tuple[str, str | None, str | None]:
    """(outcome, detail, signature) of input ``index`` of ``kind``."""
    data = kind.make(_input_rng(seed, kind.name, index))
    signal.setitimer(signal.ITIMER_REAL, TIME_LIMIT_S)
    try:
        sig = kind.feed(data)
        return "accepted", None, sig
    except PylogError as exc:
        return ("rejected:" + type(exc).__name__, None,
                "err:" + type(exc).__name__ + (f":{exc}" if kind.messages else ""))
    except Hang:
        return "hang", f"took over {TIME_LIMIT_S} s", "hang"
    except CALLER_ERRORS as exc:
        name = "struct.error" if isinstance(exc, struct.error) else type(exc).__name__
        if not kind.typed(data):
            return "caller_error:" + name, None, "err:" + name
        return ("foreign", f"{type(exc).__name__}: {exc}"[:300] + "\n" + traceback.format_exc(limit=-4),
                "err:" + type(exc).__name__)
    except Exception as exc:  # noqa: BLE001 - the point: any other exception is a violation
        return ("foreign", f"{type(exc).__name__}: {exc}"[:300] + "\n" + traceback.format_exc(limit=-4),
                "err:" + type(exc).__name__)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def _check_build(spec: dict) -> None:
    from pylog import accel
    if spec["role"] == "reference":
        assert not pylog.ACCELERATED, "the reference child must run pure Python"
        return
    assert pylog.ACCELERATED, f"pylog is not accelerated in the ASan child: {accel.REASON}"
    assert accel.native is not None and accel.native.__file__ == spec["so"], \
        f"pylog._native is {getattr(accel.native, '__file__', None)}, not the ASan build {spec['so']}"


def child_main(spec: dict) -> int:
    """A child: fuzz its share of each kind (``role`` fuzz), the pure-Python reference of ``api``
    (``reference``), or the tracemalloc rounds (``leaks``); results to ``spec["result"]``."""
    _child_imports()
    _check_build(spec)
    fuzz.logging_off()
    signal.signal(signal.SIGALRM, _on_alarm)
    with contextlib.suppress(OSError):
        os.nice(10)
    work = tempfile.mkdtemp(prefix=f"{spec['role']}-", dir=os.getcwd())
    with open(spec["progress"], "wb") as f:
        f.write(b"\0" * 64)
    with open(spec["progress"], "r+b") as f:
        progress = mmap.mmap(f.fileno(), 64)
    if spec["role"] == "leaks":
        out = leak_rounds(spec, work, progress)
    else:
        out = fuzz_share(spec, work, progress)
    shutil.rmtree(work, ignore_errors=True)
    with open(spec["result"] + ".tmp", "w") as f:
        json.dump(out, f)
    os.replace(spec["result"] + ".tmp", spec["result"])
    return 0


def _mark(progress: mmap.mmap, kind: str, seed: int, index: int) -> None:
    progress[:64] = f"{kind}:{seed}:{index}".encode().ljust(64)


def fuzz_share(spec: dict, work: str, progress: mmap.mmap) -> dict:
    seed, w, workers = spec["seed"], spec["worker"], spec["workers"]
    counts: dict[str, Counter] = {}
    bad: list = []
    sigs: dict[str, dict[str, str]] = {}
    skipped: list = []
    seconds: dict[str, float] = {}
    for name, n in spec["counts"].items():
        kind = KINDS[name](os.path.join(work, name))
        skipped += getattr(kind, "skipped", [])
        c: Counter = Counter()
        t0 = time.monotonic()
        for i in range(w, n, workers):
            _mark(progress, name, seed, i)
            outcome, detail, sig = run_one(kind, seed, i)
            c[outcome] += 1
            if name in DIFF_KINDS:
                sigs.setdefault(name, {})[str(i)] = sig or ""
            if detail is not None and len(bad) < 10:
                bad.append((name, seed, i, outcome, detail))
        kind.close()
        counts[name] = c
        seconds[name] = round(time.monotonic() - t0, 1)
        if spec["mode"] == "full":
            print(f"    {spec['role']}{w}: {name} {sum(c.values())} inputs in {time.monotonic() - t0:.0f} s",
                  file=sys.stderr, flush=True)
    return {"counts": {k: dict(v) for k, v in counts.items()}, "bad": bad, "sigs": sigs, "skipped": skipped,
            "seconds": seconds}


def _one_round(kind: Kind, inputs: list, progress: mmap.mmap, seed: int) -> tuple[int, Any]:
    """Feed ``inputs`` once; returns the traced bytes and the snapshot they were counted in. Left out: numpy's
    data domain and what numpy's own Python functions allocate (its caches of freed data and shape blocks
    fill over several rounds; an array leaked by pylog's C still counts, as the array object allocated
    under pylog's frame) and tracemalloc's (the snapshots themselves)."""
    import gc
    import tracemalloc
    for i, data in enumerate(inputs):
        _mark(progress, kind.name, seed, i)
        with contextlib.suppress(Exception):
            kind.feed(data)
    gc.collect()
    if not tracemalloc.is_tracing():
        return 0, None
    snap = tracemalloc.take_snapshot().filter_traces([
        tracemalloc.DomainFilter(False, np.lib.tracemalloc_domain),
        tracemalloc.Filter(False, os.path.join(os.path.dirname(np.__file__), "*")),
        tracemalloc.Filter(False, tracemalloc.__file__)])
    return sum(t.size for t in snap.traces), snap


def leak_rounds(spec: dict, work: str, progress: mmap.mmap) -> dict:
    """The same inputs of each kind, ``spec["rounds"]`` times (LEAK_ROUNDS), under tracemalloc when more
    than once (once: for LeakSanitizer's report at exit alone). Caches (pylog's, CPython's) fill in the
    first rounds; a reference leaked in C grows the traced memory by the same amount every round. A kind
    fails when each of the last three rounds grew by more than ``max(LEAK_BYTES_PER_INPUT * inputs,
    LEAK_FLOOR)``; the report shows where the last round's growth was allocated."""
    import tracemalloc
    seed = spec["seed"]
    growth: dict[str, list[int]] = {}
    findings: list[str] = []
    seconds: dict[str, float] = {}
    rounds = spec["rounds"]
    if rounds > 1:
        tracemalloc.start(10)
    for name, n in spec["counts"].items():
        t0 = time.monotonic()
        kind = KINDS[name](os.path.join(work, name))
        inputs = [kind.make(_input_rng(seed, name, i)) for i in range(n)]
        marks = []
        snaps: list = []
        for _ in range(rounds):
            size, snap = _one_round(kind, inputs, progress, seed)
            marks.append(size)
            snaps = (snaps + [snap])[-2:]
        deltas = [b - a for a, b in zip(marks, marks[1:], strict=False)]
        growth[name] = deltas
        limit = max(LEAK_BYTES_PER_INPUT * n, LEAK_FLOOR)
        if len(deltas) >= 3 and min(deltas[-3:]) > limit:
            top = snaps[1].compare_to(snaps[0], "traceback")[:3]
            where = "\n".join(f"{s.size_diff:+d} B in {s.count_diff:+d} blocks at\n  " +
                              "\n  ".join(s.traceback.format()[-8:]) for s in top)
            findings.append(f"leaks: {name}: traced memory grows every round of the same {n} inputs (seed {seed}; "
                            f"bytes per round {deltas}, limit {limit}); the last round's growth:\n{where}")
        kind.close()
        del inputs, snaps
        seconds[name] = round(time.monotonic() - t0, 1)
    tracemalloc.stop()
    return {"growth": growth, "findings": findings, "seconds": seconds}


def repro(spec: str, workdir: str) -> int:
    """Rerun one input in an ASan child, showing its outcome and any report."""
    info = build(workdir)
    kind, seed, index = spec.split(":")
    code = (f"import sys; sys.path.insert(0, {HERE!r}); import fuzz_native as f; f._child_imports(); "
            f"f._check_build({{'role': 'repro', 'so': {info['so']!r}}}); f.fuzz.logging_off(); "
            f"k = f.KINDS[{kind!r}]({os.path.join(workdir, 'repro')!r}); "
            f"d = k.make(f._input_rng({int(seed)}, {kind!r}, {int(index)})); print(repr(d)[:3000]); "
            f"print(f.run_one(k, {int(seed)}, {int(index)})); k.close()")
    proc = subprocess.run([sys.executable, "-P", "-c", code], env=child_env(info), cwd=workdir, text=True,
                          capture_output=True)
    print(proc.stdout)
    rep = read_reports(proc.stderr, info["so"])
    for e in rep["errors"] + rep["native_leaks"]:
        print(e)
    print(f"exit {proc.returncode}; {len(rep['errors'])} sanitizer reports, {len(rep['native_leaks'])} leaks in "
          f"pylog._native ({rep['leaks']} LSan reports in all)")
    return 0 if proc.returncode in (0, 23) and not rep["errors"] and not rep["native_leaks"] else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--full", action="store_true")
    g.add_argument("--short", action="store_true")
    g.add_argument("--repro", metavar="KIND:SEED:INDEX", help="rerun one input in an ASan child and show it")
    g.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--seed", type=int)
    ap.add_argument("--only", help="comma-separated kinds: " + ",".join(FULL_COUNTS))
    ap.add_argument("--workers", type=int, default=WORKERS)
    ap.add_argument("--workdir", default=None, help="default: a temporary directory, removed afterwards")
    args = ap.parse_args(argv)
    if args.child:
        return child_main(json.loads(args.child))
    with contextlib.ExitStack() as stack:
        workdir = args.workdir or stack.enter_context(tempfile.TemporaryDirectory(prefix="pylog-fuzz-native-"))
        os.makedirs(workdir, exist_ok=True)
        if args.repro:
            return repro(args.repro, workdir)
        only = args.only.split(",") if args.only else None
        try:
            result = run("full" if args.full else "short", workdir, args.seed, only, max(1, args.workers))
        except AssertionError as exc:
            print(exc)
            return 1
        print(summary(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
