"""engine/ must stay usable headless: importing every engine module loads no Qt."""

from __future__ import annotations

import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import engine

ENGINE = Path(engine.__file__).parent
QT_IMPORT = re.compile(r"^\s*(from|import)\s+(PySide6|PyQt5|PyQt6|pyqtgraph|shiboken6)\b", re.M)


def test_no_qt_import_statements_in_engine():
    offenders = [str(p) for p in ENGINE.rglob("*.py") if QT_IMPORT.search(p.read_text())]
    assert not offenders, f"engine modules import Qt: {offenders}"


def test_importing_all_engine_modules_loads_no_qt():
    names = [m.name for m in pkgutil.walk_packages([str(ENGINE)], prefix="engine.")
             if m.name.rsplit(".", 1)[-1] != "__main__"]  # importing a __main__ runs the program
    code = (
        "import importlib, sys\n"
        f"for n in {names!r}:\n"
        "    importlib.import_module(n)\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('PySide6', 'PyQt5', 'PyQt6', 'pyqtgraph')]\n"
        "print(bad)\n"
        "sys.exit(1 if bad else 0)\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
