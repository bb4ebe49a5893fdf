"""The app's diff view (issue 21): the panel over a Diff built from the model's dataclasses, the waterfall's bars,
the Runs list's Diff, and the diff controller's error path. No diff_runs needed: where the app calls it,
the tests put a stand-in on engine.api (the contract is the Diff it returns)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

pytest.importorskip("pytestqt")
from PySide6.QtCore import QSettings, Qt  # noqa: E402

import engine.api as engine_api  # noqa: E402
from engine.analysis.diff import Diff, DiffRow, SpecSplit, WaterfallStep  # noqa: E402
from engine.api import ReportError, load_report  # noqa: E402
from gui.controllers.diff import NO_DIFF_RUNS, DiffController  # noqa: E402
from gui.history import OPENED, report_settings  # noqa: E402
from gui.main_window import MainWindow  # noqa: E402
from gui.model import RunData  # noqa: E402
from gui.panels.diff_panel import COL, EMPTY_TEXT, DiffPanel, split_text  # noqa: E402
from gui.panels.history import HistoryPanel  # noqa: E402
from gui.settings import Settings  # noqa: E402
from gui.state import AppState  # noqa: E402
from gui.widgets.waterfall import (  # noqa: E402
    FASTER_COLOUR,
    REST_COLOUR,
    SLOWER_COLOUR,
    WaterfallChart,
    waterfall_bars,
)
from tests.diff_cases import A_MS, B_MS, sample_diff, sample_rows, sample_steps  # noqa: E402

H200 = "tests/data/h200/corrtrack_{}_p256_sample.json"
DIFF_TIMEOUT_MS = 10_000


@pytest.fixture
def panel(qtbot):
    p = DiffPanel()
    qtbot.addWidget(p)
    p.resize(1000, 800)
    p.show()
    return p


# -- the panel ---------------------------------------------------------------------------------------------------
def test_a_new_panel_says_how_to_make_a_diff(panel):
    assert not panel.showing_diff and panel.empty_note.text() == EMPTY_TEXT
    assert panel.table.rowCount() == 0 and panel.waterfall.empty


def test_the_panel_shows_every_row_ranked_by_the_size_of_its_delta(panel):
    diff = sample_diff()
    panel.set_diff(diff)
    assert panel.showing_diff
    assert panel.table.rowCount() == len(diff.rows)
    shown = panel.shown_rows()
    sizes = [abs(r.delta_ms) for r in shown]
    assert sizes == sorted(sizes, reverse=True)  # largest move first, faster or slower
    assert shown[0].name == "conv fp32 (SIMT)"  # -7.6 ms: larger than the run's own -6.7
    assert {r.name for r in shown} == {r.name for r in diff.rows}
    # a missing side reads as a dash, the delta keeps its sign, the ratio its x
    row = next(i for i, r in enumerate(shown) if r.name == "conv bf16 (tensor cores)")
    assert panel.table.item(row, COL["A ms"]).text() == "—"
    assert panel.table.item(row, COL["Δ ms"]).text() == "+1.2"
    backbone = next(i for i, r in enumerate(shown) if r.name == "backbone")
    assert panel.table.item(backbone, COL["B/A"]).text() == "0.18x"


def test_sorting_by_another_column_and_back(panel):
    panel.set_diff(sample_diff())
    panel.table.sortItems(COL["A ms"], Qt.SortOrder.AscendingOrder)  # ascending A ms; rows absent in A last
    a = [r.a_ms for r in panel.shown_rows()]
    present = [v for v in a if v is not None]
    assert present == sorted(present) and a[len(present):] == [None] * (len(a) - len(present))
    panel.set_level("stage")  # the sort is kept across a new filter
    assert [r.a_ms for r in panel.shown_rows()] == sorted(r.a_ms for r in sample_rows() if r.level == "stage")


def test_the_level_filter_shows_one_level(panel):
    diff = sample_diff()
    panel.set_diff(diff)
    for level in ("stage", "module", "function", "kernel_class"):
        panel.set_level(level)
        shown = panel.shown_rows()
        assert shown and {r.level for r in shown} == {level}
        assert len(shown) == sum(r.level == level for r in diff.rows)
        assert panel.count_label.text() == f"{len(shown)} of {len(diff.rows)} rows"
    panel.set_level(None)
    assert panel.table.rowCount() == len(diff.rows)
    panel.set_level("module")
    panel.set_diff(sample_diff(b_is_projection=True))  # a new diff keeps the filter
    assert {r.level for r in panel.shown_rows()} == {"module"}


def test_selecting_a_row_shows_its_reason_and_evidence(panel):
    panel.set_diff(sample_diff())
    assert panel.evidence.toPlainText() == ""
    assert panel.select_row("backbone", "stage")
    text = panel.evidence.toPlainText()
    assert "fp32 SIMT convolutions on A, bf16 tensor cores on B" in text
    evidence = json.loads(text[text.index("{"):])  # the evidence as JSON, whole
    assert evidence == next(r.evidence for r in sample_rows() if r.name == "backbone")
    assert panel.select_row("backbone.layer1")
    assert "(in backbone)" in panel.evidence.toPlainText()
    assert "no evidence recorded" in panel.evidence.toPlainText()
    panel.set_level("kernel_class")  # the filter drops the selection and its evidence
    assert panel.selected_row() is None and panel.evidence.toPlainText() == ""


def test_the_header_says_the_split_and_marks_a_projection(panel):
    diff = sample_diff()
    panel.set_diff(diff)
    header = panel.header.text()
    assert "corrtrack fp32 p256 (NVIDIA H200)" in header and "corrtrack bf16 p256 (NVIDIA H200)" in header
    assert "12.1" in header and "5.4" in header and "projection" not in header
    total, spec = B_MS / A_MS, diff.split.spec_ratio
    assert f"B/A {total:.2f}x: specs explain {spec:.2f}x, named rest {total / spec:.2f}x" in header
    assert panel.notes.isVisible() and "grid_sample" in panel.notes.text()
    panel.set_diff(sample_diff(b_is_projection=True))
    header = panel.header.text()
    assert header.count("projection") == 1 and header.index("projection") > header.index("bf16")


def test_labels_from_files_are_escaped_and_an_unknown_split_is_said(panel):
    split = SpecSplit(total_ratio=None, spec_ratio=None, explained_ms=0.0, rest_ms=0.0)
    diff = Diff("<img src='/dev/zero'>", "b", None, 3.0, (), split)
    panel.set_diff(diff)
    assert "<img" not in panel.header.text() and "&lt;img" in panel.header.text()
    assert "unknown" in split_text(diff)
    assert panel.table.rowCount() == 0 and panel.waterfall.empty  # no rows, no steps: no crash
    same = SpecSplit(total_ratio=0.5, spec_ratio=None, explained_ms=0.0, rest_ms=-1.0)
    assert "the specs explain none" in split_text(Diff("a", "b", 2.0, 1.0, (), same))


def test_an_error_replaces_the_diff_with_its_message(panel):
    panel.set_diff(sample_diff())
    panel.show_error("report B: not a run report")
    assert not panel.showing_diff and panel.diff is None
    assert "report B: not a run report" in panel.empty_note.text()
    panel.set_diff(sample_diff())
    assert panel.showing_diff and panel.error == ""


# -- the waterfall ----------------------------------------------------------------------------------------------
def test_the_waterfall_floats_each_delta_on_the_running_sum(qtbot):
    steps = sample_steps()
    bars = waterfall_bars(steps)
    assert [b.kind for b in bars] == [s.kind for s in steps]
    level = 0.0
    for step, bar in zip(steps, bars):
        if step.kind in ("start", "end"):
            assert (bar.bottom, bar.top) == (0.0, step.ms)
            level = step.ms
        else:
            assert bar.bottom == pytest.approx(min(level, level + step.ms))
            assert bar.top == pytest.approx(max(level, level + step.ms))
            level += step.ms
        assert bar.level == pytest.approx(level)
    assert bars[-2].level == pytest.approx(B_MS)  # the rest closes the sum on B's time
    named = {b.label: b.colour for b in bars if b.kind == "named"}
    assert named["backbone"] == FASTER_COLOUR and named["download"] == SLOWER_COLOUR
    assert bars[-2].colour == REST_COLOUR

    chart = WaterfallChart()
    qtbot.addWidget(chart)
    chart.resize(900, 300)
    chart.show()
    chart.set_steps(steps)
    opts = chart.bar_item.opts  # what is drawn is the geometry
    assert np.allclose(opts["y0"], [b.bottom for b in bars])
    assert np.allclose(opts["height"], [b.top - b.bottom for b in bars])
    assert np.allclose(opts["x"], range(len(bars)))
    assert [t.toPlainText() for t in chart.value_items][:3] == ["12.1 ms", "-5.9", "-0.75"]
    assert chart.tick_labels()[0] == "A fp32" and len(chart.tick_labels()) == len(bars)
    assert "backbone" in chart.bar_tip(2) and "named delta" in chart.bar_tip(2)
    assert chart.bar_at(2.0, (bars[2].bottom + bars[2].top) / 2) == 2 and chart.bar_at(2.0, 0.1) is None


def test_the_waterfall_takes_odd_steps(qtbot):
    chart = WaterfallChart()
    qtbot.addWidget(chart)
    chart.set_steps([])
    assert chart.empty and chart.note.isVisibleTo(chart)
    odd = [WaterfallStep("named", "no start", -2.0), WaterfallStep("named", "zero", 0.0),
           WaterfallStep("rest", "unknown", None), WaterfallStep("named", "nan", math.nan),  # type: ignore[arg-type]
           WaterfallStep("weird", "", 1.0)]
    chart.set_steps(odd)
    bars = chart.bars
    assert (bars[0].bottom, bars[0].top) == (-2.0, 0.0)  # without a start the sum begins at 0
    assert bars[1].bottom == bars[1].top == -2.0 and bars[1].colour == REST_COLOUR  # a zero delta: no sign
    assert bars[2].ms is None and bars[3].ms is None and bars[2].top == bars[3].top == -2.0
    assert bars[4].label == "weird" and (bars[4].bottom, bars[4].top) == (-2.0, -1.0)
    assert [t.toPlainText() for t in chart.value_items][1:4] == ["0", "—", "—"]
    view = chart.plot.getPlotItem().getViewBox().viewRange()[1]
    assert view[0] <= -2.0 and view[1] >= 0.0  # the axis reaches below zero for a negative sum


# -- the Runs list and the controller --------------------------------------------------------------------------
def _report_entry(state: AppState, precision: str) -> int:
    report = load_report(H200.format(precision))
    entry = state.new_entry(video="sample.mp4", tracker=report.config.tracker, settings=report_settings(report),
                            machine=report.device_name, status=OPENED, source=H200.format(precision),
                            run=RunData.from_report(report), report=report)
    state.add_entry(entry, compare_previous=False)
    return entry.id


def test_diff_is_enabled_once_a_and_b_are_picked_or_two_rows_are_selected(qtbot):
    state = AppState()
    history = HistoryPanel(state)
    qtbot.addWidget(history)
    a, b = _report_entry(state, "fp32"), _report_entry(state, "bf16")
    assert not history.diff_button.isEnabled()
    history.pick(a)
    history.pick_as("A")
    assert state.ab["A"] == a and not history.diff_button.isEnabled()
    with qtbot.assertNotEmitted(history.diff_requested):
        history.request_diff()
    history.pick(b)
    history.pick_as("B")
    assert state.ab == {"A": a, "B": b} and history.diff_button.isEnabled()
    with qtbot.waitSignal(history.diff_requested, timeout=1000) as blocker:
        history.diff_button.click()
    assert blocker.args == [a, b]


def test_two_selected_rows_are_diffed_without_an_a_b_pick_upper_one_as_a(qtbot):
    """Any two runs with reports can be diffed (other videos, other trackers): the A/B pick's same-video rule is the
    track overlay's. Two selected rows win over A and B."""
    from PySide6.QtCore import QItemSelectionModel

    state = AppState()
    history = HistoryPanel(state)
    qtbot.addWidget(history)
    a, _, c = _report_entry(state, "fp32"), _report_entry(state, "bf16"), _report_entry(state, "fp32")
    selection = history.table.selectionModel()
    for entry_id in (c, a):  # selected bottom row first: A is still the upper one
        index = history.model.index(history.model.row_of(entry_id), 0)
        selection.select(index, QItemSelectionModel.SelectionFlag.Select | QItemSelectionModel.SelectionFlag.Rows)
    assert history.diff_button.isEnabled() and history.picked_pair() == (a, c)
    with qtbot.waitSignal(history.diff_requested, timeout=1000) as blocker:
        history.diff_button.click()
    assert blocker.args == [a, c]
    history.table.clearSelection()
    assert not history.diff_button.isEnabled()  # one row or none, and no A/B pick: nothing to diff


