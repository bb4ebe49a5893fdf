"""The run history as the app's model (issue 12, items 2, 4, 7, 8, 9): bench files opened whole, A/B picked
from the history, trade-offs per video with LK's precision n/a, batch sizes changed mid-run, no stale state
after another video is opened."""

from __future__ import annotations

import re

import numpy as np
import pytest

pytest.importorskip("pytestqt")
from PySide6.QtCore import QSettings  # noqa: E402

from engine.api import RunRecorder, save  # noqa: E402
from engine.core.config import RunConfig  # noqa: E402
from engine.io.video import write_video  # noqa: E402
from engine.run.session import Session  # noqa: E402
from gui.main_window import MainWindow  # noqa: E402
from gui.model import RunData  # noqa: E402
from gui.panels.ab_view import ABView  # noqa: E402
from gui.panels.tradeoff import COL, TradeoffPanel  # noqa: E402
from gui.settings import Settings  # noqa: E402
from tests.helpers import moving_square_video  # noqa: E402
from tests.test_diagnose import gpu_report  # noqa: E402
from tests.test_gui_panels import make_report  # noqa: E402
from tests.test_gui_window import RUN_TIMEOUT_MS, SlowTracker  # noqa: E402

QUANT_BENCH = "tests/data/h200/quant/bench.json"
NUM_FRAMES, SIZE = 6, 32


@pytest.fixture
def settings(tmp_path):
    return Settings(QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat))


@pytest.fixture
def window(qtbot, settings):
    w = MainWindow(settings=settings, sampler=None, config=RunConfig(tracker="lk", device="cpu"))
    qtbot.addWidget(w)
    w.set_video(moving_square_video(NUM_FRAMES, SIZE), fps=10.0)
    w.set_grid(2)
    w.show()
    yield w
    w.close()


def run_once(qtbot, w: MainWindow, config: RunConfig | None = None) -> None:
    if config is not None:
        w.toggles.set_config(config)
    with qtbot.waitSignal(w.run_finished, timeout=RUN_TIMEOUT_MS):
        assert w.start_run(), w.banner.message
    qtbot.waitUntil(lambda: not w.controller.running, timeout=5000)


def growth_bench(tmp_path) -> str:
    """A bench file of two batch sizes whose 'smooth' stage grows quadratically in points (16x work for 4x
    points), on a video beside it."""
    video = tmp_path / "clip.mp4"
    write_video(video, moving_square_video(8, 32), fps=10)
    lat = {"bound": "latency", "pct_of_roofline": 0.5, "ops": 2000}
    reports = []
    for points, ms, flops in ((64, 2.0, 1e6), (256, 32.0, 1.6e7)):
        r = gpu_report(stage_ms={"smooth": ms, "backbone": 5.0}, points=points, label=f"p{points}",
                       cost={"smooth": {**lat, "flops": flops, "bytes": flops}})
        r["config"]["points_per_batch"] = points
        r["video"] = {"path": str(video), "name": "clip.mp4", "num_frames": 8}
        reports.append(r)
    path = save({"format": "trackscope-bench", "version": 1, "environment": {}, "reports": reports},
                tmp_path / "bench.json")
    return str(path)


# -- item 2: a bench file opened in the app ----------------------------------------------------------------
def test_bench_file_opens_with_its_growth_findings_and_every_report(qtbot, settings, tmp_path):
    w = MainWindow(settings=settings, sampler=None)
    qtbot.addWidget(w)
    assert w.load_path(growth_bench(tmp_path)), w.banner.message
    assert "superlinear_growth" in {f.rule for f in w.state.analysis.findings}  # as `trackscope diagnose` says
    w.tabs.setCurrentWidget(w.diagnosis)
    assert any("superlinear in points" in t for t in w.diagnosis.finding_titles())
    entries = list(w.state.runs)
    assert [e.points_per_batch for e in entries] == [(64,), (256,)]  # each report of the file
    assert {e.video for e in entries} == {"clip.mp4"} and {e.status for e in entries} == {"report"}
    w.close()


