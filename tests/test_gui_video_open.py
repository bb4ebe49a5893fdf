"""Opening a video of any length: first frame at once, decoding in a worker with progress and Cancel,
frames kept within a memory budget, runs fed the kept frames (issue 12, item 5)."""

from __future__ import annotations

import time

import numpy as np
import pytest

pytest.importorskip("pytestqt")
from PySide6.QtCore import QSettings  # noqa: E402

import engine.io.frames as frames_module  # noqa: E402
import engine.io.video as video_module  # noqa: E402
import gui.controllers.files as files_module  # noqa: E402
from engine.core.config import RunConfig  # noqa: E402
from engine.io.video import load_video, write_video  # noqa: E402
from gui.main_window import MainWindow  # noqa: E402
from gui.settings import Settings  # noqa: E402
from tests.helpers import moving_square_video  # noqa: E402

NUM_FRAMES = 60
SIZE = 64
FRAME_DELAY_S = 0.02  # a slowed decoder: 60 frames take > 1 s, so the test can act while it decodes
WAIT_MS = 20_000


@pytest.fixture
def settings(tmp_path):
    return Settings(QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat))


@pytest.fixture
def clip(tmp_path):
    path = tmp_path / "clip.mp4"
    write_video(path, moving_square_video(NUM_FRAMES, SIZE), fps=10)
    return path, load_video(path)[0]


@pytest.fixture
def slow_background_decoding(monkeypatch):
    """Every video decodes in the worker, each frame after the first slowed down; progress on every frame."""
    monkeypatch.setattr(files_module, "DECODE_IN_PLACE_BYTES", 0)
    monkeypatch.setattr(frames_module, "PROGRESS_INTERVAL_S", 0.0)
    real = video_module.VideoReader.iter_frames

    def slow(self, *args, **kwargs):
        for frame in real(self, *args, **kwargs):
            time.sleep(FRAME_DELAY_S)
            yield frame

    monkeypatch.setattr(video_module.VideoReader, "iter_frames", slow)


@pytest.fixture
def window(qtbot, settings):
    w = MainWindow(settings=settings, sampler=None, config=RunConfig(tracker="lk", points_per_batch=16))
    qtbot.addWidget(w)
    w.show()
    yield w
    w.close()
    assert not w.files.decoding


def _shown(w: MainWindow) -> np.ndarray:
    return np.asarray(w.view.image.image)


def test_first_frame_shows_before_the_video_is_decoded(qtbot, window, clip, slow_background_decoding):
    path, reference = clip
    progress = []
    window.state.video_progress.connect(progress.append)
    assert window.load_path(path), window.banner.message
    assert window.state.decoding and window.files.decoding  # the rest decodes in the worker
    assert window.view.num_frames == NUM_FRAMES and window.view.decode_row.isVisibleTo(window.view)
    np.testing.assert_array_equal(_shown(window), reference[0])  # frame 0 on screen already
    assert not window.start_run() and "still decoding" in window.banner.message  # the tracker waits
    qtbot.waitUntil(lambda: not window.files.decoding, timeout=WAIT_MS)
    assert progress[0].decoded < NUM_FRAMES and not progress[0].complete
    assert progress[-1].complete and progress[-1].decoded == NUM_FRAMES
    assert [p.decoded for p in progress] == sorted(p.decoded for p in progress)
    assert not window.view.decode_row.isVisibleTo(window.view)
    np.testing.assert_array_equal(window.frames, reference)
    window.view.set_frame(NUM_FRAMES - 1)
    np.testing.assert_array_equal(_shown(window), reference[-1])


def test_a_frame_shown_before_it_decoded_is_redrawn_once_it_is(qtbot, window, clip, slow_background_decoding):
    path, reference = clip
    assert window.load_path(path)
    window.view.set_frame(NUM_FRAMES - 1)  # not decoded yet: black for now
    assert window.state.video.decoded < NUM_FRAMES
    qtbot.waitUntil(lambda: not window.files.decoding, timeout=WAIT_MS)
    np.testing.assert_array_equal(_shown(window), reference[-1])


def test_cancel_keeps_the_frames_decoded_so_far(qtbot, window, clip, slow_background_decoding):
    path, reference = clip
    assert window.load_path(path)
    qtbot.waitUntil(lambda: window.state.video.decoded >= 5, timeout=WAIT_MS)
    window.view.decode_cancel.click()
    assert not window.files.decoding and not window.state.decoding
    kept = len(window.frames)
    assert 5 <= kept < NUM_FRAMES
    assert window.view.num_frames == kept and window.state.video_info["num_frames"] == kept
    np.testing.assert_array_equal(window.frames, reference[:kept])
    assert "decoding cancelled" in window.banner.message and f"first {kept} of {NUM_FRAMES}" in window.banner.message
    with qtbot.waitSignal(window.run_finished, timeout=WAIT_MS):  # what was kept can be tracked
        assert window.start_run()
    qtbot.waitUntil(lambda: not window.controller.running, timeout=WAIT_MS)
    assert window.current.tracks.shape[1] == kept


