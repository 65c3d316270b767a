"""The docs stay in step with the code: docs/CONFIGURATION.md's tables against the settings the code
accepts, every ``pylog ...`` command line in docs/OPERATIONS.md against the real CLI parser, every API name
docs/OPERATIONS.md cites against real objects, every test docs/GUARANTEES.md cites against the test files,
and every relative link (and anchor) in README.md, CHANGELOG.md and docs/: it must resolve to a file inside
the repository.
"""

from __future__ import annotations

import ast
import math
import re
import shlex
from pathlib import Path

import pytest

import pylog
from pylog import config
from pylog.clients.assignors import assignor_named
from pylog.cli import with_default_action, build_parser
from pylog.clients.consumer_config import DEFAULTS as CONSUMER_DEFAULTS
from pylog.clients.producer import _DEFAULTS as PRODUCER_DEFAULTS

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
CONFIGURATION = ROOT / "docs" / "CONFIGURATION.md"
GUARANTEES = ROOT / "docs" / "GUARANTEES.md"
OPERATIONS = ROOT / "docs" / "OPERATIONS.md"
#: Written by the benchmark suite, possibly after these docs: a link to it is checked only once it exists.
MAY_NOT_EXIST_YET = {ROOT / "benchmarks" / "results" / "REPORT.md"}

_FENCE = re.compile(r"^[ \t]*(```+|~~~+)[ \t]*([\w+-]*)[^\n]*\n(.*?)^[ \t]*\1[ \t]*$", re.S | re.M)
_INLINE_CODE = re.compile(r"(`+)(.+?)\1", re.S)


def _cells(row: str) -> list[str]:
    """The cells of a Markdown table row; a '|' inside a code span does not split."""
    cells, cell, in_code = [], [], False
    for ch in row.strip().strip("|"):
        if ch == "`":
            in_code = not in_code
        if ch == "|" and not in_code:
            cells.append("".join(cell).strip())
            cell = []
        else:
            cell.append(ch)
    cells.append("".join(cell).strip())
    return cells


# ------------------------------------------------------------------------------------ configuration table

def _doc_value(cell: str):
    """The value a default cell states: its first code span, read as a Python literal or arithmetic
    (``1 << 30``, ``None``, ``["range"]``, ``inf``), else as the bare string (``delete``, ``CreateTime``)."""
    m = re.search(r"`([^`]+)`", cell)
    assert m, f"default cell {cell!r} has no `value`"
    text = m.group(1)
    if text == "inf":
        return math.inf
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        return text
    allowed = (ast.Expression, ast.Constant, ast.UnaryOp, ast.USub, ast.BinOp, ast.Add, ast.Sub, ast.Mult,
               ast.Pow, ast.LShift, ast.List, ast.Tuple, ast.Load)
    if not all(isinstance(node, allowed) for node in ast.walk(tree)):
        return text
    return eval(compile(tree, "CONFIGURATION.md", "eval"), {"__builtins__": {}})  # only literals and arithmetic


def _config_tables() -> dict[str, dict[str, str]]:
    """``{"Topic settings": {name: default cell}, ...}`` from the ``## ...`` sections of docs/CONFIGURATION.md."""
    tables: dict[str, dict[str, str]] = {}
    current = None
    for line in CONFIGURATION.read_text().splitlines():
        if line.startswith("## "):
            current = tables.setdefault(line[3:].strip(), {})
        elif line.startswith("| `") and current is not None:
            cells = _cells(line)
            name = cells[0].strip("`")
            assert name not in current, f"{name} appears twice in one configuration table"
            current[name] = cells[1]
    return tables


def _strategy_names(value) -> list[str]:
    return [assignor_named(s).name for s in ([value] if isinstance(value, str) else value)]


@pytest.mark.parametrize("table, code", [
    ("Topic settings", config.SETTINGS),
    ("Store settings", config.STORE_SETTINGS),
    ("Remote storage settings", config.REMOTE_STORAGE_SETTINGS),
])
def test_configuration_doc_lists_every_topic_and_store_setting_with_its_default(table, code):
    rows = _config_tables()[table]
    assert set(rows) == set(code), (f"docs/CONFIGURATION.md '{table}' differs from the code: missing "
                                    f"{sorted(set(code) - set(rows))}, unknown {sorted(set(rows) - set(code))}")
    for name, cell in rows.items():
        setting = code[name]
        stated = config.parse_value(setting, _doc_value(cell))
        # ^ the library's own rules, as for any user value
        assert stated == config.parse_value(setting, setting.default), f"{name}: the doc says {cell!r}, code {setting.default!r}"


