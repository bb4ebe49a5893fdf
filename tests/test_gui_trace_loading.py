"""The Capture tab reads a trace in a worker, bounded, and closing during a read returns (issue 20 item 9)."""

from __future__ import annotations

import gzip
import json
import threading

import pytest

pytest.importorskip("pytestqt")
from PySide6.QtCore import QThread  # noqa: E402

from engine.api import load_timeline  # noqa: E402
from engine.capture.trace import TraceCancelled, read_trace  # noqa: E402
from gui.panels import capture_panel as panel_module  # noqa: E402
from gui.panels.capture_panel import TRACE_THREAD_NAME, CapturePanel  # noqa: E402
from tests.test_capture_files import _events  # noqa: E402
from tests.test_capture_view import DEEP, LOAD_MS, _runs  # noqa: E402

MiB = 2**20


@pytest.fixture
def summary() -> dict:
    return _runs()["deep_nested"]["summary"]


@pytest.fixture
def panel(qtbot):
    p = CapturePanel()
    qtbot.addWidget(p)
    yield p
    p.shutdown()


def test_the_trace_is_read_in_the_trace_worker(panel, qtbot, summary, monkeypatch):
    threads = []

    def spy(path, **kwargs):
        threads.append(QThread.currentThread().objectName())
        return load_timeline(path, **kwargs)

    monkeypatch.setattr(panel_module, "load_timeline", spy)
    with qtbot.waitSignal(panel.trace_loaded, timeout=LOAD_MS):
        panel.set_capture(summary, None, DEEP)
    assert threads == [TRACE_THREAD_NAME]


def test_closing_during_a_read_cancels_it_and_returns(panel, qtbot, summary, monkeypatch):
    started, saw_cancel = threading.Event(), threading.Event()

    def endless(path, cancel=None, **kwargs):  # a read that ends only when it is cancelled
        started.set()
        assert cancel is not None
        if cancel.wait(60):
            saw_cancel.set()
        raise TraceCancelled(str(path))

    monkeypatch.setattr(panel_module, "load_timeline", endless)
    panel.set_capture(summary, None, DEEP)
    qtbot.waitUntil(started.is_set, timeout=LOAD_MS)
    assert panel.shutdown()  # within CLOSE_WAIT_MS: the read was told to stop
    assert saw_cancel.is_set() and panel.lingering == 0


def test_a_cancelled_read_stops_at_the_next_object(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": _events(2_000)}))
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(TraceCancelled):
        read_trace(path, cancel=cancel)


def test_a_gzip_bomb_is_refused_with_a_message_in_the_tab(panel, qtbot, summary, tmp_path, monkeypatch):
    monkeypatch.setattr(panel_module, "load_timeline",
                        lambda path, **kw: load_timeline(path, max_bytes=2 * MiB, **kw))
    bomb = tmp_path / "bomb.trace.json.gz"
    with gzip.open(bomb, "wb", compresslevel=1) as gz:
        gz.write(b'{"traceEvents": [' + b" " * (16 * MiB) + b"]}")
    with qtbot.waitSignal(panel.trace_failed, timeout=LOAD_MS) as blocker:
        panel.set_capture(summary, None, bomb)
    assert "inflates to more than 2 MiB" in blocker.args[0] and panel.trace_label.text() == blocker.args[0]
    assert panel.tree.topLevelItemCount() > 0  # the summary stays


def test_a_capped_trace_says_how_many_events_were_left_out(panel, qtbot, summary, monkeypatch):
    monkeypatch.setattr(panel_module, "load_timeline", lambda path, **kw: load_timeline(path, max_events=500, **kw))
    with qtbot.waitSignal(panel.trace_loaded, timeout=LOAD_MS) as blocker:
        panel.set_capture(summary, None, DEEP)
    data = blocker.args[0]
    assert data.events_left_out > 0
    assert f"{data.events_left_out:,} more events past the 500 read" in panel.trace_label.text()
