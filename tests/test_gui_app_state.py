"""The app's state never lies (issue 20, items 3-6 and 8): the Runs list changes one row per run, a refused
A/B pick changes nothing, a run toggled mid-run is diagnosed by what each batch ran with, exports agree on
what is current, and text fits where it is shown."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("pytestqt")

from gui.history import HistoryEntry  # noqa: E402
from gui.model import RunData  # noqa: E402
from gui.panels.history import HistoryPanel  # noqa: E402
from gui.panels.runs_model import COL  # noqa: E402
from gui.state import AppState  # noqa: E402

NUM_FRAMES = 6


def _entry(state: AppState, points: int = 2, video: str = "a.mp4") -> HistoryEntry:
    queries = np.stack([np.zeros(points), np.arange(points) + 4.0, np.full(points, 4.0)], axis=1).astype(np.float32)
    run = RunData("r", {}, queries, np.repeat(queries[:, None, 1:], NUM_FRAMES, axis=1),
                  np.ones((points, NUM_FRAMES), bool))
    return state.new_entry(video=video, tracker="corrtrack", settings={"precision": ("fp32",)}, machine="CPU",
                           status="finished", source="run", run=run, num_frames=NUM_FRAMES)


def _column(panel: HistoryPanel, column: str) -> list[str]:
    model = panel.table.model()
    return [model.index(r, COL[column]).data() or "" for r in range(model.rowCount())]


# -- item 3: a new run costs the Runs list one row, not a rebuild of all of them ---------------------------
def test_a_new_run_inserts_one_row_and_rebuilds_none_at_60_entries(qtbot):
    state = AppState()
    panel = HistoryPanel(state)
    qtbot.addWidget(panel)
    for _ in range(60):
        state.add_entry(_entry(state), compare_previous=False, select=True)
    model = panel.table.model()
    assert model.rowCount() == state.runs.limit  # 50 kept of 60
    counts = {"reset": 0, "inserted": [], "removed": [], "cells": 0}
    model.modelReset.connect(lambda: counts.__setitem__("reset", counts["reset"] + 1))
    model.rowsInserted.connect(lambda _, first, last: counts["inserted"].append(last - first + 1))
    model.rowsRemoved.connect(lambda _, first, last: counts["removed"].append(last - first + 1))

    def changed(top, bottom, *_):
        counts["cells"] += (bottom.row() - top.row() + 1) * (bottom.column() - top.column() + 1)

    model.dataChanged.connect(changed)
    newest = _entry(state)
    state.add_entry(newest, compare_previous=False, select=True)
    assert counts["reset"] == 0 and counts["inserted"] == [1] and counts["removed"] == [1]
    assert counts["cells"] <= 2 * len(COL)  # the marks of the rows selected before and now, nothing else
    assert panel.entry_ids() == [e.id for e in state.runs] and panel.entry_ids()[-1] == newest.id
    assert _column(panel, "#")[-1] == f"▶ {newest.id}" and not _column(panel, "#")[-2].startswith("▶")


# -- item 4: a refused A/B pick changes nothing ----------------------------------------------------------------
def test_a_refused_b_pick_is_not_marked_and_the_comparison_stays(qtbot):
    state = AppState()
    panel = HistoryPanel(state)
    qtbot.addWidget(panel)
    first, second, other = _entry(state, points=80), _entry(state, points=80), _entry(state, points=400)
    for e in (first, second, other):
        state.add_entry(e, compare_previous=False)
    comparisons: list = []
    state.comparison_changed.connect(comparisons.append)
    panel.pick(first.id)
    panel.a_button.click()
    panel.pick(second.id)
    with qtbot.waitSignal(panel.ab_requested, timeout=1000):
        panel.b_button.click()
    assert state.ab == {"A": first.id, "B": second.id} and len(comparisons) == 1
    requested: list = []
    panel.ab_requested.connect(lambda: requested.append(True))
    panel.pick(other.id)
    panel.b_button.click()  # 400 points against 80: refused
    assert "different query points" in state.last_message.text
    assert state.ab == {"A": first.id, "B": second.id}  # the pair shown in the A/B tab
    assert _column(panel, "A/B") == ["A", "B", ""]  # the refused row is not marked B
    assert len(comparisons) == 1 and not requested  # the A/B tab keeps its pair and is not brought forward


# -- item 5: a run whose precision changed mid-run is diagnosed by what each batch ran with ----------------
def test_diagnosis_header_and_whatif_follow_each_batchs_precision(qtbot):
    from engine.api import as_report, project
    from gui.panels.diagnosis import DiagnosisPanel
    from tests.test_whatif_by_batch import TARGET, batched_report

    report = as_report(batched_report(("fp32", "fp16")))
    assert report.label == "corrtrack fp32 p256 f16"  # what the recorder wrote: the first batch's config
    panel = DiagnosisPanel()
    qtbot.addWidget(panel)
    panel.set_report(report)
    panel.set_target(TARGET)
    assert "corrtrack fp32→fp16 p256 f16" in panel.header.text()
    assert panel.projection is not None and panel.projection["precision"] == "fp32→fp16"
    assert panel.projection["projected_ms"] < 0.8 * project(report, TARGET)["projected_ms"]  # not all at fp32
    assert "fp32→fp16" in panel.whatif_summary.text()


# -- item 6: exports agree on what is current; a tracker without precision is not refused for it ------------
@pytest.fixture
def window(qtbot, tmp_path):
    from PySide6.QtCore import QSettings

    from engine.core.config import RunConfig
    from gui.main_window import MainWindow
    from gui.settings import Settings
    from tests.helpers import moving_square_video

    settings = Settings(QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat))
    w = MainWindow(settings=settings, sampler=None, config=RunConfig(tracker="lk", device="cpu"))
    qtbot.addWidget(w)
    w.set_video(moving_square_video(NUM_FRAMES, 32), fps=10.0)
    w.set_grid(2)
    w.show()
    yield w
    w.close()


def _run(qtbot, w, config=None) -> None:
    from tests.test_gui_window import RUN_TIMEOUT_MS

    if config is not None:
        w.toggles.set_config(config)
    with qtbot.waitSignal(w.run_finished, timeout=RUN_TIMEOUT_MS):
        assert w.start_run(), w.banner.message
    qtbot.waitUntil(lambda: not w.controller.running, timeout=5000)


def test_after_new_queries_tracks_and_report_exports_write_the_same_run_and_say_so(qtbot, window, tmp_path,
                                                                                   monkeypatch):
    from engine.api import load_report
    from engine.io.trackio import load_tracks

    _run(qtbot, window)
    ran = window.state.current.queries.copy()  # 2 x 2 grid
    window.set_grid(3)  # Grid replaces the queries: the run shown is dropped
    assert window.state.current is None and len(window.state.queries) == 9
    out = {"tracks": tmp_path / "tracks.npz", "report": tmp_path / "report.json"}
    monkeypatch.setattr(window.exports, "_save_path", lambda title, *a: str(out["tracks" if "tracks" in title
                                                                            else "report"]))
    window.exports.export_tracks_dialog()
    assert out["tracks"].exists(), window.banner.message  # not "nothing to export"
    assert "queries changed since" in window.banner.message and "4 points" in window.banner.message
    window.banner.hide()
    window.exports.export_report_dialog()
    assert out["report"].exists() and "queries changed since" in window.banner.message
    tracks = load_tracks(out["tracks"])
    report_queries, _, _ = load_report(out["report"]).tracks_arrays()
    np.testing.assert_allclose(tracks["queries"], ran)  # both files: the run that was made, the same one
    np.testing.assert_allclose(report_queries, ran, atol=0.01)


def test_lk_is_not_refused_for_a_precision_left_over_from_corrtrack(qtbot, window):
    from engine.core.config import RunConfig

    _run(qtbot, window, RunConfig(tracker="lk", device="cpu", precision="fp8"))  # CorrTrack's fp8 kept
    entry = list(window.state.runs)[-1]
    assert entry.status == "finished" and entry.precision == "n/a"
    assert not (window.banner.isVisible() and window.banner.level == "error"), window.banner.message


def test_a_refused_precision_suggests_only_modes_this_machine_runs():
    from engine.core.config import RunConfig
    from engine.core.precision import gate
    from engine.io.trackio import grid_queries
    from engine.run.session import Failed, Session
    from tests.helpers import moving_square_video
    from tests.test_gui_window import SlowTracker

    frames = moving_square_video(NUM_FRAMES, 32)
    for precision in ("fp8", "fp16"):  # no fp8 recipe in this tracker; fp16 is refused on the CPU
        last = Session(frames, grid_queries(2, 32, 32), RunConfig(tracker=SlowTracker.name, device="cpu",
                                                                   precision=precision)).run()
        assert isinstance(last, Failed), precision
        named = {m for m in ("fp32", "tf32", "fp16", "bf16", "int8", "fp8") if m in (last.suggestion or "")}
        assert named and all(gate(m, "cpu").runnable for m in named), (precision, last.suggestion)


# -- item 8: text that fits ----------------------------------------------------------------------------------
def _labels_inside(charts) -> bool:
    view = charts.breakdown.getViewBox().sceneBoundingRect()
    texts = charts._breakdown_items[1:]
    return bool(texts) and all(t.mapRectToScene(t.boundingRect()).right() <= view.right() + 0.5 for t in texts)


def test_breakdown_labels_stay_inside_when_the_charts_get_narrower(qtbot):
    from engine.analysis.roofline import Cost, StageRoofline
    from engine.telemetry import specs
    from gui.widgets.charts import ChartsPanel

    stages = ["backbone", "cost_volume", "refine"]
    totals = {"backbone": 561.2, "cost_volume": 180.4, "refine": 470.9}
    cost = Cost(stages={s: StageRoofline(1e9, 1e9, ms, pct_of_roofline=42.0, bound="compute")
                        for s, ms in totals.items()}, spec=specs.GPUS[0])
    charts = ChartsPanel()
    qtbot.addWidget(charts)
    charts.resize(900, 1000)
    charts.show()
    charts.set_stages(stages)
    charts.set_breakdown(totals, cost)  # laid out at 900 px: "561.2 ms (46%) · roofline 42% (compute)"
    qtbot.waitUntil(lambda: _labels_inside(charts), timeout=3000)
    charts.resize(560, 1000)  # the dock made narrower (or the window of another size)
    qtbot.waitUntil(lambda: charts.breakdown.getViewBox().width() < 500, timeout=3000)
    qtbot.waitUntil(lambda: _labels_inside(charts), timeout=3000)


def _rect(item, vb):
    r = item.mapRectToItem(vb, item.boundingRect())
    return r.left(), r.top(), r.right(), r.bottom()


def test_scatter_legend_covers_no_point_and_no_label(qtbot):
    from gui.panels.tradeoff import TradeoffPanel
    from gui.panels.tradeoff_parts import overlap
    from tests.test_gui_panels import make_report

    panel = TradeoffPanel()
    qtbot.addWidget(panel)
    panel.resize(700, 600)
    panel.show()
    for precision, ms, aj in (("fp32", 30.0, 0.80), ("fp16", 5.0, 0.95), ("bf16", 12.0, 0.86)):  # fp16: top left
        report = make_report(precision, ms)
        report["accuracy"] = {"vs": "ground truth", "aj": aj}
        panel.add_report(report)
    vb = panel.plot.getViewBox()

    def clear_of_the_legend() -> None:
        assert vb.width() > 100 and len(panel._labels) == 3
        legend = _rect(panel.legend, vb)
        (x0, x1), (y0, y1) = vb.viewRange()
        for item, x, y in panel._labels:
            px, py = (x - x0) / (x1 - x0) * vb.width(), (y1 - y) / (y1 - y0) * vb.height()
            dot = (px - 6, py - 6, px + 6, py + 6)
            assert not overlap(dot, legend), item.textItem.toPlainText()
            assert not overlap(_rect(item, vb), legend), item.textItem.toPlainText()

    qtbot.waitUntil(clear_of_the_legend, timeout=3000)


def test_the_banner_floats_under_the_tab_bar_and_moves_nothing(qtbot, window):
    from PySide6.QtCore import QPoint

    bar = window.tabs.tabBar()
    qtbot.waitUntil(lambda: bar.isVisible() and bar.height() > 0, timeout=3000)
    before = bar.mapTo(window, QPoint(0, 0)), window.view.mapTo(window, QPoint(0, 0))
    window.state.post_message("a long problem " * 12, "a suggested fix that is long too " * 4, "warning")
    banner = window.banner
    qtbot.waitUntil(lambda: banner.isVisible() and banner.height() >= banner.heightForWidth(banner.width()) > 0,
                    timeout=3000)  # laid out, its wrapped text whole
    after = bar.mapTo(window, QPoint(0, 0)), window.view.mapTo(window, QPoint(0, 0))
    assert after == before  # the tab bar and the page stay where the pointer left them
    top_left = banner.mapTo(window, QPoint(0, 0))
    assert top_left.y() >= bar.mapTo(window, QPoint(0, bar.height())).y()  # under the tab bar, over the page


def test_queued_panel_calls_that_accumulate_keep_only_the_newest(qtbot):
    """A tab never shown kept every run's trade-off entry queued (500 runs: 500 reports and their tracks)."""
    from PySide6.QtWidgets import QTabWidget, QWidget

    from gui.panels.queue import PanelQueue

    tabs = QTabWidget()
    qtbot.addWidget(tabs)
    shown, hidden = QWidget(), QWidget()
    tabs.addTab(shown, "shown")
    tabs.addTab(hidden, "hidden")
    got: list[int] = []
    queue = PanelQueue(tabs, lambda text: None)
    for i in range(200):
        queue.call(hidden, got.append, i, replace=False, keep_last=50)
    queue.flush(hidden)
    assert got == list(range(150, 200))
