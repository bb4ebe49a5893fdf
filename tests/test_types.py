"""engine/ type-checks clean: ``python -m mypy engine`` with pyproject.toml's [tool.mypy] reports no error.

gui/ is not checked here: PySide6's stubs leave errors that are not the code's (docs/mypy_gui.md lists them).
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(importlib.util.find_spec("mypy") is None, reason="mypy is not installed (pip install -e .[test])")
def test_engine_type_checks_clean():
    res = subprocess.run([sys.executable, "-m", "mypy", "engine"], cwd=ROOT, capture_output=True, text=True,
                         timeout=600)
    assert res.returncode == 0, f"mypy engine found errors:\n{res.stdout}\n{res.stderr}"