def test_every_report_of_a_bench_file_is_an_entry_and_each_can_be_shown(qtbot, settings):
    w = MainWindow(settings=settings, sampler=None)
    qtbot.addWidget(w)
    assert w.load_path(QUANT_BENCH), w.banner.message
    entries = list(w.state.runs)
    assert len(entries) == 12 and len(w.history_panel.entry_ids()) == 12
    assert {e.machine for e in entries} == {"NVIDIA H200"} and {e.tracker for e in entries} == {"corrtrack"}
    assert [e.precision for e in entries[:6]] == ["fp32", "tf32", "fp16", "bf16", "int8", "fp8"]
    assert entries[0].time_text == entries[0].report.created.replace("T", " ")[:16] + " UTC"  # when it ran, not opened
    assert w.state.selected == entries[0].id and w.state.report is entries[0].report
    w.history_panel.pick(entries[4].id)  # int8 p256: Show
    w.history_panel.show_button.click()
    assert w.state.report is entries[4].report and w.state.analysis.reports[0] is entries[4].report
    assert w.current is entries[4].run  # its tracks on the video
    assert w.status_label.text() == f"Report: {entries[4].report.label}"  # its charts replayed
    assert any("int8" in (f.label or "") for f in w.state.analysis.findings)  # the file's findings stay
    w.close()


# -- item 4: A/B tolerance and picking A and B from the history --------------------------------------------
def test_ab_against_a_report_with_rounded_queries_does_not_warn(qtbot):
    view = ABView()
    qtbot.addWidget(view)
    view.set_frames(np.zeros((NUM_FRAMES, SIZE, SIZE, 3), np.uint8))
    queries = np.array([[0, 10.123, 20.456], [0, 4.004, 7.996]], np.float32)
    tracks = np.repeat(queries[:, None, 1:], NUM_FRAMES, axis=1)
    visible = np.ones((2, NUM_FRAMES), bool)
    live = RunData("live", {}, queries, tracks, visible)
    saved = RunData("report", {}, np.round(queries, 2), tracks, visible)  # reports keep 2 decimals
    view.set_runs(live, saved)
    assert "different query points" not in view.warning.text()
    moved = RunData("moved", {}, queries + [0, 0.5, 0], tracks, visible)
    view.set_runs(live, moved)
    assert "different query points" in view.warning.text()


def test_a_and_b_are_picked_from_the_history_and_other_videos_refused(qtbot, window):
    for precision in ("fp32", "tf32", "bf16"):  # modes this CPU runs (fp16 is gated off there)
        run_once(qtbot, window, RunConfig(tracker=SlowTracker.name, precision=precision, points_per_batch=4))
    first, _, third = list(window.state.runs)
    panel = window.history_panel
    panel.pick(first.id)
    panel.a_button.click()
    panel.pick(third.id)
    panel.b_button.click()
    window.flush_panels()
    assert window.tabs.currentWidget() is window.ab_view
    assert window.ab_view.run_a is first.run and window.ab_view.run_b is third.run
    assert window.state.ab == {"A": first.id, "B": third.id}
    window.set_video(moving_square_video(NUM_FRAMES, 48), fps=10.0, path="other.mp4")
    window.set_grid(2)
    run_once(qtbot, window, RunConfig(tracker=SlowTracker.name, points_per_batch=4))
    other = list(window.state.runs)[-1]
    assert other.video == "other.mp4"
    assert not window.state.compare_entries(first.id, other.id)
    assert window.banner.isVisible() and "same video" in window.banner.message
    window.flush_panels()
    # the refused pick changed nothing: the A/B view stays as the new video left it (cleared)
    assert window.ab_view.run_a is None and window.ab_view.run_b is None


