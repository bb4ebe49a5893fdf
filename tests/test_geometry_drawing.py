"""Drawing a shrunk video: tracks and queries are source pixels; the A/B view and the exported overlay
place them on the frames through the video's geometry."""

from __future__ import annotations

import numpy as np

from engine.api import VideoGeometry
from gui import export
from gui.model import RunData
from gui.panels.ab_view import ABView

SCALE = 2  # source pixels per frame pixel


def _shrunk() -> tuple[np.ndarray, VideoGeometry, RunData]:
    frames = np.zeros((2, 20, 40, 3), np.uint8)  # decoded at half the source size
    geometry = VideoGeometry(40 * SCALE, 20 * SCALE, 40, 20)
    tracks = np.array([[[60.0, 20.0], [60.0, 20.0]]], np.float32)  # source pixels
    queries = np.array([[0.0, 60.0, 20.0]], np.float32)
    return frames, geometry, RunData("r", {}, queries, tracks, np.ones((1, 2), bool))


def test_overlay_draws_source_pixel_tracks_at_their_frame_position():
    frames, geometry, run = _shrunk()
    overlay = export.draw_overlay(frames, run, geometry=geometry)
    ys, xs = np.nonzero(overlay[1].any(axis=-1))
    assert abs(xs.mean() - 60 / SCALE) < 1.5 and abs(ys.mean() - 20 / SCALE) < 1.5  # not at (60, 20)


def test_ab_view_places_the_frame_image_in_source_pixels(qtbot):
    frames, geometry, run = _shrunk()
    view = ABView()
    qtbot.addWidget(view)
    view.set_frames(frames, geometry)
    rect = view.side_a.image.mapRectToParent(view.side_a.image.boundingRect())
    assert abs(rect.width() - geometry.source_width) < 1e-6 and abs(rect.height() - geometry.source_height) < 1e-6
    assert view._video_size(run) == geometry.source_size
