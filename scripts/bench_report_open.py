"""Open a (large) report in the real app, offscreen, and measure how long the window is held.

    PYTHONPATH=. QT_QPA_PLATFORM=offscreen python scripts/bench_report_open.py REPORT.json
    PYTHONPATH=. python scripts/bench_report_open.py --make big.json --rows 300000   # a ~145 MiB test report

Prints when ``load_path`` returned, when the report was shown and the longest gap of a 10 ms heartbeat
meanwhile. ``--make`` pads a recorded H200 report with an extra top-level list (the reader keeps unknown
keys), so the file is as slow to parse as a real one of that size.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SOURCE = ROOT / "tests" / "data" / "h200" / "corrtrack_fp32_p256_sample.json"
HEARTBEAT_MS = 10
TIMEOUT_S = 600.0


def make(path: Path, rows: int) -> None:
    data = json.loads(SOURCE.read_text())
    data["padding_for_a_size_test"] = [[i * 0.001] * 50 for i in range(rows)]
    path.write_text(json.dumps(data))
    print(f"wrote {path} ({path.stat().st_size / 2**20:.1f} MiB)")


def measure(path: Path) -> None:
    from PySide6.QtCore import QSettings, QTimer
    from PySide6.QtWidgets import QApplication

    app = QApplication([])
    from gui.main_window import MainWindow
    from gui.settings import Settings

    settings = Settings(QSettings(tempfile.mktemp(suffix=".ini"), QSettings.Format.IniFormat))
    window = MainWindow(settings=settings, sampler=None)
    window.show()
    gaps: list[float] = []
    last = [time.perf_counter()]

    def beat() -> None:
        now = time.perf_counter()
        gaps.append(now - last[0])
        last[0] = now

    timer = QTimer()
    timer.timeout.connect(beat)
    timer.start(HEARTBEAT_MS)
    t0 = time.perf_counter()
    window.load_path(path)
    returned = time.perf_counter() - t0
    while window.state.report is None and time.perf_counter() - t0 < TIMEOUT_S:
        app.processEvents()
        time.sleep(0.002)
    shown = time.perf_counter() - t0
    timer.stop()
    print(f"{path.name} ({path.stat().st_size / 2**20:.1f} MiB): load_path returned after {returned * 1e3:.0f} ms; "
          f"report shown after {shown:.1f} s; longest event-loop gap {max(gaps, default=0.0) * 1e3:.0f} ms")
    window.close()
    del window


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("report", nargs="?", type=Path)
    ap.add_argument("--make", type=Path, help="write a padded test report here and stop")
    ap.add_argument("--rows", type=int, default=300_000)
    args = ap.parse_args()
    if args.make is not None:
        make(args.make, args.rows)
    elif args.report is not None:
        measure(args.report)
    else:
        ap.error("give a report, or --make PATH")


if __name__ == "__main__":
    main()