# -- item 7: the trade-off table tells runs apart ----------------------------------------------------------
def test_tradeoff_rows_come_from_the_history_grouped_by_video(qtbot, window):
    run_once(qtbot, window, RunConfig(tracker=SlowTracker.name, precision="fp32", points_per_batch=4))
    window.set_video(moving_square_video(NUM_FRAMES, 48), fps=10.0, path="other.mp4")
    window.set_grid(2)
    run_once(qtbot, window, RunConfig(tracker=SlowTracker.name, precision="bf16", points_per_batch=4))
    window.tabs.setCurrentWidget(window.tradeoff)
    panel = window.tradeoff
    assert len(panel.rows) == 2 and panel.video == "other.mp4"
    assert panel.table.rowCount() == 1  # the video open now; the other video's row is not mixed in
    assert panel.table.item(0, COL["precision"]).text() == "bf16"
    panel.set_video(None)  # all videos: grouped, with a video column
    assert panel.table.rowCount() == 2 and not panel.table.isColumnHidden(COL["video"])
    videos = [panel.table.item(r, COL["video"]).text() for r in range(2)]
    assert sorted(videos) == ["(no file)", "other.mp4"]
    assert not panel.table.isColumnHidden(COL["machine"]) or "CPU" in panel.common.text()


def test_lk_rows_say_precision_na_not_the_toggle(qtbot, window):
    run_once(qtbot, window, RunConfig(tracker="lk", device="cpu", precision="bf16", points_per_batch=2))
    window.tabs.setCurrentWidget(window.tradeoff)
    (row,) = window.tradeoff.rows.values()
    assert row.precision == "n/a" and row.points_per_batch is None
    assert window.tradeoff.table.item(0, COL["precision"]).text() == "n/a"
    assert list(window.state.runs)[-1].precision == "n/a"


def test_scatter_labels_name_the_tracker_when_trackers_differ(qtbot):
    panel = TradeoffPanel()
    qtbot.addWidget(panel)
    for tracker, ms in (("corrtrack", 10.0), ("other", 20.0)):
        report = make_report("fp32", ms)
        report["config"]["tracker"] = tracker
        report["accuracy"] = {"vs": "ground truth", "aj": 0.6}
        panel.add_report(report)
    labels = [item.textItem.toPlainText() for item, _, _ in panel._labels]
    assert len(labels) == 2 and len(set(labels)) == 2
    assert {"corrtrack fp32", "other fp32"} == set(labels)


# -- item 8: a batch size changed mid-run ---------------------------------------------------------------------
def test_batch_size_changed_mid_run_is_counted_and_named_the_same_everywhere(qtbot, window):
    window.toggles.set_config(RunConfig(tracker=SlowTracker.name, points_per_batch=1))
    window.set_grid(4)  # 16 points: 16 batches at 1 point, fewer after the change
    lines: list[str] = []
    window.runs.status.connect(lines.append)
    with qtbot.waitSignal(window.controller.batch_done, timeout=RUN_TIMEOUT_MS):
        window.start_run()
    window.toggles.points.setValue(4)
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        pass
    qtbot.waitUntil(lambda: not window.controller.running, timeout=5000)
    counts = [tuple(map(int, m.groups())) for m in (re.search(r"batch (\d+) / (\d+)", x) for x in lines) if m]
    assert counts[-1][0] == counts[-1][1] == window.batches_seen < 16  # the last batch reads "n / n"
    assert all(done <= total for done, total in counts)
    entry = list(window.state.runs)[-1]
    assert entry.points_per_batch == (1, 4)
    assert "p1→4" in entry.title and window.history[-1].label == entry.title  # the A/B title says the same
    window.tabs.setCurrentWidget(window.tradeoff)
    (row,) = window.tradeoff.rows.values()
    assert row.points_per_batch_text == "1→4"
    assert window.tradeoff.table.item(0, COL["points/batch"]).text() == "1→4"


