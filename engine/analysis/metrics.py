"""TAP-Vid metrics (AJ, delta_avg, occlusion accuracy) and the divergence between two track sets.

Definitions follow TAP-Vid (Doersch et al., 2022):

- Positions are scaled to a 256x256 raster from the video's (width, height) before distances are taken.
- Evaluated frames: query mode "first" keeps frames strictly after each point's query frame; "strided"
  keeps every frame except the query frame itself.
- A prediction is *within* threshold d when its distance to the ground truth is strictly less than d.
- delta_avg: share of gt-visible evaluated points predicted within d, averaged over d in 1, 2, 4, 8, 16.
- Jaccard at d: TP / (TP + FP + FN) with TP = predicted visible & gt visible & within d,
  FP = predicted visible & not (gt visible & within d), FN = gt visible & not (predicted visible & within d);
  AJ is its mean over the thresholds.
- OA: share of evaluated frames where predicted visibility equals gt visibility.

Counts are pooled over all points and evaluated frames of one video; ``mean_scores`` averages videos.
A NaN predicted position is never within any threshold.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

#: the raster TAP-Vid measures distances in (width, height)
EVAL_SIZE = (256, 256)
#: distance thresholds in pixels of the 256x256 raster
THRESHOLDS = (1, 2, 4, 8, 16)
#: TAP-Vid "strided" mode samples a query every this many frames
STRIDE = 5
QUERY_MODES = ("first", "strided")


@dataclass
class TapVidScores:
    """TAP-Vid scores of one video (or any set of points graded together)."""

    aj: float
    delta_avg: float
    oa: float
    jaccard_by_thr: dict[int, float] = field(default_factory=dict)
    pts_within_by_thr: dict[int, float] = field(default_factory=dict)
    num_points: int = 0
    num_eval: int = 0  # evaluated (point, frame) pairs

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dict (threshold keys as strings)."""
        return {
            "aj": finite_or_none(self.aj),
            "delta_avg": finite_or_none(self.delta_avg),
            "oa": finite_or_none(self.oa),
            "jaccard_by_thr": {str(k): finite_or_none(v) for k, v in self.jaccard_by_thr.items()},
            "pts_within_by_thr": {str(k): finite_or_none(v) for k, v in self.pts_within_by_thr.items()},
            "num_points": int(self.num_points),
            "num_eval": int(self.num_eval),
        }


def finite_or_none(x: float | None) -> float | None:
    """A float for JSON: NaN becomes None."""
    return None if x is None or not np.isfinite(x) else float(x)


def _ratio(num: int, den: int) -> float:
    return float(num) / float(den) if den > 0 else float("nan")


def eval_mask(query_t: np.ndarray, num_frames: int, query_mode: str = "first") -> np.ndarray:
    """Which (point, frame) pairs are graded. bool [N, T]."""
    if query_mode not in QUERY_MODES:
        raise ValueError(f"query_mode must be one of {', '.join(QUERY_MODES)}, not {query_mode!r}")
    qt = np.round(np.asarray(query_t, dtype=np.float64)).astype(np.int64)[:, None]  # [N, 1]
    frames = np.arange(num_frames)[None, :]  # [1, T]
    return frames > qt if query_mode == "first" else frames != qt


def _check_shapes(pred_tracks: np.ndarray, pred_visible: np.ndarray, gt_tracks: np.ndarray,
                  gt_visible: np.ndarray, query_t: np.ndarray) -> None:
    if gt_tracks.ndim != 3 or gt_tracks.shape[-1] != 2:
        raise ValueError(f"ground-truth tracks must be [N, T, 2], got {gt_tracks.shape}")
    n, t = gt_tracks.shape[:2]
    if n == 0 or t == 0:
        raise ValueError(f"cannot score an empty track set ({n} points x {t} frames)")
    if pred_tracks.shape != gt_tracks.shape:
        raise ValueError(f"predicted tracks {pred_tracks.shape} do not match ground truth {gt_tracks.shape}")
    if pred_visible.shape != (n, t) or gt_visible.shape != (n, t):
        raise ValueError(f"visibility must be [N, T] = {(n, t)}, got predicted {pred_visible.shape} "
                         f"and ground truth {gt_visible.shape}")
    if query_t.shape != (n,):
        raise ValueError(f"query_t must be [N] = ({n},), got {query_t.shape}")


