"""The main window end to end: open, run with streaming, stop/close mid-run, live toggles, errors, replay."""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import pytest

pytest.importorskip("pytestqt")
from PySide6.QtCore import QSettings  # noqa: E402

from engine.api import ReportVideo, RunRecorder, VideoGeometry, save  # noqa: E402
from engine.core.config import RunConfig  # noqa: E402
from engine.io.video import load_video, write_video  # noqa: E402
from engine.run.session import BatchDone, Session  # noqa: E402
from engine.trackers.base import PreparedVideo, RunContext, Tracker, TrackResult  # noqa: E402
from gui.main_window import MainWindow  # noqa: E402
from gui.settings import Settings  # noqa: E402
from tests.helpers import moving_square_video  # noqa: E402
from tests.qt_waits import wait_posted_events_delivered, wait_without_events  # noqa: E402

RUN_TIMEOUT_MS = 20_000
SLOW_BATCH_S = 0.05


class SlowTracker(Tracker):
    """Constant-velocity tracks, a fixed sleep per batch: many small batches to act between."""

    name = "tests.test_gui_window:slow_tracker"
    stages = ("compute",)
    device_types = ("cpu",)
    calls = 0  # batches tracked, all instances (tests reset it)

    def prepare(self, frames: np.ndarray, ctx: RunContext) -> PreparedVideo:
        return PreparedVideo(frames.shape[0], frames.shape[1], frames.shape[2])

    def track(self, prepared: PreparedVideo, queries: np.ndarray, ctx: RunContext) -> TrackResult:
        SlowTracker.calls += 1
        with ctx.timer.stage("compute", host=True):
            time.sleep(SLOW_BATCH_S)
            t = np.arange(prepared.num_frames, dtype=np.float32)
            x = queries[:, 1:2] + (t[None] - queries[:, :1])
            y = np.broadcast_to(queries[:, 2:3], x.shape)
        return TrackResult(np.stack([x, y], -1), np.ones(x.shape, bool))


class FailingTracker(SlowTracker):
    """Fails on its third batch, after two batches of real results."""

    name = "tests.test_gui_window:failing_tracker"

    def __init__(self) -> None:
        self.calls = 0

    def track(self, prepared: PreparedVideo, queries: np.ndarray, ctx: RunContext) -> TrackResult:
        self.calls += 1
        if self.calls == 3:
            raise RuntimeError("plugin exploded on purpose")
        return super().track(prepared, queries, ctx)


def slow_tracker() -> Tracker:
    return SlowTracker()


def failing_tracker() -> Tracker:
    return FailingTracker()


@pytest.fixture
def settings(tmp_path):
    return Settings(QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat))


@pytest.fixture
def window(qtbot, settings):
    w = MainWindow(settings=settings, sampler=None, config=RunConfig(tracker="lk", points_per_batch=4))
    qtbot.addWidget(w)
    w.set_video(moving_square_video(8, 48), fps=10.0)
    w.show()
    yield w
    w.close()
    assert not w.controller.running


def test_open_video_file_with_sidecar_queries(qtbot, settings, tmp_path):
    path = tmp_path / "clip.mp4"
    write_video(path, moving_square_video(6, 32), fps=12)
    (tmp_path / "clip.queries.csv").write_text("t,x,y\n0,8,12\n2,20,20\n")
    w = MainWindow(settings=settings, sampler=None)
    qtbot.addWidget(w)
    assert w.load_path(path)
    assert w.frames.shape == (6, 32, 32, 3)
    assert w.view.num_frames == 6
    assert w.queries.shape == (2, 3) and w.queries[1, 0] == 2
    assert settings.recent_files()[0].endswith("clip.mp4")
    w.close()