# -- item 9: nothing stale after opening another video ---------------------------------------------------------
def test_opening_another_video_clears_the_old_banner_label_and_diagnosis(qtbot, window):
    run_once(qtbot, window)
    window.tabs.setCurrentWidget(window.diagnosis)
    assert window.diagnosis.analysis is not None
    window.toggles.set_config(RunConfig(tracker="no_such_tracker"))
    with qtbot.waitSignal(window.controller.failed, timeout=RUN_TIMEOUT_MS):
        window.start_run()
    qtbot.waitUntil(lambda: not window.controller.running, timeout=5000)
    assert window.banner.isVisible() and window.run_label.text().startswith("failed")
    window.set_video(moving_square_video(NUM_FRAMES, 48), fps=10.0, path="next.mp4")
    assert not window.banner.isVisible() and window.run_label.text() == ""
    assert window.state.report is None and window.diagnosis.analysis is None
    assert window.state.selected is None


def test_opening_another_video_clears_the_ab_comparison(qtbot, window):
    run_once(qtbot, window)
    run_once(qtbot, window)  # the second run is compared with the first
    window.tabs.setCurrentWidget(window.ab_view)  # panels apply queued calls when shown
    assert window.ab_view.run_a is not None and window.ab_view.table.rowCount() > 0
    window.set_video(moving_square_video(NUM_FRAMES, 48), fps=10.0, path="next.mp4")
    assert window.ab_view.run_a is None and window.ab_view.run_b is None  # before: the old video's runs stayed
    assert window.ab_view.table.rowCount() == 0 and window.ab_view.summary.text() == "no runs to compare"


def test_replayed_cpu_report_says_it_is_a_replay(qtbot, settings, tmp_path):
    recorder = RunRecorder()
    queries = np.array([[0, 8.0, 12.0]], np.float32)
    for event in Session(moving_square_video(NUM_FRAMES, SIZE), queries, RunConfig(tracker="lk")).events():
        recorder.add(event)
    data = recorder.build().to_dict()
    data["telemetry"] = {"t": [0.0, 0.1, 0.2], "metrics": {"process_cpu_pct": [50.0, 60.0, 55.0]},
                         "availability": {"gpu_busy_pct": "no GPU (CPU run)"}, "static": {}}
    path = save(data, tmp_path / "cpu.json")
    w = MainWindow(settings=settings, sampler=None)
    qtbot.addWidget(w)
    assert w.load_path(path), w.banner.message
    assert not w.charts.gpu and w.charts.mode_label.text().startswith("Replay")
    assert "not live" in w.charts.mode_label.text()
    w.close()


# -- the history model on its own (Qt-free) ---------------------------------------------------------------------
def _entry(history, video="a.mp4", shift=0.0, status="finished", points=2):
    from gui.history import HistoryEntry

    queries = np.array([[0, 4.0 + shift, 4.0], [0, 8.0, 8.0]], np.float32)[:points]
    run = RunData("r", {}, queries, np.repeat(queries[:, None, 1:], NUM_FRAMES, axis=1),
                  np.ones((points, NUM_FRAMES), bool))
    return HistoryEntry(id=history.new_id(), video=video, tracker="corrtrack", settings={"precision": ("fp32",)},
                        machine="CPU", status=status, source="run", run=run, num_frames=NUM_FRAMES)


def test_history_is_bounded_and_ids_are_never_reused():
    from gui.history import RunHistory

    history = RunHistory(limit=3)
    entries = [_entry(history) for _ in range(5)]
    dropped = [d for e in entries for d in history.add(e)]
    assert [e.id for e in history] == [3, 4, 5] and [d.id for d in dropped] == [1, 2]
    assert history.get(1) is None and history.get(5) is entries[4]


def test_comparable_entries_need_the_same_video_and_queries_within_report_rounding():
    from gui.history import RunHistory, why_not_comparable

    history = RunHistory()
    a = _entry(history)
    assert why_not_comparable(a, _entry(history, shift=0.004)) is None  # a report's 2-decimal rounding
    assert "different query points" in why_not_comparable(a, _entry(history, shift=0.02))
    assert "same video" in why_not_comparable(a, _entry(history, video="b.mp4"))
    assert "different query points" in why_not_comparable(a, _entry(history, points=1))
    assert "same entry" in why_not_comparable(a, a)


