"""The app starts whatever its settings or arguments say (issue 13, item 10): each stored key with bad values
still opens the window; a value not usable here falls back, with a message naming it."""

from __future__ import annotations

import argparse
import json

import pytest

pytest.importorskip("pytestqt")
from PySide6.QtCore import QByteArray, QSettings  # noqa: E402

from engine.api import RunConfig  # noqa: E402
from gui.main_window import MainWindow  # noqa: E402
from gui.panels.run_panel import DEFAULT_GRID, MAX_GRID  # noqa: E402
from gui.panels.toggles import MAX_POINTS_PER_BATCH  # noqa: E402
from gui.settings import Settings, checked_config  # noqa: E402

BAD_CONFIG_VALUES = {
    "tracker": [None, 7, "", "no-such-tracker", ["lk"], {"a": 1}],
    "device": ["cuda:1", "cuda", "cuda:x", "tpu", "", 3, None, ["cpu"]],
    "precision": ["fp64", "", 16, None, "FP16x"],
    "points_per_batch": ["abc", -1, 0, 10**12, 2.5, True, None, [4], "1e3"],
    "frames_per_batch": ["abc", -5, 0, 10**9, 1.5, False, {"n": 2}],
}
BAD_RAW = {
    "config": ["{not json", "[1, 2]", "7", '"a string"', "null", json.dumps({"tracker": "lk", "extra": [1]})],
    "grid": ["abc", "-3", "0", str(10**9), "2.5", "[1]", ""],
    "recent_files": [5, "", [1, None, "x"], {"a": 1}],
    "window/geometry": [QByteArray(b"\x00" * 3), QByteArray(b"x" * 500), "not bytes", 12],
    "window/state": [QByteArray(b"\xff" * 64), QByteArray(b""), "not bytes", 12],
}


def _case_ids(cases: dict) -> list[tuple[str, object]]:
    return [(key, value) for key, values in cases.items() for value in values]


@pytest.fixture
def store(tmp_path):
    return QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)


def _open(qtbot, store: QSettings) -> MainWindow:
    w = MainWindow(settings=Settings(store), sampler=None)
    qtbot.addWidget(w)
    w.show()
    return w


@pytest.mark.parametrize(("key", "value"), _case_ids(BAD_CONFIG_VALUES))
def test_bad_stored_run_setting_opens_the_window_with_a_fallback(qtbot, store, key, value):
    store.setValue("config", json.dumps({**RunConfig(tracker="lk").to_dict(), key: value}))
    w = _open(qtbot, store)
    config = w.toggles.config()
    RunConfig.from_dict(config.to_dict())  # a valid configuration
    assert w.toggles.points.value() == config.points_per_batch and w.toggles.frames.value() == config.frames_per_batch
    assert w.toggles.precision.currentText() == config.precision
    assert config.device in ("auto", "cpu")  # this machine has no CUDA device
    if value is not None:  # None means "not stored": nothing to report
        assert "saved settings" in w.banner.message, w.banner.message
    w.close()


@pytest.mark.parametrize(("key", "value"), _case_ids(BAD_RAW))
def test_bad_stored_value_of_every_key_opens_the_window(qtbot, store, key, value):
    store.setValue(key, value)
    w = _open(qtbot, store)
    assert 1 <= w.grid_spin.value() <= MAX_GRID
    assert isinstance(w.settings.recent_files(), list)
    w._fill_recent()
    w.close()


def test_hand_edited_settings_file_opens_the_window(qtbot, tmp_path):
    path = tmp_path / "trackscope.conf"
    path.write_text('[General]\nconfig="{\\"device\\": \\"cuda:1\\", \\"points_per_batch\\": \\"abc\\"}"\n'
                    "grid=abc\nrecent_files=5\n\n[window]\ngeometry=garbage\nstate=@ByteArray(\\0\\x1)\n")
    w = _open(qtbot, QSettings(str(path), QSettings.Format.IniFormat))
    assert w.grid_spin.value() == DEFAULT_GRID
    assert w.toggles.config().device == "auto" and w.toggles.config().points_per_batch == 256
    assert "cuda:1" in w.banner.message and "'abc'" in w.banner.message
    w.close()


def test_checked_config_keeps_good_values_and_names_the_bad():
    base = RunConfig(tracker="lk", precision="bf16")
    config, notes = checked_config({"device": "cpu", "points_per_batch": "64", "frames_per_batch": 8.0}, base, "x")
    assert config == base.with_changes(device="cpu", points_per_batch=64, frames_per_batch=8) and notes == []
    config, notes = checked_config({"points_per_batch": 10**9, "precision": "FP16"}, base, "the command line")
    assert config.points_per_batch == MAX_POINTS_PER_BATCH and config.precision == "fp16"
    assert len(notes) == 1 and notes[0].startswith("the command line: points per batch")
    config, notes = checked_config({"tracker": "pkg.module:factory"}, base, "x")
    assert config.tracker == "pkg.module:factory" and notes == []  # a plugin is checked when it runs


def _args(**given) -> argparse.Namespace:
    fields = ("tracker", "device", "precision", "points_per_batch", "frames_per_batch")
    return argparse.Namespace(**{f: given.get(f) for f in fields})


def test_command_line_device_this_machine_lacks_falls_back_with_a_note(monkeypatch, tmp_path):
    """`--device cuda` on a CPU-only torch, `--precision fp64`: the app starts, saying what it did instead."""
    import gui.app

    settings = Settings(QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat))
    config, notes = gui.app._config_from_args(_args(device="cuda", precision="fp64", points_per_batch=0,
                                                    tracker="lk"), settings)
    assert config.device == "auto" and config.precision == "fp32" and config.points_per_batch == 256
    assert config.tracker == "lk"
    assert len(notes) == 3 and all(n.startswith("the command line:") for n in notes)
    assert any("'cuda'" in n and "using auto" in n for n in notes)


def test_a_settings_file_that_is_a_fifo_is_not_opened(tmp_path):
    """Before: QSettings opened the FIFO and start-up blocked forever (here: the subprocess timed out)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    folder = tmp_path / "trackscope"
    folder.mkdir()
    os.mkfifo(folder / "trackscope.conf")
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path), "QT_QPA_PLATFORM": "offscreen"}
    code = ("from gui.settings import Settings; s = Settings(); s.set_value('k', 1); "
            "print(s.value('k'), *s.notes, sep='|')")
    out = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[1], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    value, note = out.stdout.strip().split("|")
    assert value == "1"  # kept for the session
    assert note.startswith(f"the settings file {folder / 'trackscope.conf'} is not a regular file")
