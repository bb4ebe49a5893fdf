"""Measure what one more entry costs the Runs list once it holds many: the GUI-thread time of
``AppState.add_entry`` (every slot it drives: the Runs list, the trade-off table) plus the paint after it.

    QT_QPA_PLATFORM=offscreen python scripts/runs_list_bench.py [--entries 70]

Entries are made directly (tiny tracks, no tracker run) so the number is the list's own cost, not the
tracker's. Prints the median and max GUI-thread ms per added entry below and above the history's limit.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
from PySide6.QtCore import QSettings  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

NUM_FRAMES = 6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=70)
    args = parser.parse_args()
    app = QApplication.instance() or QApplication([])
    from engine.core.config import RunConfig
    from gui.history import MAX_HISTORY, HistoryEntry
    from gui.main_window import MainWindow
    from gui.model import RunData
    from gui.settings import Settings

    settings = Settings(QSettings("/tmp/runs_list_bench.ini", QSettings.Format.IniFormat))
    window = MainWindow(settings=settings, sampler=None, config=RunConfig(tracker="lk", device="cpu"))
    window.resize(1366, 768)
    window.show()
    app.processEvents()
    state = window.state
    queries = np.array([[0, 4.0, 4.0], [0, 8.0, 8.0]], np.float32)
    costs: list[float] = []
    for _ in range(args.entries):
        run = RunData("r", {}, queries, np.repeat(queries[:, None, 1:], NUM_FRAMES, axis=1),
                      np.ones((2, NUM_FRAMES), bool))
        entry = HistoryEntry(id=state.runs.new_id(), video="a.mp4", tracker="corrtrack",
                             settings={"precision": ("fp32", "fp8"), "points_per_batch": (64,)}, machine="CPU",
                             status="finished", source="run", run=run, num_frames=NUM_FRAMES)
        t0 = time.perf_counter()
        state.add_entry(entry, compare_previous=True, select=True)
        app.processEvents()
        costs.append(1e3 * (time.perf_counter() - t0))
    below, above = costs[5:MAX_HISTORY], costs[MAX_HISTORY:]
    for name, values in (("entries 5-49", below), (f"entries {MAX_HISTORY}+", above)):
        if values:
            print(f"{name}: median {statistics.median(values):.1f} ms, max {max(values):.1f} ms per added entry")
    window.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
