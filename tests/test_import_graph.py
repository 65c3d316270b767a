"""pylog's import graph has no cycle, between packages or inside one (docs/ARCHITECTURE.md: "no import cycle").

setup.cfg's ``acyclic_siblings`` contract (``lint-imports``) checks each package's children taken together;
this test checks single modules too: every strongly connected component of the module graph, built by grimp
(import-linter's graph library) with ``TYPE_CHECKING`` imports included, is one module.
"""

from __future__ import annotations

import grimp


def strongly_connected(graph: grimp.ImportGraph) -> list[set[str]]:
    """The graph's cycles: its strongly connected components of more than one module, or of one module that
    imports itself (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[set[str]] = []
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.find_modules_directly_imported_by(child)))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    m = stack.pop()
                    on_stack.discard(m)
                    component.add(m)
                    if m == node:
                        break
                if len(component) > 1 or graph.direct_import_exists(importer=node, imported=node):
                    cycles.append(component)
    return cycles


def test_cycle_finder_finds_a_cycle_inside_a_package_and_across_packages() -> None:
    g = grimp.ImportGraph()
    for m in ("p", "p.a", "p.b", "p.c", "q", "q.x", "q.y"):
        g.add_module(m)
    g.add_import(importer="p.a", imported="p.b")
    g.add_import(importer="p.b", imported="p.a")        # inside package p
    g.add_import(importer="p.c", imported="q.x")
    g.add_import(importer="q.x", imported="q.y")
    g.add_import(importer="q.y", imported="p.c")        # across packages
    assert sorted(map(sorted, strongly_connected(g))) == [["p.a", "p.b"], ["p.c", "q.x", "q.y"]]


def test_pylog_has_no_import_cycle() -> None:
    graph = grimp.build_graph("pylog", cache_dir=None)
    assert len(graph.modules) > 50  # the whole package was found
    cycles = strongly_connected(graph)
    assert cycles == [], "import cycles in pylog (break each; never with an import inside a function):\n" + \
        "\n".join(" <-> ".join(sorted(c)) for c in cycles)
