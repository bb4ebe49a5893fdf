"""Speed and accuracy of trained CorrTrack weights: precision x queries, warm median, cold start, peak memory.

Usage (device machine): python3 scripts/corrtrack_bench.py --weights W.safetensors --out DIR
Times the whole tracker call (upload, backbone, track, download) on a synthetic 47x256x256 video,
median of --repeats warm runs; cold start = weights load + first run in this process (CUDA context
creation reported apart); a per-stage breakdown from the StageTimer; a kernel profile; accuracy
(AJ, delta_avg, OA) per precision on the training validation set.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.core.atomic import atomic_open  # noqa: E402
from engine.core.precision import precision_context  # noqa: E402
from engine.core.stages import StageTimer  # noqa: E402
from engine.trackers.base import RunContext  # noqa: E402
from engine.trackers.corrtrack import CorrTrackTracker  # noqa: E402

PRECISIONS = ("fp32", "tf32", "fp16", "bf16")
VIDEO_SEED = 4242


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def make_video(device: torch.device, frames: int, queries: int) -> tuple[np.ndarray, np.ndarray]:
    """A synthetic val-split video [T, 256, 256, 3] and ``queries`` queries on frame 0 and later frames."""
    from engine.training.synthetic import SynthConfig, TextureBank, generate_batch

    textures = TextureBank.build(device, size=512, photos=True, procedural=8, seed=1, split="val")
    gen = torch.Generator(device=device)
    gen.manual_seed(VIDEO_SEED)
    batch = generate_batch(1, SynthConfig(num_frames=frames, num_points=queries), textures, gen, device)
    return batch.video[0].cpu().numpy(), batch.queries[0].cpu().numpy()


def run_once(tracker: CorrTrackTracker, frames: np.ndarray, queries: np.ndarray, ctx: RunContext) -> None:
    with torch.inference_mode(), precision_context(ctx.precision, ctx.device):
        prepared = tracker.prepare(frames, ctx)
        tracker.track(prepared, queries, ctx)


def time_config(tracker: CorrTrackTracker, frames: np.ndarray, queries: np.ndarray, device: torch.device,
                precision: str, repeats: int, warmup: int) -> dict:
    ctx = RunContext(device, precision, len(frames), StageTimer(device, enabled=False))
    for _ in range(warmup):
        run_once(tracker, frames, queries, ctx)
    _sync(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    times = []
    for _ in range(repeats):
        _sync(device)
        t0 = time.perf_counter()
        run_once(tracker, frames, queries, ctx)
        _sync(device)
        times.append((time.perf_counter() - t0) * 1e3)
    peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
    timed = RunContext(device, precision, len(frames), StageTimer(device, enabled=True))
    run_once(tracker, frames, queries, timed)
    stages = timed.timer.collect()
    return {"precision": precision, "queries": len(queries), "median_ms": statistics.median(times),
            "min_ms": min(times), "max_ms": max(times), "peak_bytes": peak,
            "stage_ms": {k: round(v, 3) for k, v in stages.items()}}


def accuracy(tracker: CorrTrackTracker, device: torch.device, precisions: tuple[str, ...], videos: int) -> dict:
    """AJ / delta_avg / OA per precision on the training validation set (24 frames, 128 points)."""
    from engine.analysis.metrics import mean_scores, tapvid_metrics
    from engine.training.corrtrack import VAL_BATCH, make_val_set

    batches = make_val_set(device, videos, 24, 128, VAL_BATCH)
    out = {}
    for precision in precisions:
        ctx = RunContext(device, precision, 24, StageTimer(device, enabled=False))
        scores = []
        for batch in batches:
            for i in range(batch.video.shape[0]):
                sample = batch.numpy(i)
                with torch.inference_mode(), precision_context(precision, device):
                    prepared = tracker.prepare(sample["video"], ctx)
                    result = tracker.track(prepared, sample["queries"], ctx)
                scores.append(tapvid_metrics(result.tracks, result.visible, sample["tracks"], sample["visible"],
                                             sample["query_t"], size=(256, 256), query_mode="first"))
        mean = mean_scores(scores)
        out[precision] = {k: round(float(mean[k]), 4) for k in ("aj", "delta_avg", "oa")}
    return out


def mode_divergence(trackers: list[CorrTrackTracker], frames: np.ndarray, queries: np.ndarray,
                    device: torch.device, precision: str) -> float:
    """Largest position difference (pixels) between the trackers' outputs on the same input."""
    outs = []
    for tr in trackers:
        ctx = RunContext(device, precision, len(frames), StageTimer(device, enabled=False))
        with torch.inference_mode(), precision_context(precision, device):
            outs.append(tr.track(tr.prepare(frames, ctx), queries, ctx).tracks)
    return float(max(np.abs(o - outs[0]).max() for o in outs[1:]))


def kernel_profile(tracker: CorrTrackTracker, frames: np.ndarray, queries: np.ndarray, device: torch.device,
                   precision: str) -> str:
    from torch.profiler import ProfilerActivity, profile

    ctx = RunContext(device, precision, len(frames), StageTimer(device, enabled=False))
    run_once(tracker, frames, queries, ctx)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        run_once(tracker, frames, queries, ctx)
        _sync(device)
    rows = int(os.environ.get("PROFILE_ROWS", "18"))
    return prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=rows, max_name_column_width=90)


