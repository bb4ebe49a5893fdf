"""Deep captures of the planted trackers and CorrTrack on the lent GPU (or the CPU, smaller).

Usage: python3 scripts/device_capture.py --out DIR [--device cuda|cpu] [--repeats 5]

For each configuration: warm-up runs, ``--repeats`` timed runs of the whole session without the
profiler (median = the real wall time), then one capture (``engine.capture.capture_session``), its
summary, the capture rules' findings, and the gzipped trace's size. Writes under --out (at most 8
files): ``summaries.json`` (every configuration: timings, capture wall, overhead, summary, findings,
trace size), ``kernel_names.json`` (every distinct kernel name with its class, for the tests),
``table.txt`` (the table printed at the end) and a few ``trace_*.json.gz`` files.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine.capture.export import slim_chrome_trace, write_trace  # noqa: E402
from engine.capture.kernels import classify  # noqa: E402
from engine.capture.profile import capture_session  # noqa: E402
from engine.capture.rules import diagnose_capture  # noqa: E402
from engine.capture.summary import summarize  # noqa: E402
from engine.core.config import RunConfig  # noqa: E402
from engine.run.session import Finished, Session  # noqa: E402
from engine.trackers.base import Tracker  # noqa: E402
from engine.trackers.plugin import PluginTracker  # noqa: E402

VIDEO_SEED = 7
MAX_TRACE_FILES = 4  # trace files written (the rest only measured)
MAX_FILE_BYTES = 15 * 2**20  # files over this do not come back from the device machine
TRACES_WRITTEN = ("deep_nested", "item_per_point", "tiny_kernels", "corrtrack bf16 q1024")


def make_video(frames: int, size: int) -> np.ndarray:
    """A textured scene translating by one pixel per frame: uint8 [T, size, size, 3]."""
    rng = np.random.default_rng(VIDEO_SEED)
    big = rng.integers(0, 256, (size // 8 + frames, size // 8 + frames, 3), dtype=np.uint8)
    tex = np.kron(big, np.ones((8, 8, 1), dtype=np.uint8))
    return np.stack([tex[t:t + size, t:t + size] for t in range(frames)]).copy()


def make_queries(n: int, frames: int, size: int) -> np.ndarray:
    rng = np.random.default_rng(VIDEO_SEED + 1)
    t = rng.integers(0, frames, n).astype(np.float32)
    xy = rng.uniform(4, size - 5, (n, 2)).astype(np.float32)
    return np.concatenate([t[:, None], xy], axis=1)


def configurations(quick: bool) -> list[dict[str, Any]]:
    sync_points = 64 if quick else 512
    small, large = (32, 64) if quick else (256, 1024)
    planted = [("item_per_point", "fp32", sync_points), ("cpu_round_trip", "fp32", small),
               ("fp32_grid_sample", "bf16", small), ("deep_nested", "fp32", small), ("deep_nested", "bf16", small),
               ("tiny_kernels", "fp32", small)]
    out = [{"label": n if p == "fp32" or n == "fp32_grid_sample" else f"{n} {p}", "tracker": n, "precision": p,
            "queries": q} for n, p, q in planted]
    for precision in ("fp32", "bf16"):
        for q in (small, large):
            out.append({"label": f"corrtrack {precision} q{q}",
                        "tracker": "corrtrack", "precision": precision, "queries": q})
    return out


def load(name: str) -> Tracker:
    if name == "corrtrack":
        from engine.trackers.corrtrack import CorrTrackTracker

        return CorrTrackTracker()
    from tests.plugins.planted_capture import PLANTED

    return PluginTracker(name, PLANTED[name]())


def measure(cfg: dict[str, Any], frames: np.ndarray, device: str, repeats: int, warmup: int) -> dict[str, Any]:
    tracker = load(cfg["tracker"])
    queries = make_queries(cfg["queries"], len(frames), frames.shape[1])
    config = RunConfig(tracker=tracker.name, device=device, precision=cfg["precision"],
                       points_per_batch=cfg["queries"], frames_per_batch=16)

    def make() -> Session:
        return Session(frames, queries, config, tracker=tracker)

    walls = []
    for i in range(warmup + repeats):
        last = make().run()
        if not isinstance(last, Finished):
            return {**cfg, "error": f"run failed: {last.message}"}
        if i >= warmup:
            walls.append(last.wall_ms)
    t0 = time.perf_counter()
    result = capture_session(make, device=device)
    capture_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    summary = summarize(result, precision=cfg["precision"])
    summarize_s = time.perf_counter() - t1
    median = statistics.median(walls)
    findings = diagnose_capture(summary, typical_wall_ms=median)
    out: dict[str, Any] = {**cfg, "wall_ms_median": median, "wall_ms_runs": walls, "capture_s": capture_s,
                           "summarize_s": summarize_s, "overhead": summary.overhead,
                           "overhead_vs_median": (summary.profiled_wall_ms / median
                                                  if summary.profiled_wall_ms and median else None),
                           "summary": summary.to_dict(),
                           "findings": findings, "summary_bytes": len(json.dumps(summary.to_dict()))}
    if result.chrome is not None:
        t2 = time.perf_counter()
        raw = json.dumps(slim_chrome_trace(result.chrome), separators=(",", ":")).encode()
        out["trace_gz_bytes"] = len(gzip.compress(raw, compresslevel=6))
        out["trace_json_bytes"] = len(raw)
        out["trace_events"] = len(result.chrome.get("traceEvents", []))
        out["export_s"] = time.perf_counter() - t2
    out["_kernels"] = {}
    if result.trace is not None:
        for k in result.trace.kernels:
            row = out["_kernels"].setdefault(k.name, [0, 0.0])
            row[0] += 1
            row[1] += k.dur / 1e3
    out["_chrome"] = result.chrome
    return out


def table(rows: list[dict[str, Any]]) -> str:
    head = (f"{'config':26} {'wall ms':>8} {'prof ms':>8} {'ovh':>5} {'kern':>6} {'launch':>6} {'sync':>5} "
            f"{'copy':>5} {'k/wall':>6} {'grid ms':>7} {'named k':>7} {'named w':>7} {'trk w':>7} {'cap s':>5} "
            f"{'trace MB':>8}  "
            "top finding")
    lines = [head, "-" * len(head)]
    for r in rows:
        if "summary" not in r:
            lines.append(f"{r['label']:26} {r.get('error', '')}")
            continue
        s = r["summary"]
        c, sh = s["counts"], s["shares"]
        top = r["findings"][0] if r["findings"] else None
        kw = s["kernel_ms"] / s["wall_ms"] if s["wall_ms"] else 0.0
        grid = sum(k["total_ms"] for k in s["top_kernels"] if "grid_sampler" in k["name"]
                   or "bilinear_sampler" in k["name"])  # fp32_grid_sample's planted kernel (ms)

        def pct(v: float | None) -> str:
            return "-" if v is None else f"{100 * v:.0f}%"

        lines.append(
            f"{r['label']:26} {r['wall_ms_median']:8.2f} {s['profiled_wall_ms'] or 0:8.2f} {r['overhead'] or 0:5.2f} "
            f"{c['kernels']:6d} {c['launches']:6d} {c['syncs']:5d} {c['copies']:5d} {pct(kw):>6} {grid:7.2f} "
            f"{pct(sh['kernel_named']):>7} {pct(sh['wall_named']):>7} {pct(sh['wall_named_of_tracker']):>7} "
            f"{r['capture_s']:5.1f} "
            f"{r.get('trace_gz_bytes', 0) / 2**20:8.2f}  "
            + (f"{top['rule']} [{top['severity']}] {top['evidence']['share']:.2f}: {top['title'][:70]}" if top else "-")
            + (f"  ERROR {s['error']}" if s.get("error") else ""))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--frames", type=int, default=None, help="default 47 (GPU), 8 (CPU)")
    parser.add_argument("--size", type=int, default=None, help="default 256 (GPU), 64 (CPU)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--only", default="", help="comma-separated labels or tracker names to run")
    args = parser.parse_args(argv)
    quick = args.device == "cpu"
    frames_n = args.frames or (8 if quick else 47)
    size = args.size or (64 if quick else 256)
    args.out.mkdir(parents=True, exist_ok=True)
    frames = make_video(frames_n, size)
    env = {"device": args.device, "torch": torch.__version__, "cuda": torch.version.cuda,
           "frames": frames_n, "size": size, "repeats": args.repeats, "warmup": args.warmup}
    if args.device.startswith("cuda"):
        env["gpu"] = torch.cuda.get_device_name(0)
        env["capability"] = list(torch.cuda.get_device_capability(0))
    print(json.dumps(env), flush=True)
    wanted = {w.strip() for w in args.only.split(",") if w.strip()}
    rows: list[dict[str, Any]] = []
    kernel_names: dict[str, dict[str, Any]] = {}
    written = 0
    t_start = time.perf_counter()
    for cfg in configurations(quick):
        if wanted and cfg["label"] not in wanted and cfg["tracker"] not in wanted:
            continue
        t0 = time.perf_counter()
        try:
            row = measure(cfg, frames, args.device, args.repeats, args.warmup)
        except Exception as exc:
            row = {**cfg, "error": f"{type(exc).__name__}: {exc}", "details": traceback.format_exc()[-2000:]}
        chrome = row.pop("_chrome", None)
        for name, (count, ms) in row.pop("_kernels", {}).items():
            entry = kernel_names.setdefault(name, {"name": name, "class": classify(name).to_dict(), "count": 0,
                                                   "total_ms": 0.0, "configs": []})
            entry["count"] += count
            entry["total_ms"] = round(entry["total_ms"] + ms, 4)
            entry["configs"].append(cfg["label"])
        if (chrome is not None and cfg["label"] in TRACES_WRITTEN and written < MAX_TRACE_FILES
                and row.get("trace_gz_bytes", 0) < MAX_FILE_BYTES):
            path = write_trace(chrome, args.out / f"trace_{cfg['label'].replace(' ', '_')}.json.gz")
            row["trace_file"] = path.name
            written += 1
        row["config_s"] = time.perf_counter() - t0
        rows.append(row)
        print(f"{cfg['label']}: {row['config_s']:.1f} s"
              + (f", capture {row['capture_s']:.2f} s" if "capture_s" in row else f", {row.get('error')}"),
              flush=True)
    env["total_s"] = time.perf_counter() - t_start
    (args.out / "summaries.json").write_text(json.dumps({"env": env, "runs": rows}, indent=1))
    (args.out / "kernel_names.json").write_text(json.dumps(
        {"env": env, "kernels": sorted(kernel_names.values(), key=lambda k: -k["total_ms"])}, indent=1))
    text = table(rows)
    (args.out / "table.txt").write_text(text + "\n")
    print(text)
    for r in rows:
        for f in r.get("findings", [])[:4]:
            print(f"  {r['label']:24} {f['rule']:22} {f['severity']:8} share {f['evidence']['share']:.3f}  "
                  f"{f['module'] or ''}  {f['call_site'] or ''}")
    print(f"total {env['total_s']:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