@pytest.mark.parametrize("table, code", [
    ("Producer settings", PRODUCER_DEFAULTS),
    ("Consumer settings", CONSUMER_DEFAULTS),
])
def test_configuration_doc_lists_every_client_setting_with_its_default(table, code):
    rows = _config_tables()[table]
    assert set(rows) == set(code), (f"docs/CONFIGURATION.md '{table}' differs from the code: missing "
                                    f"{sorted(set(code) - set(rows))}, unknown {sorted(set(rows) - set(code))}")
    for name, cell in rows.items():
        stated, default = _doc_value(cell), code[name]
        if name == "partition_assignment_strategy":
            stated, default = _strategy_names(stated), _strategy_names(default)
        assert stated == default and type(stated) is type(default), \
            f"{name}: the doc says {cell!r}, code {default!r}"


def test_configuration_value_reader_is_strict():
    """The comparison above can fail: a wrong default or a missing setting is noticed."""
    assert _doc_value("`1073741824` (1 GiB)") == 1 << 30 and _doc_value("`delete`") == "delete"
    assert _doc_value("`None`") is None and _doc_value('`["range", "roundrobin"]`') == ["range", "roundrobin"]
    assert config.parse_value(config.SETTINGS["segment.bytes"], _doc_value("`1048576`")) != 1 << 30
    assert _doc_value("`__import__('os')`") == "__import__('os')"  # never evaluated
    with pytest.raises(AssertionError):
        _doc_value("1 GiB")


# -------------------------------------------------------------------------------- OPERATIONS.md commands

#: Upper-case placeholders that stand for numbers in command lines (the parser checks numbers).
_NUMBER_PLACEHOLDERS = {"N", "PARTITION", "OFFSET", "R", "MS"}
_OPERATORS = {"|", "||", "&&", ";", "&"}
_REDIRECTS = {">", ">>", "<", "2>", "&>"}


def _argv_lists(line: str) -> list[list[str]]:
    """The argument lists of the ``pylog`` commands in one shell line (pipes and ``;`` split it)."""
    lex = shlex.shlex(line, posix=True, punctuation_chars=True)
    lex.whitespace_split = True
    lex.commenters = "#"
    out: list[list[str]] = []
    for piece in _split(list(lex), _OPERATORS):
        if piece and piece[0] == "pylog":
            args = []
            for token in piece[1:]:
                if token in _REDIRECTS:
                    break
                args.append("1" if token in _NUMBER_PLACEHOLDERS else token)
            out.append(args)
    return out


def _split(tokens: list[str], separators: set[str]) -> list[list[str]]:
    pieces: list[list[str]] = [[]]
    for token in tokens:
        if token in separators:
            pieces.append([])
        else:
            pieces[-1].append(token)
    return pieces


def _command_lines(text: str) -> list[str]:
    """Shell lines quoted in ``text``: every line of ``bash``/``sh`` blocks (``\\`` continues a line), the
    ``$ `` lines of ``console`` blocks, and inline code spans that start with ``pylog ``."""
    lines: list[str] = []
    for m in _FENCE.finditer(text):
        lang, block = m.group(2), m.group(3)
        if lang in ("bash", "sh", "shell"):
            lines.extend(line.strip() for line in block.replace("\\\n", " ").splitlines() if line.strip())
        elif lang == "console":
            lines.extend(line.strip()[2:] for line in block.splitlines() if line.strip().startswith("$ "))
    prose = _FENCE.sub("", text)
    lines.extend(m.group(2).strip() for m in _INLINE_CODE.finditer(prose) if m.group(2).startswith("pylog "))
    return lines