def test_the_controller_diffs_a_and_b_reports_in_a_worker(qtbot, monkeypatch):
    state = AppState()
    a, b = _report_entry(state, "fp32"), _report_entry(state, "bf16")
    seen = []

    def fake_diff_runs(ra, rb):  # stands in for the engine's: the contract is its Diff
        seen.append((ra.precision, rb.precision))
        return sample_diff()

    monkeypatch.setattr(engine_api, "diff_runs", fake_diff_runs, raising=False)
    differ = DiffController(state)
    state.ab = {"A": a, "B": b}
    with qtbot.waitSignal(differ.diffed, timeout=DIFF_TIMEOUT_MS) as got:
        assert differ.diff_ab()
    assert isinstance(got.args[0], Diff) and seen == [("fp32", "bf16")]
    differ.shutdown()


def test_bad_files_and_failing_diffs_come_out_as_messages(qtbot, monkeypatch, tmp_path):
    state = AppState()
    differ = DiffController(state)
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    good = H200.format("fp32")
    monkeypatch.setattr(engine_api, "diff_runs", lambda ra, rb: sample_diff(), raising=False)
    with qtbot.waitSignal(differ.failed, timeout=DIFF_TIMEOUT_MS) as got:
        assert differ.diff_files(good, bad)  # read in the worker: its ReportError becomes the message
    assert "bad.json" in got.args[0]
    with qtbot.waitSignal(differ.failed, timeout=1000) as got:
        assert not differ.diff_files(good, tmp_path / "missing.json")
    assert "missing.json" in got.args[0] and "not a file" in got.args[0]

    def refuses(ra, rb):
        raise ReportError("B has no stage times", "record it with trackscope bench")

    monkeypatch.setattr(engine_api, "diff_runs", refuses, raising=False)
    with qtbot.waitSignal(differ.failed, timeout=DIFF_TIMEOUT_MS) as got:
        differ.diff_files(good, good)
    assert got.args[0] == "B has no stage times (record it with trackscope bench)"

    monkeypatch.setattr(engine_api, "diff_runs", lambda ra, rb: 1 / 0, raising=False)  # a bug, not a crash
    with qtbot.waitSignal(differ.failed, timeout=DIFF_TIMEOUT_MS) as got:
        differ.diff_files(good, good)
    assert "ZeroDivisionError" in got.args[0]

    monkeypatch.delattr(engine_api, "diff_runs", raising=False)  # an engine without diff_runs
    with qtbot.waitSignal(differ.failed, timeout=DIFF_TIMEOUT_MS) as got:
        differ.diff_files(good, good)
    assert NO_DIFF_RUNS in got.args[0]
    differ.shutdown()


