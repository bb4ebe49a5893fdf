"""Environment flags: one parser (engine.core.flags) for every TRACKSCOPE_* boolean."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from engine.core import flags
from engine.core.flags import FlagWarning, env_flag
from engine.telemetry.nvml import nvml_disabled_by_env

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("raw", ["1", "true", "YES", " on ", "True"])
def test_true_words(raw):
    assert env_flag("X", default=False, environ={"X": raw}) is True


@pytest.mark.parametrize("raw", ["0", "false", "No", "OFF", "", "  "])
def test_false_words(raw):
    assert env_flag("X", default=True, environ={"X": raw}) is False


def test_unset_gives_the_default_and_anything_else_warns_and_gives_the_default():
    assert env_flag("X", default=True, environ={}) is True
    assert env_flag("X", default=False, environ={}) is False
    with pytest.warns(FlagWarning, match=r"X='maybe' is neither true .* using the default, True"):
        assert env_flag("X", default=True, environ={"X": "maybe"}) is True


@pytest.mark.parametrize("raw, disabled", [("1", True), ("true", True), ("false", False), ("0", False), ("", False)])
def test_no_nvml_false_keeps_nvml(monkeypatch, raw, disabled):
    monkeypatch.setenv(flags.NO_NVML, raw)
    assert nvml_disabled_by_env() is disabled


def test_every_trackscope_variable_is_read_through_flags():
    """No module but engine/core/flags.py reads a TRACKSCOPE_* variable from the environment itself."""
    read = re.compile(r"(environ\.get|getenv|environ\[)\(?\s*[\"']TRACKSCOPE_")
    offenders = [str(p.relative_to(ROOT)) for d in ("engine", "gui") for p in (ROOT / d).rglob("*.py")
                 if read.search(p.read_text()) and p.name != "flags.py"]
    assert not offenders, offenders
