"""Soak the app: N runs in one window, the event loop's worst stall per run and the process memory.

    QT_QPA_PLATFORM=offscreen python scripts/gui_soak.py [--runs 500] [--points 64] [--tracker lk]

Each run is the app's own Run (a worker thread, the Runs list, the trade-off table, the charts) on the
bundled sample with a grid of queries; a heartbeat timer on the GUI thread records every gap. Prints one
line every 50 runs (runs so far, worst gap of those runs, RSS, history entries) and a summary: the worst gap
over all runs, the runs with a gap over 100 ms, and the RSS growth per run of a least-squares line through
the samples after the first 20 runs (allocator pools and caches warming up).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
import psutil  # noqa: E402

from scripts.gui_bench import Heartbeat, sample_window, wait_run  # noqa: E402

STALL_MS = 100.0  # the app's target: no event-loop stall over this, ever
WARM_RUNS = 20
REPORT_EVERY = 50


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=500)
    parser.add_argument("--points", type=int, default=64)
    parser.add_argument("--tracker", default="lk")
    args = parser.parse_args()

    from engine.api import RunConfig

    app, window, _ = sample_window(RunConfig(tracker=args.tracker, device="cpu"), args.points, (1366, 768),
                                   "gui_soak.ini")
    process = psutil.Process()
    worst: list[float] = []
    rss: list[float] = []
    for i in range(args.runs):
        beat = Heartbeat()
        beat.start()
        wait_run(window)
        beat.stop()
        app.processEvents()
        worst.append(float(np.max(beat.gaps)) if len(beat.gaps) else 0.0)
        rss.append(process.memory_info().rss / 2**20)
        if (i + 1) % REPORT_EVERY == 0 or i + 1 == args.runs:
            recent = worst[-REPORT_EVERY:]
            print(f"runs {i + 1:4d}: worst gap {max(recent):6.1f} ms in the last {len(recent)}, "
                  f"RSS {rss[-1]:7.1f} MiB, {len(window.state.history)} history entries", flush=True)
    over = [i for i, gap in enumerate(worst) if gap > STALL_MS]
    tail = np.asarray(rss[WARM_RUNS:])
    slope = float(np.polyfit(np.arange(len(tail)), tail, 1)[0]) * 1024 if len(tail) > 1 else 0.0
    print(f"{args.runs} runs of {args.tracker} ({len(window.queries)} points): worst event-loop gap "
          f"{max(worst):.1f} ms; {len(over)} runs with a gap over {STALL_MS:.0f} ms"
          + (f" (runs {over[:10]})" if over else "")
          + f"; RSS {rss[WARM_RUNS] if len(rss) > WARM_RUNS else rss[0]:.1f} -> {rss[-1]:.1f} MiB, "
          f"{slope:+.1f} KiB per run after {WARM_RUNS} warm-up runs")
    window.close()
    return 1 if over else 0


if __name__ == "__main__":
    raise SystemExit(main())
