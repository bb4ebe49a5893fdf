"""Is the instrumentation overhead the sampler's, or the protocol's? CorrTrack on the sample, timed in on/off blocks.

Usage (repo root, on a GPU): python3 scripts/overhead_protocol.py [--sets 9] [--runs 20] [--precision bf16]

The hypothesis (session 18): ``bench --overhead`` paused 0.15 s before every instrumented block only (to let the
sampler take its first sample), and a short run that follows a host sleep starts with clocks and caches cold; so
the instrumented side paid the pause, sampler or not (session 17: an idle sampler thread cost as much as the full
sampler, 1.05-1.14x). Each variant: ``--sets`` sets of ``--runs`` timed runs per side, blocks of 5 alternating,
each set's median(B)/median(A), the median of the sets (and their spread).

- A/A, pause before B only      both sides plain: the old protocol's entry, no instrumentation at all
- A/A, both entered alike       both sides plain, the bench's entry now (pause + one untimed run, both sides)
- on/off, old entry             B instrumented (sampler + stage timing), the pause before B only
- on/off, both entered alike    what ``bench --overhead`` measures now
- timing only / sampler only    on/off with one of the two, entered alike
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.core.config import RunConfig  # noqa: E402
from engine.workflows.bench import OVERHEAD_BLOCK, SAMPLER_SETTLE_S, Bench, load_input  # noqa: E402


def run_blocks(bench: Bench, config: RunConfig, runs: int, *, b_timing: bool, b_sampler: bool, pause_a: bool,
               untimed_first: bool, b_first: bool) -> tuple[list[float], list[float]]:
    a_ms: list[float] = []
    b_ms: list[float] = []
    block = 0
    while len(a_ms) < runs or len(b_ms) < runs:
        is_b = (block % 2 == 0) == b_first
        block += 1
        out = b_ms if is_b else a_ms
        if len(out) >= runs:
            continue
        sampler = bench.sampler if (is_b and b_sampler) else None
        if sampler is not None:
            sampler.start()
        timing = b_timing if is_b else False
        try:
            if is_b or pause_a:
                time.sleep(SAMPLER_SETTLE_S)
            if untimed_first:
                bench._session(config, timing=timing).run()
            for _ in range(min(OVERHEAD_BLOCK, runs - len(out))):
                out.append(bench._session(config, timing=timing).run().wall_ms)
        finally:
            if sampler is not None:
                sampler.stop()
    return a_ms, b_ms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", type=int, default=9)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--precision", default="bf16")
    parser.add_argument("--points", type=int, default=256)
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    data = load_input(argparse.Namespace(video=None, queries=None, grid=None, points=args.points))
    config = RunConfig(tracker="corrtrack", device=args.device, precision=args.precision, points_per_batch=args.points)
    bench = Bench(data, "corrtrack", args.device, telemetry=True, cost=False, direct=False)
    for _ in range(5):
        bench._session(config, timing=True).run()
    variants = [
        ("A/A, pause before B only", dict(b_timing=False, b_sampler=False, pause_a=False, untimed_first=False)),
        ("A/A, both entered alike", dict(b_timing=False, b_sampler=False, pause_a=True, untimed_first=True)),
        ("on/off, old entry", dict(b_timing=True, b_sampler=True, pause_a=False, untimed_first=False)),
        ("on/off, both entered alike", dict(b_timing=True, b_sampler=True, pause_a=True, untimed_first=True)),
        ("timing only, alike", dict(b_timing=True, b_sampler=False, pause_a=True, untimed_first=True)),
        ("sampler only, alike", dict(b_timing=False, b_sampler=True, pause_a=True, untimed_first=True)),
    ]
    print(f"CorrTrack {args.precision}, {args.points} points, {args.sets} sets x {args.runs} runs per side, "
          f"blocks of {OVERHEAD_BLOCK}, pause {SAMPLER_SETTLE_S} s")
    print(f"{'variant':30s} {'B/A':>7s} {'sets min-max':>15s} {'A ms':>7s} {'B ms':>7s}")
    for label, kw in variants:
        ratios, a_all, b_all = [], [], []
        for i in range(args.sets):
            a, b = run_blocks(bench, config, args.runs, b_first=i % 2 == 0, **kw)
            ratios.append(statistics.median(b) / statistics.median(a))
            a_all += a
            b_all += b
        print(f"{label:30s} {statistics.median(ratios):7.4f} {min(ratios):7.4f}-{max(ratios):.4f} "
              f"{statistics.median(a_all):7.2f} {statistics.median(b_all):7.2f}", flush=True)
    overhead = bench.overhead(config, warmup=2, repeat=30)
    print(f"Bench.overhead (the CLI's --overhead, 3 sets x 30): {overhead['ratio']:.4f} (sets "
          + ", ".join(f"{r:.4f}" for r in overhead["set_ratios"]) + ")")
    bench.close()


if __name__ == "__main__":
    main()
