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


def retimed(report: dict, stage_ms: dict, cold_extra_ms: dict | None = None, default_ms: float = 0.01) -> dict:
    """A copy of a recorded report with chosen stage times in place of this machine's measurements.

    Rules are tested on numbers the test picks, never on how fast this CPU ran: the batches, the counted
    work (FLOPs, bytes, ops) and the layout stay the real run's; each batch's stage times become
    ``stage_ms[stage]`` (a number, or a function of the batch's points), stages left out ``default_ms``;
    the cold run's first batch gets ``cold_extra_ms`` on top. Runs are laid end to end from the first
    run's start; totals are recomputed from the new times (the roofline is derived from them on load).
    """
    import copy
    import statistics

    out = copy.deepcopy(report)
    t = out["runs"][0].get("start_s", 0.0) if out["runs"] else 0.0
    for run in out["runs"]:
        for i, batch in enumerate(run["batches"]):
            points = int(batch["stop"]) - int(batch["start"])
            times = {}
            for name in batch["stage_ms"]:
                chosen = stage_ms.get(name, default_ms)
                times[name] = float(chosen(points) if callable(chosen) else chosen)
            if run.get("cold") and i == 0:
                for name, extra in (cold_extra_ms or {}).items():
                    times[name] = times.get(name, 0.0) + extra
            batch["stage_ms"] = times
            batch["wall_ms"] = sum(times.values())
        run["stage_ms"] = {n: sum(b["stage_ms"].get(n, 0.0) for b in run["batches"]) for n in run["stage_ms"]}
        run["wall_ms"] = sum(b["wall_ms"] for b in run["batches"])
        run["start_s"] = t
        t += run["wall_ms"] / 1e3 + 0.001
    finished = [r for r in out["runs"] if r.get("status", "finished") == "finished"]
    warm = [r for r in finished if not r.get("cold")]
    cold = [r for r in finished if r.get("cold")]
    basis = warm or cold
    totals = out["totals"]
    totals["stage_ms"] = {n: statistics.median(r["stage_ms"].get(n, 0.0) for r in basis)
                          for n in sorted({n for r in basis for n in r["stage_ms"]})}
    totals["warm_ms_median"] = statistics.median(r["wall_ms"] for r in warm) if warm else None
    totals["warm_ms_min"] = min((r["wall_ms"] for r in warm), default=None)
    totals["cold_ms"] = cold[0]["wall_ms"] if cold else None
    return out
