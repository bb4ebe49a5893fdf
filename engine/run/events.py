"""The events a session yields: Started -> BatchDone ... -> Finished, or Failed.

Positions (queries, tracks) in every event are source pixels (the video file's own); ``Started.geometry``
says how they relate to the decoded frames the tracker saw.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from engine.core.config import RunConfig
from engine.io.geometry import VideoGeometry

#: Failed.kind values
FAIL_KINDS = ("oom", "input", "tracker", "internal")


@dataclass
class Started:
    """The run is set up: video, device and tracker known; nothing tracked yet."""

    t: float
    config: RunConfig
    video: dict[str, Any]  # the reader's info plus the geometry's keys; width/height are the source's
    geometry: VideoGeometry
    num_queries: int
    num_batches: int
    stages: tuple[str, ...]
    device: str  # the device the run uses (may differ from config.device: "auto", a CPU-only tracker)
    device_name: str
    tracker: dict[str, Any]
    precision_gate: str = ""
    device_note: str = ""  # why the device differs from what "auto" would pick, when it does


@dataclass
class BatchDone:
    """One batch of points tracked."""

    t: float
    index: int
    start: int  # first query index of this batch
    stop: int  # one past the last
    tracks: np.ndarray  # float32 [n, T, 2], source pixels
    visible: np.ndarray  # bool [n, T]
    stage_ms: dict[str, float]
    wall_ms: float
    config: RunConfig
    cold: bool
    prepared: bool  # this batch included the per-video work (backbone etc.)
    peak_memory_bytes: int | None = None


@dataclass
class Finished:
    """The run ended (all points tracked, or cancelled between batches)."""

    t: float
    tracks: np.ndarray  # float32 [N, T, 2], source pixels
    visible: np.ndarray  # bool [N, T]
    queries: np.ndarray  # float32 [N, 3], source pixels
    wall_ms: float
    cancelled: bool = False


@dataclass
class Failed:
    """The run stopped on an error; what was tracked before it is kept."""

    t: float
    message: str
    suggestion: str | None
    kind: str  # one of FAIL_KINDS
    tracks: np.ndarray | None = None  # what was computed before the failure (NaN where not)
    visible: np.ndarray | None = None
    details: str = ""


Event = Started | BatchDone | Finished | Failed
