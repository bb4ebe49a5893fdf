"""OpenCV pyramidal Lucas-Kanade: the classical baseline the built-in tracker is measured against.

Each query is tracked from its own frame forward to the last frame and backward to frame 0, chained
frame to frame. Every step is checked forward-backward: a point tracked to the next frame and back must
land within ``fb_threshold`` (pixels at 256 px frame size) of where it started, with OpenCV's status
set both ways, inside the frame, and with a window that still looks like the last one (mean grey-level
difference at most ``max_patch_error``). A point that fails is lost from that frame on: it is marked
not visible and holds its last position, so every frame still has coordinates.
Runs on the CPU whatever device the run asks for.

Defaults were chosen on synthetic videos (engine.synthetic). On ``trackscope sample --count 8 --seed 7``
(256 px, 24 frames, 64 points) AJ stayed within 0.409-0.432 over window 15-31, 2-4 levels and thresholds
2-8 (these defaults 0.428; window 31 with threshold 8 was the lowest). Pyramids are not built ahead:
OpenCV 5's Python binding does not accept prebuilt pyramids in calcOpticalFlowPyrLK, so each call
builds its own (one call per frame step for all points of a batch).
"""

from __future__ import annotations

from typing import Any

import cv2
import numpy as np

from engine.trackers.base import PreparedVideo, RunContext, Tracker, TrackResult

#: LK search window (pixels, square) at each pyramid level
DEFAULT_WINDOW = 21
#: pyramid levels above the full-resolution image
DEFAULT_LEVELS = 3
#: round-trip error above which a step is rejected, in pixels of a frame scaled so its long side is
#: REFERENCE_SIZE (the TAP-Vid raster), so the check is as strict on a 1080p video as on a 256x256 one
DEFAULT_FB_THRESHOLD = 4.0
REFERENCE_SIZE = 256
#: Gauss-Newton iterations and the update size (pixels) that stops them
DEFAULT_MAX_ITERS = 10
DEFAULT_EPS = 0.01
#: largest mean absolute grey-level difference (0-255) between a point's window in consecutive frames;
#: catches an occluder the forward-backward check misses (both directions settle on the same spot)
DEFAULT_MAX_PATCH_ERROR = 30.0
#: OpenCV's minimum eigenvalue of the window's gradient matrix (status 0 below it)
DEFAULT_MIN_EIG = 1e-4

STAGES = ("grayscale", "track_forward", "track_backward", "fb_check")


