"""The architecture, enforced: import-linter's contracts (pyproject.toml [tool.importlinter]) hold,
no engine module names gui/Qt in a string import, no import cycle joins engine modules, and mypy is
clean on engine/ and gui/."""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[1]
ENGINE = ROOT / "engine"
QT_OR_APP = ("gui", "PySide6", "PyQt5", "PyQt6", "pyqtgraph", "shiboken6")

#: module-level import cycles between engine modules that exist today, each with why it may stay.
#: Any other cycle, or a module joining one of these, fails test_no_import_cycles_between_engine_modules.
ALLOWED_CYCLES: dict[frozenset[str], str] = {}


def test_mypy_is_clean_on_engine_and_gui():
    """The type check is part of the test command (per-module exceptions for gui/ in pyproject.toml)."""
    if importlib.util.find_spec("mypy") is None:
        pytest.skip("mypy is not installed (pip install -e '.[test]')")
    res = subprocess.run([sys.executable, "-m", "mypy", "engine", "gui"], cwd=ROOT, capture_output=True, text=True,
                         timeout=900)
    assert res.returncode == 0, f"mypy found errors:\n{res.stdout[-6000:]}\n{res.stderr[-2000:]}"


def test_import_linter_contracts_are_kept():
    code = ("import sys\nfrom importlinter.cli import lint_imports\n"
            "sys.exit(lint_imports(no_cache=True, no_logo=True))\n")
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, f"lint-imports found broken contracts:\n{res.stdout}\n{res.stderr}"
    assert "0 broken" in res.stdout, res.stdout


def _string_imports(tree: ast.AST) -> list[tuple[int, str]]:
    """``importlib.import_module("x")`` / ``__import__("x")`` calls with a literal name: (line, name)."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        f = node.func
        name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
        arg = node.args[0]
        if name in ("import_module", "__import__") and isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            found.append((node.lineno, arg.value))
    return found


def test_engine_imports_no_app_or_qt_by_string():
    """import-linter cannot see ``import_module("...")``; this does (literal names only)."""
    offenders = []
    for path in sorted(ENGINE.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for line, name in _string_imports(tree):
            if name.split(".")[0] in QT_OR_APP:
                offenders.append(f"{path.relative_to(ROOT)}:{line} imports {name!r}")
        # a table of module names fed to import_module later (like the CLI's verbs) counts too
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                head = node.value.split(".")[0]
                if head in QT_OR_APP and node.value.replace(".", "").replace("_", "").isalnum() and "." in node.value:
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} names module {node.value!r}")
    assert not offenders, "engine reaches the app or Qt by name:\n" + "\n".join(offenders)


def test_string_import_finder_sees_both_forms():
    tree = ast.parse("import importlib\ndef f():\n"
                     "    importlib.import_module('gui.app')\n    __import__('pyqtgraph')\n")
    assert [n for _, n in _string_imports(tree)] == ["gui.app", "pyqtgraph"]


def _cycles(graph: grimp.ImportGraph, modules: set[str]) -> list[list[str]]:
    """Strongly connected groups (more than one module) of the direct-import graph over ``modules``."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    edges = {m: sorted(graph.find_modules_directly_imported_by(m) & modules) for m in modules}

    def visit(v: str) -> None:  # Tarjan, iterative enough for ~100 modules
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for m in sorted(modules):
        if m not in index:
            visit(m)
    return out


def test_no_import_cycles_between_engine_modules():
    """Every import counts, lazy ones inside functions too; a package importing its own children
    (``engine.trackers`` -> ``engine.trackers.lk``) is a module like any other."""
    graph = grimp.build_graph("engine", cache_dir=None)
    modules = {m for m in graph.modules if m.startswith("engine")}
    found = [c for c in _cycles(graph, modules) if frozenset(c) not in ALLOWED_CYCLES]
    lines = []
    for group in found:
        chain = graph.find_shortest_chain(importer=group[0], imported=group[1]) or ()
        back = graph.find_shortest_chain(importer=group[1], imported=group[0]) or ()
        lines.append(f"{group}: {' -> '.join(chain)} ; {' -> '.join(back)}")
    assert not found, "import cycles between engine modules:\n" + "\n".join(lines)


def test_cycle_finder_finds_a_planted_cycle():
    graph = grimp.ImportGraph()
    for a, b in [("p.a", "p.b"), ("p.b", "p.c"), ("p.c", "p.a"), ("p.c", "p.d")]:
        graph.add_import(importer=a, imported=b)
    assert _cycles(graph, set(graph.modules)) == [["p.a", "p.b", "p.c"]]
