"""librdkafka's own regression suite against ``pylog serve``: a maintainer's check before a release.

CI cannot download librdkafka's source, so this script is run by hand (like the torture full modes, see
docs/TESTING.md) with a librdkafka source tree (a git checkout of a release tag)::

    python tests/interop/librdkafka_suite.py /path/to/librdkafka            # every broker-facing test
    python tests/interop/librdkafka_suite.py /path/to/librdkafka --tests 0082,0081 --jobs 1
    python tests/interop/librdkafka_suite.py /path/to/librdkafka --no-build --scenario noautocreate
    python tests/interop/librdkafka_suite.py /path/to/librdkafka --no-build --tests 0135,0142 --sasl SCRAM-SHA-256
    python tests/interop/librdkafka_suite.py /path/to/librdkafka --no-build --tests 0081 --subtests DescribeTopics
    python tests/interop/librdkafka_suite.py /path/to/librdkafka --no-build --tests 0081 --authorizer

It
1. builds librdkafka (``./configure`` when not configured yet, without ``--install-deps``: the Debian packages
   libssl-dev, libsasl2-dev, zlib1g-dev, libzstd-dev, liblz4-dev, libcurl4-openssl-dev serve) and its test
   runner (``make -C tests build``), unless ``--no-build``;
2. starts a fresh ``pylog serve`` on a temporary store (127.0.0.1, a free port, topics auto-created with
   ``--num-partitions 4``, what the suite assumes of a broker);
3. writes the ``test.conf`` the runner reads (``bootstrap.servers``, random topic names) and runs every test
   entry of ``tests/test.c`` that is not local-only or manual, one test number per runner process
   (``TESTS=0nnn ./test-runner -L``, full mode, broker version 3.9.0 through ``TEST_KAFKA_VERSION``), each under
   ``--timeout`` seconds, ``--jobs`` at a time;
4. prints PASSED / FAILED / SKIPPED / TIMEOUT per test entry and the counts, writes them to ``--report`` (JSON),
   and compares them with the allow-list (``librdkafka_allowlist.txt`` beside this file: the entries that must
   pass). Every failure should be explained in ``LIBRDKAFKA_FINDINGS.md``.

Exit status: 0 when every allow-listed entry that ran passed, 1 otherwise, 2 when the build or the server
failed. The server's log is kept in the work directory (``--workdir``, a temporary one by default).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ALLOWLIST = HERE / "librdkafka_allowlist.txt"
BROKER_VERSION = "3.9.0"
SASL_USER, SASL_PASSWORD = "rdkafka", "rdkafka-suite-secret"  # a throw-away server on 127.0.0.1
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_FAILED = re.compile(r'^### Test "(\d{4}_\w+)(?: \((.*)\))?" failed at')
_SUMMARY_ROW = re.compile(r"^\|\s*(\d{4}_\w+)\s*\|\s*(\w+)\s*\|\s*([\d.]+)s\s*\|\s*(.*)$")


def test_entries(source: Path) -> list[tuple[str, str]]:
    """(name, flags text) of every ``_TEST(...)`` entry of the runner's table in tests/test.c."""
    src = (source / "tests" / "test.c").read_text(errors="replace")
    pos = src.index("struct test tests[]")
    out = []
    while (start := src.find("_TEST(", pos)) >= 0:
        end, depth = start + len("_TEST("), 1
        while depth:
            depth += {"(": 1, ")": -1}.get(src[end], 0)
            end += 1
        body = " ".join(src[start + len("_TEST("):end - 1].split())
        name, _, flags = body.partition(",")
        out.append((name.strip(), flags))
        pos = end
    return out


def broker_facing(entries: list[tuple[str, str]], scenario: str = "default") -> list[str]:
    """The entries that talk to a broker: not local-only (mock clusters, unit tests) and not manual, of the
    test ``scenario`` (an entry without one is of "default")."""
    def of_scenario(flags: str) -> bool:
        m = re.search(r'\.scenario\s*=\s*"([^"]*)"', flags)
        return scenario in (m.group(1) if m else "default")
    return [n for n, f in entries if "TEST_F_LOCAL" not in f and "TEST_F_MANUAL" not in f and of_scenario(f)]


