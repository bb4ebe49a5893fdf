"""The Tracker protocol every tracker implements (built-in, baseline or plugin).

A run has two steps so that per-video work is done once and points are batched:

- ``prepare(frames, ctx)``: per-video work (decode to tensors, upload, backbone features), timed in
  the stages it declares. Called again when a config change invalidates it (device, precision,
  frames per batch).
- ``track(prepared, queries, ctx)``: one batch of query points against the prepared video.

Coordinates are pixels of the frames the tracker is given (x right, y down, (0, 0) the centre of the
top-left pixel). Those are the decoded frames, which a reader shrinks for a video over its max side: the
session converts queries from the video's source pixels to frame pixels before ``track`` and the tracks
back after it (``engine.io.geometry.VideoGeometry``), so a tracker never sees source pixels. Queries are
``[N, 3]`` float32 rows of ``(t, x, y)``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from engine.core.stages import StageTimer


@dataclass
class RunContext:
    """What a tracker needs to know about the run it is part of."""

    device: torch.device
    precision: str
    frames_per_batch: int
    timer: StageTimer


@dataclass
class PreparedVideo:
    """Per-video state a tracker keeps between batches of points."""

    num_frames: int
    height: int
    width: int
    data: dict[str, Any] = field(default_factory=dict)


def track_arrays(tracks: Any, visible: Any) -> tuple[np.ndarray, np.ndarray]:
    """Tracks as float32 [N, T, 2] and visibility as bool [N, T]; ValueError when the shapes disagree."""
    tracks = np.asarray(tracks, dtype=np.float32)
    visible = np.asarray(visible, dtype=bool)
    if tracks.ndim != 3 or tracks.shape[-1] != 2:
        raise ValueError(f"tracks must be [N, T, 2], got {tracks.shape}")
    if visible.shape != tracks.shape[:2]:
        raise ValueError(f"visible must be [N, T] = {tracks.shape[:2]}, got {visible.shape}")
    return tracks, visible


def check_result_types(tracks: Any, visible: Any) -> tuple[np.ndarray, np.ndarray]:
    """A tracker's raw outputs as arrays; ValueError when their element types cannot be tracks and visibility.

    Tracks must be real floating point (sub-pixel positions): an integer array is refused, because whole
    pixels from a tracker are almost always indices or a lost cast, and complex values would lose their
    imaginary part silently. Visibility is bool, or real numbers (integer or floating, non-zero = visible)
    without NaN; complex and object arrays are refused.
    """
    tracks, visible = np.asarray(tracks), np.asarray(visible)
    if tracks.dtype.kind != "f":
        hint = "; cast them with .float()" if tracks.dtype.kind in "iub" else ""
        raise ValueError(f"tracks must be real floating point (float16/32/64), got {tracks.dtype}{hint}")
    if visible.dtype.kind not in "biuf":
        raise ValueError(f"visible must be bool or real numbers, got {visible.dtype}")
    if visible.dtype.kind == "f" and np.isnan(visible).any():
        raise ValueError(f"visible holds {int(np.count_nonzero(np.isnan(visible)))} NaN value(s)")
    return tracks, visible


@dataclass
class TrackResult:
    """Tracks for one batch of queries.

    tracks:  float32 [N, T, 2] (x, y) in frame pixels (of the frames given to prepare), for every frame.
    visible: bool [N, T].
    Given as any real floating tracks and bool or real visibility (``check_result_types``); stored as above.
    """

    tracks: np.ndarray
    visible: np.ndarray

    def __post_init__(self) -> None:
        self.tracks, self.visible = track_arrays(*check_result_types(self.tracks, self.visible))


class Tracker(ABC):
    """A point tracker: frames and queries in, tracks and visibility out."""

    name: str = "tracker"
    #: stage names in the order they run; shown to users
    stages: tuple[str, ...] = ()
    #: device types this tracker can run on; the session refuses others (device "auto" falls back to the CPU)
    device_types: tuple[str, ...] = ("cpu", "cuda")

    @abstractmethod
    def prepare(self, frames: np.ndarray, ctx: RunContext) -> PreparedVideo:
        """Per-video work. frames: uint8 [T, H, W, 3] RGB."""

    @abstractmethod
    def track(self, prepared: PreparedVideo, queries: np.ndarray, ctx: RunContext) -> TrackResult:
        """Track one batch of queries [N, 3] (t, x, y), frame pixels, through the prepared video."""

    def describe(self) -> dict[str, Any]:
        """Facts about the tracker for the run report (parameters, weights, ...)."""
        return {"name": self.name, "stages": list(self.stages)}

    def describe_precision(self, precision: str, device: torch.device | str) -> dict[str, Any]:
        """What ``precision`` does in this tracker on ``device``, for the run report: a quantising tracker
        returns its int8/fp8 recipe and the layers it quantises; {} otherwise."""
        return {}

    def counting_mode(self) -> AbstractContextManager[None]:
        """A context in which every op goes through torch's dispatcher, for counting FLOPs and bytes.

        A tracker that replays CUDA graphs (which bypass the dispatcher) runs eagerly inside it.
        """
        return nullcontext()
