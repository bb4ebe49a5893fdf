"""Video geometry: the source's pixel grid vs the decoded frames' grid, the one place pixel spaces change.

The source is the video file's own pixel grid; frames are what the reader decoded (a video with a side
over the reader's max side is shrunk on reading). Both use OpenCV's convention: x right, y down, (0, 0)
is the centre of the top-left pixel. A frame pixel spans ``scale`` source pixels per axis. The frames
come from ``cv2.resize``, which is centre-aligned (the two grids share their outer edges), so a point
converts as ``(x + 0.5) * scale - 0.5`` (``engine.core.pixels.resample_coordinates``), not ``x * scale``:
multiplying put a point of a 1080p video kept at 364x204 about 2 px up and left of where the frame shows it.
Tests check this against cv2-resized content, not against the formula (tests/test_geometry_resized.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from engine.core.pixels import HALF_PIXEL, resample_coordinates

#: the keys of ``to_dict`` / ``from_dict``
GEOMETRY_KEYS = ("source_width", "source_height", "frame_width", "frame_height")


@dataclass(frozen=True)
class VideoGeometry:
    """Source size (the file's pixels) and frame size (the decoded pixels), in pixels."""

    source_width: int
    source_height: int
    frame_width: int
    frame_height: int

    def __post_init__(self) -> None:
        for name in GEOMETRY_KEYS:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"{name} must be a whole number of pixels >= 1, not {value!r}")
            object.__setattr__(self, name, int(value))

    # -- construction --------------------------------------------------------------------------
    @classmethod
    def unscaled(cls, width: int, height: int) -> VideoGeometry:
        """Frames decoded at the source's own size."""
        return cls(width, height, width, height)

    @classmethod
    def from_frames(cls, source_width: int, source_height: int, frames: Any) -> VideoGeometry:
        """The geometry of decoded frames [T, H, W, 3] (or [H, W, ...] with ndim < 4) of a source of that size."""
        shape = np.shape(frames)
        height, width = (shape[1], shape[2]) if len(shape) >= 4 else (shape[0], shape[1])
        return cls(source_width, source_height, int(width), int(height))

    @classmethod
    def from_info(cls, info: Any, frames: Any) -> VideoGeometry:
        """The geometry of frames [T, H, W, 3] decoded from a VideoInfo or its dict (width/height: the source)."""
        data = info.to_dict() if hasattr(info, "to_dict") else dict(info or {})
        shape = np.shape(frames)
        width = int(data.get("source_width") or data.get("width") or shape[2])
        height = int(data.get("source_height") or data.get("height") or shape[1])
        return cls.from_frames(width, height, frames)

    # -- sizes and scale -----------------------------------------------------------------------
    @property
    def source_size(self) -> tuple[int, int]:
        """(width, height) of the source, pixels."""
        return self.source_width, self.source_height

    @property
    def frame_size(self) -> tuple[int, int]:
        """(width, height) of the decoded frames, pixels."""
        return self.frame_width, self.frame_height

    @property
    def scale(self) -> tuple[float, float]:
        """(sx, sy): source pixels per frame pixel, per axis."""
        sx, sy = self._factors()
        return float(sx), float(sy)

    @property
    def is_scaled(self) -> bool:
        """True when the frames were resized from the source."""
        return self.frame_size != self.source_size

    def _factors(self) -> np.ndarray:
        """float64 [2] (sx, sy)."""
        return np.array([self.source_width / self.frame_width, self.source_height / self.frame_height])

    @property
    def frame_extent(self) -> tuple[float, float, float, float]:
        """(left, top, width, height) of the frame image in source pixels: where to draw it so that each
        frame pixel's centre lands on the source position it was resampled from (the source's own edges)."""
        return -HALF_PIXEL, -HALF_PIXEL, float(self.source_width), float(self.source_height)

    # -- conversions ---------------------------------------------------------------------------
    def to_frame(self, points: Any) -> np.ndarray:
        """Source-pixel points [..., 2] (x, y) in frame pixels [..., 2] (float32 in, float32 out)."""
        arr = _as_points(points, 2)
        return _like(arr, resample_coordinates(arr.astype(np.float64), 1.0 / self._factors()))

    def to_source(self, points: Any) -> np.ndarray:
        """Frame-pixel points [..., 2] (x, y) in source pixels [..., 2] (float32 in, float32 out)."""
        arr = _as_points(points, 2)
        return _like(arr, resample_coordinates(arr.astype(np.float64), self._factors()))

    def queries_to_frame(self, queries: Any) -> np.ndarray:
        """Source-pixel queries [N, 3] (t, x, y) in frame pixels [N, 3]; t is unchanged."""
        arr = _as_points(queries, 3)
        out = np.array(arr, dtype=_float_dtype(arr))
        out[..., 1:] = self.to_frame(arr[..., 1:])
        return out

    def queries_to_source(self, queries: Any) -> np.ndarray:
        """Frame-pixel queries [N, 3] (t, x, y) in source pixels [N, 3]; t is unchanged."""
        arr = _as_points(queries, 3)
        out = np.array(arr, dtype=_float_dtype(arr))
        out[..., 1:] = self.to_source(arr[..., 1:])
        return out

    def contains_source(self, points: Any) -> np.ndarray:
        """bool [...]: whether source-pixel points [..., 2] lie on the source (-0.5 .. size - 0.5; NaN: False)."""
        points = _as_points(points, 2)
        x, y = points[..., 0], points[..., 1]
        return ((x >= -HALF_PIXEL) & (x <= self.source_width - HALF_PIXEL)
                & (y >= -HALF_PIXEL) & (y <= self.source_height - HALF_PIXEL))

    # -- serialisation -------------------------------------------------------------------------
    def to_dict(self) -> dict[str, int]:
        """{source_width, source_height, frame_width, frame_height}."""
        return {name: getattr(self, name) for name in GEOMETRY_KEYS}

    @classmethod
    def from_dict(cls, data: Any) -> VideoGeometry:
        """From ``to_dict``'s keys; a missing frame size means the source size. ValueError when malformed."""
        if not isinstance(data, dict):
            raise ValueError(f"a video geometry must be an object, not {type(data).__name__}")
        try:
            width, height = data["source_width"], data["source_height"]
        except KeyError as exc:
            raise ValueError(f"a video geometry needs {exc.args[0]}") from None
        # unchecked JSON values (__post_init__ checks them); typed Any, as mypy reads dict.get(key, Any) as Optional
        frame_width: Any = data.get("frame_width", width)
        frame_height: Any = data.get("frame_height", height)
        return cls(width, height, frame_width, frame_height)


def _float_dtype(arr: np.ndarray) -> np.dtype:
    """The input's dtype when it is floating (float32 tracks stay float32), else float64."""
    return arr.dtype if np.issubdtype(arr.dtype, np.floating) else np.dtype(np.float64)


def _like(arr: np.ndarray, converted: np.ndarray) -> np.ndarray:
    """``converted`` (float64) in the input's float dtype."""
    return converted.astype(_float_dtype(arr), copy=False)


def _as_points(points: Any, width: int) -> np.ndarray:
    """points as an array whose last axis has ``width`` entries; ValueError otherwise."""
    arr = np.asarray(points)
    if arr.ndim == 0 or arr.shape[-1] != width:
        raise ValueError(f"points must be [..., {width}], got shape {arr.shape}")
    return arr
