"""VideoGeometry values: round trips, identity, bounds, refusals."""

from __future__ import annotations

import numpy as np
import pytest

from engine.io.geometry import VideoGeometry
from engine.io.video import DEFAULT_MAX_SIDE, fit_within

WIDE_SOURCE = (4200, 64)  # over the reader's max side: decoded 4096 wide


def _wide_frames() -> np.ndarray:
    width, height = fit_within(*WIDE_SOURCE, DEFAULT_MAX_SIDE)
    return np.zeros((1, height, width, 3), np.uint8)


def _random_queries(n: int, width: int, height: int, num_frames: int = 5) -> np.ndarray:
    rng = np.random.default_rng(0)
    return np.stack([rng.integers(0, num_frames, n), rng.uniform(-0.5, width - 0.5, n),
                     rng.uniform(-0.5, height - 0.5, n)], axis=1).astype(np.float32)


def test_wide_source_is_shrunk_to_the_max_side():
    frames = _wide_frames()
    geo = VideoGeometry.from_frames(*WIDE_SOURCE, frames)
    assert geo.frame_width == DEFAULT_MAX_SIDE and geo.frame_height == frames.shape[1]
    assert geo.is_scaled
    sx, sy = geo.scale
    assert sx == pytest.approx(4200 / 4096) and sy == pytest.approx(64 / frames.shape[1])



def test_round_trips():
    geo = VideoGeometry(4200, 64, 4096, 62)
    points = np.random.default_rng(2).uniform(-0.5, 4000, (3, 4, 2))
    assert np.allclose(geo.to_source(geo.to_frame(points)), points, rtol=1e-6)
    queries = _random_queries(50, 4200, 64)
    back = geo.queries_to_source(geo.queries_to_frame(queries))
    assert np.array_equal(back[:, 0], queries[:, 0])  # frame indices never change
    assert np.allclose(back, queries, rtol=1e-6)
    assert VideoGeometry.from_dict(geo.to_dict()) == geo
    assert set(geo.to_dict()) == {"source_width", "source_height", "frame_width", "frame_height"}


def test_identity_when_unscaled():
    geo = VideoGeometry.unscaled(256, 128)
    assert not geo.is_scaled and geo.scale == (1.0, 1.0)
    points = np.random.default_rng(3).uniform(0, 100, (5, 2)).astype(np.float32)
    assert np.array_equal(geo.to_frame(points), points) and np.array_equal(geo.to_source(points), points)
    queries = _random_queries(10, 256, 128)
    assert np.array_equal(geo.queries_to_frame(queries), queries)
    assert VideoGeometry.from_frames(256, 128, np.zeros((2, 128, 256, 3), np.uint8)) == geo


def test_bounds_are_pixel_edges():
    geo = VideoGeometry.unscaled(10, 20)
    points = np.array([[-0.5, -0.5], [9.5, 19.5], [-0.51, 0], [0, 19.51], [9.6, 0], [np.nan, 1]])
    assert geo.contains_source(points).tolist() == [True, True, False, False, False, False]
    assert geo.contains_source(np.zeros((2, 3, 2))).shape == (2, 3)


def test_bad_values_are_refused():
    with pytest.raises(ValueError, match="source_width"):
        VideoGeometry(0, 10, 10, 10)
    with pytest.raises(ValueError, match="frame_height"):
        VideoGeometry(10, 10, 10, True)
    with pytest.raises(ValueError, match=r"\[\.\.\., 2\]"):
        VideoGeometry.unscaled(4, 4).to_frame(np.zeros((3, 3)))
    with pytest.raises(ValueError, match="source_height"):
        VideoGeometry.from_dict({"source_width": 4})
    assert VideoGeometry.from_dict({"source_width": 4, "source_height": 3}) == VideoGeometry.unscaled(4, 3)
