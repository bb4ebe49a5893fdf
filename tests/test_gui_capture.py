"""Run > Deep capture in the app: a worker captures the current configuration; the Capture tab shows it."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import QSettings

from engine.api import RunConfig
from gui.main_window import MainWindow
from gui.settings import Settings
from tests.helpers import moving_square_video

DEEP_NESTED = "tests.plugins.planted_capture:deep_nested"
CAPTURE_TIMEOUT_MS = 120_000


@pytest.fixture
def window(qtbot, tmp_path):
    settings = Settings(QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat))
    w = MainWindow(settings=settings, sampler=None)
    qtbot.addWidget(w)
    yield w
    w.shutdown()


def test_deep_capture_fills_the_capture_tab_with_modules_and_a_trace(qtbot, window):
    window.set_video(moving_square_video(6, 48), fps=10)
    window.set_queries(np.array([[0, 10, 10], [0, 30, 20]], np.float32))
    window.capture._config = lambda: RunConfig(tracker=DEEP_NESTED, device="cpu")
    with qtbot.waitSignal(window.capture.captured, timeout=CAPTURE_TIMEOUT_MS) as blocker:
        assert window.capture.start()
    deep = blocker.args[0]
    assert deep.error is None and deep.trace_path is not None and deep.trace_path.is_file()
    assert window.tabs.currentWidget() is window.capture_panel
    panel = window.capture_panel
    assert panel.tree.topLevelItemCount() > 0
    modules = {row.module for row in deep.summary.modules}
    assert any(m.startswith("updater.blocks.") for m in modules)


def test_deep_capture_needs_a_video_and_refuses_during_a_run(qtbot, window):
    assert not window.capture.start()  # no video yet: a message, no worker
    assert "open a video" in window.banner.message.lower()
    window.set_video(moving_square_video(4, 32), fps=10)
    window.capture._is_running = lambda: True
    assert not window.capture.start()
    assert not window.capture.busy


def test_a_report_never_selects_a_plugin_tracker(qtbot, window, tmp_path):
    """A shared report names its plugin; the app shows the name and keeps its own tracker selected."""
    import json

    from engine.api import SAMPLE_VIDEO, load_report
    from tests.test_h200_recorded import DATA

    report = json.loads((DATA / "corrtrack_bf16_p256_sample.json").read_text())
    report["config"]["tracker"] = "evil_module:factory"
    report["video"]["path"] = str(SAMPLE_VIDEO)
    path = tmp_path / "shared.json"
    path.write_text(json.dumps(report))
    load_report(path)  # a valid report
    before = window.state.config.tracker
    assert window.load_path(str(path))
    assert window.state.config.tracker == before
    assert window.state.config.precision == "bf16"  # the rest of the configuration is adopted
    assert "evil_module:factory" in window.banner.message
