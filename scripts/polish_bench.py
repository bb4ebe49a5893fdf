"""Time CorrTrack's NCC polish alone per correlation method (fft, conv) on a device; print the faster.

    python3 scripts/polish_bench.py [--device cuda] [--queries 256 1024] [--frames 47]

Eager, float32, synchronised, median of --repeats after a warm-up; also checks both methods agree.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.trackers.corrtrack.polish import PolishConfig, ncc_polish  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--device", default="cuda")
    p.add_argument("--queries", type=int, nargs="+", default=[256, 1024])
    p.add_argument("--frames", type=int, default=47)
    p.add_argument("--repeats", type=int, default=20)
    args = p.parse_args()
    dev = torch.device(args.device)
    gen = torch.Generator(device="cpu").manual_seed(0)
    grey = torch.nn.functional.avg_pool2d(torch.randn(1, args.frames, 256, 256, generator=gen), 5, 1, 2)[0].to(dev)
    totals = {"fft": 0.0, "conv": 0.0}
    for n in args.queries:
        q = torch.cat([torch.randint(0, args.frames, (1, n, 1), generator=gen).float(),
                       torch.rand(1, n, 2, generator=gen) * 240 + 8], -1).to(dev)
        pos = (q[..., None, 1:] + torch.randn(1, n, args.frames, 2, generator=gen).to(dev)).contiguous()
        vis = torch.ones(1, n, args.frames, dtype=torch.bool, device=dev)
        outs = {}
        for method in totals:
            cfg = PolishConfig(correlation=method)
            outs[method] = ncc_polish(grey, q, pos, vis, cfg)[0]
            times = []
            for _ in range(args.repeats):
                if dev.type == "cuda":
                    torch.cuda.synchronize(dev)
                t0 = time.perf_counter()
                ncc_polish(grey, q, pos, vis, cfg)
                if dev.type == "cuda":
                    torch.cuda.synchronize(dev)
                times.append((time.perf_counter() - t0) * 1e3)
            ms = statistics.median(times)
            totals[method] += ms
            print(f"polish {method:4s} N={n:5d} T={args.frames}: median {ms:.2f} ms (min {min(times):.2f})", flush=True)
        diff = float((outs["fft"] - outs["conv"]).abs().max())
        print(f"  max |fft - conv| = {diff:.2e} px")
    print("faster:", min(totals, key=totals.get))
    return 0


if __name__ == "__main__":
    sys.exit(main())
