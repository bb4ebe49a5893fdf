"""Small trackers and videos for engine tests (CPU, tiny)."""

from __future__ import annotations

import numpy as np
import torch

from engine.trackers.base import PreparedVideo, RunContext, Tracker, TrackResult


def moving_square_video(num_frames: int = 8, size: int = 32, step: int = 1) -> np.ndarray:
    """A textured square moving right by ``step`` px per frame on a noise background. [T, H, W, 3]."""
    rng = np.random.default_rng(0)
    background = rng.integers(0, 255, (size, size, 3), dtype=np.uint8)
    frames = np.repeat(background[None], num_frames, axis=0).copy()
    for t in range(num_frames):
        x0 = 4 + step * t
        frames[t, 8:16, x0:x0 + 8] = 255
    return frames


class ConstantVelocityTracker(Tracker):
    """Moves every query by (1, 0) px per frame; records the configs it saw (for tests)."""

    name = "constvel"
    stages = ("upload", "compute", "download")

    def __init__(self, fail_on_batch: int | None = None, exc: Exception | None = None):
        self.seen_precisions: list[str] = []
        self.prepare_calls = 0
        self.batches = 0
        self.fail_on_batch = fail_on_batch
        self.exc = exc or RuntimeError("boom")

    def prepare(self, frames: np.ndarray, ctx: RunContext) -> PreparedVideo:
        self.prepare_calls += 1
        with ctx.timer.stage("upload"):
            video = torch.from_numpy(frames).to(ctx.device)
        return PreparedVideo(frames.shape[0], frames.shape[1], frames.shape[2], {"video": video})

    def track(self, prepared: PreparedVideo, queries: np.ndarray, ctx: RunContext) -> TrackResult:
        if self.fail_on_batch is not None and self.batches == self.fail_on_batch:
            raise self.exc
        self.batches += 1
        self.seen_precisions.append(ctx.precision)
        with ctx.timer.stage("compute"):
            q = torch.as_tensor(queries, device=ctx.device)
            t = torch.arange(prepared.num_frames, device=ctx.device, dtype=torch.float32)
            dt = t[None, :] - q[:, :1]  # [N, T]
            x = q[:, 1:2] + dt
            y = q[:, 2:3].expand_as(x)
            tracks = torch.stack([x, y], dim=-1)
        with ctx.timer.stage("download"):
            out = tracks.cpu().numpy()
        visible = np.ones(out.shape[:2], dtype=bool)
        return TrackResult(out, visible)
