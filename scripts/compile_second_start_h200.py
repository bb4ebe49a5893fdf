"""CorrTrack's compiled second start on a GPU: cold build, a second start from the cache, a background switch.

    python scripts/compile_second_start_h200.py [--points 256,1024] [--backend aoti|dynamo|precompile] [--runs 5]

Three fresh processes, bf16, the sample video, one batch of N points per run:
  1. cold, empty cache, ``--compile on``: seconds from tracker creation to the end of the first compiled run
     per point count (the build is in it);
  2. a second start on that cache, ``--compile on``: seconds from tracker creation to the end of the first
     compiled run (target <= 2 s), whether it said "compiled (from cache)", then warm medians of eager and
     compiled runs per point count;
  3. ``--compile background`` from an empty cache, first point count only: seconds until the first run at
     compiled speed, how many eager runs went before and their median ms while the compile ran.
Each child prints its compile job's events (the tracker's log) to stderr, kept short; the parent prints a
table and a JSON line. Exits 0 with a line when there is no CUDA (``--device cpu`` runs it on the CPU with
TRACKSCOPE_CORRTRACK_COMPILE_CPU=1, to check the script; slow: C++ builds). Budget: <= 4 min on an H200.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine.cli.compile_flag import BACKEND_CHOICES  # noqa: E402  (after the path; no torch import)

PRECISION = "bf16"
SECOND_START_TARGET_S = 2.0
#: process 3: the most seconds of eager runs waiting for the switch
SWITCH_WAIT_S = 45.0
#: seconds a child may take: 245 s in all, so the whole call stays within 4 minutes (a child past its limit
#: is reported as a timeout with its last log lines)
CHILD_TIMEOUT_S = {"cold": 150, "second": 40, "background": 55}
#: the most characters of a child's stderr echoed
ECHO_CHARS = 2500


@functools.lru_cache(maxsize=8)
def _inputs(points: int):
    import numpy as np

    from engine.core.paths import SAMPLE_VIDEO
    from engine.io.video import open_video

    with open_video(SAMPLE_VIDEO) as reader:
        frames = reader.read()
        info = reader.info.to_dict()
    rng = np.random.default_rng(0)
    height, width = frames.shape[1:3]
    xy = rng.uniform([0, 0], [width - 1, height - 1], size=(points, 2))
    queries = np.concatenate([np.zeros((points, 1)), xy], axis=1).astype(np.float32)
    return frames, queries, info


def _run(tracker, points: int, device: str) -> tuple[float, str]:
    """One session run -> (wall ms, the compile label it started with)."""
    from engine.core.config import RunConfig
    from engine.run.session import Finished, Session, Started

    frames, queries, info = _inputs(points)
    precision = PRECISION if device == "cuda" else "fp32"
    config = RunConfig(tracker="corrtrack", device=device, precision=precision, points_per_batch=points)
    label, last = "?", None
    for event in Session(frames, queries, config, tracker=tracker, video_info=info).events():
        if isinstance(event, Started):
            label = str(event.tracker.get("compile"))
        last = event
    if not isinstance(last, Finished):
        raise SystemExit(f"run failed: {getattr(last, 'message', last)}")
    return last.wall_ms, label


def _median(tracker, points: int, runs: int, device: str) -> float:
    _run(tracker, points, device)
    return statistics.median(_run(tracker, points, device)[0] for _ in range(runs))


def _tracker(mode: str, args):
    from engine.trackers.corrtrack import CorrTrackTracker

    return CorrTrackTracker(compile=mode, compile_cache_root=args.cache_dir, compile_backend=args.backend)


def _job(tracker) -> dict:
    info = tracker.describe()
    keep = ("compile", "compile_s", "compile_ready_after_s", "compile_error", "compile_retries", "compile_cache_note",
            "compile_package_misses", "cuda_graphs", "cuda_graphs_error")
    return {k: info[k] for k in keep if k in info}


def child(role: str, points: list[int], args) -> dict:
    out: dict = {"role": role}
    for n in points:
        _inputs(n)  # decoded before any clock starts
    if role in ("cold", "second"):
        t0 = time.perf_counter()
        tracker = _tracker("on", args)
        for n in points:
            t_run = time.perf_counter()
            ms, label = _run(tracker, n, args.device)
            out[n] = {"first_run_end_s": time.perf_counter() - t0, "run_s": time.perf_counter() - t_run,
                      "label": label, "compiled": tracker.last_track_compiled, **_job(tracker)}
            print(f"{role}: {n} points: first run ended {out[n]['first_run_end_s']:.2f} s after creation, "
                  f"label {label!r}, compiled {tracker.last_track_compiled}", file=sys.stderr, flush=True)
        if role == "second":
            eager = _tracker("off", args)
            for n in points:
                out[n]["eager_ms"] = _median(eager, n, args.runs, args.device)
                out[n]["compiled_ms"] = _median(tracker, n, args.runs, args.device)
                out[n]["still_compiled"] = tracker.last_track_compiled
        return out
    n = points[0]
    t0 = time.perf_counter()
    tracker = _tracker("background", args)
    eager_ms: list[float] = []
    while True:
        ms, label = _run(tracker, n, args.device)
        if tracker.last_track_compiled:
            break
        eager_ms.append(ms)
        if time.perf_counter() - t0 > SWITCH_WAIT_S:
            break
    out[n] = {"switched": tracker.last_track_compiled, "first_compiled_run_end_s": time.perf_counter() - t0,
              "eager_runs_before": len(eager_ms), "eager_ms_while_compiling":
              statistics.median(eager_ms) if eager_ms else None, "label": label, **_job(tracker)}
    if tracker.last_track_compiled:
        out[n]["compiled_ms"] = _median(tracker, n, args.runs, args.device)
    return out


def _spawn(role: str, args, cache: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "TORCHINDUCTOR_CACHE_DIR"}
    if args.device == "cpu":
        env["TRACKSCOPE_CORRTRACK_COMPILE_CPU"] = "1"
    cmd = [sys.executable, __file__, "--role", role, "--points", args.points, "--runs", str(args.runs),
           "--backend", args.backend, "--device", args.device, "--cache-dir", str(cache)]
    t0 = time.perf_counter()
    try:
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S[role])
    except subprocess.TimeoutExpired as exc:
        err = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        print(f"--- {role}: timed out after {CHILD_TIMEOUT_S[role]} s\n{err[-ECHO_CHARS:]}", file=sys.stderr)
        return {"role": role, "error": "timeout"}
    print(f"--- {role} ({time.perf_counter() - t0:.0f} s, exit {done.returncode})\n{done.stderr[-ECHO_CHARS:]}",
          file=sys.stderr, flush=True)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        return {"role": role, "error": f"exit {done.returncode}"}
    return {k if k == "role" else int(k) if k.isdigit() else k: v for k, v in json.loads(lines[-1]).items()}


def _f(value, digits: int = 2) -> str:
    return f"{value:.{digits}f}" if isinstance(value, (int, float)) and not isinstance(value, bool) else str(value)


def _table(cold: dict, second: dict, background: dict, points: list[int]) -> str:
    rows = [("points", "cold 1st run s", "2nd start 1st run s", "2nd label", "eager ms", "compiled ms",
             "bg switch s", "bg eager ms")]
    for i, n in enumerate(points):
        c, s, b = cold.get(n, {}), second.get(n, {}), background.get(n, {}) if i == 0 else {}
        second_s = s.get("first_run_end_s") if i == 0 else s.get("run_s")  # later counts: that run's own seconds
        rows.append((str(n), _f(c.get("run_s"), 1), _f(second_s), str(s.get("compile", "-")),
                     _f(s.get("eager_ms")), _f(s.get("compiled_ms")),
                     _f(b.get("first_compiled_run_end_s"), 1) if b.get("switched") else ("-" if not b else "no"),
                     _f(b.get("eager_ms_while_compiling"))))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join(" | ".join(c.ljust(w) for c, w in zip(r, widths)) for r in rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", default="256,1024")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--backend", default="aoti", choices=BACKEND_CHOICES)
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--cache-dir", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--role", choices=("cold", "second", "background"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    points = [int(p) for p in args.points.split(",") if p.strip()]
    if args.role:
        logging.basicConfig(level=logging.WARNING, format="  %(message)s", stream=sys.stderr)
        for name in ("engine.trackers.corrtrack.tracker", "engine.trackers.compiled_switch"):
            logging.getLogger(name).setLevel(logging.INFO)  # the job's events
        print(json.dumps(child(args.role, points, args), default=str))
        return 0
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("compile_second_start_h200: skipped: no CUDA device")
        return 0
    name = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    print(f"compile_second_start_h200: {name}, torch {torch.__version__}, backend {args.backend}", file=sys.stderr)
    t0 = time.perf_counter()
    shared = Path(tempfile.mkdtemp(prefix="trackscope-compile-"))
    cold = _spawn("cold", args, shared)
    second = _spawn("second", args, shared)
    background = _spawn("background", args, Path(tempfile.mkdtemp(prefix="trackscope-compile-bg-")))
    print(_table(cold, second, background, points))
    print(json.dumps({"cold": cold, "second": second, "background": background}, default=str)[:3000])
    first = second.get(points[0], {})
    labels = [second.get(n, {}).get("compile") for n in points]
    if isinstance(first.get("first_run_end_s"), (int, float)):
        ok = first["first_run_end_s"] <= SECOND_START_TARGET_S and first.get("compiled") and \
            labels[0] == "compiled (from cache)"
        print(f"second start: first run ({points[0]} points) ended {first['first_run_end_s']:.2f} s after creation, "
              f"compiled {first.get('compiled')}, labels {labels} (target <= {SECOND_START_TARGET_S:.0f} s, "
              f"compiled: {'met' if ok else 'NOT met'}); total {time.perf_counter() - t0:.0f} s")
    else:
        print(f"second start: no result ({second.get('error')}); total {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
