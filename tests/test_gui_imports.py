"""The app's import rules, read from the source (every import, lazy ones inside functions included):
gui/ never imports torch, and from the engine it imports only the facade, engine.api."""

from __future__ import annotations

import ast
from pathlib import Path

GUI = Path(__file__).resolve().parents[1] / "gui"
FACADE = "engine.api"
FORBIDDEN = ("torch",)


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import in a file; ``from engine import api`` reads as engine.api."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "engine":
                out += [(node.lineno, f"engine.{alias.name}") for alias in node.names]
            else:
                out.append((node.lineno, node.module))
    return out


def _gui_files() -> list[Path]:
    files = sorted(GUI.rglob("*.py"))
    assert len(files) > 10, f"gui/ source not found at {GUI}"
    return files


def test_gui_never_imports_torch():
    found = [f"{p.relative_to(GUI.parent)}:{line} imports {m}" for p in _gui_files() for line, m in _imports(p)
             if m.split(".")[0] in FORBIDDEN]
    assert not found, "gui/ must not import torch (ask engine.api):\n" + "\n".join(found)


def test_gui_imports_only_the_engine_facade():
    found = [f"{p.relative_to(GUI.parent)}:{line} imports {m}" for p in _gui_files() for line, m in _imports(p)
             if (m == "engine" or m.startswith("engine.")) and m != FACADE]
    assert not found, f"gui/ imports the engine only through {FACADE}:\n" + "\n".join(found)


def test_the_scan_sees_lazy_and_package_imports(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text("def f():\n    import torch.nn\n    from engine import api\n    from engine.core import x\n")
    assert [m for _, m in _imports(sample)] == ["torch.nn", "engine.api", "engine.core"]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(GUI.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _targets(path: Path) -> set[str]:
    """Modules a file imports, ``from gui import export`` read as gui.export too."""
    out = {m for _, m in _imports(path)}
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out |= {f"{node.module}.{alias.name}" for alias in node.names}
    return out


def test_gui_modules_import_no_cycle():
    """Imports between gui modules (lazy ones too) form no cycle: app -> main_window -> ... -> app is gone."""
    modules = {_module_name(p): p for p in _gui_files()}
    graph = {name: {m for m in _targets(path) if m in modules and m != name} for name, path in modules.items()}
    done: set[str] = set()

    def visit(name: str, trail: list[str]) -> None:
        if name in trail:
            raise AssertionError("import cycle: " + " -> ".join(trail[trail.index(name):] + [name]))
        if name in done:
            return
        for other in sorted(graph[name]):
            visit(other, trail + [name])
        done.add(name)

    for name in sorted(graph):
        visit(name, [])
