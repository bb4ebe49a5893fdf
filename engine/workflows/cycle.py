"""Cycle error of a tracker on videos without ground truth: a grid tracked forward over a clip and back
(``engine.analysis.cycle`` defines the metric), each run through a ``Session`` like any other."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from engine.analysis.cycle import CycleScores, backward_queries, cycle_scores, shared_medians
from engine.core.config import RunConfig
from engine.core.errors import OutOfMemory, TrackerError, UserError
from engine.io.trackio import grid_queries
from engine.run.session import Failed, Session
from engine.trackers.base import Tracker

DEFAULT_GRID = 12  # 12 x 12 points on frame 0
DEFAULT_FRAMES = 48  # the clip: the first 48 frames
MIN_FRAMES = 2


@dataclass
class CycleResult:
    """One tracker's cycle error on one video."""

    video: str
    tracker: str
    frames: int
    scores: CycleScores
    wall_ms: float  # forward and backward runs

    def to_dict(self) -> dict[str, Any]:
        return {"video": self.video, "tracker": self.tracker, "frames": self.frames, "wall_ms": round(self.wall_ms, 2),
                **self.scores.to_dict()}


def _run(frames: np.ndarray, queries: np.ndarray, config: RunConfig, tracker: Tracker, what: str):
    last = Session(frames, queries, config, tracker=tracker).run()
    if isinstance(last, Failed):
        cls = {"oom": OutOfMemory, "tracker": TrackerError}.get(last.kind, UserError)
        raise cls(f"{what}: tracker {config.tracker!r} failed: {last.message}", last.suggestion)
    return last


def cycle_error(frames: np.ndarray, config: RunConfig, tracker: Tracker, grid: int = DEFAULT_GRID,
                video: str = "video") -> CycleResult:
    """Track a ``grid`` x ``grid`` grid from frame 0 to the last of ``frames`` and back; -> its cycle error."""
    if len(frames) < MIN_FRAMES:
        raise UserError(f"{video}: {len(frames)} frame(s); a cycle needs at least {MIN_FRAMES}")
    height, width = frames.shape[1:3]
    queries = grid_queries(grid, width, height)
    forward = _run(frames, queries, config, tracker, f"{video} (forward)")
    back_q, index = backward_queries(forward.tracks, forward.visible)
    wall = float(forward.wall_ms)
    if len(index):
        backward = _run(np.ascontiguousarray(frames[::-1]), back_q, config, tracker, f"{video} (backward)")
        back_tracks, back_visible, wall = backward.tracks, backward.visible, wall + float(backward.wall_ms)
    else:
        back_tracks, back_visible = np.zeros((0, len(frames), 2)), np.zeros((0, len(frames)), dtype=bool)
    return CycleResult(video, config.tracker, len(frames), cycle_scores(queries, index, back_tracks, back_visible),
                       wall)


def cycle_videos(paths: list[Path], tracker_names: list[str], config: RunConfig, grid: int = DEFAULT_GRID,
                 max_frames: int = DEFAULT_FRAMES, progress: Callable[[str], None] | None = None,
                 ) -> dict[str, dict[str, CycleResult]]:
    """{video name: {tracker name: result}} over the first ``max_frames`` frames of each video."""
    from engine.io.video import open_video
    from engine.trackers import load_tracker

    trackers = {name: load_tracker(name) for name in tracker_names}  # weights load once
    out: dict[str, dict[str, CycleResult]] = {}
    for path in paths:
        with open_video(path) as reader:
            frames = reader.read(0, min(max_frames, reader.info.num_frames) or None)
        for name, tracker in trackers.items():
            out.setdefault(path.name, {})[name] = cycle_error(frames, config.with_changes(tracker=name), tracker,
                                                              grid, path.name)
            if progress is not None:
                progress(f"{path.name}: {name} done")
    return out


def _px(x: float) -> str:
    return "-" if not np.isfinite(x) else f"{x:.2f}"


def format_table(results: dict[str, dict[str, CycleResult]], baseline: str | None = None) -> str:
    """A row per video and tracker: points kept, median / p90 cycle error; with a baseline, both medians on the
    points both kept."""
    rows = ["| video | tracker | frames | kept | median px | p90 px | within 1 px | shared points | median px "
            "(shared) | baseline median px (shared) |", "|---|---|---|---|---|---|---|---|---|---|"]
    for video, by_tracker in results.items():
        base = by_tracker.get(baseline) if baseline else None
        for name, res in by_tracker.items():
            s = res.scores
            within = s.within(1.0)
            shared = ["-", "-", "-"]
            if base is not None and name != baseline:
                n, mine, theirs = shared_medians(s, base.scores)
                shared = [str(n), _px(mine), _px(theirs)]
            rows.append(f"| {video} | {name} | {res.frames} | {s.kept}/{s.num_points} | {_px(s.median_px)} | "
                        f"{_px(s.p90_px)} | {'-' if not np.isfinite(within) else f'{100 * within:.0f} %'} | "
                        + " | ".join(shared) + " |")
    return "\n".join(rows)