def test_bundled_sample_opens(qtbot, settings):
    from gui.app import sample_video_path

    sample = sample_video_path()
    assert sample is not None, "resources/sample.mp4 is part of the repository"
    w = MainWindow(settings=settings, sampler=None)
    qtbot.addWidget(w)
    assert w.load_path(sample), w.banner.message
    assert w.frames is not None and len(w.queries) > 0
    w.close()


def test_full_run_streams_into_view(qtbot, window):
    batches = []
    def points_shown(_event) -> None:
        batches.append(np.isfinite(window.view.tracks).all(-1).any(-1).sum())

    window.controller.batch_done.connect(points_shown)
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS) as blocker:
        assert window.start_run()
    run = blocker.args[0]
    n = len(window.queries)
    assert len(batches) == -(-n // 4)
    assert batches == sorted(batches) and batches[0] < n  # points appear batch by batch
    assert run.complete and run.tracks.shape == (n, 8, 2)
    assert window.view.tracks is not None and np.isfinite(window.view.tracks).all()
    assert window.report is not None and window.report.totals.num_points == n
    assert window.report.tracks is None and window.state.analysis is not None  # analysed off the GUI thread
    full = window.full_report()  # the tracks are added when the report is saved
    queries, tracks, visible = full.tracks_arrays()
    np.testing.assert_allclose(tracks, run.tracks, atol=0.01)
    np.testing.assert_array_equal(visible, run.visible)
    assert set(window.charts.stage_totals()) >= {"track_forward"}
    qtbot.waitUntil(lambda: not window.controller.running, timeout=5000)
    assert window.run_button.isEnabled()


def test_stop_during_run_keeps_results(qtbot, window):
    window.toggles.set_config(RunConfig(tracker=SlowTracker.name, points_per_batch=2))
    window.set_grid(4)
    with qtbot.waitSignal(window.controller.batch_done, timeout=RUN_TIMEOUT_MS):
        assert window.start_run()
    with qtbot.waitSignal(window.controller.finished_run, timeout=RUN_TIMEOUT_MS) as blocker:
        window.stop_run()
    assert blocker.args[0].cancelled
    qtbot.waitUntil(lambda: not window.controller.running, timeout=5000)
    done = np.isfinite(window.current.tracks).all(axis=(1, 2))
    assert 0 < done.sum() < 16  # what was computed is still shown
    assert window.controller._thread is None and not window.controller._outlived  # the thread ended


def test_close_during_run_stops_worker(qtbot, settings):
    w = MainWindow(settings=settings, sampler=None, config=RunConfig(tracker="tests.test_gui_window:slow_tracker",
                                                                       points_per_batch=1))
    qtbot.addWidget(w)
    w.set_video(moving_square_video(8, 32), fps=10.0)
    w.set_grid(5)
    w.show()
    SlowTracker.calls = 0
    with qtbot.waitSignal(w.controller.batch_done, timeout=RUN_TIMEOUT_MS):
        w.start_run()
    assert w.controller.running
    thread = w.controller._thread
    w.close()
    assert SlowTracker.calls < 25  # cancelled between batches, not after all 25
    assert not w.controller.running
    assert thread.isFinished() and not w.controller._outlived  # the worker's QThread ended, none left over


def test_toggle_applies_mid_run(qtbot, window):
    window.toggles.set_config(RunConfig(tracker="tests.test_gui_window:slow_tracker", points_per_batch=1))
    window.set_grid(4)
    configs = []
    window.controller.batch_done.connect(lambda e: configs.append(e.config))
    with qtbot.waitSignal(window.controller.batch_done, timeout=RUN_TIMEOUT_MS):
        window.start_run()
    window.toggles.precision.setCurrentText("bf16")  # the user changes precision during the run
    window.toggles.points.setValue(3)
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS) as blocker:
        pass
    assert configs[0].precision == "fp32" and configs[0].points_per_batch == 1
    assert configs[-1].precision == "bf16" and configs[-1].points_per_batch == 3
    assert any("bf16" in label for _, label in window.charts.markers)  # the charts show the change
    assert blocker.args[0].complete


