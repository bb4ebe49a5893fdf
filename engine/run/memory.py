"""Host memory a run needs, estimated before it starts, and a clear refusal when it cannot fit.

The estimate is the decoded frames (uint8 RGB) plus the tracker's working memory plus the session's
track arrays. Working memory per frame is measured per tracker (CorrTrack: about 1.8 MB per frame
whatever the frame size, issue 13); a tracker not in the table may say its own with a
``host_bytes_per_frame`` attribute, else only its frames are counted. A CorrTrack run on the CPU holds
its tensors in host memory too (features, the correlation pyramid of a batch of points, the backbone's
working set: ``engine.run.device_memory``'s cpu formula, which grows with points x frames and the frame
size); the larger of the two is its working memory (issue 20: 500 frames of 1080p with 256 points
was estimated at 0.9 GB and peaked at 6.19 GB). The CLI calls ``check_host_memory``
before decoding (on the container's count) and again once the frames are in memory; the app can call it
the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.core.config import DEFAULT_FRAMES_PER_BATCH
from engine.core.errors import UserError
from engine.run.device_memory import cpu_bytes_for_tracker

#: measured host working memory per frame, bytes (issue 13: 0.75 / 2.0 / 3.8 / 7.5 GiB at 250 / 1k / 2k / 4k frames)
TRACKER_HOST_BYTES_PER_FRAME = {
    "corrtrack": 1_800_000,
    "corrtrack-nopolish": 1_800_000,
    "lk": 0,
}
#: bytes per frame of decoded video, per pixel (uint8 RGB)
FRAME_BYTES_PER_PIXEL = 3
#: bytes per point and frame the session keeps (float32 x, y and a bool visible), x3 for copies on the way out
TRACK_BYTES_PER_POINT_FRAME = 3 * (2 * 4 + 1)
#: share of the available memory a run may plan to use (the rest is headroom for Python, the app, the OS)
HOST_MEMORY_FRACTION = 0.85


@dataclass(frozen=True)
class MemoryEstimate:
    """Host bytes one run needs, by part."""

    num_frames: int
    frames_bytes: int  # the decoded frames
    working_bytes: int  # the tracker's working memory
    tracks_bytes: int  # the session's tracks and visibility

    @property
    def total_bytes(self) -> int:
        """All the parts together."""
        return self.frames_bytes + self.working_bytes + self.tracks_bytes

    @property
    def bytes_per_frame(self) -> float:
        """Total bytes per frame (for 'how many frames fit')."""
        return self.total_bytes / max(1, self.num_frames)


def tracker_bytes_per_frame(tracker: Any) -> int:
    """Host working memory per frame of a tracker given by name or object (0 when not known)."""
    own = getattr(tracker, "host_bytes_per_frame", None)
    if isinstance(own, (int, float)) and own >= 0:
        return int(own)
    name = tracker if isinstance(tracker, str) else getattr(tracker, "name", "")
    return TRACKER_HOST_BYTES_PER_FRAME.get(str(name), 0)


def estimate_host_bytes(num_frames: int, width: int, height: int, num_queries: int = 0,
                        tracker: Any = "corrtrack", *, on_cpu: bool = True, points_per_batch: int | None = None,
                        frames_per_batch: int = DEFAULT_FRAMES_PER_BATCH,
                        precision: str = "fp32") -> MemoryEstimate:
    """Host bytes a run of ``tracker`` over ``num_frames`` frames of width x height (as tracked) needs.

    on_cpu: the tracker runs on the CPU, so its tensors (CorrTrack's features, correlation pyramid, backbone
    activations: ``engine.run.device_memory``'s terms) live in host memory too; points_per_batch: the
    batch size (the query count when not given)."""
    num_frames = max(0, int(num_frames))
    working = num_frames * tracker_bytes_per_frame(tracker)
    if on_cpu:
        ppb = max(1, int(points_per_batch if points_per_batch is not None else max(1, num_queries)))
        tensors = cpu_bytes_for_tracker(tracker, num_frames, width, height, max(1, int(num_queries)), ppb,
                                        frames_per_batch, precision)
        if tensors is not None:
            working = max(working, tensors)
    return MemoryEstimate(
        num_frames=num_frames,
        frames_bytes=num_frames * int(width) * int(height) * FRAME_BYTES_PER_PIXEL,
        working_bytes=working,
        tracks_bytes=num_frames * max(0, int(num_queries)) * TRACK_BYTES_PER_POINT_FRAME,
    )



def available_host_bytes() -> int | None:
    """Memory the OS says is available now (psutil), or None when it cannot say."""
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except Exception:  # no psutil, or a platform it cannot read
        return None


def _gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB"


def check_host_memory(estimate: MemoryEstimate, what: str, frames_held: bool = False,
                      available: int | None = None) -> None:
    """UserError when the run cannot fit in the available host memory, with how many frames would.

    frames_held: the frames are decoded already (their bytes are out of ``available`` and not counted again).
    what: names the input in the message (the video's path).
    """
    if available is None:
        available = available_host_bytes()
    if available is None:
        return
    need = estimate.total_bytes - (estimate.frames_bytes if frames_held else 0)
    budget = int(available * HOST_MEMORY_FRACTION)
    if need <= budget:
        return
    per_frame = estimate.bytes_per_frame - (estimate.frames_bytes / max(1, estimate.num_frames) if frames_held else 0)
    fit = int(budget // per_frame) if per_frame > 0 else estimate.num_frames
    raise UserError(
        f"{what}: {estimate.num_frames} frames need about {_gib(need)} of host memory "
        f"(frames {_gib(0 if frames_held else estimate.frames_bytes)}, tracker {_gib(estimate.working_bytes)}), "
        f"only {_gib(available)} is available",
        f"track at most {max(fit, 0)} frames (--max-frames {max(fit, 1)}) or a shorter clip",
    )