def test_opening_another_video_while_decoding_stops_the_first(qtbot, window, clip, tmp_path,
                                                             slow_background_decoding):
    path, _ = clip
    other = tmp_path / "other.mp4"
    write_video(other, moving_square_video(6, 32), fps=10)
    assert window.load_path(path)
    first = window.files._decoder
    assert window.load_path(other)
    assert first.thread.isFinished()  # stopped and joined before the second video opened
    qtbot.waitUntil(lambda: not window.files.decoding, timeout=WAIT_MS)
    qtbot.wait(50)  # any signal the first worker left queued is delivered (and must be ignored)
    assert window.frames.shape == (6, 32, 32, 3) and window.view.num_frames == 6
    assert window.state.video_info["num_frames"] == 6


def test_closing_while_decoding_ends_the_worker(qtbot, settings, clip, slow_background_decoding):
    path, _ = clip
    w = MainWindow(settings=settings, sampler=None)
    qtbot.addWidget(w)
    assert w.load_path(path)
    handle = w.files._decoder
    assert handle is not None
    w.close()
    assert not w.files.decoding and handle.thread.isFinished()


def test_a_long_video_is_kept_within_the_memory_budget(qtbot, window, clip, monkeypatch):
    path, _ = clip
    budget = NUM_FRAMES * (SIZE // 2) * (SIZE // 2) * 3  # room for half-size frames only
    monkeypatch.setattr(files_module, "VIDEO_MEMORY_BYTES", budget)
    assert window.load_path(path)
    qtbot.waitUntil(lambda: not window.files.decoding, timeout=WAIT_MS)
    assert window.frames.nbytes <= budget and len(window.frames) == NUM_FRAMES
    assert window.frames.shape[1:3] == (SIZE // 2, SIZE // 2)
    g = window.state.geometry
    assert g.source_size == (SIZE, SIZE) and g.frame_size == (SIZE // 2, SIZE // 2)
    assert f"{SIZE}x{SIZE} (shown at {SIZE // 2}x{SIZE // 2})" in window.status_label.text()  # the video's own size
    shown = window.view.image.mapRectToParent(window.view.image.boundingRect())  # placed in source pixels
    assert shown.width() == pytest.approx(SIZE)
    window.set_queries(np.array([[0, 8.0, 12.0]], np.float32))  # source pixels: on the moving square
    with qtbot.waitSignal(window.run_finished, timeout=WAIT_MS):
        assert window.start_run()
    qtbot.waitUntil(lambda: not window.controller.running, timeout=WAIT_MS)
    tracks = window.current.tracks  # [1, T, 2] source pixels, not the kept frames' half-size pixels
    assert np.isfinite(tracks).all() and tracks[0, 0, 0] == pytest.approx(8.0, abs=1.0)
    assert tracks[0, 10, 0] > 10.0  # moved right in source pixels (in the kept half-size pixels it would read < 8)


def test_a_large_file_is_opened_in_the_worker_too(qtbot, window, clip, monkeypatch):
    path, reference = clip
    monkeypatch.setattr(files_module, "OPEN_IN_PLACE_FILE_BYTES", 0)  # every file counts as large
    monkeypatch.setattr(files_module, "DECODE_IN_PLACE_BYTES", 0)
    window.set_video(moving_square_video(4, 32), fps=10)
    assert window.load_path(path)  # returns at once: the header and frame 0 are read in the worker
    qtbot.waitUntil(lambda: window.state.video_path == str(path) and not window.files.decoding, timeout=WAIT_MS)
    np.testing.assert_array_equal(window.frames, reference)
    assert window.view.num_frames == NUM_FRAMES and len(window.queries) > 0


def test_a_large_file_that_does_not_open_is_a_message(qtbot, window, tmp_path, monkeypatch):
    monkeypatch.setattr(files_module, "OPEN_IN_PLACE_FILE_BYTES", 0)
    window.set_video(moving_square_video(4, 32), fps=10)
    before = window.frames
    bad = tmp_path / "broken.mp4"
    bad.write_bytes(b"\x00\x01 not a video at all" * 10)
    window.load_path(bad)
    qtbot.waitUntil(lambda: not window.files.decoding, timeout=WAIT_MS)
    assert "broken.mp4" in window.banner.message and window.banner.isVisible()
    assert window.frames is before  # the open video stays
    assert str(bad.resolve()) not in window.settings.recent_files()  # before: listed as if it had opened
