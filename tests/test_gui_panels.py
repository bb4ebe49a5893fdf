"""The three standalone panels: A/B view (two real LK runs), trade-off table and scatter, diagnosis."""

from __future__ import annotations

import copy
import dataclasses

import numpy as np
import pytest

pytest.importorskip("pytestqt")
from PySide6.QtCore import QPointF, Qt, QTimer  # noqa: E402

from engine.analysis.analyse import analyse  # noqa: E402
from engine.analysis.metrics import divergence, tapvid_metrics  # noqa: E402
from engine.analysis.whatif import project  # noqa: E402
from engine.core.config import RunConfig  # noqa: E402
from engine.core.errors import ReportError  # noqa: E402
from engine.report.files import save  # noqa: E402
from engine.report.parts import TelemetryWindow  # noqa: E402
from engine.report.recorder import RunRecorder  # noqa: E402
from engine.report.schema import Report  # noqa: E402
from engine.run.session import BatchDone, Finished, Session  # noqa: E402
from gui.model import RunData  # noqa: E402
from gui.panels.ab_view import ABView  # noqa: E402
from gui.panels.diagnosis import NO_COST, NO_FINDINGS, DiagnosisPanel  # noqa: E402
from gui.panels.tradeoff import COL, TradeoffPanel  # noqa: E402
from tests.helpers import moving_square_video  # noqa: E402

NUM_FRAMES = 10
SIZE = 48
PERTURBED = 3  # the point moved in run B
SHIFT = np.array([3.0, 4.0], np.float32)  # 5 px
QUERIES = np.array([[0, 30, 30], [0, 40, 10], [0, 10, 40], [0, 36, 40], [0, 24, 6], [0, 40, 24]], np.float32)


def lk_run() -> Finished:
    frames = moving_square_video(NUM_FRAMES, SIZE)
    result = Session(frames, QUERIES, RunConfig(tracker="lk", device="cpu")).run()
    assert isinstance(result, Finished), result
    return result


@pytest.fixture(scope="module")
def ab_runs():
    frames = moving_square_video(NUM_FRAMES, SIZE)
    run_a, run_b = lk_run(), lk_run()
    tracks_b = run_b.tracks.copy()
    tracks_b[PERTURBED] += SHIFT
    a = RunData("lk run A", {"tracker": "lk"}, QUERIES, run_a.tracks, run_a.visible)
    b = RunData("lk run B (perturbed)", {"tracker": "lk"}, QUERIES, tracks_b, run_b.visible)
    assert (a.visible[PERTURBED] & b.visible[PERTURBED]).sum() >= 2, "the perturbed point must stay tracked"
    return frames, a, b


@pytest.fixture
def ab_view(qtbot, ab_runs):
    frames, a, b = ab_runs
    view = ABView()
    qtbot.addWidget(view)
    view.resize(900, 500)
    view.set_frames(frames)
    view.set_runs(a, b)
    view.show()
    return view


def test_ab_numbers_match_engine_metrics(ab_view, ab_runs):
    _, a, b = ab_runs
    expected = divergence(a.tracks, a.visible, b.tracks, b.visible)
    assert ab_view.divergence.mean_px == pytest.approx(expected.mean_px)
    assert ab_view.divergence.max_px == pytest.approx(5.0, abs=1e-4)
    np.testing.assert_allclose(ab_view.divergence.per_point_px, expected.per_point_px)
    text = ab_view.summary.text()
    assert f"{expected.mean_px:.2f} px" in text
    assert f"{100 * expected.visibility_agreement:.1f} %" in text
    assert "no ground truth" in text


