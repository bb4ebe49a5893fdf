"""Time CorrTrack's NCC polish alone on a device, and show where its time goes (kernel table).

    python3 scripts/polish_bench.py [--device cuda] [--queries 256 1024] [--frames 47] [--profile]

Eager, float32, synchronised, median of --repeats after a warm-up. On the H200 (2026-11-30) the polish
took 5.2 / 16.2 ms at 256 / 1024 queries x 47 frames, the same with an FFT or a grouped-conv correlation
(docs/records/h200_polish_bench.log): --profile names the kernels that do cost.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.trackers.corrtrack.polish import ncc_polish  # noqa: E402


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--device", default="cuda")
    p.add_argument("--queries", type=int, nargs="+", default=[256, 1024])
    p.add_argument("--frames", type=int, default=47)
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--profile", action="store_true", help="print the kernel table of one call per size")
    args = p.parse_args()
    dev = torch.device(args.device)
    gen = torch.Generator(device="cpu").manual_seed(0)
    grey = torch.nn.functional.avg_pool2d(torch.randn(1, args.frames, 256, 256, generator=gen), 5, 1, 2)[0].to(dev)
    for n in args.queries:
        q = torch.cat([torch.randint(0, args.frames, (1, n, 1), generator=gen).float(),
                       torch.rand(1, n, 2, generator=gen) * 240 + 8], -1).to(dev)
        pos = (q[..., None, 1:] + torch.randn(1, n, args.frames, 2, generator=gen).to(dev)).contiguous()
        vis = torch.ones(1, n, args.frames, dtype=torch.bool, device=dev)
        ncc_polish(grey, q, pos, vis)
        times = []
        for _ in range(args.repeats):
            _sync(dev)
            t0 = time.perf_counter()
            ncc_polish(grey, q, pos, vis)
            _sync(dev)
            times.append((time.perf_counter() - t0) * 1e3)
        print(f"polish N={n:5d} T={args.frames}: median {statistics.median(times):.2f} ms (min {min(times):.2f})",
              flush=True)
        if args.profile:
            from torch.profiler import ProfilerActivity, profile

            activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
            with profile(activities=activities) as prof:
                ncc_polish(grey, q, pos, vis)
                _sync(dev)
            sort = "cuda_time_total" if dev.type == "cuda" else "cpu_time_total"
            print(prof.key_averages().table(sort_by=sort, row_limit=15, max_name_column_width=50))
    return 0


if __name__ == "__main__":
    sys.exit(main())
