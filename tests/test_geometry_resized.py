"""Centre-aligned geometry, checked against resized CONTENT: a bright blob at a known sub-pixel source
position, resized by cv2 (as the reader and the frame store do) or by the model's own resize, lands where
the geometry says; today's multiplication was off by (scale - 1) / 2 px (2.15 px at 5.3x)."""

from __future__ import annotations

import cv2
import numpy as np
import pytest
import torch

from engine.core.pixels import resample_coordinates
from engine.io.geometry import VideoGeometry
from engine.io.video import resize_frames
from engine.trackers.corrtrack.model import MODEL_SIZE, CorrTrackNet
from engine.trackers.corrtrack.tracker import from_model_xy, to_model_xy

#: the blob's Gaussian radius, in pixels of the coarser of the two grids (well sampled on both)
BLOB_SIGMA_COARSE_PX = 2.5
#: how far the blob's centroid may be from where the geometry puts it, in source pixels per source px of scale
TOLERANCE_COARSE_PX = 0.03
#: (source width, source height, frame width, frame height): shrinking 2x, 5.3x and mixed; growing 2x and 1/0.94x
SIZES = [
    (400, 240, 200, 120),      # 2x smaller
    (1060, 530, 200, 100),     # 5.3x smaller
    (1060, 300, 200, 150),     # 5.3x in x, 2x in y
    (120, 90, 240, 180),       # 2x larger
    (470, 282, 500, 300),      # 0.94 source px per frame px: slightly larger
    (1920, 1080, 364, 204),    # a 1080p video as the app keeps a 2-minute one
]
#: sub-pixel source positions, as fractions of the source size (off-centre, off the pixel grid)
POSITIONS = [(0.37, 0.41), (0.61, 0.55)]


def _blob(width: int, height: int, x: float, y: float, sigma: float) -> np.ndarray:
    """uint8 [H, W, 3]: a Gaussian blob centred at source position (x, y) (pixel centres at integers)."""
    xs, ys = np.meshgrid(np.arange(width), np.arange(height))
    img = 250.0 * np.exp(-((xs - x) ** 2 + (ys - y) ** 2) / (2 * sigma**2))
    return np.repeat(np.round(img).astype(np.uint8)[..., None], 3, axis=-1)


def _centroid(image: np.ndarray) -> np.ndarray:
    """(x, y) intensity-weighted centroid of a single-channel (or first channel) image, its own pixels."""
    grey = image[..., 0].astype(np.float64) if image.ndim == 3 else image.astype(np.float64)
    ys, xs = np.indices(grey.shape)
    return np.array([(xs * grey).sum(), (ys * grey).sum()]) / grey.sum()


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}->{s[2]}x{s[3]}")
@pytest.mark.parametrize("where", POSITIONS)
def test_a_resized_blob_maps_back_to_its_source_position(size, where):
    sw, sh, fw, fh = size
    geometry = VideoGeometry(sw, sh, fw, fh)
    coarse = max(geometry.scale + (1.0,))  # source px per px of the coarser grid
    source_xy = np.array([where[0] * sw + 0.3, where[1] * sh + 0.7])
    image = _blob(sw, sh, *source_xy, sigma=BLOB_SIGMA_COARSE_PX * coarse)
    frame = resize_frames(image[None], (fw, fh))[0]  # the reader's resize (INTER_AREA shrinking, LINEAR growing)
    frame_xy = _centroid(frame)
    tolerance = TOLERANCE_COARSE_PX * coarse
    np.testing.assert_allclose(geometry.to_source(frame_xy), source_xy, atol=tolerance)
    np.testing.assert_allclose(geometry.to_frame(source_xy), frame_xy, atol=tolerance / min(geometry.scale))
    queries = geometry.queries_to_source(np.array([[3.0, *frame_xy]], np.float32))
    assert queries[0, 0] == 3.0
    np.testing.assert_allclose(queries[0, 1:], source_xy, atol=tolerance)


def test_the_app_size_of_a_1080p_video_is_no_longer_two_pixels_off():
    """The issue's numbers: (1000, 500) in 1080p kept at 364x204 came back as (997.86, 497.85)."""
    geometry = VideoGeometry(1920, 1080, 364, 204)
    np.testing.assert_allclose(geometry.to_source(geometry.to_frame(np.array([1000.0, 500.0]))), [1000, 500])
    image = _blob(1920, 1080, 1000.0, 500.0, sigma=BLOB_SIGMA_COARSE_PX * 1920 / 364)
    frame_xy = _centroid(cv2.resize(image, (364, 204), interpolation=cv2.INTER_AREA))
    assert np.abs(geometry.to_source(frame_xy) - [1000.0, 500.0]).max() < 0.2


def test_the_frame_image_spans_the_source_edges():
    """Placing the frame image at frame_extent puts frame pixel centres where to_source says they are."""
    geometry = VideoGeometry(1060, 530, 200, 100)
    left, top, width, height = geometry.frame_extent
    sx, sy = width / geometry.frame_width, height / geometry.frame_height  # source px per drawn frame pixel
    centres = np.array([[0.0, 0.0], [199.0, 99.0], [57.0, 31.0]])
    drawn = np.stack([left + (centres[:, 0] + 0.5) * sx, top + (centres[:, 1] + 0.5) * sy], axis=1)
    np.testing.assert_allclose(drawn, geometry.to_source(centres))


@pytest.mark.parametrize("frame_size", [(640, 360), (200, 120), (96, 80)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_corrtrack_model_coordinates_follow_its_own_resize(frame_size):
    """to_model_xy agrees with CorrTrackNet.normalise's resize of real content (shrinking and growing)."""
    width, height = frame_size
    coarse = max(width / MODEL_SIZE, height / MODEL_SIZE, 1.0)
    xy = np.array([0.43 * width + 0.2, 0.58 * height + 0.6])
    frame = _blob(width, height, *xy, sigma=BLOB_SIGMA_COARSE_PX * coarse)
    model_in = CorrTrackNet.normalise(torch.from_numpy(frame).permute(2, 0, 1)[None].contiguous())
    model_image = (model_in[0, 0] - model_in[0, 0].min()).numpy()  # [256, 256], background at 0
    model_xy = _centroid(model_image)
    predicted = to_model_xy(torch.tensor(xy, dtype=torch.float32), width, height).numpy()
    tolerance = TOLERANCE_COARSE_PX * coarse * MODEL_SIZE / min(width, height)
    np.testing.assert_allclose(predicted, model_xy, atol=max(tolerance, TOLERANCE_COARSE_PX))
    back = from_model_xy(torch.tensor(model_xy, dtype=torch.float32), width, height).numpy()
    np.testing.assert_allclose(back, xy, atol=TOLERANCE_COARSE_PX * coarse * 2)


def test_resample_coordinates_works_on_arrays_and_tensors_alike():
    points = np.array([[0.0, 10.0], [-0.5, 99.5]])
    out = resample_coordinates(points, np.array([2.0, 0.5]))
    np.testing.assert_allclose(out, [[0.5, 4.75], [-0.5, 49.5]])
    on_tensor = resample_coordinates(torch.tensor(points), 2.0).numpy()
    np.testing.assert_allclose(on_tensor, resample_coordinates(points, 2.0))