def test_every_pylog_command_line_in_operations_parses():
    parser = build_parser()
    commands = set(parser._subparsers._group_actions[0].choices)  # the command names pylog has
    checked: list[list[str]] = []
    for line in _command_lines(OPERATIONS.read_text()):
        for argv in _argv_lists(line):
            if len(argv) == 1:  # a command named in prose (`pylog health`), not a command line
                assert argv[0] in commands, f"docs/OPERATIONS.md names `pylog {argv[0]}`, which does not exist"
                continue
            try:
                build_parser().parse_args(with_default_action(list(argv)))
            except SystemExit as exc:
                pytest.fail(f"docs/OPERATIONS.md: `{line}` does not parse (exit {exc.code})")
            checked.append(argv)
    cited = {argv[0] for argv in checked}
    assert {"topics", "produce", "consume", "dump", "verify", "retention", "compact", "delete-records",
            "groups", "health"} <= cited, f"expected the runbooks to use these commands, found {sorted(cited)}"
    assert len(checked) >= 30


def test_command_line_extraction_finds_and_rejects():
    """The parse check above can fail: a bad option is caught, quoting and pipes are understood."""
    assert _argv_lists("seq 3 | pylog produce data t --key-separator : > /dev/null  # note") == [
        ["produce", "data", "t", "--key-separator", ":"]]
    assert _argv_lists("pylog delete-records STORE TOPIC PARTITION OFFSET") == [
        ["delete-records", "STORE", "TOPIC", "1", "1"]]
    assert _command_lines("```console\n$ pylog verify data\nverify: ok\n```\nrun `pylog health` and `ls`\n") == [
        "pylog verify data", "pylog health"]
    with pytest.raises(SystemExit):
        build_parser().parse_args(["verify", "data", "--no-such-option"])


# ------------------------------------------------------------------------------- OPERATIONS.md API names

def test_api_names_cited_in_operations_exist(tmp_path):
    """Every ``store.x``, ``p.x``, ``topic.x``, ``producer.x`` and ``consumer.x`` in a code span of
    docs/OPERATIONS.md is an attribute of the real object."""
    with pylog.open(tmp_path / "s", log_cleaner_enable=False) as store:
        topic = store.create_topic("t")
        p = topic.partition(0)
        p.append_values([b"v"])
        with store.producer() as producer, store.consumer("t") as consumer:
            objects = {"store": store, "topic": topic, "p": p, "producer": producer, "consumer": consumer}
            cited = set()
            for m in _INLINE_CODE.finditer(_FENCE.sub("", OPERATIONS.read_text())):
                for name, attr in re.findall(r"\b(store|topic|p|producer|consumer)\.([A-Za-z_]\w*)", m.group(2)):
                    cited.add((name, attr))
            missing = sorted(f"{name}.{attr}" for name, attr in cited if not hasattr(objects[name], attr))
            assert not missing, f"docs/OPERATIONS.md cites API that does not exist: {missing}"
            assert len(cited) >= 15


# ----------------------------------------------------------------------------------------------- links

