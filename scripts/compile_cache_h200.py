"""CorrTrack's compile cache on a GPU: cold compile, warm eager vs compiled, and a second start from the cache.

    python scripts/compile_cache_h200.py [--points 256,1024] [--runs 10] [--cache-dir DIR]

Process 1 (this one), in a fresh cache folder: the time from tracker creation to the end of the first
compiled run (``--compile on``: the compile is in that run), then warm medians of eager and compiled runs,
bf16, per point count. Process 2 (a subprocess on the same folder, ``--compile background`` as in the app):
runs go on eagerly while the compile (now from the cache) runs in the background; it reports the time from
tracker creation to the switch and to the end of the first run at compiled speed (target <= 2 s), and its
warm compiled median. A short table at the end. Exits 0 with a line when there is no CUDA.
Budget: ~150 s on an H200 (the cold compile is most of it; --points 256 halves it). ``--dynamo-precompile``
repeats it with dynamo's experimental output cache on (a second start that skips tracing, if it works).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PRECISION = "bf16"
SECOND_START_TARGET_S = 2.0
#: the most seconds process 2 runs eagerly waiting for the switch, per point count
SWITCH_WAIT_S = 60.0
CHILD_TIMEOUT_S = 240


@functools.lru_cache(maxsize=8)
def _inputs(points: int):
    """The sample's frames, ``points`` random queries on frame 0 and the reader's info (decoded once)."""
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


def _run(tracker, points: int):
    """One session run of ``points`` points in one batch -> (wall ms, the compile label it started with)."""
    from engine.core.config import RunConfig
    from engine.run.session import Finished, Session, Started

    frames, queries, info = _inputs(points)
    config = RunConfig(tracker="corrtrack", device="cuda", precision=PRECISION, points_per_batch=points)
    label = "?"
    last = None
    for event in Session(frames, queries, config, tracker=tracker, video_info=info).events():
        if isinstance(event, Started):
            label = str(event.tracker.get("compile"))
        last = event
    if not isinstance(last, Finished):
        raise SystemExit(f"run failed: {getattr(last, 'message', last)}")
    return last.wall_ms, label


def _warm_median(tracker, points: int, runs: int) -> float:
    _run(tracker, points)
    return statistics.median(_run(tracker, points)[0] for _ in range(runs))


def first_process(points: list[int], runs: int, cache_root: Path) -> dict:
    from engine.trackers.corrtrack import CorrTrackTracker

    out: dict = {"cold": {}, "eager_ms": {}, "compiled_ms": {}}
    t0 = time.perf_counter()
    compiled = CorrTrackTracker(compile="on", compile_cache_root=cache_root)
    for n in points:
        t_run = time.perf_counter()
        ms, label = _run(compiled, n)
        out["cold"][n] = {"since_creation_s": time.perf_counter() - t0, "run_s": time.perf_counter() - t_run,
                          "label": label, "compile_s": compiled.describe().get("compile_s")}
        print(f"process 1: first compiled run at {n} points: {out['cold'][n]['run_s']:.1f} s "
              f"({time.perf_counter() - t0:.1f} s since the tracker was made)", file=sys.stderr, flush=True)
    eager = CorrTrackTracker(compile="off")
    for n in points:
        out["eager_ms"][n] = _warm_median(eager, n, runs)
        out["compiled_ms"][n] = _warm_median(compiled, n, runs)
    out["cache_folder"] = compiled.describe().get("compile_cache")
    return out


def second_process(points: list[int], runs: int, cache_root: Path) -> dict:
    from engine.trackers.corrtrack import CorrTrackTracker

    out: dict = {}
    t0 = time.perf_counter()
    tracker = CorrTrackTracker(compile="background", compile_cache_root=cache_root)
    for n in points:
        eager_runs: list[float] = []
        t_start = time.perf_counter()
        while True:
            ms, label = _run(tracker, n)
            if tracker.last_track_compiled:  # the run's one batch ran the compiled code
                break
            eager_runs.append(ms)
            if time.perf_counter() - t_start > SWITCH_WAIT_S:
                raise SystemExit(f"process 2: no switch within {SWITCH_WAIT_S:.0f} s at {n} points "
                                 f"({tracker.describe().get('compile_error', 'no error')})")
        status = tracker.switch.status
        out[n] = {"first_compiled_run_end_s": time.perf_counter() - t0, "first_compiled_run_ms": ms,
                  "label": label, "compile_s": status.seconds, "from_cache": status.from_cache,
                  "eager_runs_before": len(eager_runs),
                  "eager_ms_while_compiling": statistics.median(eager_runs) if eager_runs else None,
                  "warm_ms": _warm_median(tracker, n, runs)}
        t0 = time.perf_counter()  # the next point count: from the end of this one (its own compile job)
    return out


def _table(first: dict, second: dict, points: list[int]) -> str:
    rows = [("points", "cold: 1st compiled run s", "eager ms", "compiled ms", "2nd start: compiled after s",
             "from cache", "2nd start ms")]
    for n in points:
        s = second.get(n, second.get(str(n), {}))
        cold = first["cold"].get(n, first["cold"].get(str(n), {}))
        rows.append((str(n), f"{cold.get('run_s', float('nan')):.1f}", f"{first['eager_ms'][n]:.2f}",
                     f"{first['compiled_ms'][n]:.2f}", f"{s.get('first_compiled_run_end_s', float('nan')):.2f}",
                     str(s.get("from_cache")), f"{s.get('warm_ms', float('nan')):.2f}"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join(" | ".join(c.ljust(w) for c, w in zip(r, widths)) for r in rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", default="256,1024")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--cache-dir", type=Path, help="compile-cache root (default: a fresh temporary folder)")
    parser.add_argument("--dynamo-precompile", action="store_true",
                        help="also cache dynamo's output (TORCH_CACHING_PRECOMPILE=1, experimental in torch): a "
                             "second start then skips tracing too")
    parser.add_argument("--second", action="store_true", help=argparse.SUPPRESS)  # process 2
    args = parser.parse_args()
    if args.dynamo_precompile:
        os.environ["TORCH_CACHING_PRECOMPILE"] = "1"  # read when torch imports (the child inherits it)
    import torch

    if not torch.cuda.is_available():
        print("compile_cache_h200: skipped: no CUDA device (torch.compile's cache is measured on a GPU)")
        return 0
    points = [int(p) for p in args.points.split(",") if p.strip()]
    os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)  # the tracker points Inductor at the keyed folder
    if args.second:
        print(json.dumps(second_process(points, args.runs, args.cache_dir)))
        return 0
    root = args.cache_dir or Path(tempfile.mkdtemp(prefix="trackscope-compile-"))
    print(f"compile_cache_h200: {torch.cuda.get_device_name()}, torch {torch.__version__}, cache {root}",
          file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    first = first_process(points, args.runs, root)
    print(f"process 1 done in {time.perf_counter() - t0:.0f} s; process 2 ...", file=sys.stderr, flush=True)
    env = {k: v for k, v in os.environ.items() if k != "TORCHINDUCTOR_CACHE_DIR"}
    child = subprocess.run([sys.executable, __file__, "--second", "--points", args.points, "--runs", str(args.runs),
                            "--cache-dir", str(root), *(["--dynamo-precompile"] if args.dynamo_precompile else [])],
                           env=env, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)
    sys.stderr.write(child.stderr[-4000:])
    if child.returncode != 0:
        print(f"process 2 failed (exit {child.returncode})")
        return 1
    second = {int(k): v for k, v in json.loads(child.stdout.strip().splitlines()[-1]).items()}
    print(_table(first, second, points))
    print(json.dumps({"first": first, "second": second}, default=str))
    worst = max(second[n]["first_compiled_run_end_s"] for n in points)
    verdict = "met" if worst <= SECOND_START_TARGET_S else "NOT met"
    print(f"second start: compiled speed after {worst:.2f} s at worst (target <= {SECOND_START_TARGET_S:.0f} s: "
          f"{verdict}); total {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