def tapvid_metrics(
    pred_tracks: np.ndarray,
    pred_visible: np.ndarray,
    gt_tracks: np.ndarray,
    gt_visible: np.ndarray,
    query_t: np.ndarray,
    size: tuple[int, int],
    query_mode: str = "first",
) -> TapVidScores:
    """TAP-Vid scores of one video. Tracks [N, T, 2] in video pixels; size is the video's (width, height)."""
    pred_tracks = np.asarray(pred_tracks, dtype=np.float64)
    gt_tracks = np.asarray(gt_tracks, dtype=np.float64)
    pred_visible = np.asarray(pred_visible, dtype=bool)
    gt_visible = np.asarray(gt_visible, dtype=bool)
    query_t = np.asarray(query_t).reshape(-1)
    _check_shapes(pred_tracks, pred_visible, gt_tracks, gt_visible, query_t)
    width, height = size
    if width <= 0 or height <= 0:
        raise ValueError(f"video size must be positive, got {width}x{height}")
    evaluated = eval_mask(query_t, gt_tracks.shape[1], query_mode)  # [N, T]
    num_eval = int(evaluated.sum())
    if num_eval == 0:
        raise ValueError(f"no frames to evaluate in query mode {query_mode!r} "
                         "(every query lies on the last frame)")

    scale = np.array([EVAL_SIZE[0] / width, EVAL_SIZE[1] / height])  # [2]
    dist = np.linalg.norm((pred_tracks - gt_tracks) * scale, axis=-1)  # [N, T], NaN where pred is NaN
    dist = np.where(np.isfinite(dist), dist, np.inf)

    gt_vis = gt_visible & evaluated
    pred_vis = pred_visible & evaluated
    num_gt_visible = int(gt_vis.sum())
    jaccard: dict[int, float] = {}
    within_share: dict[int, float] = {}
    for thr in THRESHOLDS:
        correct = gt_vis & (dist < thr)  # gt visible, within threshold
        true_pos = int((correct & pred_vis).sum())
        false_pos = int((pred_vis & ~correct).sum())
        false_neg = int((gt_vis & ~(pred_vis & correct)).sum())
        jaccard[thr] = _ratio(true_pos, true_pos + false_pos + false_neg)
        within_share[thr] = _ratio(int(correct.sum()), num_gt_visible)
    oa = _ratio(int(((pred_visible == gt_visible) & evaluated).sum()), num_eval)
    return TapVidScores(
        aj=_nanmean_or_nan(list(jaccard.values())),
        delta_avg=_nanmean_or_nan(list(within_share.values())),
        oa=oa,
        jaccard_by_thr=jaccard,
        pts_within_by_thr=within_share,
        num_points=int(gt_tracks.shape[0]),
        num_eval=num_eval,
    )


def _nanmean_or_nan(values: list[float]) -> float:
    arr = np.asarray(values, dtype=np.float64)
    arr = arr[np.isfinite(arr)]
    return float(arr.mean()) if arr.size else float("nan")


def mean_scores(scores: list[TapVidScores]) -> dict[str, Any]:
    """Mean over videos of each score (videos where a score is undefined are left out of its mean)."""
    if not scores:
        raise ValueError("cannot average an empty list of scores")
    out: dict[str, Any] = {
        "aj": _nanmean_or_nan([s.aj for s in scores]),
        "delta_avg": _nanmean_or_nan([s.delta_avg for s in scores]),
        "oa": _nanmean_or_nan([s.oa for s in scores]),
        "jaccard_by_thr": {t: _nanmean_or_nan([s.jaccard_by_thr.get(t, np.nan) for s in scores])
                           for t in THRESHOLDS},
        "pts_within_by_thr": {t: _nanmean_or_nan([s.pts_within_by_thr.get(t, np.nan) for s in scores])
                              for t in THRESHOLDS},
        "num_videos": len(scores),
        "num_points": int(sum(s.num_points for s in scores)),
        "num_eval": int(sum(s.num_eval for s in scores)),
    }
    return out


