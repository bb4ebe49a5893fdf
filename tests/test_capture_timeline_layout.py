"""The capture timeline and table fit a small screen (issue 20 item 8): time labels apart, every lane named,
the live charts' stage colours, the table's numbers in view at 1366x768."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("pytestqt")
from PySide6.QtCore import QEventLoop, QSettings, QTimer  # noqa: E402
from PySide6.QtGui import QColor, QPainter, QPixmap  # noqa: E402

from engine.capture.timeline import TimelineData  # noqa: E402
from engine.capture.trace import CpuOp, Range, Trace  # noqa: E402
from gui.widgets import timeline as timeline_module  # noqa: E402
from gui.widgets.stage_colours import stage_colour  # noqa: E402
from gui.widgets.timeline import TimelineWidget  # noqa: E402

MIN_LABEL_GAP_PX = 8


def _trace(window_ms: float, threads: int = 1) -> Trace:
    us = window_ms * 1e3
    stages = [Range("upload", 1, 0.0, us * 0.1), Range("features", 1, us * 0.1, us * 0.4),
              Range("updater", 1, us * 0.5, us * 0.5)]
    tids = [1234567 * t for t in range(1, threads + 1)]  # Linux thread ids run to seven digits
    ops = [CpuOp(f"aten::op{i}", tid, us * i / 50, us / 60) for tid in tids for i in range(50)]
    return Trace(cpu_ops=ops, stages=stages, runs=[Range("trackscope.run", 1, 0.0, us)])


def _widget(qtbot, data: TimelineData, width: int, height: int) -> TimelineWidget:
    w = TimelineWidget()
    qtbot.addWidget(w)
    w.resize(width, height)
    w.show()
    w.set_data(data)
    qtbot.waitExposed(w)
    loop = QEventLoop()
    QTimer.singleShot(50, loop.quit)
    loop.exec()
    return w


def _text_rects(axis) -> list:
    pixmap = QPixmap(10, 10)
    painter = QPainter(pixmap)
    try:
        _, _, texts = axis.generateDrawSpecs(painter)
    finally:
        painter.end()
    return [(rect, text) for rect, _flags, text in texts]


@pytest.mark.parametrize("window_ms", [1000.0, 400.0, 13.0, 0.05, 2500.0])
@pytest.mark.parametrize("width", [260, 340, 520])
def test_time_labels_stay_apart_on_a_narrow_timeline(qtbot, window_ms, width):
    w = _widget(qtbot, TimelineData.from_trace(_trace(window_ms)), width, 300)  # a plot 90-350 px wide
    rects = sorted(_text_rects(w.plot.getPlotItem().getAxis("bottom")), key=lambda rt: rt[0].left())
    assert rects
    for (a, ta), (b, tb) in zip(rects, rects[1:]):
        assert b.left() - a.right() >= MIN_LABEL_GAP_PX, (ta, tb)  # was "200400600800" at 1366x768


@pytest.mark.parametrize("threads, height", [(1, 260), (8, 260), (8, 600)])
def test_every_lane_keeps_its_name(qtbot, threads, height):
    """Thread ids of seven digits made 'CPU ops 0 (thread 1234567)' wider than the name axis: pyqtgraph dropped it."""
    data = TimelineData.from_trace(_trace(20.0, threads=threads))  # 3 CPU lanes per thread
    w = _widget(qtbot, data, 700, height)
    drawn = sorted((rect.center().y(), text) for rect, text in _text_rects(w.left))
    assert len(drawn) == len(w.row_names) == len(data.lanes)
    for (_y, text), name in zip(drawn, w.row_names):  # top to bottom, each row its own name (elided if long)
        assert text == name or ("…" in text and text.split("…")[0] in name)


def test_stages_have_the_live_charts_colours(qtbot):
    w = _widget(qtbot, TimelineData.from_trace(_trace(10.0)), 700, 300)
    lane_items = [it for it in w._items if isinstance(it, timeline_module.RectsItem)]
    stage_item = lane_items[[lane.kind for lane in w.data.lanes].index("stage")]
    names = [w.data.names[int(v)] for v in dict.fromkeys(w.data.lanes_of("stage")[0].label.tolist())]
    assert [c.getRgb()[:3] for c in stage_item._colours] == [stage_colour(n) for n in names]
    assert QColor(*stage_colour("features")).name() != "#4fc3f7"  # the timeline's own palette is gone


def test_the_capture_tables_numbers_are_in_view_at_1366x768(qtbot, tmp_path):
    from gui.main_window import MainWindow
    from gui.panels.capture_panel import COL_COUNT, COL_GPU, COL_WALL
    from gui.settings import Settings

    settings = Settings(QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat))
    w = MainWindow(settings=settings, sampler=None)
    qtbot.addWidget(w)
    w.resize(1366, 768)
    w.show()
    panel = w.capture_panel
    w.tabs.setCurrentWidget(panel)  # a hidden tab is filled when it is shown
    with qtbot.waitSignal(panel.trace_loaded, timeout=60_000):
        assert w.load_path("tests/data/h200/deep/deep_nested.json")
    qtbot.waitUntil(lambda: panel.tree.viewport().width() > 0, timeout=5_000)
    tree = panel.tree
    for col in (COL_WALL, COL_GPU, COL_COUNT):
        right = tree.header().sectionViewportPosition(col) + tree.columnWidth(col)
        assert right <= tree.viewport().width(), (col, right, tree.viewport().width())
    values = [tree.topLevelItem(0).text(c) for c in (COL_WALL, COL_GPU, COL_COUNT)]
    assert all(values) and np.isfinite(float(values[0]))
    w.shutdown()
