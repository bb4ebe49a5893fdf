"""Measure the GUI under load: playback fps and event-loop stalls while a run is in progress,
and what the live charts cost the tracker (same run with the charts shown and hidden).

    python scripts/gui_bench.py [--points 1000] [--trail 10] [--repeats 3] [--tracker lk]

Runs offscreen unless a display is set (QT_QPA_PLATFORM=offscreen is the default here). Frames drawn
are counted as paint events of the video view, not as timer ticks.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen" if not os.environ.get("DISPLAY") else "xcb")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
from PySide6.QtCore import QElapsedTimer, QEvent, QEventLoop, QObject, QSettings, QTimer  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

HEARTBEAT_MS = 10
PLAYBACK_SPEED = 2.0  # 24 fps sample at 2x asks for 48 frames per second
RUN_TIMEOUT_S = 300.0


class PaintCounter(QObject):
    """Counts paint events of one widget."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def eventFilter(self, obj, event) -> bool:  # noqa: N802
        if event.type() == QEvent.Type.Paint:
            self.count += 1
        return False


class Heartbeat:
    """A 10 ms timer; the largest gap between its ticks is the worst event-loop stall."""

    def __init__(self) -> None:
        self.timer = QTimer()
        self.timer.setInterval(HEARTBEAT_MS)
        self.timer.timeout.connect(self._tick)
        self.clock = QElapsedTimer()
        self.gaps: list[float] = []
        self.at: list[float] = []  # ms since start at the end of each gap
        self._last = 0

    def start(self) -> None:
        self.gaps.clear()
        self.at.clear()
        self.clock.start()
        self._last = self.clock.nsecsElapsed()
        self.timer.start()

    def stop(self) -> None:
        self.timer.stop()

    def _tick(self) -> None:
        now = self.clock.nsecsElapsed()
        self.gaps.append((now - self._last) / 1e6)
        self.at.append(now / 1e6)
        self._last = now