def test_corrupt_video_is_a_message(qtbot, window, tmp_path):
    bad = tmp_path / "broken.mp4"
    bad.write_bytes(b"\x00\x01 not a video at all" * 10)
    frames_before = window.frames
    assert not window.load_path(bad)
    assert window.banner.isVisible() and "broken.mp4" in window.banner.message
    assert window.frames is frames_before  # the open video stays


def test_plugin_failure_keeps_computed_points(qtbot, window):
    window.toggles.set_config(RunConfig(tracker="tests.test_gui_window:failing_tracker", points_per_batch=2))
    window.set_grid(3)
    with qtbot.waitSignal(window.controller.failed, timeout=RUN_TIMEOUT_MS) as blocker:
        window.start_run()
    event = blocker.args[0]
    assert event.kind == "tracker"
    assert window.banner.isVisible() and "exploded" in window.banner.message
    assert "choose another tracker" in window.banner.text.text()
    kept = np.isfinite(window.current.tracks).all(axis=(1, 2))
    assert kept.sum() == 4 and kept[:4].all()
    qtbot.waitUntil(lambda: not window.controller.running, timeout=5000)
    assert window.run_button.isEnabled()  # the app keeps running


def test_replay_recorded_report(qtbot, settings, tmp_path):
    frames = moving_square_video(8, 32)
    video = tmp_path / "clip.mp4"
    write_video(video, frames, fps=10)
    queries = np.array([[0, 8, 12], [0, 20, 20], [3, 10, 10]], np.float32)
    recorder = RunRecorder()
    decoded, info = load_video(video)  # sessions take decoded frames
    session = Session(decoded, queries, RunConfig(tracker="lk", points_per_batch=2), video_info=info.to_dict())
    for event in session.events():
        recorder.add(event)
        if isinstance(event, BatchDone) and event.index == 0:
            session.update_config(precision="bf16")  # a live toggle, recorded in the batches
    path = save(recorder.build(), tmp_path / "run.json")
    w = MainWindow(settings=settings, sampler=None)
    qtbot.addWidget(w)
    assert w.load_path(path), w.banner.message
    assert w.frames.shape[:3] == (8, 32, 32)
    assert w.current is not None and w.current.tracks.shape == (3, 8, 2)
    np.testing.assert_allclose(w.view.queries, queries)
    assert len(w.charts._batches) == 2
    assert "track_forward" in w.charts.stage_totals()
    assert [label for _, label in w.charts.markers] == ["lk bf16 p2 f16"]
    assert w.toggles.config().points_per_batch == 2 and w.toggles.config().tracker == "lk"  # adopted
    w.set_grid(2)
    with qtbot.waitSignal(w.run_finished, timeout=RUN_TIMEOUT_MS):  # a live run after the replay
        w.start_run()
    assert w.charts.live and len(w.charts._batches) >= 1 and not w.charts.markers
    w.close()


def test_replay_report_without_video_uses_blank_canvas(qtbot, settings, tmp_path):
    queries = np.array([[0, 8, 12]], np.float32)
    recorder = RunRecorder()
    for event in Session(moving_square_video(6, 32), queries, RunConfig(tracker="lk")).events():
        recorder.add(event)
    report = dataclasses.replace(recorder.build(), video=ReportVideo(
        path=str(tmp_path / "gone.mp4"), num_frames=6, geometry=VideoGeometry.unscaled(32, 32)))
    path = save(report, tmp_path / "run.json")
    w = MainWindow(settings=settings, sampler=None)
    qtbot.addWidget(w)
    assert w.load_path(path)
    assert w.frames.shape == (6, 32, 32, 3) and w.banner.level == "warning"
    assert w.current.tracks.shape == (1, 6, 2)
    w.close()


