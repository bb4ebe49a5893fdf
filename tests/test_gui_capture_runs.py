"""A deep capture in the app belongs to its run and can be stopped (issue 20 items 1 and 2)."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest
from PySide6.QtCore import QSettings

from engine.api import RunConfig, load_report, trace_path_for
from gui.controllers.capture import CAPTURE_THREAD_NAME
from gui.main_window import MainWindow
from gui.settings import Settings
from tests.helpers import moving_square_video
from tests.plugins import misbehaving
from tests.test_gui_history import run_once

CAPTURE_TIMEOUT_MS = 120_000
HANGS = "tests.plugins.misbehaving:hangs"


@pytest.fixture
def window(qtbot, tmp_path):
    settings = Settings(QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat))
    w = MainWindow(settings=settings, sampler=None, config=RunConfig(tracker="lk", device="cpu"))
    qtbot.addWidget(w)
    w.set_video(moving_square_video(6, 48), fps=10)
    w.set_queries(np.array([[0, 10, 10], [0, 30, 20]], np.float32))
    yield w
    w.shutdown()


def _entry(window, tracker):
    return next(e for e in window.state.runs if e.tracker == tracker)


def test_a_capture_of_a_picked_run_is_exported_with_that_run_and_its_trace(qtbot, window, tmp_path):
    run_once(qtbot, window, RunConfig(tracker="corrtrack", device="cpu", points_per_batch=2))
    run_once(qtbot, window, RunConfig(tracker="lk", device="cpu", points_per_batch=2))
    corr, lk = _entry(window, "corrtrack"), _entry(window, "lk")
    assert window.state.select(corr.id)  # picked again in the Runs list; the toggles still say LK
    with qtbot.waitSignal(window.capture.captured, timeout=CAPTURE_TIMEOUT_MS) as blocker:
        assert window.capture.start()
    deep = blocker.args[0]
    assert deep.error is None
    assert "cost_volume" in {s.stage for s in deep.summary.stages}  # CorrTrack's stages: its run was captured
    assert corr.report.capture is not None and lk.report.capture is None
    out = tmp_path / "out" / "corr.json"
    out.parent.mkdir()
    window.exports._export_report(str(out))
    report = load_report(out)
    assert report.config.tracker == "corrtrack" and report.capture is not None
    trace = trace_path_for(out)
    assert report.capture["trace_file"] == trace.name and trace.is_file()  # beside it, named after it
    assert json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
    with qtbot.waitSignal(window.capture_panel.trace_loaded, timeout=CAPTURE_TIMEOUT_MS):
        window.capture_panel.set_report(report, out)  # reopened: its timeline, not "trace missing"
    assert "missing" not in window.capture_panel.trace_label.text()
    saved = window.capture.export_trace(tmp_path / "any.trace.json.gz")  # File > Export > Trace
    assert saved.read_bytes() == trace.read_bytes()
    window.state.select(lk.id)  # LK shown: the capture is not LK's
    assert window.capture.trace_of_current() is None


def test_a_capture_finishing_after_another_run_is_picked_stays_with_its_own(qtbot, window):
    run_once(qtbot, window, RunConfig(tracker="corrtrack", device="cpu", points_per_batch=2))
    run_once(qtbot, window, RunConfig(tracker="lk", device="cpu", points_per_batch=2))
    corr, lk = _entry(window, "corrtrack"), _entry(window, "lk")
    window.state.select(corr.id)
    with qtbot.waitSignal(window.capture.captured, timeout=CAPTURE_TIMEOUT_MS):
        assert window.capture.start()
        window.state.select(lk.id)  # picked while the capture runs
    assert window.state.report is lk.report and lk.report.capture is None
    assert corr.report.capture is not None


def test_a_hung_capture_is_stopped_within_its_bound_and_runs_wait_for_it(qtbot, window, release_hung_plugins):
    window.capture._config = lambda: RunConfig(tracker=HANGS, device="cpu")
    assert window.capture.start()
    qtbot.waitUntil(misbehaving.ENTERED.is_set, timeout=CAPTURE_TIMEOUT_MS)
    assert window.capture.busy
    assert not window.start_run()  # no run beside a capture
    assert "deep capture is running" in window.banner.message
    window.stop_run()  # Stop: the capture's cancel relays to its run; the hung call is abandoned by the guard
    assert not window.capture.busy
    qtbot.waitUntil(lambda: "stopped" in window.statusBar().currentMessage()
                    or bool(window.capture.abandoned), timeout=5_000)


def test_a_capture_hung_under_the_profiler_is_left_behind_and_closing_returns(qtbot, window, release_hung_plugins):
    from tests.plugins import capture_hostile

    capture_hostile.HUNG_UNDER_PROFILER.clear()
    window.capture._config = lambda: RunConfig(tracker="tests.plugins.capture_hostile:hangs_when_profiled",
                                               device="cpu")
    assert window.capture.start()
    qtbot.waitUntil(capture_hostile.HUNG_UNDER_PROFILER.is_set, timeout=CAPTURE_TIMEOUT_MS)
    window.shutdown()  # bounded: returns although the plugin call never does (it runs in the capture's thread)
    assert [t.name for t in window.capture.abandoned] == [CAPTURE_THREAD_NAME]
    assert window.capture.abandoned[0].daemon and window.capture.abandoned[0].is_alive()
    assert "left running" in window.banner.message


def test_an_opened_reports_tracker_is_never_captured(qtbot, window, monkeypatch):
    """A shared report's entry names its tracker (a plugin is code): a capture of it runs the toggles' tracker."""
    import dataclasses

    from gui.controllers import capture as capture_module

    run_once(qtbot, window, RunConfig(tracker="lk", device="cpu", points_per_batch=2))
    entry = _entry(window, "lk")
    entry.source = "shared.json"  # as if opened from a file
    entry.report = dataclasses.replace(entry.report, config=dataclasses.replace(entry.report.config,
                                                                                tracker="evil_module:factory"))
    window.state.select(entry.id)
    loaded = []
    real = capture_module.load_tracker
    monkeypatch.setattr(capture_module, "load_tracker", lambda name: loaded.append(name) or real(name))
    window.capture._config = lambda: RunConfig(tracker="lk", device="cpu")
    with qtbot.waitSignal(window.capture.captured, timeout=CAPTURE_TIMEOUT_MS):
        assert window.capture.start()
    assert loaded == ["lk"]
