"""Video geometry: the source's pixel grid vs the decoded frames' grid, the one place pixel spaces change.

The source is the video file's own pixel grid; frames are what the reader decoded (a video with a side
over the reader's max side is shrunk on reading). Both use OpenCV's convention: x right, y down, (0, 0)
is the centre of the top-left pixel. A frame pixel spans ``scale`` source pixels per axis, and points
are multiplied (frame -> source) or divided (source -> frame) by it, exactly as
``engine.io.video.query_scale`` did (float32 factors), so tracks stay bit-identical.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

#: the dtype of the scale factors (the former engine.io.video.query_scale's); conversions must match it bit for bit
SCALE_DTYPE = np.float32
#: half a pixel: a pixel centre is at an integer coordinate, its area reaches 0.5 px either side
HALF_PIXEL = 0.5
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
        """(sx, sy): source pixels per frame pixel, per axis (float32-rounded, as the conversions use them)."""
        sx, sy = self._factors()
        return float(sx), float(sy)

    @property
    def is_scaled(self) -> bool:
        """True when the frames were resized from the source."""
        return self.frame_size != self.source_size

    def _factors(self) -> np.ndarray:
        """float32 [2] (sx, sy)."""
        return np.array([self.source_width / self.frame_width, self.source_height / self.frame_height],
                        SCALE_DTYPE)

    def _query_factors(self) -> np.ndarray:
        """float32 [3] (1, sx, sy): the former query_scale's factors for (t, x, y) queries."""
        return np.concatenate([np.ones(1, SCALE_DTYPE), self._factors()])

    # -- conversions ---------------------------------------------------------------------------
    def to_frame(self, points: Any) -> np.ndarray:
        """Source-pixel points [..., 2] (x, y) in frame pixels [..., 2]."""
        return _as_points(points, 2) / self._factors()

    def to_source(self, points: Any) -> np.ndarray:
        """Frame-pixel points [..., 2] (x, y) in source pixels [..., 2]."""
        return _as_points(points, 2) * self._factors()

    def queries_to_frame(self, queries: Any) -> np.ndarray:
        """Source-pixel queries [N, 3] (t, x, y) in frame pixels [N, 3]; t is unchanged."""
        return _as_points(queries, 3) / self._query_factors()

    def queries_to_source(self, queries: Any) -> np.ndarray:
        """Frame-pixel queries [N, 3] (t, x, y) in source pixels [N, 3]; t is unchanged."""
        return _as_points(queries, 3) * self._query_factors()

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


def _as_points(points: Any, width: int) -> np.ndarray:
    """points as an array whose last axis has ``width`` entries; ValueError otherwise."""
    arr = np.asarray(points)
    if arr.ndim == 0 or arr.shape[-1] != width:
        raise ValueError(f"points must be [..., {width}], got shape {arr.shape}")
    return arr