def sample_queries(gt_tracks: np.ndarray, gt_visible: np.ndarray,
                   query_mode: str = "first") -> tuple[np.ndarray, np.ndarray]:
    """Queries from ground truth as TAP-Vid samples them.

    "first": one query per point, at its first visible frame. "strided": one query at every
    ``STRIDE``-th frame (0, 5, 10, ...) where the point is visible. Returns (queries float32 [M, 3]
    rows (t, x, y), point index int [M] into the ground truth); points never visible get no query.
    """
    if query_mode not in QUERY_MODES:
        raise ValueError(f"query_mode must be one of {', '.join(QUERY_MODES)}, not {query_mode!r}")
    gt_visible = np.asarray(gt_visible, dtype=bool)  # [N, T]
    if query_mode == "first":
        has_visible = gt_visible.any(axis=1)
        points = np.flatnonzero(has_visible)
        frames = np.argmax(gt_visible[points], axis=1)
    else:
        sampled = np.zeros_like(gt_visible)
        sampled[:, ::STRIDE] = True
        points, frames = np.nonzero(gt_visible & sampled)
    xy = np.asarray(gt_tracks, dtype=np.float32)[points, frames]  # [M, 2]
    queries = np.concatenate([frames[:, None].astype(np.float32), xy], axis=1)  # [M, 3] float32
    return queries, points.astype(np.int64)


@dataclass
class Divergence:
    """How far two track sets of the same queries are apart (A/B comparison)."""

    mean_px: float  # mean distance over (point, frame) pairs where both are visible
    per_point_px: np.ndarray  # [N], mean over frames where both visible; NaN if none
    max_px: float
    visibility_agreement: float  # share of (point, frame) pairs where the visibility flags agree
    per_point_visibility_agreement: np.ndarray  # [N]

    def most_divergent(self, k: int) -> np.ndarray:
        """Indices of the k points with the largest mean distance (points with no distance come last)."""
        key = np.where(np.isfinite(self.per_point_px), self.per_point_px, -np.inf)
        order = np.argsort(-key, kind="stable")
        return order[: max(0, int(k))]

    def to_dict(self) -> dict[str, Any]:
        return {
            "mean_px": finite_or_none(self.mean_px),
            "max_px": finite_or_none(self.max_px),
            "visibility_agreement": finite_or_none(self.visibility_agreement),
        }


def divergence(tracks_a: np.ndarray, visible_a: np.ndarray,
               tracks_b: np.ndarray, visible_b: np.ndarray) -> Divergence:
    """Distances (video pixels) and visibility agreement between track sets A and B, [N, T, 2] / [N, T]."""
    tracks_a = np.asarray(tracks_a, dtype=np.float64)
    tracks_b = np.asarray(tracks_b, dtype=np.float64)
    visible_a = np.asarray(visible_a, dtype=bool)
    visible_b = np.asarray(visible_b, dtype=bool)
    if tracks_a.ndim != 3 or tracks_a.shape[-1] != 2 or tracks_a.shape != tracks_b.shape:
        raise ValueError(f"track sets must both be [N, T, 2] of the same shape, got {tracks_a.shape} "
                         f"and {tracks_b.shape}")
    n, t = tracks_a.shape[:2]
    if n == 0 or t == 0:
        raise ValueError(f"cannot compare empty track sets ({n} points x {t} frames)")
    if visible_a.shape != (n, t) or visible_b.shape != (n, t):
        raise ValueError(f"visibility must be [N, T] = {(n, t)}, got {visible_a.shape} and {visible_b.shape}")
    dist = np.linalg.norm(tracks_a - tracks_b, axis=-1)  # [N, T]
    both = visible_a & visible_b & np.isfinite(dist)
    counts = both.sum(axis=1)  # [N]
    sums = np.where(both, dist, 0.0).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        per_point = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
    agree = visible_a == visible_b  # [N, T]
    total = int(both.sum())
    return Divergence(
        mean_px=float(dist[both].mean()) if total else float("nan"),
        per_point_px=per_point,
        max_px=float(dist[both].max()) if total else float("nan"),
        visibility_agreement=float(agree.mean()),
        per_point_visibility_agreement=agree.mean(axis=1),
    )