def make_tracker(weights: Path, graphs: bool, compile_what: str) -> CorrTrackTracker:
    """The tracker for --modes and --compile: "all" is the shipped opt-in (CorrTrackTracker(compile=True):
    backbone features, each refinement iteration and the polish), "refine" the same with the backbone left
    uncompiled. Compilation happens on the first call of each shape, inside the first (cold) run. (The
    numbers in docs/records/h200_compile/ came from this script's first version, which patched the same
    functions in from outside.)"""
    tracker = CorrTrackTracker(weights, cuda_graphs=graphs, compile=compile_what != "none")
    if compile_what == "refine":
        shipped = tracker._fn
        tracker._fn = lambda name, fn, device: fn if name == "features" else shipped(name, fn, device)
    return tracker


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--weights", type=Path, required=True)
    p.add_argument("--out", type=Path, default=Path("out/bench"))
    p.add_argument("--device", default="cuda")
    p.add_argument("--frames", type=int, default=47)
    p.add_argument("--queries", type=int, nargs="+", default=[256, 1024])
    p.add_argument("--precisions", nargs="+", default=list(PRECISIONS))
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--val-videos", type=int, default=32)
    p.add_argument("--no-profile", action="store_true")
    p.add_argument("--compile", choices=["none", "refine", "all"], default="none",
                   help="torch.compile parts of the tracker (see make_tracker); the cold run includes compiling")
    p.add_argument("--modes", nargs="+", default=["graphs", "eager"], choices=["graphs", "eager"],
                   help="CUDA graphs per stage, and/or plain eager launches (the first mode gets cold/accuracy)")
    args = p.parse_args()
    device = torch.device(args.device)
    args.out.mkdir(parents=True, exist_ok=True)
    result: dict = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
                    "torch": torch.__version__, "threads": torch.get_num_threads(), "frames": args.frames}

    t0 = time.perf_counter()
    if device.type == "cuda":
        torch.zeros(1, device=device)
        _sync(device)
    result["context_ms"] = (time.perf_counter() - t0) * 1e3
    frames, all_queries = make_video(device, args.frames, max(args.queries))
    best = "bf16" if "bf16" in args.precisions else args.precisions[0]
    t0 = time.perf_counter()
    tracker = make_tracker(args.weights, args.modes[0] == "graphs", args.compile)
    result["compile"] = args.compile
    load_ms = (time.perf_counter() - t0) * 1e3
    ctx = RunContext(device, best, args.frames, StageTimer(device, enabled=False))
    run_once(tracker, frames, all_queries[: args.queries[0]], ctx)
    _sync(device)
    result["cold"] = {"mode": args.modes[0], "precision": best, "queries": args.queries[0], "load_ms": load_ms,
                      "load_plus_first_run_ms": (time.perf_counter() - t0) * 1e3}
    rows = []
    trackers = {args.modes[0]: tracker}
    for mode in args.modes[1:]:
        trackers[mode] = make_tracker(args.weights, mode == "graphs", args.compile)
    for mode, tr in trackers.items():
        for precision in args.precisions:
            for n in args.queries:
                row = time_config(tr, frames, all_queries[:n], device, precision, args.repeats, args.warmup)
                row["mode"] = mode
                rows.append(row)
                peak = f"{row['peak_bytes'] / 2**20:.0f} MiB" if row["peak_bytes"] else "-"
                print(f"{mode:6s} {precision:5s} N={n:5d} median {row['median_ms']:8.2f} ms (min {row['min_ms']:.2f}, "
                      f"max {row['max_ms']:.2f}) peak {peak} stages {row['stage_ms']}", flush=True)
        kept = ("cuda_graphs", "cuda_graphs_error", "compile", "compile_error", "fused_kernels")  # what really ran
        result.setdefault("describe", {})[mode] = {k: v for k, v in tr.describe().items() if k in kept}
    if len(trackers) > 1:
        result["mode_divergence_px"] = mode_divergence(list(trackers.values()), frames, all_queries, device, best)
        print("max |tracks difference| between modes:", result["mode_divergence_px"])
    result["speed"] = rows
    if not args.no_profile and device.type == "cuda":
        table = kernel_profile(tracker, frames, all_queries[: args.queries[0]], device, best)
        with atomic_open(args.out / "profile.txt", "w") as f:
            f.write(table)
        print(table)
    if args.val_videos > 0:
        result["accuracy"] = accuracy(tracker, device, tuple(args.precisions), args.val_videos)
        print("accuracy", json.dumps(result["accuracy"]))
    with atomic_open(args.out / "bench.json", "w") as f:
        f.write(json.dumps(result, indent=1) + "\n")
    print(f"\n{result['device']}, torch {result['torch']}, compile {args.compile}, {args.frames} frames 256x256, "
          f"warm median of "
          f"{args.repeats}; cold = load + first run ({best}, N={args.queries[0]}): "
          f"{result['cold']['load_plus_first_run_ms']:.0f} ms (load {load_ms:.0f} ms; CUDA context "
          f"{result['context_ms']:.0f} ms before it)")
    print(f"{'mode':6s} {'precision':9s} " + " ".join(f"{'N=' + str(n):>10s} {'peak':>9s}" for n in args.queries))
    for mode in trackers:
        for precision in args.precisions:
            cells = [r for r in rows if r["precision"] == precision and r["mode"] == mode]
            print(f"{mode:6s} {precision:9s} " + " ".join(
                f"{r['median_ms']:8.2f}ms {(r['peak_bytes'] or 0) / 2**20:6.0f}MiB" for r in cells))
    if "accuracy" in result:
        for precision, s in result["accuracy"].items():
            print(f"accuracy {precision}: AJ {s['aj']:.4f} delta_avg {s['delta_avg']:.4f} OA {s['oa']:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