class LKTracker(Tracker):
    """Pyramidal Lucas-Kanade with a forward-backward check per frame step (CPU only)."""

    name = "lk"
    stages = STAGES
    device_types = ("cpu",)

    def __init__(
        self,
        window: int = DEFAULT_WINDOW,
        levels: int = DEFAULT_LEVELS,
        fb_threshold: float = DEFAULT_FB_THRESHOLD,
        max_iters: int = DEFAULT_MAX_ITERS,
        eps: float = DEFAULT_EPS,
        min_eig: float = DEFAULT_MIN_EIG,
        max_patch_error: float = DEFAULT_MAX_PATCH_ERROR,
    ):
        self.window = int(window)
        self.levels = int(levels)
        self.fb_threshold = float(fb_threshold)
        self.max_iters = int(max_iters)
        self.eps = float(eps)
        self.min_eig = float(min_eig)
        self.max_patch_error = float(max_patch_error)

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            "device": "cpu (OpenCV)",
            "window": self.window,
            "levels": self.levels,
            "fb_threshold": self.fb_threshold,
            "max_iters": self.max_iters,
            "eps": self.eps,
            "min_eig": self.min_eig,
            "max_patch_error": self.max_patch_error,
            "opencv": cv2.__version__,
            "tunable": [],  # OpenCV on the CPU: precision and batch sizes change nothing it computes
        }

    def prepare(self, frames: np.ndarray, ctx: RunContext) -> PreparedVideo:
        """Grayscale once per video: uint8 [T, H, W]."""
        frames = np.asarray(frames)
        if frames.ndim != 4 or frames.shape[-1] != 3:
            raise ValueError(f"frames must be uint8 [T, H, W, 3], got {frames.shape}")
        num_frames, height, width = frames.shape[:3]
        with ctx.timer.stage("grayscale", host=True):
            gray = [cv2.cvtColor(np.ascontiguousarray(f, dtype=np.uint8), cv2.COLOR_RGB2GRAY) for f in frames]
        return PreparedVideo(num_frames, height, width, data={"gray": gray})

    def track(self, prepared: PreparedVideo, queries: np.ndarray, ctx: RunContext) -> TrackResult:
        """Track queries [N, 3] (t, x, y) forward and backward from their frames."""
        queries = np.asarray(queries, dtype=np.float32).reshape(-1, 3)
        n, num_frames = len(queries), prepared.num_frames
        tracks = np.zeros((n, num_frames, 2), dtype=np.float32)  # [N, T, 2]
        visible = np.zeros((n, num_frames), dtype=bool)  # [N, T]
        if n == 0:
            return TrackResult(tracks, visible)
        query_t = np.clip(np.round(queries[:, 0]).astype(np.int64), 0, num_frames - 1)  # [N]
        tracks[np.arange(n), query_t] = queries[:, 1:]
        visible[np.arange(n), query_t] = True
        gray = prepared.data["gray"]
        size = (prepared.width, prepared.height)
        self._sweep(gray, queries, query_t, tracks, visible, size, forward=True, ctx=ctx)
        self._sweep(gray, queries, query_t, tracks, visible, size, forward=False, ctx=ctx)
        return TrackResult(tracks, visible)

    # -- internals ---------------------------------------------------------------------------------
    def _lk(self, prev: np.ndarray, nxt: np.ndarray, pts: np.ndarray,
            guess: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One LK call: points [M, 2] in ``prev`` -> positions [M, 2] in ``nxt``, status bool [M] and
        the mean absolute grey-level difference of the matched windows [M]."""
        criteria = (cv2.TERM_CRITERIA_COUNT | cv2.TERM_CRITERIA_EPS, self.max_iters, self.eps)
        flags = 0
        init = None
        if guess is not None:
            flags = cv2.OPTFLOW_USE_INITIAL_FLOW
            init = np.array(guess, dtype=np.float32).reshape(-1, 1, 2)  # a copy: OpenCV writes its result into it
        out, status, err = cv2.calcOpticalFlowPyrLK(
            prev, nxt, np.ascontiguousarray(pts, dtype=np.float32).reshape(-1, 1, 2), init,  # type: ignore[arg-type]
            winSize=(self.window, self.window), maxLevel=self.levels, criteria=criteria,
            flags=flags, minEigThreshold=self.min_eig,
        )
        return out.reshape(-1, 2), status.reshape(-1).astype(bool), err.reshape(-1)

    def _sweep(self, gray: list[np.ndarray], queries: np.ndarray, query_t: np.ndarray, tracks: np.ndarray,
               visible: np.ndarray, size: tuple[int, int], forward: bool, ctx: RunContext) -> None:
        """Propagate every query away from its frame in one time direction, filling tracks/visible."""
        num_frames = len(gray)
        width, height = size
        n = len(queries)
        pos = queries[:, 1:].astype(np.float32).copy()  # [N, 2] last known position
        lost = np.zeros(n, dtype=bool)  # [N]
        fb_limit_px = self.fb_threshold * max(width, height) / REFERENCE_SIZE
        stage = "track_forward" if forward else "track_backward"
        if forward:
            steps = range(int(query_t.min()), num_frames - 1)
            step = 1
        else:
            steps = range(int(query_t.max()), 0, -1)
            step = -1
        for t in steps:
            nt = t + step
            started = query_t <= t if forward else query_t >= t  # the point exists at frame t
            active = np.flatnonzero(started & ~lost)
            if active.size:
                start = pos[active]  # [M, 2]
                with ctx.timer.stage(stage, host=True):
                    new, ok_fwd, patch_err = self._lk(gray[t], gray[nt], start)
                with ctx.timer.stage("fb_check", host=True):
                    back, ok_back, _ = self._lk(gray[nt], gray[t], new, guess=start)
                    round_trip = np.linalg.norm(back - start, axis=1)
                    inside = ((new[:, 0] >= -0.5) & (new[:, 0] <= width - 0.5)
                              & (new[:, 1] >= -0.5) & (new[:, 1] <= height - 0.5))
                    ok = ok_fwd & ok_back & inside & np.isfinite(new).all(axis=1)
                    ok &= (round_trip <= fb_limit_px) & (patch_err <= self.max_patch_error)
                pos[active[ok]] = new[ok]
                lost[active[~ok]] = True
                visible[active[ok], nt] = True
            holding = np.flatnonzero(started)
            tracks[holding, nt] = pos[holding]  # lost points hold their last position