def test_previous_match_skips_stopped_runs_and_other_videos():
    from gui.history import RunHistory

    history = RunHistory()
    first, stopped, other, last = (_entry(history), _entry(history, status="stopped"),
                                   _entry(history, video="b.mp4"), _entry(history))
    for e in (first, stopped, other, last):
        history.add(e)
    assert history.previous_match(last) is first and history.previous_match(first) is None


def test_titles_name_every_value_a_setting_took():
    from gui.history import sized_title

    assert sized_title("corrtrack", {"precision": ("fp32",), "points_per_batch": (64, 32),
                                     "frames_per_batch": (16,)}) == "corrtrack fp32 p64→32 f16"
    assert sized_title("lk", {}) == "lk"


def test_state_forgets_an_ab_pick_that_left_the_history(qtbot):
    from gui.state import AppState

    state = AppState()
    state.runs.limit = 2
    first = _entry(state.runs)
    state.add_entry(first, compare_previous=False)
    state.ab["A"] = first.id
    for _ in range(2):
        state.add_entry(_entry(state.runs), compare_previous=False)
    assert state.ab["A"] is None and len(state.runs) == 2


def test_a_large_report_is_read_in_a_worker_and_then_shown(qtbot, settings, monkeypatch, tmp_path):
    """Issue 13: a 600 MB report froze the app for 43 s while it parsed; a large one is read off the GUI thread."""
    import threading
    from pathlib import Path

    from gui.controllers import reports as reports_module

    monkeypatch.setattr(reports_module, "OPEN_REPORT_IN_PLACE_BYTES", 0)  # every report counts as large
    readers = []
    load_any = reports_module.load_any
    monkeypatch.setattr(reports_module, "load_any", lambda path: readers.append(threading.current_thread()) or
                        load_any(path))
    w = MainWindow(settings=settings, sampler=None)
    qtbot.addWidget(w)
    assert w.load_path(QUANT_BENCH)  # returns at once
    qtbot.waitUntil(lambda: len(list(w.state.runs)) == 12, timeout=RUN_TIMEOUT_MS)
    assert readers and readers[0] is not threading.main_thread()
    assert w.state.report is list(w.state.runs)[0].report
    assert "reading" not in w.banner.message or not w.banner.isVisible()  # the note went with the new video
    assert str(Path(QUANT_BENCH).resolve()) in w.settings.recent_files()
    broken = tmp_path / "broken.json"
    broken.write_text('{"format": "trackscope-report", "version": 2, "runs": [')
    assert w.load_path(broken)
    qtbot.waitUntil(lambda: "broken.json" in w.banner.message, timeout=RUN_TIMEOUT_MS)
    assert str(broken.resolve()) not in w.settings.recent_files()
    w.close()


def test_closing_while_a_report_is_read_leaves_the_reader_behind_not_destroyed(qtbot, settings, monkeypatch):
    """A JSON parse cannot be interrupted: close waits CLOSE_WAIT_MS, then keeps the reader's thread (deleting a
    running QThread aborts the app) and the app exits past it."""
    import threading

    from gui.controllers import reports as reports_module

    entered, release = threading.Event(), threading.Event()

    def slow_load_any(path):
        entered.set()
        release.wait(60)
        raise reports_module.UserError("stopped")

    monkeypatch.setattr(reports_module, "OPEN_REPORT_IN_PLACE_BYTES", 0)
    monkeypatch.setattr(reports_module, "CLOSE_WAIT_MS", 50)
    monkeypatch.setattr(reports_module, "load_any", slow_load_any)
    w = MainWindow(settings=settings, sampler=None)
    qtbot.addWidget(w)
    assert w.load_path(QUANT_BENCH)
    qtbot.waitUntil(entered.is_set, timeout=RUN_TIMEOUT_MS)
    w.close()
    assert w.files.lingering == 1  # kept, still running
    release.set()
    qtbot.waitUntil(lambda: w.files.lingering == 0, timeout=RUN_TIMEOUT_MS)