def build(source: Path, jobs: int) -> None:
    if not (source / "Makefile.config").exists():
        subprocess.run(["./configure", "--disable-gssapi"], cwd=source, check=True)
    subprocess.run(["make", f"-j{jobs}", "libs"], cwd=source, check=True)
    subprocess.run(["make", f"-j{jobs}", "-C", "tests", "build"], cwd=source, check=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(workdir: Path, port: int, sasl: str | None, scenario: str, authorizer: bool) -> subprocess.Popen:
    logf = open(workdir / "server.log", "wb")
    extra = ["--no-auto-create-topics"] if scenario == "noautocreate" else []
    if authorizer:  # the ACL APIs served; the tests' principal is a super user, so no ACL they create blocks them
        extra += ["--authorizer", "--super-users", f"User:{SASL_USER}" if sasl else "User:ANONYMOUS"]
    if sasl:
        users = workdir / "users.json"
        users.write_text(json.dumps({"users": {SASL_USER: SASL_PASSWORD}}))
        users.chmod(0o600)
        extra += ["--sasl-users", str(users), "--sasl-mechanisms", sasl]
    proc = subprocess.Popen([sys.executable, "-m", "pylog", "serve", str(workdir / "store"), "--host", "127.0.0.1",
                             "--port", str(port), "--num-partitions", "4", *extra],
                            stdout=logf, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"pylog serve exited with {proc.returncode}: see {workdir / 'server.log'}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return proc
        except OSError:
            time.sleep(0.2)  # polling a port that is not listening yet: there is no handshake to wait on
    proc.kill()
    raise RuntimeError("pylog serve did not listen within 60 s")


def write_conf(workdir: Path, port: int, multiplier: float, sasl: str | None) -> Path:
    conf = workdir / "test.conf"
    text = (f"bootstrap.servers=127.0.0.1:{port}\n"
            "test.topic.random=true\n"
            f"test.timeout.multiplier={multiplier}\n")
    if sasl:
        text += (f"security.protocol=SASL_PLAINTEXT\nsasl.mechanism={sasl}\n"
                 f"sasl.username={SASL_USER}\nsasl.password={SASL_PASSWORD}\n")
    conf.write_text(text)
    return conf


def run_number(source: Path, number: str, names: list[str], conf: Path, timeout: float, logdir: Path,
               subtests: str | None = None, scenario: str = "default") -> dict[str, dict]:
    """Run every broker-facing entry of test ``number`` in one runner process; each entry's state.
    ``subtests``: only the sub-tests whose name contains it (the runner's SUBTESTS)."""
    libs = f"{source / 'src'}:{source / 'src-cpp'}"  # the runner links the freshly built libraries, as run-test.sh
    env = dict(os.environ, TESTS=number, RDKAFKA_TEST_CONF=str(conf), TEST_KAFKA_VERSION=BROKER_VERSION,
               LD_LIBRARY_PATH=f"{libs}:{os.environ['LD_LIBRARY_PATH']}" if os.environ.get("LD_LIBRARY_PATH")
               else libs)
    env.pop("CI", None)
    if subtests:
        env["SUBTESTS"] = subtests
    started = time.monotonic()
    log = logdir / (f"{number}.log" if not subtests else f"{number}-{re.sub(r'[^A-Za-z0-9_]', '_', subtests)}.log")
    with open(log, "wb") as out:
        try:
            proc = subprocess.run(["./test-runner", "-L", "-p1", "-s", scenario], cwd=source / "tests", env=env,
                                  stdout=out, stderr=subprocess.STDOUT, timeout=timeout, check=False)
            rc: int | None = proc.returncode
        except subprocess.TimeoutExpired:
            rc = None
    elapsed = round(time.monotonic() - started, 1)
    return parse_log(_ANSI.sub("", log.read_text(errors="replace")), names, rc, elapsed, log)


def parse_log(text: str, names: list[str], rc: int | None, elapsed: float, log: Path) -> dict[str, dict]:
    """Each entry's state from a runner's output: its summary table when it printed one (a failed run aborts
    before it), else the progress lines ("Test X PASSED", "SKIPPING TEST", "### Test "X (sub-test)" failed")."""
    found: dict[str, dict] = {}
    lines = text.splitlines()
    for line in lines:
        m = _SUMMARY_ROW.match(line.strip())
        if m and m.group(1) in names:
            found[m.group(1)] = {"state": m.group(2), "seconds": float(m.group(3)), "detail": m.group(4).strip()[:300]}
    if len(found) == len(names):
        return found
    failures: dict[str, str] = {}
    for i, line in enumerate(lines):
        if m := _FAILED.match(line):
            failures.setdefault(m.group(1), f"{m.group(2) or ''} {lines[i + 1] if i + 1 < len(lines) else ''}".strip())
    for name in names:
        if name in found:
            continue
        tag = f"[{name:<21}"[:22]
        if name in failures:
            found[name] = {"state": "FAILED", "seconds": elapsed, "detail": failures[name][:300]}
        elif any(f"Test {name} PASSED" in line for line in lines):
            found[name] = {"state": "PASSED", "seconds": elapsed, "detail": ""}
        elif skipped := [line.split("SKIPPING TEST:", 1)[1].strip() for line in lines
                         if "SKIPPING TEST:" in line and line.startswith(tag)]:
            found[name] = {"state": "SKIPPED", "seconds": 0.0, "detail": skipped[0][:300]}
        else:
            found[name] = {"state": "TIMEOUT" if rc is None else "FAILED", "seconds": elapsed,
                           "detail": f"no result (runner exit status {rc}); see {log}"}
    return found


def read_allowlist(path: Path) -> set[str]:
    if not path.exists():
        return set()
    return {line.split("#", 1)[0].strip() for line in path.read_text().splitlines()} - {""}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("source", type=Path, help="a librdkafka source tree")
    p.add_argument("--tests", help="comma-separated test numbers (default: every broker-facing one)")
    p.add_argument("--jobs", type=int, default=2, help="test numbers run at once (default 2)")
    p.add_argument("--timeout", type=float, default=900, help="seconds per test number (default 900)")
    p.add_argument("--timeout-multiplier", type=float, default=2.0,
                   help="the runner's test.timeout.multiplier (default 2: a loaded machine)")
    p.add_argument("--subtests", help="only the sub-tests whose name contains this (the runner's SUBTESTS), e.g. "
                                      "DescribeTopics with --tests 0081: a failed sub-test ends its test's run")
    p.add_argument("--scenario", choices=["default", "noautocreate"], default="default",
                   help="the runner's test scenario; noautocreate serves --no-auto-create-topics and runs the tests "
                        "that need a broker without topic auto-creation (0045 sub-entries, 0107, 0111)")
    p.add_argument("--authorizer", action="store_true",
                   help="serve with pylog's authorizer (the tests' principal a super user): the ACL sub-tests of 0081")
    p.add_argument("--sasl", choices=["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"],
                   help="serve SASL_PLAINTEXT with this mechanism (the SASL tests, e.g. 0135 and 0142, need it)")
    p.add_argument("--no-build", action="store_true", help="use the test runner as built")
    p.add_argument("--workdir", type=Path, help="where the store, test.conf and logs go (default: a temporary "
                                                "directory, removed unless something failed)")
    p.add_argument("--report", type=Path, help="write the results as JSON here")
    p.add_argument("--allowlist", type=Path, default=ALLOWLIST)
    p.add_argument("--update-allowlist", action="store_true",
                   help="add the entries that passed to the allow-list (after a run of every test: none is removed)")
    args = p.parse_args(argv)
    source = args.source.resolve()
    entries = test_entries(source)
    names = broker_facing(entries, args.scenario)
    if args.tests:
        wanted = {t.strip().zfill(4) for t in args.tests.split(",") if t.strip()}
        names = [n for n in names if n[:4] in wanted]
    by_number: dict[str, list[str]] = {}
    for n in names:
        by_number.setdefault(n[:4], []).append(n)
    if not args.no_build:
        try:
            build(source, max(1, args.jobs))
        except subprocess.CalledProcessError as exc:
            print(f"build failed: {exc}", file=sys.stderr)
            return 2
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="pylog-librdkafka-"))
    workdir.mkdir(parents=True, exist_ok=True)
    logdir = workdir / "logs"
    logdir.mkdir(exist_ok=True)
    port = free_port()
    try:
        server = start_server(workdir, port, args.sasl, args.scenario, args.authorizer)
    except RuntimeError as exc:
        print(exc, file=sys.stderr)
        return 2
    conf = write_conf(workdir, port, args.timeout_multiplier, args.sasl)
    print(f"librdkafka {source} ({len(names)} broker-facing entries, {len(by_number)} test numbers) against "
          f"pylog serve 127.0.0.1:{port}, store {workdir / 'store'}", flush=True)
    results: dict[str, dict] = {}
    try:
        with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:
            futures = {pool.submit(run_number, source, num, group, conf, args.timeout, logdir, args.subtests,
                                   args.scenario): num
                       for num, group in sorted(by_number.items())}
            for fut in concurrent.futures.as_completed(futures):
                for name, res in sorted(fut.result().items()):
                    results[name] = res
                    print(f"{name:48} {res['state']:8} {res['seconds']:8.1f}s  {res['detail'][:120]}", flush=True)
                if server.poll() is not None:
                    print(f"pylog serve exited with {server.returncode} during the run", file=sys.stderr)
    finally:
        server.terminate()
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
    counts: dict[str, int] = {}
    for res in results.values():
        counts[res["state"]] = counts.get(res["state"], 0) + 1
    allow = read_allowlist(args.allowlist)
    ran = {n for n, r in results.items() if r["state"] != "SKIPPED"}
    regressions = sorted(n for n in allow & set(results) if results[n]["state"] != "PASSED")
    new_passes = sorted(n for n, r in results.items() if r["state"] == "PASSED" and n not in allow)
    print(f"\n{len(results)} entries: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) +
          f" ({len(ran)} ran); allow-list {len(allow)} entries, {len(regressions)} of them not passing")
    for n in regressions:
        print(f"  allow-listed but {results[n]['state']}: {n}")
    for n in new_passes:
        print(f"  passed, not allow-listed (add it): {n}")
    if args.update_allowlist and new_passes:
        head = [line for line in (args.allowlist.read_text().splitlines() if args.allowlist.exists() else [])
                if line.startswith("#")]
        args.allowlist.write_text("\n".join(head + sorted(allow | set(new_passes))) + "\n")
        print(f"allow-list {args.allowlist}: {len(allow | set(new_passes))} entries")
    if args.report:
        args.report.write_text(json.dumps({"source": str(source), "counts": counts, "results": results,
                                           "regressions": regressions, "new_passes": new_passes}, indent=1))
    failed = regressions or server.returncode not in (0, -15)
    if not failed and not args.workdir:
        shutil.rmtree(workdir, ignore_errors=True)
    else:
        print(f"logs: {logdir}, server log: {workdir / 'server.log'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
