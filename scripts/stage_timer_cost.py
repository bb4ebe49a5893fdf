"""What the StageTimer costs the host per stage on this device: disabled, enabled, and enabled with its CUDA
events reused (a pool) instead of created per stage, each around a tiny kernel.

Usage: python3 scripts/stage_timer_cost.py [--device cuda] [--stages 8] [--runs 2000]
Prints microseconds per stage (host time, median of 5 sets), so the instrumentation overhead of a run
(``bench --overhead``: about 0.2-0.3 ms per CorrTrack run on the H200) can be set against its stage count.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.core.stages import StageTimer  # noqa: E402

SETS = 5


class _PooledEvents:
    """The same begin/end/collect as StageTimer on CUDA, its events reused after each collect."""

    def __init__(self) -> None:
        self.free: list[torch.cuda.Event] = []
        self.pending: list[tuple[str, torch.cuda.Event, torch.cuda.Event]] = []
        self.open: list[tuple[str, torch.cuda.Event]] = []

    def _event(self) -> torch.cuda.Event:
        return self.free.pop() if self.free else torch.cuda.Event(enable_timing=True)

    def begin(self, name: str) -> None:
        torch.cuda.nvtx.range_push(name)
        start = self._event()
        start.record()
        self.open.append((name, start))

    def end(self, name: str) -> None:
        _, start = self.open.pop()
        end = self._event()
        end.record()
        torch.cuda.nvtx.range_pop()
        self.pending.append((name, start, end))

    def collect(self) -> dict[str, float]:
        out: dict[str, float] = {}
        if self.pending:
            self.pending[-1][2].synchronize()
        for name, start, end in self.pending:
            out[name] = out.get(name, 0.0) + start.elapsed_time(end)
            self.free += (start, end)
        self.pending.clear()
        return out


def per_stage_us(make_timer, x: torch.Tensor, stages: int, runs: int) -> float:
    """Host µs per stage (a tiny kernel inside each) of ``runs`` batches of ``stages`` stages, minus the
    kernels alone."""
    names = [f"stage{i}" for i in range(stages)]

    def batch(timer) -> None:
        for name in names:
            if timer is None:
                x.add_(1.0)
                continue
            timer.begin(name)
            x.add_(1.0)
            timer.end(name)
        if timer is not None:
            timer.collect()
        elif x.is_cuda:
            torch.cuda.current_stream().synchronize()  # the timer's collect waits too

    sets = []
    for _ in range(SETS):
        timer = make_timer()
        batch(timer)  # warm
        t0 = time.perf_counter()
        for _ in range(runs):
            batch(timer)
        sets.append((time.perf_counter() - t0) / (runs * stages) * 1e6)
    return statistics.median(sets)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--stages", type=int, default=8)
    p.add_argument("--runs", type=int, default=2000)
    args = p.parse_args()
    device = torch.device(args.device)
    x = torch.zeros(16, device=device)
    bare = per_stage_us(lambda: None, x, args.stages, args.runs)
    rows = [("kernel alone", bare),
            ("StageTimer disabled", per_stage_us(lambda: StageTimer(device, enabled=False), x, args.stages, args.runs)),
            ("StageTimer enabled", per_stage_us(lambda: StageTimer(device, enabled=True), x, args.stages, args.runs))]
    if device.type == "cuda":
        rows.append(("enabled, events pooled", per_stage_us(_PooledEvents, x, args.stages, args.runs)))
    print(f"stage_timer_cost: {device}, {args.stages} stages x {args.runs} batches, median of {SETS} sets")
    for name, us in rows:
        print(f"  {name:24s} {us:8.2f} us/stage  (+{us - bare:6.2f} over the kernel alone)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