def wait_run(window, gui_cpu: list | None = None) -> float:
    """Start a run and spin the event loop until it ends; returns the run's wall ms (tracker time).

    ``gui_cpu`` gets the GUI thread's CPU time per second of run (ms/s), the direct cost of drawing.
    """
    result: dict = {}
    cpu0, wall0 = time.thread_time(), time.perf_counter()
    loop = QEventLoop()
    ctl = window.controller
    slots = [(ctl.finished_run, lambda e: result.setdefault("ms", e.wall_ms)),
             (ctl.failed, lambda e: result.setdefault("error", e.message)),
             (ctl.running_changed, lambda: None if ctl.running else loop.quit())]
    for signal, slot in slots:
        signal.connect(slot)
    QTimer.singleShot(int(RUN_TIMEOUT_S * 1e3), loop.quit)
    if not window.start_run():
        raise SystemExit(f"could not start: {window.banner.message}")
    loop.exec()  # the app's own event loop, as in real use
    for signal, slot in slots:
        signal.disconnect(slot)
    if ctl.running or not result:
        raise SystemExit("run timed out")
    if "error" in result:
        raise SystemExit(f"run failed: {result['error']}")
    if gui_cpu is not None:
        gui_cpu.append(1e3 * (time.thread_time() - cpu0) / (time.perf_counter() - wall0))
    return float(result["ms"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=1000)
    parser.add_argument("--trail", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3, help="runs per charts-shown/hidden condition")
    parser.add_argument("--tracker", default="lk")
    parser.add_argument("--points-per-batch", type=int, default=100)
    parser.add_argument("--device", default="cpu", help="device of the runs (cpu, cuda, auto)")
    args = parser.parse_args()

    from engine.config import RunConfig
    from engine.trackio import grid_queries
    from gui.app import sample_video_path
    from gui.main_window import MainWindow
    from gui.settings import Settings

    app = QApplication.instance() or QApplication(sys.argv[:1])
    settings = Settings(QSettings(str(Path(os.environ.get("TMPDIR", "/tmp")) / "gui_bench.ini"),
                                  QSettings.Format.IniFormat))
    config = RunConfig(tracker=args.tracker, device=args.device, points_per_batch=args.points_per_batch)
    window = MainWindow(settings=settings, config=config)
    window.resize(1500, 900)
    window.show()
    sample = sample_video_path()
    if sample is None:
        raise SystemExit("resources/sample.mp4 is missing")
    window.open_video(sample)
    h, w = window.frames.shape[1:3]
    k = int(np.ceil(np.sqrt(args.points)))
    window.set_queries(grid_queries(k, w, h)[: args.points])
    window.view.trail = args.trail
    counter = PaintCounter()
    window.view.plot.viewport().installEventFilter(counter)
    beat = Heartbeat()

    # 1. playback while running: frames drawn per second and the worst stall
    wait_run(window)  # warm-up (fills the tracks so every frame has 1,000 points and trails)
    window.view.set_speed(PLAYBACK_SPEED)
    window.view.set_playing(True)
    counter.count = 0
    beat.start()
    t0 = time.perf_counter()
    run_ms = wait_run(window)
    elapsed = time.perf_counter() - t0
    beat.stop()
    window.view.set_playing(False)
    fps = counter.count / elapsed
    target = window.view.fps * PLAYBACK_SPEED
    gaps = np.asarray(beat.gaps)
    print(f"video: {sample.name} {w}x{h}, {window.view.num_frames} frames; {len(window.queries)} points, "
          f"{args.trail}-frame trails; tracker {args.tracker} on {args.device}, "
          f"{args.points_per_batch} points per batch; "
          f"charts: {'GPU (NVML)' if window.charts.gpu else 'CPU'}")
    print(f"playback during a run ({elapsed:.2f} s, run {run_ms:.0f} ms): {fps:.1f} frames drawn per second "
          f"(asked for {target:.0f})")
    print(f"event loop: heartbeat {HEARTBEAT_MS} ms, max gap {gaps.max():.1f} ms, "
          f"p99 {np.percentile(gaps, 99):.1f} ms, median {np.median(gaps):.1f} ms over {len(gaps)} ticks")

    worst = np.argsort(gaps)[-3:][::-1]
    print("  worst gaps (ms, ending at ms since start): "
          + ", ".join(f"{gaps[i]:.0f} at {beat.at[i]:.0f}" for i in worst) + f"; the run ended at {elapsed * 1e3:.0f}")

    # 2. uncapped drawing rate (timer as fast as it goes), no run
    window.view._timer.setInterval(0)
    window.view.set_playing(True)
    counter.count = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < 2.0:
        app.processEvents()
    window.view.set_playing(False)
    print(f"uncapped playback, idle tracker: {counter.count / (time.perf_counter() - t0):.1f} frames drawn per second")
    window.view._update_interval()

    # 3. tracker time with the charts shown vs hidden (order alternates ABBA to cancel drift; medians)
    shown, hidden, cpu_shown, cpu_hidden = [], [], [], []
    for i in range(args.repeats):
        for show in ((True, False) if i % 2 == 0 else (False, True)):
            window.charts_dock.setVisible(show)
            app.processEvents()
            polls = window.charts.polls
            if show:
                shown.append(wait_run(window, cpu_shown))
                assert window.charts.polls > polls, "charts did not poll while shown"
            else:
                hidden.append(wait_run(window, cpu_hidden))
    ms_shown, ms_hidden = statistics.median(shown), statistics.median(hidden)
    print(f"tracker time, charts shown: {ms_shown:.0f} ms (runs {', '.join(f'{v:.0f}' for v in shown)})")
    print(f"tracker time, charts hidden: {ms_hidden:.0f} ms (runs {', '.join(f'{v:.0f}' for v in hidden)})")
    print(f"ratio shown/hidden: {ms_shown / ms_hidden:.3f} ({100 * (ms_shown / ms_hidden - 1):+.1f} %)")
    print(f"GUI thread CPU during runs: charts shown {statistics.median(cpu_shown):.0f} ms/s, "
          f"hidden {statistics.median(cpu_hidden):.0f} ms/s (the charts' own cost, less noisy than wall time)")
    print(f"machine load average while measuring: {', '.join(f'{v:.1f}' for v in os.getloadavg())} "
          f"on {os.cpu_count()} cores")
    window.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
