"""Output of the command line: tables, progress bars and the text form of records.

Everything a command prints goes to the ``out`` stream it was given, as plain text that scripts can parse
(aligned columns, one row per line): that is what a pipe, a file or a test sees. On a terminal, tables
are drawn with ``rich`` and work that takes more than :data:`PROGRESS_DELAY` seconds shows a progress bar
on stderr. ``rich`` is optional (``pip install rich``): imported behind a guard, and without it a terminal
gets the plain tables and a one-line text progress indicator.
"""

from __future__ import annotations

import base64
import datetime as _dt
import sys
import time
from typing import Any, Sequence, TextIO

__all__ = ["Table", "Progress", "PROGRESS_DELAY", "rich_console", "text_of", "json_bytes", "bytes_from_json",
           "format_ms", "format_bytes", "report_partition"]

#: Work shorter than this shows no progress bar (seconds).
PROGRESS_DELAY = 1.0
#: Least time between two redraws of the plain progress line (seconds).
_PLAIN_REDRAW = 0.1


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def rich_console(stream: Any) -> Any:
    """A ``rich`` console writing to ``stream`` when it is a terminal and rich is installed, else None."""
    if not _isatty(stream):
        return None
    try:
        from rich.console import Console
    except ImportError:
        return None
    return Console(file=stream, highlight=False)


class Table:
    """Rows under named columns: aligned plain text, or a rich table on a terminal.

    Cells are printed with ``str()``; None prints as ``-`` (Kafka's tools' "no value"). Columns whose
    cells are all numbers are right-aligned in the rich form.
    """

    def __init__(self, *columns: str, title: str | None = None) -> None:
        self.columns = columns
        self.title = title
        self.rows: list[tuple[str, ...]] = []
        self._numeric = [True] * len(columns)

    def add_row(self, *cells: Any) -> None:
        if len(cells) != len(self.columns):
            raise ValueError(f"{len(cells)} cells for {len(self.columns)} columns")
        for i, c in enumerate(cells):
            if c is not None and not isinstance(c, (int, float)):
                self._numeric[i] = False
        self.rows.append(tuple("-" if c is None else str(c) for c in cells))

    def print(self, out: TextIO) -> None:
        console = rich_console(out)
        if console is not None:
            from rich.table import Table as RichTable
            from rich.text import Text  # plain text: a '[' in a cell is not rich markup
            t = RichTable(title=Text(self.title) if self.title else None, title_justify="left")
            for name, numeric in zip(self.columns, self._numeric, strict=True):
                t.add_column(Text(name), justify="right" if numeric and self.rows else "left")
            for row in self.rows:
                t.add_row(*map(Text, row))
            console.print(t)
            return
        if self.title:
            print(self.title, file=out)
        widths = [max([len(c)] + [len(r[i]) for r in self.rows]) for i, c in enumerate(self.columns)]
        for row in (self.columns, *self.rows):
            print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip(), file=out)


class Progress:
    """Progress of work with a known ``total`` (e.g. bytes or records), drawn on stderr once the work has
    taken :data:`PROGRESS_DELAY` seconds, and only when stderr is a terminal. A rich bar when rich is
    installed, a one-line text indicator otherwise; removed when closed. Use as a context manager."""

    def __init__(self, description: str, total: int | None, unit: str = "") -> None:
        self.description = description
        self.total = total
        self.unit = unit
        self.done = 0
        self._stream = sys.stderr
        self._enabled = _isatty(self._stream)
        self._start = time.monotonic()
        self._rich: Any = None
        self._task: Any = None
        self._plain = False
        self._last_draw = 0.0

    def advance(self, n: int = 1) -> None:
        self.done += n
        if not self._enabled:
            return
        now = time.monotonic()
        if self._rich is None and not self._plain:
            if now - self._start < PROGRESS_DELAY:
                return
            self._open()
        if self._rich is not None:
            self._rich.update(self._task, completed=self.done)
        elif now - self._last_draw >= _PLAIN_REDRAW:
            self._last_draw = now
            self._draw_plain()

    def _open(self) -> None:
        try:
            from rich.console import Console
            from rich import progress as rp
        except ImportError:
            self._plain = True
            return
        columns = [rp.TextColumn("{task.description}"), rp.BarColumn(), rp.TaskProgressColumn(),
                   rp.MofNCompleteColumn(), rp.TimeElapsedColumn(), rp.TimeRemainingColumn()]
        self._rich = rp.Progress(*columns, console=Console(file=self._stream), transient=True)
        self._task = self._rich.add_task(self.description, total=self.total, completed=self.done)
        self._rich.start()

    def _draw_plain(self) -> None:
        if self.total:
            text = f"{self.description}: {100 * self.done / self.total:3.0f}% ({self.done:,}/{self.total:,}{self.unit})"
        else:
            text = f"{self.description}: {self.done:,}{self.unit}"
        self._stream.write("\r" + text)
        self._stream.flush()

    def close(self) -> None:
        if self._rich is not None:
            self._rich.stop()
            self._rich = None
        elif self._plain and self._last_draw:
            self._stream.write("\r\033[K")  # erase the indicator line
            self._stream.flush()
        self._enabled = False

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


# ----------------------------------------------------------------------------------------- record text

#: Control characters as ``\\xNN`` (what :func:`text_of` does with ``escape``).
_ESCAPES = {c: f"\\x{c:02x}" for c in [*range(0x20), 0x7F]}


def text_of(data: bytes | None, null: str = "null", escape: bool = False) -> str:
    """Bytes as text: UTF-8, with undecodable bytes shown as ``\\xNN`` (and, with ``escape``, control
    characters too, so that a value stays on one line); ``null`` for None."""
    if data is None:
        return null
    text = bytes(data).decode("utf-8", "backslashreplace")
    return text.translate(_ESCAPES) if escape else text


def json_bytes(data: bytes | None) -> Any:
    """Bytes in JSON, reversibly (:func:`bytes_from_json`): UTF-8 text as a string, anything else as
    ``{"base64": "..."}``, None as null."""
    if data is None:
        return None
    data = bytes(data)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode("ascii")}


def bytes_from_json(value: Any, what: str) -> bytes | None:
    """The inverse of :func:`json_bytes`. :raises ValueError: naming ``what`` for anything else."""
    if value is None:
        return None
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, dict) and set(value) == {"base64"} and isinstance(value["base64"], str):
        try:
            return base64.b64decode(value["base64"], validate=True)
        except ValueError:
            raise ValueError(f"{what}: bad base64") from None
    raise ValueError(f"{what} must be a string, null or {{\"base64\": ...}}, got {type(value).__name__}")


def format_ms(ms: int | None) -> str | None:
    """Milliseconds since the epoch as UTC ISO 8601 to the second (None stays None)."""
    if ms is None:
        return None
    return _dt.datetime.fromtimestamp(ms / 1000, _dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_bytes(n: int) -> str:
    """``1.5 MiB``-style sizes (bytes below 1 KiB as a plain count)."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{n} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def report_partition(out: TextIO, name: str, what: str, start: int, end: int, found: Sequence[str]) -> None:
    """One partition's line of a check (``name: what, offsets [start, end): ok`` or its problem count), then
    each problem indented."""
    status = "ok" if not found else f"{len(found)} problem(s)"
    print(f"{name}: {what}, offsets [{start}, {end}): {status}", file=out)
    for line in found:
        print(f"  {line}", file=out)
