"""GUI pieces on their own: settings, toggles, charts, video view, export, drag and drop, A/B, loop."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("pytestqt")
from PySide6.QtCore import (  # noqa: E402
    QMimeData,
    QPointF,
    QSettings,
    Qt,  # noqa: E402
    QUrl,
)
from PySide6.QtGui import QDropEvent  # noqa: E402

from engine.api import ConfigChange, Cost, StageRoofline, as_report, load_report, specs  # noqa: E402
from engine.core.config import RunConfig  # noqa: E402
from engine.io.trackio import load_tracks  # noqa: E402
from engine.io.video import open_video, write_video  # noqa: E402
from gui import export  # noqa: E402
from gui.main_window import MainWindow  # noqa: E402
from gui.model import RunData  # noqa: E402
from gui.panels.toggles import TogglesPanel  # noqa: E402
from gui.settings import Settings  # noqa: E402
from gui.widgets.charts import POLL_HZ, ChartsPanel  # noqa: E402
from gui.widgets.video_view import VideoView  # noqa: E402
from tests.helpers import moving_square_video  # noqa: E402

RUN_TIMEOUT_MS = 20_000
DATA = Path(__file__).parent / "data" / "h200"


@pytest.fixture
def settings(tmp_path):
    return Settings(QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat))


def _run_data(n: int = 5, t: int = 8) -> RunData:
    rng = np.random.default_rng(1)
    tracks = rng.uniform(2, 30, (n, t, 2)).astype(np.float32)
    visible = rng.random((n, t)) > 0.3
    queries = np.concatenate([np.zeros((n, 1)), tracks[:, 0]], axis=1)
    return RunData("lk fp32 p4 f16", RunConfig(tracker="lk").to_dict(), queries, tracks, visible)


class FakeGpuSampler:
    """Stands in for TelemetrySampler on an H200-like GPU with GPM (the GUI only reads these calls)."""

    def __init__(self, gpm: bool):
        self.gpm = gpm

    def static_info(self):
        return {"name": "NVIDIA H200", "memory_total_bytes": 141e9, "max_sm_clock_mhz": 1980,
                "max_mem_clock_mhz": 2619, "power_limit_w": 700.0, "peak_bandwidth_gbps": 4800.0,
                "gpm_supported": self.gpm}

    def availability(self):
        gpm_reason = "" if self.gpm else "not supported on this GPU"
        return {"gpu_busy_pct": "", "mem_busy_pct": "", "sm_active_pct": gpm_reason, "dram_bw_gbps": gpm_reason,
                "tensor_active_pct": gpm_reason}

    def snapshot(self, since=None):
        t = np.linspace(0, 2, 21)
        nan = np.full_like(t, np.nan)
        return {"t": t, "gpu_busy_pct": np.full_like(t, 90.0),
                "sm_active_pct": np.full_like(t, 40.0) if self.gpm else nan,
                "dram_bw_gbps": np.full_like(t, 3000.0) if self.gpm else nan, "mem_busy_pct": np.full_like(t, 55.0),
                "mem_used_bytes": np.full_like(t, 20e9), "sm_clock_mhz": np.full_like(t, 1980.0),
                "mem_clock_mhz": np.full_like(t, 2619.0), "power_w": np.full_like(t, 650.0),
                "clock_reasons": np.where(t > 1, 4.0, 0.0)}


def test_settings_persist_recent_config_and_layout(qtbot, settings, tmp_path):
    for name in ("a.mp4", "b.mp4", "a.mp4"):
        settings.add_recent(tmp_path / name)
    assert [Path(f).name for f in settings.recent_files()] == ["a.mp4", "b.mp4"]
    w = MainWindow(settings=settings, sampler=None, config=RunConfig(tracker="lk", precision="bf16"))
    qtbot.addWidget(w)
    w.show()
    w.charts_dock.hide()
    w.toggles.points.setValue(33)
    w.close()
    assert settings.config().points_per_batch == 33 and settings.config().precision == "bf16"
    w2 = MainWindow(settings=settings, sampler=None)
    qtbot.addWidget(w2)
    assert w2.toggles.config().points_per_batch == 33
    w2.show()
    assert settings.geometry() is not None
    assert w2.charts_dock.isHidden() and not w2.run_dock.isHidden()  # the layout came back
    w2.close()


def test_toggles_gate_precisions_on_cpu(qtbot):
    panel = TogglesPanel(RunConfig(tracker="lk", device="cpu"))
    qtbot.addWidget(panel)
    assert not panel.is_enabled("fp16") and "fp16 on the CPU" in panel.gate_reason("fp16")
    assert panel.precision.model().item(panel.precision.findText("fp16")).toolTip() == panel.gate_reason("fp16")
    assert panel.is_enabled("tf32") and "IEEE fp32" in panel.gate_reason("tf32")
    changes = []
    panel.config_changed.connect(changes.append)
    panel.precision.setCurrentText("tf32")
    panel.frames.setValue(4)
    assert changes == [ConfigChange(precision="tf32"), ConfigChange(frames_per_batch=4)]  # typed changes
    assert panel.gate_note.isVisibleTo(panel)  # tf32 on CPU says it runs as fp32
    assert panel.config() == RunConfig(tracker="lk", device="cpu", precision="tf32", frames_per_batch=4)


def test_charts_label_cpu_only_plainly(qtbot, monkeypatch):
    monkeypatch.setenv("TRACKSCOPE_NO_NVML", "1")
    from engine.telemetry.sampler import TelemetrySampler

    charts = ChartsPanel()
    qtbot.addWidget(charts)
    charts.show()
    sampler = TelemetrySampler(rate_hz=50)
    sampler.start()
    try:
        charts.attach_sampler(sampler)
        qtbot.waitUntil(lambda: charts.polls >= 2, timeout=3000)
    finally:
        charts.stop()
        sampler.stop()
    assert not charts.gpu and "CPU" in charts.mode_label.text()
    assert charts.c_cpu.isVisible() and not charts.c_busy.isVisible() and not charts.bw.isVisible()
    assert len(charts.c_cpu.getData()[0]) >= 1


@pytest.mark.parametrize("gpm", [True, False])
def test_charts_gpu_bandwidth_label(qtbot, gpm):
    charts = ChartsPanel()
    qtbot.addWidget(charts)
    charts.show()
    sampler = FakeGpuSampler(gpm)
    charts.attach_sampler(sampler)
    charts.stop()
    charts.show_telemetry(sampler.snapshot(), 0.0)
    title = charts.bw.titleLabel.text
    if gpm:
        assert "DRAM" in title and charts.c_sm.isVisible()
        assert charts.bw_peak.value() == pytest.approx(4800.0)
        assert np.nanmax(charts.c_bw.getData()[1]) == pytest.approx(3000.0)
    else:
        assert "Memory-controller busy %" in title and not charts.c_sm.isVisible()
        assert np.nanmax(charts.c_bw.getData()[1]) == pytest.approx(55.0)
    assert charts.mem_cap.value() == pytest.approx(141e9)
    assert len(charts.reason_dots.getData()[0]) == 10 and "power" in charts.reason_text.textItem.toPlainText().lower()


def test_charts_redraw_less_often_on_a_long_time_axis(qtbot):
    charts = ChartsPanel()
    qtbot.addWidget(charts)
    charts.resize(500, 900)
    charts.show()
    qtbot.waitUntil(lambda: charts.util.getViewBox().width() > 300, timeout=2000)
    charts.attach_sampler(None)
    charts.set_origin(time.perf_counter())  # the session's start: a 10 s page
    charts.poll()
    short = charts._timer.interval()
    charts.set_origin(time.perf_counter() - 50.0)  # 50 s into it: a 60 s page, 6x as many s per pixel
    charts.poll()
    assert short == int(1000 / POLL_HZ) and charts._timer.interval() > 2 * short
    charts.stop()


def test_charts_stage_bars_and_markers(qtbot):
    charts = ChartsPanel()
    qtbot.addWidget(charts)
    charts.follow()  # a run starts: the drawing tick runs
    charts.set_stages(["backbone", "refine"])
    charts.add_batch(0.1, 100.0, {"backbone": 60.0, "refine": 30.0})
    charts.mark(0.1, "corrtrack bf16 p256 f16")
    charts.add_batch(0.2, 50.0, {"backbone": 20.0, "refine": 25.0})
    charts.set_cost(Cost({"backbone": StageRoofline(1e9, 1e9, 60.0, pct_of_roofline=41.0, bound="memory")},
                         specs.cpu_spec()))
    assert charts.stage_totals() == {"backbone": 80.0, "refine": 55.0}
    ticks: list[int] = []
    charts._timer.timeout.connect(lambda: ticks.append(1))  # after the charts' own poll
    qtbot.waitUntil(lambda: len(ticks) >= 3, timeout=10_000)  # the drawing tick ran, three times
    assert charts._stage_bars == {} and charts._breakdown_items == []  # hidden charts draw nothing
    charts.show()
    qtbot.waitUntil(lambda: len(charts._stage_bars) == 2 and bool(charts._breakdown_items), timeout=2000)
    assert charts.markers == [(0.1, "corrtrack bf16 p256 f16")]
    texts = [i.textItem.toPlainText() for i in charts._breakdown_items[1:]]
    assert any("roofline 41%" in t and "memory" in t for t in texts)
    charts.focus(0.0, 0.2)  # a finished run: applied by the next tick
    qtbot.waitUntil(lambda: charts.util.viewRange()[0][1] == pytest.approx(0.3), timeout=2000)
    assert charts.stage_plot.viewRange()[1][1] >= 90.0  # the tallest bar in view fits
    charts.clear_runs()
    assert charts.markers == [] and charts.stage_totals() == {}


def test_video_view_draws_1000_points_with_trails(qtbot):
    view = VideoView()
    qtbot.addWidget(view)
    n, t = 1000, 20
    view.set_video(np.zeros((t, 64, 64, 3), np.uint8), fps=30)
    rng = np.random.default_rng(0)
    tracks = rng.uniform(0, 63, (n, t, 2)).astype(np.float32)
    visible = np.ones((n, t), bool)
    visible[::4, 12] = False
    view.set_tracks(tracks, visible)
    view.set_frame(12)
    assert view.points.count == n and view.points.occluded_count == 250
    assert not view.grab().isNull()  # paints without error
    # one segment per point and trail step, except into an occluded position (250 points at frame 12)
    assert view.trails.count == n * view.trail - 250
    tracks[5, 9] = np.nan  # a gap in one track: its two segments around frame 9 are not drawn
    view.set_tracks(tracks, visible)
    assert view.trails.count == n * view.trail - 250 - 2
    added = []
    view.query_added.connect(lambda *a: added.append(a))
    view.add_query_at(QPointF(10.0, 20.0))
    view.add_query_at(QPointF(100.0, 20.0))  # outside the frame: ignored
    assert added == [(12.0, 10.0, 20.0)]


def test_export_tracks_report_video_png(qtbot, tmp_path, settings):
    run = _run_data()
    export.export_tracks(tmp_path / "t.npz", run)
    np.testing.assert_allclose(load_tracks(tmp_path / "t.npz")["tracks"], run.tracks)
    export.export_tracks(tmp_path / "t.csv", run)
    assert (tmp_path / "t.csv").read_text().count("\n") == 1 + run.num_points * run.num_frames
    frames = moving_square_video(8, 33)  # odd size: padded to even for mp4v
    export.export_video(tmp_path / "o.mp4", frames, run, fps=10)
    with open_video(tmp_path / "o.mp4") as reader:
        out = reader.read()
    assert out.shape[:3] == (8, 34, 34)
    overlay = export.draw_overlay(frames, run)
    assert (overlay != frames).any() and overlay.shape == frames.shape
    w = MainWindow(settings=settings, sampler=None)
    qtbot.addWidget(w)
    assert export.export_png(tmp_path / "w.png", w).stat().st_size > 0
    w.close()


def test_drop_video_opens_it(qtbot, settings, tmp_path):
    path = tmp_path / "dropped.mp4"
    write_video(path, moving_square_video(5, 32), fps=10)
    w = MainWindow(settings=settings, sampler=None)
    qtbot.addWidget(w)
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(path))])
    event = QDropEvent(QPointF(5, 5), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton,
                       Qt.KeyboardModifier.NoModifier)
    w.dropEvent(event)
    assert w.video_path == str(path) and w.frames.shape[0] == 5
    w.close()


def test_sample_two_runs_fill_ab_tradeoff_and_accuracy(qtbot, settings):
    from gui.app import sample_video_path

    sample = sample_video_path()
    assert sample is not None, "resources/sample.mp4 is part of the repository"
    w = MainWindow(settings=settings, sampler=None, config=RunConfig(tracker="lk", points_per_batch=40))
    qtbot.addWidget(w)
    assert w.load_path(sample)
    w.set_queries(w.queries[:8])  # fewer points: fast, and the ground truth no longer fits them
    w.load_path(sample.with_suffix(".queries.csv"))  # back to the sidecar queries: it fits again
    assert w.matching_ground_truth() is not None
    with qtbot.waitSignal(w.run_finished, timeout=RUN_TIMEOUT_MS):
        w.start_run()
    qtbot.waitUntil(lambda: not w.controller.running, timeout=5000)
    assert w.report.accuracy is not None and w.report.accuracy.vs == "ground truth"
    w.toggles.points.setValue(80)
    with qtbot.waitSignal(w.run_finished, timeout=RUN_TIMEOUT_MS):
        w.start_run()
    qtbot.waitUntil(lambda: not w.controller.running, timeout=5000)
    assert len(w.history) == 2
    assert w.tradeoff is not None and w.ab_view is not None, w.banner.message  # both panels ship with the app
    assert not w.tradeoff.rows  # panels not on screen are filled when their tab is shown
    w.tabs.setCurrentWidget(w.tradeoff)
    w.flush_panels()
    assert w.ab_view.run_a is w.history[0] and w.ab_view.run_b is w.history[1]
    # LK has no batch-size setting (it changes nothing LK computes): both runs are one configuration, n/a
    assert len(w.tradeoff.rows) == 1 and next(iter(w.tradeoff.rows.values())).precision == "n/a"
    assert [e.status for e in w.state.runs] == ["finished", "finished"]
    w.close()


def test_loop_reruns_until_stopped(qtbot, settings):
    w = MainWindow(settings=settings, sampler=None, config=RunConfig(tracker="lk", points_per_batch=8))
    qtbot.addWidget(w)
    w.set_video(moving_square_video(6, 32), fps=10)
    w.set_grid(3)
    starts = []
    w.controller.started_run.connect(starts.append)
    w.loop_box.setChecked(True)
    w.start_run()
    qtbot.waitUntil(lambda: len(starts) >= 3, timeout=RUN_TIMEOUT_MS)
    w.stop_run()
    qtbot.waitUntil(lambda: not w.controller.running, timeout=5000)
    assert w.current.complete
    w.close()


@pytest.mark.parametrize("precision", ["fp32", "tf32", "fp16", "bf16"])
def test_replay_committed_reports(qtbot, settings, precision):
    """Reports recorded on the H200 (tests/data/h200/*.json) replay: tracks, stage bars, GPU telemetry."""
    path = DATA / f"corrtrack_{precision}_p256_sample.json"
    report = load_report(path)
    w = MainWindow(settings=settings, sampler=None)
    qtbot.addWidget(w)
    assert w.load_path(path), w.banner.message
    assert w.charts._batches
    assert w.charts.gpu  # NVML read the H200 in every recorded report
    assert w.current is not None and np.isfinite(w.current.tracks).all()
    np.testing.assert_allclose(w.current.tracks, report.tracks.tracks, atol=1e-4)
    w.close()


def test_click_on_video_adds_query_on_current_frame(qtbot, settings):
    from PySide6.QtTest import QTest

    w = MainWindow(settings=settings, sampler=None)
    qtbot.addWidget(w)
    w.resize(900, 700)
    w.show()
    qtbot.waitExposed(w)
    w.set_video(moving_square_video(6, 48), fps=10, queries=np.zeros((0, 3), np.float32))
    w.view.set_frame(3)
    plot = w.view.plot
    scene_pos = plot.getViewBox().mapViewToScene(QPointF(20.0, 30.0))
    QTest.mouseClick(plot.viewport(), Qt.MouseButton.LeftButton, pos=plot.mapFromScene(scene_pos))
    qtbot.waitUntil(lambda: len(w.queries) == 1, timeout=2000)
    t, x, y = w.queries[0]
    assert t == 3 and abs(x - 20) < 1.0 and abs(y - 30) < 1.0
    w.close()


def test_charts_breakdown_names_stages_and_replay_clips_cold_run(qtbot):
    charts = ChartsPanel()
    qtbot.addWidget(charts)
    charts.set_static({}, {"gpu_busy_pct": "no NVIDIA driver"})
    assert not charts.util.legend.isVisible()  # one curve: its title names it
    assert "no GPU" in charts.util.titleLabel.text
    runs = [{"cold": i == 0, "start_s": 0.4 * i, "wall_ms": 300.0 if i == 0 else 6.0,
             "batches": [{"t": 0.3 if i == 0 else 0.006, "wall_ms": 300.0 if i == 0 else 6.0,
                          "stage_ms": {"backbone": 250.0 if i == 0 else 2.0, "refine": 40.0 if i == 0 else 3.0}}]}
            for i in range(4)]
    charts.show_report(as_report({"format": "trackscope-report", "version": 2, "environment": {}, "config": {},
                                  "totals": {}, "stages": ["backbone", "refine"], "runs": runs, "telemetry": None}))
    ticks = charts.breakdown.getAxis("left")._tickLevels[0]
    assert [name for _, name in ticks] == ["backbone", "refine"]
    texts = [i.textItem.toPlainText() for i in charts._breakdown_items[1:]]
    assert all(not t.startswith(("backbone", "refine")) for t in texts)  # values only: names are on the axis
    assert charts.stage_plot.viewRange()[1][1] < 50  # scaled to the warm batches, not the 290 ms cold one
    assert "cold run: 290 ms" in charts._cold_label.textItem.toPlainText()
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # before: "Item already added to PlotItem" on the second replay
        charts.show_report(as_report({"format": "trackscope-report", "version": 2, "environment": {}, "config": {},
                                      "totals": {}, "stages": ["backbone", "refine"], "runs": runs,
                                      "telemetry": None}))
    assert charts.stage_plot.items.count(charts._cold_label) == 1


def test_queries_csv_lands_on_shrunk_frames(qtbot, settings, tmp_path):
    """A video decoded smaller than its own size (over the reader's max side): CSV queries follow."""
    from engine.io.trackio import write_queries_csv

    w = MainWindow(settings=settings, sampler=None)
    qtbot.addWidget(w)
    w.set_video(moving_square_video(6, 32), fps=10, info={"width": 64, "height": 64, "fps": 10})
    write_queries_csv(tmp_path / "q.csv", np.array([[1, 20.0, 30.0]], np.float32))
    assert w.load_path(tmp_path / "q.csv")
    np.testing.assert_allclose(w.queries, [[1, 20.0, 30.0]])  # source pixels; the view places the frames in them
    assert w.view.video_geometry.scale == (2.0, 2.0)
    w.close()


def test_video_export_runs_off_the_gui_thread_and_reports_back(qtbot, settings, tmp_path, monkeypatch):
    from gui.model import RunData

    w = MainWindow(settings=settings, sampler=None)
    qtbot.addWidget(w)
    frames = moving_square_video(6, 32)
    w.set_video(frames, fps=10)
    q = w.queries
    w.current = RunData("r", {}, q, np.repeat(q[:, None, 1:], 6, axis=1), np.ones((len(q), 6), bool))
    threads = []
    real = export.export_video
    monkeypatch.setattr(export, "export_video", lambda *a: threads.append(threading.current_thread()) or real(*a))
    out = tmp_path / "o.mp4"
    monkeypatch.setattr(w.exports, "_save_path", lambda *a: str(out))
    w.export_video_dialog()
    qtbot.waitUntil(lambda: "saved" in w.statusBar().currentMessage(), timeout=10000)
    assert threads and threads[0] is not threading.main_thread()
    assert open_video(out).read().shape == (6, 32, 32, 3)
    w.close()


def test_degraded_telemetry_is_shown_under_the_charts(qtbot):
    """The sampler's last read failure (a GPU lost mid-run, say) is shown, and cleared when reads recover."""
    from gui.widgets.charts import ChartsPanel

    sampler = FakeGpuSampler(gpm=True)
    sampler.last_error = "GPU read failed: NVMLError_GpuIsLost: GPU is lost"
    charts = ChartsPanel()
    qtbot.addWidget(charts)
    charts.show()
    charts.attach_sampler(sampler)
    charts.poll()
    assert not charts.degraded_label.isHidden()
    assert "GPU is lost" in charts.degraded_label.text()
    sampler.last_error = ""
    charts.poll()
    assert charts.degraded_label.isHidden()
    charts.stop()


def test_a_finished_run_stays_charted_minutes_after_it_ended(qtbot, monkeypatch):
    """The held run's telemetry is still asked for 5 minutes later (it was dropped after 60 s: blank charts)."""
    import gui.widgets.charts as charts_module
    from gui.widgets.charts import ChartsPanel

    class WindowedSampler(FakeGpuSampler):
        def snapshot(self, since=None):
            snap = super().snapshot()
            keep = snap["t"] >= (since if since is not None else -np.inf)
            return {k: v[keep] for k, v in snap.items()}

    charts = ChartsPanel()
    qtbot.addWidget(charts)
    charts.show()
    charts.attach_sampler(WindowedSampler(gpm=True))
    charts.set_origin(0.0)
    charts.focus(0.2, 1.8)  # the run that just finished, held in view
    monkeypatch.setattr(charts_module.time, "perf_counter", lambda: 300.0)  # five minutes later
    charts.poll()
    x, _ = charts.c_busy.getData()
    assert x is not None and len(x) and x.min() <= 0.2  # the run's samples are still drawn
    charts.stop()