def test_the_window_shows_a_diff_and_a_failed_one_in_its_diff_tab(qtbot, monkeypatch, tmp_path):
    settings = Settings(QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat))
    w = MainWindow(settings=settings, sampler=None)
    qtbot.addWidget(w)
    titles = [w.tabs.tabText(i) for i in range(w.tabs.count())]
    assert titles.index("Diff") == titles.index("Capture") + 1
    assert "Diff two reports…" in [a.text() for m in w.menuBar().actions() if m.menu() is not None
                                   for a in m.menu().actions()]
    monkeypatch.setattr(engine_api, "diff_runs", lambda ra, rb: sample_diff(), raising=False)
    with qtbot.waitSignal(w.differ.diffed, timeout=DIFF_TIMEOUT_MS):
        w.differ.diff_files(H200.format("fp32"), H200.format("bf16"))
    assert w.tabs.currentWidget() is w.diff_panel and w.diff_panel.showing_diff
    bad = tmp_path / "bad.json"
    bad.write_text("[]")
    with qtbot.waitSignal(w.message_shown, timeout=DIFF_TIMEOUT_MS):
        w.differ.diff_files(bad, H200.format("bf16"))
    assert not w.diff_panel.showing_diff and "bad.json" in w.diff_panel.empty_note.text()
    assert "bad.json" in w.statusBar().currentMessage()
    w.differ.diff_ab()  # nothing picked: said, not raised
    assert "pick A and B" in w.diff_panel.empty_note.text()
    w.shutdown()