def test_ab_most_divergent_first_and_click_selects(qtbot, ab_view, ab_runs):
    _, a, b = ab_runs
    assert ab_view.row_points()[0] == PERTURBED
    assert ab_view.table.item(0, 2).text() == "5.00"
    rect = ab_view.table.visualItemRect(ab_view.table.item(0, 1))
    with qtbot.waitSignal(ab_view.pointSelected, timeout=1000) as blocker:
        qtbot.mouseClick(ab_view.table.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    assert blocker.args == [PERTURBED]
    assert ab_view.selected == PERTURBED
    t = ab_view.frame
    assert a.visible[PERTURBED, t] and b.visible[PERTURBED, t]  # jumped to a frame where both are tracked
    ring_a = np.array(ab_view.side_a.ring.getData()).T  # [1, 2]
    ring_b = np.array(ab_view.side_b.ring.getData()).T
    np.testing.assert_allclose(ring_a[0], a.tracks[PERTURBED, t], atol=1e-4)
    np.testing.assert_allclose(ring_b[0], b.tracks[PERTURBED, t], atol=1e-4)
    assert len(ab_view.side_a.path_b.getData()[0]) == NUM_FRAMES  # B's path drawn in view A too
    ab_view.set_frame(0)
    np.testing.assert_allclose(np.array(ab_view.side_b.ring.getData()).T[0], b.tracks[PERTURBED, 0], atol=1e-4)


def test_ab_point_colours_follow_divergence(ab_view):
    rgba = ab_view.point_rgba
    assert rgba[PERTURBED, 0] > 200 and rgba[PERTURBED, 1] < 80  # red
    others = [i for i in range(len(QUERIES)) if i != PERTURBED and np.isfinite(ab_view.divergence.per_point_px[i])]
    assert others and all(rgba[i, 1] > 150 and rgba[i, 0] < 100 for i in others)  # green
    assert ab_view.colour_bar.levels()[1] == pytest.approx(ab_view.colour_max_px)


def test_ab_views_share_frame_and_zoom(qtbot, ab_view, ab_runs):
    frames, a, b = ab_runs
    ab_view.set_frame(4)
    np.testing.assert_array_equal(ab_view.side_a.image.image, frames[4])
    np.testing.assert_array_equal(ab_view.side_b.image.image, frames[4])
    drawn = ab_view.side_b.shown_points()  # [M, 2], grouped by colour bin and filled/hollow
    expected = b.tracks[np.isfinite(b.tracks[:, 4]).all(-1), 4]
    np.testing.assert_allclose(np.sort(drawn, axis=0), np.sort(expected, axis=0), atol=1e-4)
    filled = sum(len(item.getData()[0]) for item in ab_view.side_b.filled)
    assert filled == int(b.visible[:, 4].sum())  # occluded points are drawn hollow
    ab_view.side_a.plot.getViewBox().setRange(xRange=(5, 15), yRange=(5, 15), padding=0)
    range_b = ab_view.side_b.plot.getViewBox().viewRange()
    assert range_b[0] == pytest.approx(ab_view.side_a.plot.getViewBox().viewRange()[0])


def test_ab_playback_advances_and_stops(qtbot, ab_view):
    ab_view.set_frame(0)
    ab_view.set_playing(True)
    qtbot.waitUntil(lambda: ab_view.frame >= 2, timeout=2000)
    ab_view.hide()
    assert not ab_view._timer.isActive()
    assert not ab_view.play_button.isChecked()


def test_ab_aj_against_ground_truth(qtbot, ab_runs):
    frames, a, b = ab_runs
    gt = {"tracks": a.tracks, "visible": a.visible, "query_t": QUERIES[:, 0]}
    view = ABView()
    qtbot.addWidget(view)
    view.set_frames(frames)
    view.set_runs(a, b, ground_truth=gt)
    expected_b = tapvid_metrics(b.tracks, b.visible, a.tracks, a.visible, QUERIES[:, 0], size=(SIZE, SIZE)).aj
    assert view.aj["a"] == pytest.approx(1.0)
    assert view.aj["b"] == pytest.approx(expected_b) and expected_b < 1.0
    assert f"B <b>{expected_b:.3f}</b>" in view.summary.text()


def test_ab_mismatched_runs_warn_instead_of_crashing(qtbot, ab_runs):
    frames, a, b = ab_runs
    short = RunData("fewer points", {}, QUERIES[:2], b.tracks[:2], b.visible[:2])
    view = ABView()
    qtbot.addWidget(view)
    view.set_frames(frames)
    view.set_runs(a, short)
    assert view.divergence is None and view.table.rowCount() == 0
    assert "cannot be compared" in view.warning.text()


# -- trade-off --------------------------------------------------------------------------------
def make_report(precision: str, ms: float, ppb: int = 256, device: str = "NVIDIA H200",
                shift_px: float | None = None) -> dict:
    """A report's JSON, by hand (tracks when shift_px is given: a fixed grid moved by it); the panel parses it."""
    tracks = None
    if shift_px is not None:
        base = np.stack(np.meshgrid(np.arange(4.0) * 10, np.arange(3.0) * 10), -1).reshape(-1, 1, 2)
        xy = np.repeat(base, 5, axis=1) + [shift_px, 0.0]  # [12, 5, 2]
        tracks = {"queries": [[0.0, *p[0]] for p in base.tolist()], "tracks": xy.tolist(),
                  "visible": np.ones((12, 5), int).tolist()}
    return {
        "format": "trackscope-report", "version": 1, "created": "2026-11-30T01:00:00Z",
        "environment": {"gpu": {"name": device, "compute_capability": [9, 0]}},
        "config": {"tracker": "corrtrack", "device": "cuda", "precision": precision, "points_per_batch": ppb,
                   "frames_per_batch": 16},
        "label": f"corrtrack {precision} p{ppb} f16", "device_name": device,
        "video": {"name": "sample.mp4", "num_frames": 47, "width": 256, "height": 256},
        "stages": ["backbone", "cost_volume"],
        "runs": [{"cold": i == 0, "wall_ms": ms * (5 if i == 0 else 1), "stage_ms": {"backbone": ms / 2},
                  "batches": []} for i in range(4)],
        "totals": {"warm_ms_median": ms, "cold_ms": 5 * ms, "frames_per_s": 47e3 / ms,
                   "peak_memory_bytes": 3 * 1024 ** 3, "num_points": 256, "num_frames": 47, "num_runs": 4},
        "accuracy": None, "tracks": tracks, "findings": [],
    }


def table_rows(panel: TradeoffPanel) -> dict[str, list[str]]:
    """Rows by 'precision@device' (plus '/pN' when the points per batch are not 256)."""
    out = {}
    for r in range(panel.table.rowCount()):
        cells = [panel.table.item(r, c).text() for c in range(panel.table.columnCount())]
        points = cells[COL["points/batch"]]
        out[f"{cells[COL['precision']]}@{cells[COL['machine']]}" + ("" if points == "256" else f"/p{points}")] = cells
    return out


def test_tradeoff_rows_speedup_and_divergence(qtbot):
    panel = TradeoffPanel()
    qtbot.addWidget(panel)
    panel.add_report(make_report("fp32", 30.0, shift_px=0.0))
    panel.add_report(make_report("fp16", 12.0, shift_px=0.5))
    panel.add_report(make_report("bf16", 15.0))
    rows = table_rows(panel)
    assert len(rows) == 3
    assert rows["fp32@NVIDIA H200"][COL["speedup"]] == "1.00x"
    assert rows["fp16@NVIDIA H200"][COL["speedup"]] == "2.50x"
    assert rows["bf16@NVIDIA H200"][COL["speedup"]] == "2.00x"
    assert rows["fp16@NVIDIA H200"][COL["px vs fp32"]] == "0.5"  # computed from both runs' tracks
    assert rows["bf16@NVIDIA H200"][COL["px vs fp32"]] == "—"  # no tracks to compare
    assert rows["fp16@NVIDIA H200"][COL["peak memory"]] == "3.00 GiB"
    assert panel.accuracy_axis() == "px"
    assert "1 run(s) not plotted" in panel.note.text()


def test_tradeoff_rerun_replaces_row_and_other_device_has_no_baseline(qtbot):
    panel = TradeoffPanel()
    qtbot.addWidget(panel)
    for prec, ms in (("fp32", 30.0), ("fp16", 12.0), ("bf16", 15.0)):
        panel.add_report(make_report(prec, ms))
    panel.add_report(make_report("fp16", 10.0))
    rows = table_rows(panel)
    assert len(rows) == 3
    assert rows["fp16@NVIDIA H200"][COL["ms / run"]] == "10.0 ms"
    assert rows["fp16@NVIDIA H200"][COL["speedup"]] == "3.00x"
    panel.add_report(make_report("fp16", 80.0, device="Tesla T4"))
    rows = table_rows(panel)
    assert len(rows) == 4 and rows["fp16@Tesla T4"][COL["speedup"]] == "—"
    panel.add_report(make_report("fp16", 40.0, ppb=1024))  # no fp32 at p1024: no baseline (the bench's rule)
    rows = table_rows(panel)
    assert len(rows) == 5 and rows["fp16@NVIDIA H200/p1024"][COL["speedup"]] == "—"
    untrained = make_report("fp32", 25.0)
    untrained["tracker"] = {"name": "corrtrack", "weights": None}  # a learned tracker without trained weights
    panel.add_report(untrained)
    trackers = [panel.table.item(r, COL["tracker"]).text() for r in range(panel.table.rowCount())]
    assert len(trackers) == 6 and trackers.count("corrtrack (untrained)") == 1  # its own row, not a replacement
    panel.clear()
    assert panel.table.rowCount() == 0


def test_tradeoff_sorts_numerically_and_plots_aj(qtbot):
    panel = TradeoffPanel()
    qtbot.addWidget(panel)
    for prec, ms, aj in (("fp32", 100.0, 0.70), ("fp16", 9.0, 0.69), ("tf32", 20.0, 0.705)):
        report = make_report(prec, ms)
        report["accuracy"] = {"aj": aj, "delta_avg": 0.8, "oa": 0.9, "vs": "ground truth"}
        panel.add_report(report)
    panel.table.sortByColumn(COL["ms / run"], Qt.SortOrder.AscendingOrder)
    order = [panel.table.item(r, COL["precision"]).text() for r in range(3)]
    assert order == ["fp16", "tf32", "fp32"]  # 9 < 20 < 100 as numbers, not as text
    panel.table.sortByColumn(COL["AJ"], Qt.SortOrder.DescendingOrder)
    assert panel.table.item(0, COL["precision"]).text() == "tf32"
    assert panel.accuracy_axis() == "aj"
    plotted = {item.name(): item.getData() for item in panel.plot.listDataItems()}
    assert set(plotted) == {"fp32", "fp16", "tf32"}
    assert plotted["fp16"][1][0] == pytest.approx(0.69)


def test_tradeoff_bench_file_and_bad_input(qtbot, tmp_path):
    panel = TradeoffPanel()
    qtbot.addWidget(panel)
    bench = {"format": "trackscope-bench", "version": 1, "environment": {},
             "reports": [make_report("fp32", 30.0), make_report("bf16", 20.0)]}
    path = save(bench, tmp_path / "bench.json")
    assert panel.add_bench(path) == 2
    assert table_rows(panel)["bf16@NVIDIA H200"][COL["speedup"]] == "1.50x"
    (tmp_path / "junk.json").write_text("{not json")
    with pytest.raises(ReportError, match="junk.json"):
        panel.add_bench(tmp_path / "junk.json")
    with pytest.raises(ReportError):
        panel.add_report({"format": "something else"})
    assert panel.table.rowCount() == 2


# -- diagnosis --------------------------------------------------------------------------------
H200_ENV = {"hostname": "gpu-host", "os": "Linux", "python": "3.11", "torch": "2.11", "cuda": "12.8",
            "driver": "570", "device": "cuda:0", "cpu": {"model": "x86", "cores": 16},
            "gpu": {"name": "NVIDIA H200", "compute_capability": [9, 0], "memory_total_bytes": 141 * 10 ** 9}}
STAGE_COSTS = {"grayscale": {"flops": 0, "bytes": 4_000_000, "ops": 10, "precision": "fp32"},
               "track_forward": {"flops": 2 * 10 ** 11, "bytes": 2 * 10 ** 8, "ops": 40, "precision": "fp32"},
               "track_backward": {"flops": 2 * 10 ** 11, "bytes": 2 * 10 ** 8, "ops": 40, "precision": "fp32"}}


#: stage times the H200 report is recorded with, ms: LK's real ones (~1 ms on this machine) sit at the
#: rules' thresholds, so findings would depend on the machine's speed
FIXED_STAGE_MS = {"grayscale": 0.5, "track_forward": 20.0, "track_backward": 20.0, "fb_check": 2.0}
FIXED_OVERHEAD_MS = 1.0


def _fixed_times(event):
    """The event with its measured times replaced by FIXED_STAGE_MS (the rules see the same run every time)."""
    if isinstance(event, BatchDone):
        return dataclasses.replace(event, stage_ms=dict(FIXED_STAGE_MS),
                                   wall_ms=sum(FIXED_STAGE_MS.values()) + FIXED_OVERHEAD_MS)
    if isinstance(event, Finished):
        return dataclasses.replace(event, wall_ms=sum(FIXED_STAGE_MS.values()) + 2 * FIXED_OVERHEAD_MS)
    return event


@pytest.fixture(scope="module")
def h200_report() -> Report:
    """Real LK runs recorded as if on an H200 with GPM telemetry showing busy SMs and idle tensor cores."""
    recorder = RunRecorder(environment=copy.deepcopy(H200_ENV))
    frames = moving_square_video(NUM_FRAMES, SIZE)
    for _ in range(3):
        for event in Session(frames, QUERIES, RunConfig(tracker="lk", device="cpu")).events():
            recorder.add(_fixed_times(event))
    report = recorder.build(work=STAGE_COSTS)
    telemetry = TelemetryWindow(t=np.array([0.0, 0.1, 0.2]), metrics={
        "sm_active_pct": np.array([80.0, 85.0, 82.0]), "tensor_active_pct": np.zeros(3)})
    return dataclasses.replace(report, telemetry=telemetry)


def test_diagnosis_shows_findings_with_evidence(qtbot, h200_report):
    panel = DiagnosisPanel()
    qtbot.addWidget(panel)
    panel.set_report(h200_report)  # analysed on load
    findings = [f.to_dict() for f in analyse(h200_report).findings]
    assert any(f["rule"] == "tf32_off" for f in findings)
    assert panel.finding_titles() == [f["title"] for f in findings]  # diagnose sorts most severe first
    tf32 = next(i for i, f in enumerate(findings) if f["rule"] == "tf32_off")
    item = panel.findings.topLevelItem(tf32)
    assert item.text(1) == "warning"
    texts = [item.child(i).text(0) for i in range(item.childCount())]
    assert texts[0] == "evidence" and texts[-1].startswith("suggested change: run with --precision tf32")
    evidence = [item.child(0).child(i).text(0) for i in range(item.child(0).childCount())]
    assert "compute capability: 9.00" in evidence or "compute capability: 9" in evidence
    assert panel.findings.topLevelItem(0).isExpanded()


def test_diagnosis_whatif_follows_the_gpu_choice(qtbot, h200_report):
    panel = DiagnosisPanel()
    qtbot.addWidget(panel)
    panel.set_report(h200_report)
    assert panel.gpu_combo.currentText() == "Tesla T4"
    panel.gpu_combo.setCurrentText("A100 80GB SXM")
    expected = project(h200_report, "A100 80GB SXM")
    assert panel.projected_ms() == pytest.approx({k: v["projected_ms"] for k, v in expected["stages"].items()
                                                  if v["projected_ms"] is not None})
    timed = [k for k, v in expected["stages"].items() if v["observed_ms"] is not None]
    assert panel.whatif_table.rowCount() == len(timed) + 1  # untimed stages are left out, plus a total
    total = panel.whatif_table.item(panel.whatif_table.rowCount() - 1, 4).text()
    assert total.replace(",", "") == f"{expected['projected_ms']:.1f}" or float(total) == pytest.approx(
        expected["projected_ms"], rel=1e-2)
    assert "source peaks: H200" in panel.assumptions.text()
    slower = project(h200_report, "Tesla T4")["stages"]["track_forward"]["projected_ms"]
    panel.set_target("Tesla T4")
    assert panel.projected_ms()["track_forward"] == pytest.approx(slower)
    assert slower > expected["stages"]["track_forward"]["projected_ms"]


def test_diagnosis_without_findings_or_cost(qtbot, h200_report):
    panel = DiagnosisPanel()
    qtbot.addWidget(panel)
    bare = dataclasses.replace(h200_report, work={}, telemetry=None)  # nothing counted, no telemetry
    assert analyse(bare).findings == () and analyse(bare).cost is None
    panel.set_report(bare)
    assert panel.finding_titles() == [NO_FINDINGS]
    assert panel.whatif_summary.text() == NO_COST
    assert panel.whatif_table.rowCount() == 0 and panel.projection is None
    panel.set_report(None)
    assert panel.findings.topLevelItemCount() == 0


def test_panels_leave_no_running_timers(qtbot, ab_runs):
    frames, a, b = ab_runs
    view = ABView()
    qtbot.addWidget(view)
    view.set_frames(frames)
    view.set_runs(a, b)
    view.show()
    view.set_playing(True)
    view.close()
    assert not any(t.isActive() for t in view.findChildren(QTimer))


def test_ab_clicking_a_point_in_a_view_selects_it(qtbot, ab_view, ab_runs):
    _, a, _ = ab_runs
    ab_view.set_frame(0)
    ab_view.fit()
    target = 1
    x, y = a.tracks[target, 0]
    scene_pos = ab_view.side_a.plot.getViewBox().mapViewToScene(QPointF(float(x), float(y)))
    pos = ab_view.canvas.mapFromScene(scene_pos)
    with qtbot.waitSignal(ab_view.pointSelected, timeout=1000) as blocker:
        qtbot.mouseClick(ab_view.canvas.viewport(), Qt.MouseButton.LeftButton, pos=pos)
    assert blocker.args == [target]
    assert ab_view.row_points()[ab_view.table.currentRow()] == target
    grid = np.stack(np.meshgrid(np.arange(2.0, SIZE - 2), np.arange(2.0, SIZE - 2)), -1).reshape(-1, 2)
    xy_b = ab_runs[2].tracks[:, ab_view.frame]
    gap = np.linalg.norm(grid[:, None] - xy_b[None], axis=-1).min(axis=1)  # distance to the nearest point
    empty = grid[np.argmax(gap)]
    assert gap.max() * ab_view.side_b.plot.getViewBox().width() / SIZE > 15  # well outside the click radius
    far = ab_view.canvas.mapFromScene(ab_view.side_b.plot.getViewBox().mapViewToScene(QPointF(*map(float, empty))))
    with qtbot.assertNotEmitted(ab_view.pointSelected):
        qtbot.mouseClick(ab_view.canvas.viewport(), Qt.MouseButton.LeftButton, pos=far)


# -- layout checks from the screenshots ----------------------------------------------------------------
def test_ab_titles_elide_and_layout_follows_the_shape(qtbot, ab_runs):
    frames, a, b = ab_runs
    long_a = RunData("corrtrack fp32 p256 f16 " + "x" * 80, a.config, a.queries, a.tracks, a.visible)
    view = ABView()
    qtbot.addWidget(view)
    view.set_frames(frames)
    view.set_runs(long_a, b)
    view.resize(1400, 700)  # wide: list beside, A beside B
    view.show()
    qtbot.waitUntil(lambda: view.splitter.orientation() == Qt.Orientation.Horizontal and not view.stacked)
    title_a, title_b = view.titles()
    assert title_a.startswith("A: corrtrack") and "…" in title_a and title_b == f"B: {b.label}"
    width_a = view.side_a.plot.geometry().width()
    assert abs(width_a - view.side_b.plot.geometry().width()) < 2  # the long title does not widen A
    view.resize(600, 700)  # narrow (both docks open): the list goes below the views
    qtbot.waitUntil(lambda: view.splitter.orientation() == Qt.Orientation.Vertical)
    assert not view.stacked and view.canvas.height() > view.table.height()
    view.resize(1200, 1600)  # tall canvas: A above B draws the frames larger
    qtbot.waitUntil(lambda: view.stacked)
    (x0, x1), _ = view.side_a.plot.getViewBox().viewRange()
    assert x0 == pytest.approx(-0.5, abs=1.0) and x1 == pytest.approx(SIZE - 0.5, abs=1.0)  # refit to the frame


def test_tradeoff_names_shared_columns_once(qtbot):
    panel = TradeoffPanel()
    qtbot.addWidget(panel)
    for precision, ms in (("fp32", 13.3), ("bf16", 6.1)):
        panel.add_report(make_report(precision, ms))
    hidden = {name for name, c in COL.items() if panel.table.isColumnHidden(c)}
    accuracy_files = {"held-out AJ", "real-clip cycle px", "cycle kept"}  # hidden until an accuracy file is added
    assert hidden == {"video", "tracker", "machine", "points/batch", "frames/batch", "runs"} | accuracy_files
    assert "corrtrack" in panel.common.text() and "NVIDIA H200" in panel.common.text()
    panel.add_report(make_report("fp32", 20.0, device="Tesla T4"))
    assert not panel.table.isColumnHidden(COL["machine"]) and "T4" not in panel.common.text()


def test_tradeoff_labels_do_not_overlap(qtbot):
    panel = TradeoffPanel()
    qtbot.addWidget(panel)
    for precision, ms in (("fp32", 13.3), ("tf32", 6.37), ("fp16", 6.41), ("bf16", 6.14)):
        report = make_report(precision, ms)
        report["accuracy"] = {"vs": "ground truth", "aj": 0.684}
        panel.add_report(report)
    panel.resize(700, 500)
    panel.show()
    qtbot.waitUntil(lambda: panel.plot.getViewBox().width() > 100)
    panel._place_labels()
    qtbot.wait(100)  # the view's transform updates lazily
    rects = [item.mapRectToScene(item.boundingRect()) for item, _, _ in panel._labels]
    assert len(rects) == 4
    assert not any(rects[i].intersects(rects[j]) for i in range(4) for j in range(i + 1, 4))


def test_diagnosis_wraps_long_findings_to_the_column(qtbot, h200_report):
    panel = DiagnosisPanel()
    qtbot.addWidget(panel)
    analysis = analyse(h200_report)
    findings = [dataclasses.replace(f) for f in analysis.findings]
    findings[0].title = "a very long finding title " * 8
    panel.set_report(h200_report, dataclasses.replace(analysis, findings=tuple(findings)))
    panel.resize(700, 600)
    panel.show()
    qtbot.waitExposed(panel)
    top = panel.findings.topLevelItem(0)
    text = top.text(0)
    assert "\n" in text and text.replace("\n", " ") == findings[0].title.strip()
    widest = max(panel.findings.fontMetrics().horizontalAdvance(line) for line in text.splitlines())
    assert widest <= panel.findings.columnWidth(0)


def test_diagnosis_shows_todays_findings_then_the_recorded_ones_they_no_longer_give(qtbot):
    """A replayed report is analysed on load: today's rules first, then what its writer recorded that they
    no longer give, marked as recorded."""
    from pathlib import Path

    from engine.report.files import load_report
    from gui.panels.diagnosis import RECORDED_PREFIX

    planted = Path(__file__).parent / "data" / "h200" / "planted"
    report = load_report(sorted(planted.glob("host_sync_fp32_*.json"))[0])  # p1024: a sweep finding recorded
    panel = DiagnosisPanel()
    qtbot.addWidget(panel)
    panel.set_report(report)
    titles = panel.finding_titles()
    today = [f.title for f in analyse(report).findings]
    assert titles[:len(today)] == today
    recorded = titles[len(today):]
    assert recorded and all(t.startswith(RECORDED_PREFIX) for t in recorded)
    assert any("per point" in t for t in recorded)  # host_sync_per_point needs the sweep's two batch sizes


def test_diagnosis_of_a_bench_file_names_the_run_of_each_finding(qtbot):
    """A bench file's findings come from several reports: each row says which (before: three identical
    'the first run took ...' rows with nothing to tell them apart)."""
    from pathlib import Path

    from engine.api import analyse_many, load_any
    from gui.panels.diagnosis import RUN_COLUMN

    reports, recorded = load_any(Path(__file__).parent / "data" / "h200" / "quant" / "bench.json")
    analysis = analyse_many(reports, recorded)
    reports = list(analysis.reports)
    panel = DiagnosisPanel()
    qtbot.addWidget(panel)
    panel.set_report(reports[0], analysis)
    assert not panel.findings.isColumnHidden(RUN_COLUMN)
    runs = [panel.findings.topLevelItem(i).text(RUN_COLUMN) for i in range(panel.findings.topLevelItemCount())]
    assert runs[0] and len(set(runs)) > 1 and all(runs)
    panel.set_report(reports[0])  # one report: its label is the header's, the column is hidden
    assert panel.findings.isColumnHidden(RUN_COLUMN)
