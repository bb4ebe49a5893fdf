"""int8/fp8 beside fp32/tf32/fp16/bf16 on a GPU: the precision trade-off table for CorrTrack and a plugin.

Usage (device machine, repo root): python3 scripts/device_quant.py --out OUT [--repeat 5]

1. Kernel check: QuantLinear and quantized_matmul against fp32 on the device (relative error), int8/fp8.
2. CorrTrack on the bundled sample (47 frames), 256 and 1024 queries (random, seeded), all six modes,
   through Session (the path bench takes): warm median wall ms, speedup over fp32, peak memory, per-stage
   ms; AJ / delta_avg / OA on the sample's 80 ground-truth points per mode.
3. Cost-volume matmul alone (N x 64 x T*4096): bf16 matmul vs quantized_matmul int8/fp8, CUDA events.
4. tests.plugins.mlp_refine (linear-heavy plugin) in fp32/bf16/int8/fp8: warm ms and px divergence from fp32.
5. AJ / delta_avg / OA per mode on the training validation set (--val-videos synthetic videos, 24 frames,
   128 points; engine.training.corrtrack.make_val_set).
CorrTrack gets a fresh tracker per (queries, mode), so a failed CUDA-graph capture in one mode (recorded
as cuda_graphs_error) cannot turn graphs off for the next.
Writes OUT/device_quant.json; prints a compact table last.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import traceback
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine.analysis.metrics import tapvid_metrics  # noqa: E402
from engine.core.config import PRECISIONS, RunConfig  # noqa: E402
from engine.core.precision import gate  # noqa: E402
from engine.io.trackio import read_queries_csv  # noqa: E402
from engine.io.video import load_video  # noqa: E402
from engine.run.events import BatchDone, Failed, Finished, Started  # noqa: E402
from engine.run.session import Session  # noqa: E402
from engine.trackers import load_tracker  # noqa: E402
from engine.trackers import quant as Q  # noqa: E402

SAMPLE = ROOT / "resources" / "sample.mp4"
PLUGIN = "tests.plugins.mlp_refine:factory"
QUERY_SEED = 7


def random_queries(n: int, frames: np.ndarray) -> np.ndarray:
    rng = np.random.default_rng(QUERY_SEED)
    t, h, w = frames.shape[:3]
    return np.stack([rng.integers(0, t, n), rng.uniform(0, w - 1, n), rng.uniform(0, h - 1, n)], 1).astype(np.float32)


def run_once(frames, queries, config, tracker, info):
    stage: dict[str, float] = {}
    peak = 0
    describe = {}
    for ev in Session(frames, queries, config, tracker=tracker, video_info=info).events():
        if isinstance(ev, Started):
            describe = ev.tracker
        if isinstance(ev, BatchDone):
            for k, v in ev.stage_ms.items():
                stage[k] = stage.get(k, 0.0) + v
            peak = max(peak, ev.peak_memory_bytes or 0)
        if isinstance(ev, Failed):
            return None, ev.message, stage, peak, describe
        if isinstance(ev, Finished):
            return ev, "", stage, peak, describe
    return None, "no end", stage, peak, describe


def timed(frames, queries, config, tracker, info, warmup, repeat):
    walls, stages, peak, err, last, describe = [], [], 0, "", None, {}
    for i in range(warmup + repeat):
        if torch.cuda.is_available():
            torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        fin, err, stage, pk, describe = run_once(frames, queries, config, tracker, info)
        if fin is None:
            return {"error": err}
        if i >= warmup:
            walls.append(fin.wall_ms)
            stages.append(stage)
            peak = max(peak, pk)
        last = fin
        if i == 0:
            cold = (time.perf_counter() - t0) * 1e3
    med = statistics.median(walls)
    stage_med = {k: statistics.median(s.get(k, 0.0) for s in stages) for k in stages[0]}
    return {"ms": med, "cold_ms": cold, "stage_ms": stage_med, "peak_mb": peak / 2**20, "tracks": last.tracks,
            "quantisation": describe.get("quantisation")}


def val_accuracy(device, modes, videos: int) -> dict:
    """AJ / delta_avg / OA per mode on the training validation set (as scripts/corrtrack_bench.py)."""
    from engine.analysis.metrics import mean_scores
    from engine.training.corrtrack import VAL_BATCH, make_val_set

    batches = make_val_set(device, videos, 24, 128, VAL_BATCH)
    samples = [b.numpy(i) for b in batches for i in range(b.video.shape[0])]
    out = {}
    for mode in modes:
        if not gate(mode, device).runnable:
            continue
        tracker = load_tracker("corrtrack")
        scores = []
        for sample in samples:
            cfg = RunConfig(tracker="corrtrack", device=str(device), precision=mode, points_per_batch=128)
            last = Session(sample["video"], sample["queries"], cfg, tracker=tracker).run()
            if not isinstance(last, Finished):
                out[mode] = {"error": getattr(last, "message", str(last))}
                break
            scores.append(tapvid_metrics(last.tracks, last.visible, sample["tracks"], sample["visible"],
                                         sample["query_t"], size=(256, 256), query_mode="first"))
        else:
            mean = mean_scores(scores)
            out[mode] = {k: round(float(mean[k]), 4) for k in ("aj", "delta_avg", "oa")}
    return out


def kernel_check(device) -> dict:
    out = {}
    gen = torch.Generator().manual_seed(0)
    for mode in Q.QUANT_MODES:
        if not gate(mode, device).runnable:
            out[mode] = {"skipped": gate(mode, device).reason}
            continue
        recipe = Q.recipe_for(mode, device)
        try:
            check: dict | str = Q.check_kernel(recipe, device)  # the layout probe the trackers rely on
        except RuntimeError as exc:
            check = str(exc)
        rows = {}
        for m, k, n in ((12032, 128, 256), (12032, 153, 128), (5, 64, 64), (1024, 64, 192512)):
            a = torch.randn(m, k, generator=gen).to(device)
            w = torch.randn(n, k, generator=gen).to(device)
            try:
                if n > 10000:
                    got = Q.quantized_matmul(a, w.t(), recipe)
                else:
                    lin = torch.nn.Linear(k, n, bias=False).to(device)
                    with torch.no_grad():
                        lin.weight.copy_(w)
                    got = Q.QuantLinear(lin, recipe)(a)
                rows[f"{m}x{k}x{n}"] = round(Q.relative_error(got, a @ w.t()), 5)
            except Exception as exc:  # report, never stop the script
                rows[f"{m}x{k}x{n}"] = f"{type(exc).__name__}: {str(exc)[:200]}"
        out[mode] = {"recipe": recipe.describe(), "check_kernel": check, "rel_error": rows}
    return out


def cost_volume_micro(device, n_list=(256, 1024), positions=47 * 4096, c=64, reps=20) -> dict:
    res = {}
    for n in n_list:
        q = torch.randn(1, n, c, device=device)
        f = torch.randn(1, positions, c, device=device)
        row = {}
        for mode in ("bf16", "int8", "fp8"):
            if mode != "bf16" and not gate(mode, device).runnable:
                continue
            recipe = Q.recipe_for(mode, device) if mode != "bf16" else None
            with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16):
                def fn(q=q, f=f, r=recipe):
                    b = f.transpose(1, 2)
                    return torch.matmul(q, b) if r is None else Q.quantized_matmul(q, b, r)

                for _ in range(3):
                    fn()
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(reps):
                    fn()
                end.record()
                torch.cuda.synchronize()
            row[mode] = round(start.elapsed_time(end) / reps, 4)
        res[str(n)] = row
    return res


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="/tmp/device_quant")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--points", default="256,1024")
    ap.add_argument("--val-videos", type=int, default=16)
    ap.add_argument("--only-val", action="store_true", help="only the validation-set accuracy (for a CPU run)")
    args = ap.parse_args()
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    device = torch.device(args.device)
    t_script = time.perf_counter()
    result: dict = {"torch": torch.__version__, "cuda": torch.version.cuda, "device": str(device)}
    if device.type == "cuda":
        result["device_name"] = torch.cuda.get_device_name(device)
        result["capability"] = list(torch.cuda.get_device_capability(device))
    result["gates"] = {m: gate(m, device).__dict__ for m in PRECISIONS}
    if args.only_val:
        result["val_accuracy"] = val_accuracy(device, PRECISIONS, args.val_videos)
        (out_dir / "device_quant.json").write_text(json.dumps(result, indent=1, default=str))
        print(json.dumps(result["val_accuracy"], indent=1))
        return 0
    result["kernel_check"] = kernel_check(device)
    shown = {m: {k: v[k] for k in ("check_kernel", "rel_error")} if "rel_error" in v else v
             for m, v in result["kernel_check"].items()}
    print("kernel check:", json.dumps(shown))

    frames, info = load_video(SAMPLE)
    info_d = info.to_dict()
    gt = np.load(ROOT / "resources" / "sample.gt.npz")
    gt_queries = read_queries_csv(ROOT / "resources" / "sample.queries.csv")
    table = []
    corr: dict = {}
    for n in [int(x) for x in args.points.split(",")]:
        queries = random_queries(n, frames)
        ref_ms = None
        for mode in PRECISIONS:
            g = gate(mode, device)
            if not g.runnable:
                corr[f"{n}/{mode}"] = {"skipped": g.reason}
                table.append((f"corrtrack N={n}", mode, "skipped", "", "", "", "", g.reason[:50]))
                continue
            cfg = RunConfig(tracker="corrtrack", device=str(device), precision=mode, points_per_batch=n)
            tracker = load_tracker("corrtrack")  # fresh: a failed capture in one mode stays in that mode
            try:
                r = timed(frames, queries, cfg, tracker, info_d, args.warmup, args.repeat)
                info_t = tracker.describe()
                r["cuda_graphs"] = info_t.get("cuda_graphs")
                if info_t.get("cuda_graphs_error"):
                    r["cuda_graphs_error"] = info_t["cuda_graphs_error"]
            except Exception as exc:
                r = {"error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()[-2000:]}
            if "error" in r:
                corr[f"{n}/{mode}"] = r
                table.append((f"corrtrack N={n}", mode, "error", "", "", "", "", r["error"][:60]))
                continue
            r.pop("tracks")
            acc_cfg = RunConfig(tracker="corrtrack", device=str(device), precision=mode, points_per_batch=256)
            fin, err, _, _, _ = run_once(frames, gt_queries, acc_cfg, tracker, info_d)
            if fin is not None:
                s = tapvid_metrics(fin.tracks, fin.visible, gt["tracks"], gt["visible"].astype(bool), gt_queries[:, 0],
                                   size=(info.width, info.height))
                r["aj"], r["delta_avg"], r["oa"] = float(s.aj), float(s.delta_avg), float(s.oa)
            else:
                r["accuracy_error"] = err
            if mode == "fp32":
                ref_ms = r["ms"]
            r["speedup_vs_fp32"] = ref_ms / r["ms"] if ref_ms else None
            corr[f"{n}/{mode}"] = r
            stages = " ".join(f"{k}={v:.2f}" for k, v in r["stage_ms"].items() if k not in ("upload", "download"))
            graphs = "" if r.get("cuda_graphs") or device.type != "cuda" else " [no graphs]"
            table.append((f"corrtrack N={n}", mode, f"{r['ms']:.2f}", f"{r['speedup_vs_fp32'] or 0:.2f}x",
                          f"{r['peak_mb']:.0f}", f"{r.get('aj', float('nan')):.4f}", f"{r.get('oa', float('nan')):.3f}",
                          stages + graphs))
    result["corrtrack"] = corr
    if device.type == "cuda":
        try:
            result["cost_volume_ms"] = cost_volume_micro(device)
        except Exception as exc:
            result["cost_volume_ms"] = {"error": f"{type(exc).__name__}: {exc}"}

    plugin = load_tracker(PLUGIN)
    plug: dict = {}
    for n in (256, 1024):
        queries = random_queries(n, frames)
        ref = None
        for mode in ("fp32", "bf16", "int8", "fp8"):
            if not gate(mode, device).runnable:
                continue
            cfg = RunConfig(tracker=PLUGIN, device=str(device), precision=mode, points_per_batch=n)
            try:
                r = timed(frames, queries, cfg, plugin, info_d, args.warmup, args.repeat)
            except Exception as exc:
                r = {"error": f"{type(exc).__name__}: {exc}"}
            if "error" in r:
                plug[f"{n}/{mode}"] = r
                table.append((f"mlp_refine N={n}", mode, "error", "", "", "", "", r["error"][:60]))
                continue
            tracks = r.pop("tracks")
            if mode == "fp32":
                ref = (tracks, r["ms"])
            d = np.linalg.norm(tracks - ref[0], axis=-1)
            r.update(px_median=float(np.median(d)), px_mean=float(d.mean()), px_max=float(d.max()),
                     speedup_vs_fp32=ref[1] / r["ms"])
            plug[f"{n}/{mode}"] = r
            table.append((f"mlp_refine N={n}", mode, f"{r['ms']:.2f}", f"{r['speedup_vs_fp32']:.2f}x",
                          f"{r['peak_mb']:.0f}", f"px {r['px_mean']:.3f}", f"max {r['px_max']:.2f}",
                          " ".join(f"{k}={v:.2f}" for k, v in r["stage_ms"].items())))
    result["plugin"] = plug
    if args.val_videos > 0:
        try:
            result["val_accuracy"] = val_accuracy(device, PRECISIONS, args.val_videos)
        except Exception as exc:
            result["val_accuracy"] = {"error": f"{type(exc).__name__}: {exc}"}
    result["script_s"] = time.perf_counter() - t_script
    (out_dir / "device_quant.json").write_text(json.dumps(result, indent=1, default=str))
    print(f"\ncost volume matmul alone (ms): {result.get('cost_volume_ms')}")
    print(f"\n{'run':<18} {'mode':<5} {'ms':>8} {'vs fp32':>8} {'peak MB':>8} {'AJ/px':>10} {'OA/max':>9}  stages (ms)")
    for row in table:
        print(f"{row[0]:<18} {row[1]:<5} {row[2]:>8} {row[3]:>8} {row[4]:>8} {row[5]:>10} {row[6]:>9}  {row[7]}")
    print(f"\nvalidation set AJ/delta_avg/OA ({args.val_videos} videos): {json.dumps(result.get('val_accuracy'))}")
    print(f"script {result['script_s']:.0f} s; wrote {out_dir / 'device_quant.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
