"""The app's compile setting (default background; --compile saves it; the environment wins over the setting)
and the status-bar lines a run's start gives ("CorrTrack: eager, compiling in the background…", "CorrTrack: fused
kernels on …")."""

from __future__ import annotations

import argparse
import time

import pytest

pytest.importorskip("pytestqt")
from PySide6.QtCore import QSettings  # noqa: E402

from engine.api import CORRTRACK_COMPILE, RunConfig, Started, VideoGeometry  # noqa: E402
from gui.app import add_arguments, apply_compile_setting  # noqa: E402
from gui.main_window import MainWindow  # noqa: E402
from gui.settings import DEFAULT_COMPILE_MODE, Settings  # noqa: E402


@pytest.fixture
def settings(tmp_path):
    return Settings(QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat))


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(list(argv))


def test_the_compile_setting_defaults_to_off_and_refuses_odd_values(settings) -> None:
    assert settings.compile_mode() == DEFAULT_COMPILE_MODE == "off"  # background: not shown on a GPU yet
    settings.store.setValue("corrtrack/compile", "sometimes")
    assert settings.compile_mode() == "off"
    settings.set_compile_mode("off")
    assert settings.compile_mode() == "off"
    with pytest.raises(ValueError):
        settings.set_compile_mode("fast")


def test_the_flag_is_saved_and_the_environment_wins_over_the_setting(settings) -> None:
    env: dict[str, str] = {}
    assert apply_compile_setting(_args(), settings, env) == "off" and env[CORRTRACK_COMPILE] == "off"
    env = {}
    assert apply_compile_setting(_args("--compile", "background"), settings, env) == "background"
    assert settings.compile_mode() == "background" and env[CORRTRACK_COMPILE] == "background"
    env = {}
    assert apply_compile_setting(_args("--compile", "on"), settings, env) == "on"
    assert settings.compile_mode() == "on"
    env = {CORRTRACK_COMPILE: "0"}
    assert apply_compile_setting(_args(), settings, env) == "0"  # the user's variable stays
    assert apply_compile_setting(_args("--compile", "off"), settings, env) == "off"
    with pytest.raises(SystemExit):
        _args("--compile", "fast")


def _started(tracker: dict, device: str = "cpu") -> Started:
    return Started(t=time.perf_counter(), config=RunConfig(device="cpu"), video={}, geometry=VideoGeometry(8, 8, 8, 8),
                   num_queries=1, num_batches=1, stages=(), device=device, device_name=device, tracker=tracker)


def test_a_run_start_puts_the_compile_line_in_the_status_bar_once(qtbot, settings) -> None:
    w = MainWindow(settings=settings, sampler=None, config=RunConfig(tracker="lk", device="cpu"))
    qtbot.addWidget(w)
    notes: list[str] = []
    w.runs.note.connect(notes.append)
    compiling = {"name": "corrtrack", "stages": [], "compile_mode": "background",
                 "compile": "eager, compiling in the background"}
    w.runs._on_started(_started(compiling))
    w.runs._on_started(_started(compiling))  # a looped run: said once
    w.runs._on_started(_started({**compiling, "compile": "compiled", "compile_s": 45.1, "compile_cache": "/c"}))
    w.runs._on_started(_started({"name": "lk", "stages": []}))  # a tracker that does not compile: nothing
    assert notes == ["CorrTrack: eager, compiling in the background…",
                     "CorrTrack: compiled (took 45 s; cached for next start)"]
    assert w.statusBar().currentMessage() == notes[-1]


def test_a_gpu_run_says_whether_corrtrack_s_fused_kernels_ran(qtbot, settings) -> None:
    w = MainWindow(settings=settings, sampler=None, config=RunConfig(tracker="lk", device="cpu"))
    qtbot.addWidget(w)
    notes: list[str] = []
    w.runs.note.connect(notes.append)
    on = {"name": "corrtrack", "stages": [], "fused_kernels": "on for CUDA inference (Triton 3.6.0)"}
    w.runs._on_started(_started(on, "cpu"))  # the CPU runs the eager code: nothing to say
    w.runs._on_started(_started(on, "cuda:0"))
    w.runs._on_started(_started(on, "cuda:0"))  # a looped run: said once
    w.runs._on_started(_started({**on, "fused_kernels": "off: TRACKSCOPE_CORRTRACK_FUSED is false"}, "cuda:0"))
    assert notes == ["CorrTrack: fused kernels on for CUDA inference (Triton 3.6.0)",
                     "CorrTrack: fused kernels off: TRACKSCOPE_CORRTRACK_FUSED is false"]
