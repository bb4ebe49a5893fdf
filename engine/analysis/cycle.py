"""Forward-backward cycle error: how far a tracker lands from where it started after tracking a clip forward and
then back, on videos with no ground truth (real footage).

A point is queried on frame 0 and tracked to the clip's last frame; where the tracker still sees it there, that
position is queried on the reversed clip and tracked back to frame 0. The cycle error is the distance between the
returned position and the original query, in pixels. A point counts as **kept** when the tracker calls it visible
at the last frame forward and at frame 0 backward; dropped points have no error (NaN). A perfect tracker of any
motion reads 0 on every kept point; a tracker that drifts by d px per frame reads up to 2 d (T - 1). The error is
a lower bound on nothing: a tracker that stands still reads 0 on any clip, so it is read beside points kept and
against a baseline on the same points (``shared_medians``).

Pure numpy; the runs themselves are in ``engine.workflows.cycle``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class CycleScores:
    """Per-point cycle errors (NaN: dropped) and their summary."""

    errors_px: np.ndarray  # [N] float, NaN where the point was not kept
    num_points: int

    @property
    def kept(self) -> int:
        return int(np.isfinite(self.errors_px).sum())

    def _of_kept(self, fn) -> float:
        kept = self.errors_px[np.isfinite(self.errors_px)]
        return float(fn(kept)) if kept.size else float("nan")

    @property
    def median_px(self) -> float:
        return self._of_kept(np.median)

    @property
    def mean_px(self) -> float:
        return self._of_kept(np.mean)

    @property
    def p90_px(self) -> float:
        return self._of_kept(lambda e: np.percentile(e, 90))

    def within(self, px: float) -> float:
        """Share of kept points back within ``px`` of their query (NaN where none was kept)."""
        return self._of_kept(lambda e: np.mean(e <= px))

    def to_dict(self) -> dict[str, float | int | None]:
        def num(x: float) -> float | None:
            return round(x, 4) if np.isfinite(x) else None

        return {"points": self.num_points, "kept": self.kept, "median_px": num(self.median_px),
                "mean_px": num(self.mean_px), "p90_px": num(self.p90_px), "within_1px": num(self.within(1.0)),
                "within_4px": num(self.within(4.0))}


def backward_queries(forward_tracks: np.ndarray, forward_visible: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(queries [K, 3] on frame 0 of the reversed clip, indices [K] of the points they continue): the points the
    tracker sees at the last frame, at the positions it put them there."""
    tracks = np.asarray(forward_tracks, dtype=np.float64)
    visible = np.asarray(forward_visible, dtype=bool)
    if tracks.ndim != 3 or tracks.shape[-1] != 2 or visible.shape != tracks.shape[:2]:
        raise ValueError(f"tracks [N, T, 2] and visible [N, T] expected, got {tracks.shape} and {visible.shape}")
    last = visible[:, -1] & np.isfinite(tracks[:, -1]).all(axis=1)
    index = np.flatnonzero(last)
    queries = np.concatenate([np.zeros((index.size, 1)), tracks[index, -1]], axis=1).astype(np.float32)
    return queries, index


def cycle_scores(queries: np.ndarray, index: np.ndarray, back_tracks: np.ndarray,
                 back_visible: np.ndarray) -> CycleScores:
    """Scores of ``queries`` [N, 3] (t, x, y; all on frame 0) from the backward run of the points ``index``
    continued (``backward_queries``): back_tracks [K, T, 2] / back_visible [K, T] on the reversed clip, whose last
    frame is the original frame 0."""
    queries = np.asarray(queries, dtype=np.float64)
    back_tracks = np.asarray(back_tracks, dtype=np.float64)
    back_visible = np.asarray(back_visible, dtype=bool)
    if np.any(np.round(queries[:, 0]) != 0):
        raise ValueError("cycle error needs every query on frame 0")
    if back_tracks.shape[0] != len(index) or back_visible.shape != back_tracks.shape[:2]:
        raise ValueError(f"{len(index)} backward points expected, got tracks {back_tracks.shape}")
    errors = np.full(len(queries), np.nan)
    if len(index):
        returned = back_tracks[:, -1]
        seen = back_visible[:, -1] & np.isfinite(returned).all(axis=1)
        dist = np.linalg.norm(returned - queries[index, 1:3], axis=1)
        errors[index[seen]] = dist[seen]
    return CycleScores(errors, len(queries))


def shared_medians(a: CycleScores, b: CycleScores) -> tuple[int, float, float]:
    """(points both kept, a's median on them, b's median on them): the comparison the error means something in."""
    if a.num_points != b.num_points:
        raise ValueError(f"the two runs have {a.num_points} and {b.num_points} points")
    both = np.isfinite(a.errors_px) & np.isfinite(b.errors_px)
    if not both.any():
        return 0, float("nan"), float("nan")
    return int(both.sum()), float(np.median(a.errors_px[both])), float(np.median(b.errors_px[both]))