def test_rows_built_for_the_sample_are_a_valid_diff():
    """The sample the tests and the screenshot use keeps to the model: known levels, a closed waterfall."""
    from engine.analysis.diff import LEVELS, STEP_KINDS

    diff = sample_diff()
    assert {r.level for r in diff.rows} <= set(LEVELS)
    assert {s.kind for s in diff.split.steps} <= set(STEP_KINDS)
    deltas = sum(s.ms for s in diff.split.steps if s.kind not in ("start", "end"))
    assert A_MS + deltas == pytest.approx(B_MS)
    assert isinstance(diff.rows[0], DiffRow)


def test_the_menu_asks_for_two_files_and_an_entry_without_a_report_is_said(qtbot, monkeypatch):
    state = AppState()
    differ = DiffController(state)
    monkeypatch.setattr(engine_api, "diff_runs", lambda ra, rb: sample_diff(), raising=False)
    answers = iter([(H200.format("fp32"), ""), (H200.format("bf16"), "")])
    monkeypatch.setattr("gui.controllers.diff.QFileDialog.getOpenFileName", lambda *a, **k: next(answers))
    with qtbot.waitSignal(differ.diffed, timeout=DIFF_TIMEOUT_MS):
        differ.diff_files_dialog()
    cancelled = iter([(H200.format("fp32"), ""), ("", "")])  # B's dialog cancelled: nothing happens
    monkeypatch.setattr("gui.controllers.diff.QFileDialog.getOpenFileName", lambda *a, **k: next(cancelled))
    with qtbot.assertNotEmitted(differ.started):
        differ.diff_files_dialog()
    a = _report_entry(state, "fp32")
    stopped = state.new_entry(video="sample.mp4", tracker="corrtrack", settings={}, machine="cpu", status="stopped",
                              source="run", run=state.runs.get(a).run, report=None)
    state.add_entry(stopped, compare_previous=False)
    with qtbot.waitSignal(differ.failed, timeout=1000) as got:
        assert not differ.diff_entries(a, stopped.id)
    assert got.args[0].startswith("B (") and "no report" in got.args[0]
    differ.shutdown()
