"""Candidate layouts of CorrTrack's NCC polish, timed against the shipped one on a device.

    python3 scripts/polish_bench.py [--device cuda] [--queries 256 1024] [--profile]

Every variant runs the shipped pipeline (engine.trackers.corrtrack.polish) with one helper swapped;
the largest position difference from the shipped one is printed (differences come from exact NCC ties,
e.g. patches beyond the frame border, where the edge repeats):
  shipped   [T, N] patches by grid_sample, depthwise conv over the frames, separable average pools
  integral  window sums by an integral image (two cumsums), as first shipped
  matmul    correlation as one banded matmul per track instead of the conv
The first shipped polish (an int64 gather per (track, frame), one conv group per (track, frame), the
integral image) took 4.9 / 16.0 ms eager at 256 / 1024 queries on the H200, 12.9 ms of it in the cumsum
along rows (docs/records/h200_polish_profile_call1.log).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.trackers.corrtrack import polish as P  # noqa: E402


def _integral_sums(region: torch.Tensor, k: int) -> torch.Tensor:
    """The first shipped window sums: an integral image by two cumsums (rows, then columns)."""
    c = F.pad(torch.stack([region, region.square()], dim=2).cumsum(-2).cumsum(-1), (1, 0, 1, 0))
    return c[..., k:, k:] - c[..., :-k, k:] - c[..., k:, :-k] + c[..., :-k, :-k]


def _band_index(k: int, size: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    w = size - k + 1
    x = torch.arange(size, device=device).view(size, 1, 1)
    i = torch.arange(k, device=device).view(1, k, 1)
    j = x - torch.arange(w, device=device).view(1, 1, w)
    valid = (j >= 0) & (j < k)
    return (i * k + j.clamp(0, k - 1)).expand(size, k, w).reshape(-1), valid.expand(size, k, w).reshape(-1)


def _matmul_corr(region: torch.Tensor, weight: torch.Tensor, groups: int) -> torch.Tensor:
    """Drop-in for the depthwise conv: out[n, t, y, i*w + ox] = sum_x R[t, n, y, x] * K[n, i, x - ox] by one
    banded matmul per track, then corr[t, n, oy, ox] = sum_i out[n, t, oy + i, i, ox] (a strided view)."""
    t, n, size, _ = region.shape
    k = weight.shape[-1]
    w = size - k + 1
    idx, valid = _band_index(k, size, region.device)
    band = (weight.reshape(n, k * k)[:, idx] * valid).view(n, size, k * w)
    r = region.permute(1, 0, 2, 3).reshape(n, t * size, size)
    with P._TF32_SWITCH:
        saved = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = False
        try:
            out = torch.bmm(r, band)  # [N, T*size, k*w]
        finally:
            torch.backends.cuda.matmul.allow_tf32 = saved
    diag = out.as_strided((n, t, w, k, w), (t * size * k * w, size * k * w, k * w, k * w + w, 1))
    return diag.sum(dim=3).permute(1, 0, 2, 3)


VARIANTS = {  # name -> the polish module's helpers to swap in (the pipeline is the shipped one)
    "shipped": {},
    "integral": {"_window_sums": _integral_sums},
    "matmul": {"_conv_fp32": _matmul_corr},
}


def variant(name: str):
    swaps = VARIANTS[name]

    def run(*args):
        saved = {key: getattr(P, key) for key in swaps}
        for key, fn in swaps.items():
            setattr(P, key, fn)
        try:
            return P.ncc_polish(*args)
        finally:
            for key, fn in saved.items():
                setattr(P, key, fn)
    return run


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--device", default="cuda")
    p.add_argument("--queries", type=int, nargs="+", default=[256, 1024])
    p.add_argument("--frames", type=int, default=47)
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--variants", nargs="+", default=list(VARIANTS))
    p.add_argument("--profile", action="store_true", help="kernel table of one call per variant and size")
    args = p.parse_args()
    dev = torch.device(args.device)
    gen = torch.Generator(device="cpu").manual_seed(0)
    grey = F.avg_pool2d(torch.randn(1, args.frames, 256, 256, generator=gen), 5, 1, 2)[0].to(dev)
    for n in args.queries:
        q = torch.cat([torch.randint(0, args.frames, (1, n, 1), generator=gen).float(),
                       torch.rand(1, n, 2, generator=gen) * 260 - 2], -1).to(dev)
        pos = (q[..., None, 1:] + 2 * torch.randn(1, n, args.frames, 2, generator=gen).to(dev)).contiguous()
        vis = torch.rand(1, n, args.frames, generator=gen).to(dev) > 0.1
        ref, ref_peak = P.ncc_polish(grey, q, pos, vis)
        for name in args.variants:
            fn = variant(name)
            got, peak = fn(grey, q, pos, vis)
            moved = (ref - pos).norm(dim=-1) > 0
            diff = (got - ref).norm(dim=-1).max().item()
            agree = ((peak > 0) == (ref_peak > 0)).float().mean().item()
            times = []
            graph_ms = float("nan")
            for _ in range(args.repeats):
                _sync(dev)
                t0 = time.perf_counter()
                fn(grey, q, pos, vis)
                _sync(dev)
                times.append((time.perf_counter() - t0) * 1e3)
            if dev.type == "cuda":
                graph_ms = _graph_time(fn, grey, q, pos, vis, args.repeats)
            print(f"{name:10s} N={n:5d} T={args.frames}: eager median {statistics.median(times):7.2f} ms, "
                  f"graph {graph_ms:7.3f} ms; max |d pos| vs shipped {diff:.2e} px, polished-mask agreement "
                  f"{agree:.5f}, polished share {moved.float().mean().item():.3f}", flush=True)
            if args.profile:
                _profile(fn, grey, q, pos, vis, dev)
    return 0


def _graph_time(fn, grey, q, pos, vis, repeats: int) -> float:
    """Median ms of replaying fn's captured graph (refine_micro.graph_time)."""
    from refine_micro import graph_time  # scripts/ is on the path of a script run from it

    return graph_time(lambda: fn(grey, q, pos, vis), repeats)[0]


def _profile(fn, grey, q, pos, vis, dev: torch.device) -> None:
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
    with profile(activities=activities) as prof:
        fn(grey, q, pos, vis)
        _sync(dev)
    sort = "cuda_time_total" if dev.type == "cuda" else "cpu_time_total"
    print(prof.key_averages().table(sort_by=sort, row_limit=12, max_name_column_width=60))


if __name__ == "__main__":
    sys.exit(main())
