"""Measure CorrTrack's host memory on the CPU: the process's peak RSS over one session run, per run shape.

    python scripts/cpu_memory.py [--out rows.json]

Each shape runs in a fresh child process: frames are made and the tracker is loaded first, then the peak
RSS mark is reset (/proc/self/clear_refs) and one Session runs; the peak RSS (VmHWM) less the RSS before
the run is the run's working memory, what ``engine.run.memory.estimate_host_bytes`` must cover (the
decoded frames are held before the run, as in the app and the CLI). Linux only.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

#: (frames, width, height, points, points per batch); small enough for a 2-core machine
SHAPES = [(24, 256, 256, 64, 64), (24, 640, 360, 64, 64), (24, 960, 540, 64, 64), (48, 960, 540, 64, 64),
          (24, 960, 540, 256, 256), (48, 640, 360, 256, 256), (48, 1920, 1080, 64, 64), (96, 640, 360, 128, 128),
          (96, 1920, 1080, 256, 256), (192, 640, 360, 256, 256), (96, 1280, 720, 64, 64)]


def _status_kib(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


def child(frames: int, width: int, height: int, points: int, ppb: int, precision: str) -> dict:
    import numpy as np
    import torch

    from engine.core.config import RunConfig
    from engine.run.memory import estimate_host_bytes
    from engine.run.session import Failed, Session
    from engine.trackers import load_tracker

    torch.set_num_threads(2)
    rng = np.random.default_rng(0)
    video = rng.integers(0, 255, (frames, height, width, 3), dtype=np.uint8)
    queries = np.stack([np.zeros(points), rng.uniform(0, width - 1, points), rng.uniform(0, height - 1, points)],
                       axis=1).astype(np.float32)
    tracker = load_tracker("corrtrack")
    config = RunConfig(tracker="corrtrack", device="cpu", precision=precision, points_per_batch=ppb)
    Path("/proc/self/clear_refs").write_text("5")  # the peak RSS mark starts again from the RSS now
    before = _status_kib("VmRSS") * 1024
    last = Session(video, queries, config, tracker=tracker).run()
    peak = _status_kib("VmHWM") * 1024
    est = estimate_host_bytes(frames, width, height, points, tracker, on_cpu=True, points_per_batch=ppb,
                              frames_per_batch=config.frames_per_batch, precision=precision)
    return {"frames": frames, "width": width, "height": height, "points": points, "points_per_batch": ppb,
            "precision": precision, "failed": isinstance(last, Failed), "rss_before": before, "peak_rss": peak,
            "run_bytes": peak - before, "estimate_working": est.working_bytes + est.tracks_bytes}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", help="write the rows as JSON here")
    p.add_argument("--precision", default="fp32")
    p.add_argument("--child", nargs=5, type=int, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(child(*args.child, args.precision)))
        return 0
    rows = []
    for shape in SHAPES:
        out = subprocess.run([sys.executable, __file__, "--precision", args.precision, "--child", *map(str, shape)],
                             capture_output=True, text=True, check=True)
        row = json.loads(out.stdout.strip().splitlines()[-1])
        rows.append(row)
        print(f"{row['frames']:4d} x {row['width']}x{row['height']} N={row['points']:4d}: "
              f"run {row['run_bytes'] / 2**20:8.1f} MiB, estimate {row['estimate_working'] / 2**20:8.1f} MiB"
              f" (x{row['estimate_working'] / max(1, row['run_bytes']):.2f})", flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps({"rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
