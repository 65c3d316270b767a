"""A child Python process for multi-process tests: ``python -c`` code whose stdout lines arrive on a queue,
so the parent waits for each with a timeout. No file descriptor or lock is inherited from the test process.
"""

from __future__ import annotations

import queue
import subprocess
import sys
import textwrap
import threading
import time

import pytest


class Child:
    """A ``python -c`` child whose stdout lines arrive on a queue, so the parent can wait with a timeout."""

    def __init__(self, code: str, *args: str, cwd: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), *args], cwd=cwd,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.stderr: list[str] = []
        threading.Thread(target=self._pump_out, daemon=True).start()
        threading.Thread(target=self._pump_err, daemon=True).start()

    def _pump_out(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def _pump_err(self) -> None:
        for line in self.proc.stderr:
            self.stderr.append(line)

    def expect(self, prefix: str, timeout: float = 60) -> str:
        """The next stdout line, which must start with ``prefix``; fails after ``timeout`` seconds."""
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            pytest.fail(f"child said nothing for {timeout}s (waiting for {prefix!r}); stderr: {self.err()}")
        if line is None:
            self.proc.wait(5)
            pytest.fail(f"child exited ({self.proc.returncode}) before {prefix!r}; stderr: {self.err()}")
        assert line.startswith(prefix), f"expected {prefix!r}, child said {line!r}; stderr: {self.err()}"
        return line[len(prefix):].strip()

    def send(self, line: str) -> None:
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"child still running after {timeout}s; stderr: {self.err()}")

    def err(self) -> str:
        time.sleep(0.05)
        return "".join(self.stderr)[-3000:]

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            pass
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            try:
                f.close()
            except Exception:
                pass
