"""One video geometry: source vs frame pixels, converted only by the session; CLI and app agree on a huge video."""

from __future__ import annotations

import json
import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import numpy as np
import pytest

from engine.cli.entry import main
from engine.core.config import RunConfig
from engine.io.geometry import VideoGeometry
from engine.io.trackio import write_queries_csv
from engine.io.video import DEFAULT_MAX_SIDE, open_video, write_video
from engine.report.files import load_report
from engine.report.schema import Report, as_report
from engine.run.session import Finished, Session, Started
from tests.helpers import ConstantVelocityTracker, moving_square_video

#: a video wider than the reader's max side: decoded shrunk to 4096 x 62
HUGE_SIZE = (4200, 64)
HUGE_FRAMES = 3
#: a query near the right edge, where a missed conversion is ~100 px off
HUGE_QUERIES = np.array([[0, 4000.0, 30.0], [1, 100.0, 10.0], [0, 2100.0, 40.0]], np.float32)
AGREE_PX = 1e-3


def test_conversions_are_centre_aligned_and_keep_float32():
    """A frame pixel centre is (x + 0.5) * scale - 0.5 in source pixels (cv2.resize's alignment; the content
    check is tests/test_geometry_resized.py); t is unchanged and float32 tracks stay float32."""
    frames = np.zeros((2, 62, 4096, 3), np.uint8)
    geometry = VideoGeometry.from_frames(*HUGE_SIZE, frames)
    sx, sy = HUGE_SIZE[0] / 4096, HUGE_SIZE[1] / 62
    assert geometry.is_scaled and geometry.scale == (sx, sy)
    frame_queries = geometry.queries_to_frame(HUGE_QUERIES)
    assert frame_queries.dtype == np.float32
    np.testing.assert_array_equal(frame_queries[:, 0], HUGE_QUERIES[:, 0])
    np.testing.assert_allclose(frame_queries[:, 1], (HUGE_QUERIES[:, 1] + 0.5) / sx - 0.5, rtol=1e-6)
    tracks = np.random.default_rng(0).uniform(0, 60, (3, 2, 2)).astype(np.float32)
    source = geometry.to_source(tracks)
    assert source.dtype == np.float32
    np.testing.assert_allclose(source, (tracks + 0.5) * [sx, sy] - 0.5, rtol=1e-6)
    np.testing.assert_allclose(geometry.to_frame(source), tracks, atol=1e-4)


def test_unscaled_geometry_is_the_identity_and_round_trips_through_a_dict():
    geometry = VideoGeometry.unscaled(48, 32)
    points = np.array([[1.25, 2.5], [47.0, 31.0]], np.float32)
    assert not geometry.is_scaled and geometry.scale == (1.0, 1.0)
    np.testing.assert_array_equal(geometry.to_frame(points), points)
    assert VideoGeometry.from_dict(geometry.to_dict()) == geometry
    assert set(geometry.to_dict()) == {"source_width", "source_height", "frame_width", "frame_height"}
    inside = geometry.contains_source(np.array([[-0.5, -0.5], [47.5, 31.5], [47.6, 0.0], [0.0, -0.6]]))
    assert inside.tolist() == [True, True, False, False]
    with pytest.raises(ValueError):
        VideoGeometry(0, 10, 10, 10)


def test_from_info_prefers_the_source_size():
    frames = np.zeros((1, 31, 2048, 3), np.uint8)
    geometry = VideoGeometry.from_info({"width": 4200, "height": 64, "fps": 24.0}, frames)
    assert geometry == VideoGeometry(4200, 64, 2048, 31)
    assert VideoGeometry.from_info({}, frames) == VideoGeometry.unscaled(2048, 31)


def test_session_converts_once_each_way_and_started_carries_the_geometry():
    frames = moving_square_video(num_frames=4, size=32)
    geometry = VideoGeometry(64, 64, 32, 32)
    queries = np.array([[0, 20.0, 30.0]], np.float32)
    events = list(Session(frames, queries, RunConfig(tracker="constvel", device="cpu"),
                          tracker=ConstantVelocityTracker(), geometry=geometry).events())
    started, last = events[0], events[-1]
    assert isinstance(started, Started) and started.geometry == geometry
    assert started.video["width"] == 64 and started.video["frame_width"] == 32
    assert isinstance(last, Finished)
    np.testing.assert_allclose(last.tracks[0, :, 0], 20.0 + 2 * np.arange(4))  # 1 frame px = 2 source px
    np.testing.assert_array_equal(last.queries, queries)


