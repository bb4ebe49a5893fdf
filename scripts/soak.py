"""Soak: N engine runs in one process with the resident memory sampled; memory must stay flat.

    PYTHONPATH=. python scripts/soak.py --runs 200 --tracker lk
    PYTHONPATH=. python scripts/soak.py --runs 200 --tracker corrtrack --frames 8 --size 64 --points 16

Each run is a full Session (the same path as `trackscope track` and the app's runs) on a tiny synthetic
video, with a RunRecorder building its report, as the app does. RSS is read with psutil after each run;
the first WARM_RUNS runs warm caches up (allocator pools, torch's kernels) and are left out of the slope.
Prints one line per SAMPLE_EVERY runs and a summary: first/last/max RSS after warm-up, and the growth per
run of a least-squares line through the samples. Exit 1 when the growth exceeds --max-growth-kib.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time

import numpy as np
import psutil

from engine.core.config import RunConfig
from engine.io.trackio import grid_queries
from engine.report.recorder import RunRecorder
from engine.run.session import Failed, Session
from engine.trackers import load_tracker
from tests.helpers import moving_square_video

WARM_RUNS = 10
SAMPLE_EVERY = 20
MIB = 2**20


def rss() -> int:
    return int(psutil.Process().memory_info().rss)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=200)
    p.add_argument("--tracker", default="lk")
    p.add_argument("--frames", type=int, default=12)
    p.add_argument("--size", type=int, default=64)
    p.add_argument("--points", type=int, default=16, help="a grid of about this many queries")
    p.add_argument("--max-growth-kib", type=float, default=64.0, help="allowed RSS growth per run after warm-up")
    args = p.parse_args(argv)

    frames = moving_square_video(args.frames, args.size)
    k = max(1, int(round(args.points ** 0.5)))
    queries = grid_queries(k, args.size, args.size)
    config = RunConfig(tracker=args.tracker, device="cpu")
    tracker = load_tracker(args.tracker)  # one instance, as the app's tracker cache keeps it
    samples: list[tuple[int, int]] = []
    t0 = time.perf_counter()
    for i in range(args.runs):
        recorder = RunRecorder()
        for event in Session(frames, queries, config, tracker=tracker).events():
            recorder.add(event)
            if isinstance(event, Failed):
                print(f"run {i} failed: {event.message}", file=sys.stderr)
                return 2
        recorder.build()
        del recorder
        gc.collect()
        now = rss()
        if i >= WARM_RUNS:
            samples.append((i, now))
        if i % SAMPLE_EVERY == 0 or i == args.runs - 1:
            print(f"run {i:5d}: RSS {now / MIB:8.1f} MiB", flush=True)
    seconds = time.perf_counter() - t0
    if len(samples) < 2:
        print("too few runs after warm-up to say anything", file=sys.stderr)
        return 2
    x = np.array([s[0] for s in samples], float)
    y = np.array([s[1] for s in samples], float)
    slope = float(np.polyfit(x, y, 1)[0])
    print(f"{args.runs} runs of {args.tracker} ({args.frames} frames {args.size}x{args.size}, {len(queries)} points) "
          f"in {seconds:.1f} s; RSS after {WARM_RUNS} warm-up runs: first {y[0] / MIB:.1f} MiB, "
          f"last {y[-1] / MIB:.1f} MiB, max {y.max() / MIB:.1f} MiB; growth {slope / 1024:.1f} KiB/run")
    return 1 if slope / 1024 > args.max_growth_kib else 0


if __name__ == "__main__":
    sys.exit(main())
