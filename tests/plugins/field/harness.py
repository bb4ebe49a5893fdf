"""Run a field plugin through a real trackscope session on the CPU and capture one warm run of it.

For tests (this package's and the diagnosis rules'): a tiny moving-square video, a grid of queries with
their query frames spread over the video, the plugin loaded the way ``--tracker`` loads it, its
``release()`` called afterwards.
"""

from __future__ import annotations

from types import ModuleType

import numpy as np

from engine.capture.profile import CaptureResult, capture_session
from engine.core.config import RunConfig
from engine.run.session import Failed, Finished, Session
from engine.trackers import load_tracker
from tests.helpers import moving_square_video
from tests.plugins.field import PLANTED, load, tracker_name

NUM_FRAMES = 8
SIZE_PX = 64
GRID = 4  # a 4 x 4 grid of queries: 16


def grid_queries(grid: int = GRID, size_px: int = SIZE_PX, num_frames: int = NUM_FRAMES) -> np.ndarray:
    """grid x grid queries [N, 3] (t, x, y) spread over the frame, their query frames over the video."""
    ticks = (np.arange(grid) + 0.5) * size_px / grid
    xs, ys = np.meshgrid(ticks, ticks)
    ts = np.arange(grid * grid) % num_frames
    return np.stack([ts, xs.ravel(), ys.ravel()], axis=1).astype(np.float32)


def run_and_capture(name: str, precision: str | None = None, num_frames: int = NUM_FRAMES, size_px: int = SIZE_PX,
                    grid: int = GRID) -> tuple[ModuleType, Finished | Failed, CaptureResult]:
    """One session run of field plugin ``name`` on the CPU and a capture of one more; -> (its module, the
    run's last event, the capture). ``precision`` defaults to PLANTED's."""
    module = load(name)
    video = moving_square_video(num_frames=num_frames, size=size_px)
    queries = grid_queries(grid, size_px, num_frames)
    tracker = load_tracker(tracker_name(name))  # the plugin path a user's --tracker takes
    config = RunConfig(tracker=tracker_name(name), device="cpu", precision=precision or PLANTED[name].precision,
                       points_per_batch=len(queries))
    try:
        last = Session(video, queries, config, tracker=tracker).run()
        capture = capture_session(lambda: Session(video, queries, config, tracker=tracker), device="cpu")
    finally:
        release = getattr(module, "release", None)
        if release is not None:
            release()
    return module, last, capture