def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation other than '-' and '_' dropped, spaces to '-'."""
    text = re.sub(r"[`*]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for m in re.finditer(r"^#{1,6} +(.+?) *#*$", _FENCE.sub("", path.read_text()), re.M):
        slug = _slug(m.group(1))
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def _links(path: Path) -> list[str]:
    text = _INLINE_CODE.sub("", _FENCE.sub("", path.read_text()))
    return re.findall(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)", text)


_DOCS = [README, ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]


def _link_problems(doc: Path, root: Path = ROOT) -> list[str]:
    """What is wrong with the relative links of ``doc``: a target outside ``root`` (the repository, which
    is all a reader of a copy has), a missing file, or a missing heading anchor in a Markdown file. A path
    quoted in a code span that climbs up a directory (``../shared/DESIGN.md``) counts as a link: it must
    name a file of the repository."""
    problems = []
    for m in _INLINE_CODE.finditer(_FENCE.sub("", doc.read_text())):
        quoted = m.group(2).strip()
        if re.fullmatch(r"(\.\./)+[\w./-]+", quoted):
            dest = (doc.parent / quoted).resolve()
            if not dest.is_relative_to(root.resolve()):
                problems.append(f"`{quoted}`: a path outside the repository")
            elif not dest.exists():
                problems.append(f"`{quoted}`: no such file in the repository")
    for target in _links(doc):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        if file_part.startswith("/"):
            problems.append(f"{target}: an absolute path, not a link inside the repository")
            continue
        dest = (doc.parent / file_part).resolve() if file_part else doc
        if not dest.is_relative_to(root.resolve()):
            problems.append(f"{target}: outside the repository")
            continue
        if not dest.exists():
            if dest not in MAY_NOT_EXIST_YET:
                problems.append(f"{target}: no such file")
            continue
        if anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            problems.append(f"{target}: no heading with that anchor in {dest.name}")
    return problems


@pytest.mark.parametrize("doc", _DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_point_at_files_and_headings_inside_the_repository(doc):
    problems = _link_problems(doc)
    assert not problems, f"{doc.relative_to(ROOT)}: " + "; ".join(problems)


def test_links_outside_the_repository_are_refused(tmp_path):
    """The link check can fail: a link that leaves the repository is caught even when its file exists."""
    repo = tmp_path / "repo"
    (repo / "docs").mkdir(parents=True)
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "DESIGN.md").write_text("# Design\n")
    doc = repo / "docs" / "A.md"
    doc.write_text("# A\n[in](A.md#a) [up](../../shared/DESIGN.md) [abs](/etc/hostname) [gone](B.md)\n"
                   "The shape is `../../shared/DESIGN.md` or `../shared/DESIGN.md`; `../docs/A.md` is here.\n")
    problems = _link_problems(doc, root=repo)
    assert len(problems) == 5, problems
    assert "path outside the repository" in problems[0] and "no such file in the repository" in problems[1]
    assert "outside the repository" in problems[2] and "absolute path" in problems[3]
    assert "no such file" in problems[4]


def test_link_checker_sees_links_and_anchors(tmp_path):
    doc = tmp_path / "x.md"
    doc.write_text("# Top\n## Record batch (`.log` files)\nsee [a](#record-batch-log-files), [b](y.md#z)\n"
                   "`[not](a-link.md)`\n```\n[nor](this.md)\n```\n")
    assert _links(doc) == ["#record-batch-log-files", "y.md#z"]
    assert _anchors(doc) == {"top", "record-batch-log-files"}


# ------------------------------------------------------------------------------- GUARANTEES.md test names

_CITED_TEST = re.compile(r"`(tests/[\w/]+\.py)::([\w:]+)`")


def _test_names(path: Path) -> set[str]:
    """The tests pytest can collect from ``path`` by name: module-level ``test_*`` functions as ``name``,
    methods of ``Test*`` classes as ``Class::name`` and as plain ``name``."""
    tree = ast.parse(path.read_text(), str(path))
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
            names.add(node.name)
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name.startswith("test"):
                    names |= {item.name, f"{node.name}::{item.name}"}
    return names


def _missing_citations(text: str, root: Path = ROOT) -> list[str]:
    missing = []
    for file, name in _CITED_TEST.findall(text):
        path = root / file
        if not path.is_file():
            missing.append(f"{file}::{name}: no such file")
        elif name not in _test_names(path):
            missing.append(f"{file}::{name}: no such test in {file}")
    return missing


def test_every_test_cited_in_guarantees_exists():
    text = GUARANTEES.read_text()
    cited = _CITED_TEST.findall(text)
    assert len(cited) >= 40, f"expected each guarantee to cite its tests, found {len(cited)}"
    missing = _missing_citations(text)
    assert not missing, "docs/GUARANTEES.md cites tests that do not exist: " + "; ".join(missing)


def test_every_guarantee_section_cites_a_test():
    sections = re.split(r"^## ", _FENCE.sub("", GUARANTEES.read_text()), flags=re.M)[1:]
    assert len(sections) >= 14
    uncited = [s.splitlines()[0] for s in sections if not _CITED_TEST.search(s)]
    assert not uncited, f"docs/GUARANTEES.md sections without a test: {uncited}"


def test_citation_check_finds_functions_and_methods_and_rejects_the_rest(tmp_path):
    """The citation check above can fail: a renamed test, a helper or a missing file is caught."""
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text(
        "def test_a():\n    pass\n\ndef helper():\n    pass\n\n"
        "class TestB:\n    def test_c(self):\n        pass\n")
    good = "`tests/test_x.py::test_a` `tests/test_x.py::TestB::test_c` `tests/test_x.py::test_c`"
    assert _missing_citations(good, tmp_path) == []
    bad = "`tests/test_x.py::test_gone` `tests/test_x.py::helper` `tests/test_y.py::test_a`"
    assert len(_missing_citations(bad, tmp_path)) == 3
