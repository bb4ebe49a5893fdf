"""The inputs a rebuilt tracker is fed for a recorded report: its video's shape, frames and queries.

Shared by the cost model counted on demand (engine.workflows.count) and the warm runs timed for a cold-only
report (engine.workflows.warm_runs): the report's own video when its file is still there and decodes to the
recorded size, else seeded noise of the same shape; the report's own queries when it kept its tracks, else
the same number spread over the first frame.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from engine.core.errors import UserError
from engine.io.geometry import VideoGeometry
from engine.report.schema import Report

#: seed of the constructed frames and queries (the same inputs every time)
CONSTRUCTED_SEED = 0
INPUTS_VIDEO = "the run's video"
INPUTS_CONSTRUCTED = "a constructed video of the run's shape"


def report_shape(report: Report) -> tuple[int, VideoGeometry]:
    """The report's frame count and geometry, or a UserError saying what it lacks."""
    geometry = report.video.geometry
    num_frames = report.video.num_frames or report.totals.num_frames
    if geometry is None or num_frames < 1:
        raise UserError(f"report {report.short_label()!r} does not record its video's size, so its cost "
                        "cannot be counted", "record it again with trackscope track --report or bench")
    return num_frames, geometry


def report_video_frames(report: Report, num_frames: int, geometry: VideoGeometry) -> np.ndarray | None:
    """The report's video decoded, when the file is there and gives the recorded frame size; else None."""
    from engine.core.errors import VideoError
    from engine.io.video import open_video

    path = report.video.path
    if not path or not Path(path).exists():
        return None
    try:
        with open_video(path) as reader:
            if reader.output_size != (geometry.frame_width, geometry.frame_height):
                return None
            frames = reader.read(0, num_frames)
    except (VideoError, OSError, ValueError):
        return None
    return frames if len(frames) == num_frames else None


def constructed_frames(num_frames: int, height: int, width: int, seed: int = CONSTRUCTED_SEED) -> np.ndarray:
    """Seeded noise frames, uint8 [T, H, W, 3]: inputs of a given shape when the real video is not at hand."""
    return np.random.default_rng(seed).integers(0, 256, size=(num_frames, height, width, 3), dtype=np.uint8)


def report_queries(report: Report, geometry: VideoGeometry) -> np.ndarray:
    """The report's own queries [N, 3] (source px) when it kept them, else N spread over frame 0."""
    tracks = report.tracks
    if tracks is not None and len(tracks.queries):
        return np.asarray(tracks.queries, dtype=np.float32)
    n = report.totals.num_points
    if n < 1:
        raise UserError(f"report {report.short_label()!r} does not record how many points it tracked, so its "
                        "cost cannot be counted")
    rng = np.random.default_rng(CONSTRUCTED_SEED)
    xy = rng.uniform(0.0, 1.0, size=(n, 2)) * [geometry.source_width - 1, geometry.source_height - 1]
    return np.column_stack([np.zeros(n), xy]).astype(np.float32)