def test_failed_run_keeps_previous_results_on_screen(qtbot, window):
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        window.start_run()
    qtbot.waitUntil(lambda: not window.controller.running, timeout=5000)
    previous = window.view.tracks.copy()
    window.toggles.set_config(RunConfig(tracker="no_such_tracker"))
    with qtbot.waitSignal(window.controller.failed, timeout=RUN_TIMEOUT_MS):
        window.start_run()
    assert "no_such_tracker" in window.banner.message
    np.testing.assert_array_equal(window.view.tracks, previous)
    assert window.current.complete


def test_run_outliving_shutdown_wait_is_kept_until_it_ends_then_a_new_run_ignores_its_events(qtbot):
    """A batch longer than shutdown's wait: the thread is not destroyed while running, and the old
    run's late events do not reach the window once a new run has started."""
    from gui.controllers.runner import RunController
    from tests.helpers import ConstantVelocityTracker

    class Sleepy(ConstantVelocityTracker):
        def track(self, prepared, queries, ctx):
            time.sleep(0.6)
            return super().track(prepared, queries, ctx)

    def factory(frames, queries, config, **kwargs):
        tracker = Sleepy() if config.tracker == "sleepy" else ConstantVelocityTracker()
        return Session(frames, queries, config, tracker_loader=lambda name: tracker,
                       video_info=kwargs.get("video_info"))

    ctl = RunController(session_factory=factory)
    finished = []
    ctl.finished_run.connect(finished.append)
    frames = moving_square_video(4, 16)
    queries = np.array([[0, 4.0, 4.0]], np.float32)
    with qtbot.waitSignal(ctl.started_run, timeout=5000):
        ctl.start(frames, queries, RunConfig(tracker="sleepy", device="cpu"))
    qtbot.wait(100)  # inside the slow batch
    assert ctl.shutdown(wait_ms=50) is False
    assert len(ctl._outlived) == 1
    ctl.start(frames, queries, RunConfig(tracker="constvel", device="cpu"))
    qtbot.waitUntil(lambda: not ctl._outlived and not ctl.running, timeout=5000)
    assert len(finished) == 1 and finished[0].tracks.shape == (1, 4, 2)  # only the new run's Finished
    ctl.shutdown()


def test_events_queued_before_a_new_video_do_not_reach_it(qtbot, settings):
    """Opening a video mid-run stops the run; batches it had already queued stay out of the new video."""
    w = MainWindow(settings=settings, sampler=None, config=RunConfig(tracker=SlowTracker.name, points_per_batch=1))
    qtbot.addWidget(w)
    w.set_video(moving_square_video(8, 48), fps=10.0)
    w.start_run()
    qtbot.waitUntil(lambda: w.batches_seen >= 2, timeout=RUN_TIMEOUT_MS)
    worker = w.controller._handle.worker
    wait_without_events(lambda: worker._in_flight >= 2, "the worker queueing two batches the GUI has not handled")
    w.set_video(moving_square_video(12, 64), fps=10.0)  # stops and joins the run: its events are all posted
    wait_posted_events_delivered(qtbot)  # ...and now delivered (to be dropped)
    assert w.current is None and len(w.charts._batches) == 0
    w.close()


def test_live_runs_get_their_distance_from_fp32_in_the_tradeoff_table(qtbot, window):
    """The app's reports leave tracks out; the table compares the runs' own tracks instead (a tracker with a
    precision setting: LK has none, its rows say n/a)."""
    for precision in ("fp32", "tf32"):
        window.toggles.set_config(RunConfig(tracker=SlowTracker.name, precision=precision, points_per_batch=16))
        with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
            window.start_run()
        qtbot.waitUntil(lambda: not window.controller.running, timeout=5000)
    window.flush_panels()
    rows = {row.precision: row for row in window.tradeoff.rows.values()}
    assert rows["fp32"].px_source == "baseline"
    assert rows["tf32"].px_source == "tracks" and rows["tf32"].px_vs_fp32 == pytest.approx(0.0, abs=1e-6)