def test_a_geometry_that_does_not_fit_the_frames_fails_clearly():
    last = Session(moving_square_video(num_frames=4, size=32), np.array([[0, 5.0, 5.0]], np.float32),
                   RunConfig(tracker="constvel", device="cpu"), tracker=ConstantVelocityTracker(),
                   geometry=VideoGeometry(64, 64, 40, 40)).run()
    assert not isinstance(last, Finished) and last.kind == "input" and "frame size" in last.message


# -- a real video over the reader's max side: the CLI and the app record the same source pixels ---------------


@pytest.fixture(scope="module")
def huge_video(tmp_path_factory) -> tuple:
    folder = tmp_path_factory.mktemp("huge")
    rng = np.random.default_rng(1)
    frames = rng.integers(0, 255, (HUGE_FRAMES, HUGE_SIZE[1], HUGE_SIZE[0], 3), dtype=np.uint8)
    video = folder / "huge.avi"
    write_video(video, frames)
    write_queries_csv(folder / "huge.queries.csv", HUGE_QUERIES)
    return video, folder / "huge.queries.csv"


def test_the_reader_really_shrinks_the_huge_video(huge_video):
    with open_video(huge_video[0]) as reader:
        frames = reader.read()
        assert (reader.info.width, reader.info.height) == HUGE_SIZE
        assert reader.geometry == VideoGeometry.from_info(reader.info, frames)
    assert max(frames.shape[1:3]) == DEFAULT_MAX_SIDE and frames.shape[2] < HUGE_SIZE[0]


@pytest.fixture(scope="module")
def cli_report(huge_video, tmp_path_factory) -> Report:
    video, queries = huge_video
    out = tmp_path_factory.mktemp("cli")
    assert main(["track", str(video), "--queries", str(queries), "--out", str(out / "t.npz"),
                 "--report", str(out / "r.json"), "--tracker", "lk", "--device", "cpu"]) == 0
    raw = json.loads((out / "r.json").read_text())
    assert "width" not in raw["video"] and raw["video"]["geometry"]["source_width"] == HUGE_SIZE[0]
    return load_report(out / "r.json")


def test_cli_keeps_source_pixels_in_the_report(cli_report):
    queries, tracks, _ = cli_report.tracks_arrays()
    np.testing.assert_array_equal(queries, HUGE_QUERIES)
    assert tracks[0, 0, 0] == pytest.approx(4000.0, abs=0.5)  # at the query frame the track is the query
    geometry = cli_report.video.geometry
    assert (geometry.source_width, geometry.frame_width) == (4200, DEFAULT_MAX_SIDE) and geometry.is_scaled


def test_app_records_the_same_queries_as_the_cli(qtbot, tmp_path, huge_video, cli_report):
    from PySide6.QtCore import QSettings

    from gui.main_window import MainWindow
    from gui.settings import Settings

    settings = Settings(QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat))
    w = MainWindow(settings=settings, sampler=None, config=RunConfig(tracker="lk", device="cpu"))
    qtbot.addWidget(w)
    assert w.load_path(huge_video[0]), w.banner.message  # the sidecar queries CSV comes with it
    np.testing.assert_allclose(w.queries, HUGE_QUERIES, atol=AGREE_PX)
    shown = w.view.image.mapRectToParent(w.view.image.boundingRect())  # the image placed in source pixels
    assert (shown.left(), shown.width()) == (pytest.approx(-0.5), pytest.approx(4200))  # centre-aligned
    with qtbot.waitSignal(w.run_finished, timeout=20_000):
        assert w.start_run()
    qtbot.waitUntil(lambda: not w.controller.running and w.report is not None, timeout=5000)
    app_queries, app_tracks, _ = as_report(w.full_report()).tracks_arrays()
    cli_queries, cli_tracks, _ = cli_report.tracks_arrays()
    np.testing.assert_allclose(app_queries, cli_queries, atol=AGREE_PX)
    np.testing.assert_allclose(app_tracks, cli_tracks, atol=AGREE_PX)
    w.close()
