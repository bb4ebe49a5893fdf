"""Measure the GUI under load: playback fps and event-loop stalls while a run is in progress,
and what the live charts cost the tracker (same run with the charts shown and hidden).

    python scripts/gui_bench.py [--points 1000] [--trail 10] [--repeats 30] [--tracker lk] [--charts-only]

Runs offscreen unless a display is set (QT_QPA_PLATFORM=offscreen is the default here). Frames drawn
are counted as paint events of the video view, not as timer ticks. The charts' cost is measured on runs
in pairs, shown/hidden then hidden/shown (AB BA AB ...), after one discarded pair: the median of the
per-pair ratios cancels slow drift in the machine's load and the order within a pair, and the GUI
thread's own CPU time per second of run is the direct cost of drawing, far less noisy than the
tracker's wall time on a shared machine.
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
SETTLE_S = 0.5  # event loop time between showing or hiding the charts and the next run


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


def settle(seconds: float) -> None:
    """Run the event loop for ``seconds`` (pending layout, paints and timers)."""
    loop = QEventLoop()
    QTimer.singleShot(int(seconds * 1e3), loop.quit)
    loop.exec()


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


def sample_window(config, points: int, size: tuple[int, int], ini: str):
    """(app, a shown MainWindow on the bundled sample with a grid of ``points`` queries, the sample's path)."""
    from engine.api import grid_queries
    from gui.app import sample_video_path
    from gui.main_window import MainWindow
    from gui.settings import Settings

    app = QApplication.instance() or QApplication(sys.argv[:1])
    settings = Settings(QSettings(str(Path(os.environ.get("TMPDIR", "/tmp")) / ini), QSettings.Format.IniFormat))
    window = MainWindow(settings=settings, config=config)
    window.resize(*size)
    window.show()
    sample = sample_video_path()
    if sample is None:
        raise SystemExit("resources/sample.mp4 is missing")
    window.open_video(sample)
    h, w = window.frames.shape[1:3]
    k = int(np.ceil(np.sqrt(points)))
    window.set_queries(grid_queries(k, w, h)[:points])
    return app, window, sample


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=1000)
    parser.add_argument("--trail", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=30, help="shown/hidden pairs of runs")
    parser.add_argument("--charts-only", action="store_true", help="only the charts shown vs hidden runs")
    parser.add_argument("--tracker", default="lk")
    parser.add_argument("--points-per-batch", type=int, default=100)
    parser.add_argument("--device", default="cpu", help="device of the runs (cpu, cuda, auto)")
    args = parser.parse_args()

    from engine.api import RunConfig

    config = RunConfig(tracker=args.tracker, device=args.device, points_per_batch=args.points_per_batch)
    app, window, sample = sample_window(config, args.points, (1500, 900), "gui_bench.ini")
    h, w = window.frames.shape[1:3]
    window.view.trail = args.trail
    window.charts_dock.setVisible(True)  # the dock's state is restored from the settings file otherwise
    wait_run(window)  # warm-up (fills the tracks so every frame has 1,000 points and trails)
    print(f"video: {sample.name} {w}x{h}, {window.view.num_frames} frames; {len(window.queries)} points, "
          f"{args.trail}-frame trails; tracker {args.tracker} on {args.device}, "
          f"{args.points_per_batch} points per batch; "
          f"charts: {'GPU (NVML)' if window.charts.gpu else 'CPU'}")
    load0 = os.getloadavg()
    if not args.charts_only:
        playback(app, window)
    charts_cost(window, args.repeats)
    print(f"machine load average (1, 5, 15 min) at start: {', '.join(f'{v:.1f}' for v in load0)}, at end: "
          f"{', '.join(f'{v:.1f}' for v in os.getloadavg())} on {os.cpu_count()} cores")
    window.close()
    return 0


def timed_run(window, counter, beat) -> tuple[float, float, np.ndarray]:
    """One run with the video playing: (run ms, elapsed s, heartbeat gaps ms); ``counter.count`` holds the
    frames drawn meanwhile."""
    window.view.set_speed(PLAYBACK_SPEED)
    window.view.set_playing(True)
    counter.count = 0
    beat.start()
    t0 = time.perf_counter()
    run_ms = wait_run(window)
    elapsed = time.perf_counter() - t0
    beat.stop()
    window.view.set_playing(False)
    return run_ms, elapsed, np.asarray(beat.gaps)


def playback(app, window) -> None:
    """Frames drawn per second and the event loop's worst stall while a run is in progress (charts shown)."""
    counter, beat = PaintCounter(), Heartbeat()
    window.view.plot.viewport().installEventFilter(counter)
    run_ms, elapsed, gaps = timed_run(window, counter, beat)
    fps = counter.count / elapsed
    target = window.view.fps * PLAYBACK_SPEED
    print(f"playback during a run ({elapsed:.2f} s, run {run_ms:.0f} ms): {fps:.1f} frames drawn per second "
          f"(asked for {target:.0f})")
    print(f"event loop: heartbeat {HEARTBEAT_MS} ms, max gap {gaps.max():.1f} ms, "
          f"p99 {np.percentile(gaps, 99):.1f} ms, median {np.median(gaps):.1f} ms over {len(gaps)} ticks")

    worst = np.argsort(gaps)[-3:][::-1]
    print("  worst gaps (ms, ending at ms since start): "
          + ", ".join(f"{gaps[i]:.0f} at {beat.at[i]:.0f}" for i in worst) + f"; the run ended at {elapsed * 1e3:.0f}")

    # uncapped drawing rate (timer as fast as it goes), no run
    window.view._timer.setInterval(0)
    window.view.set_playing(True)
    counter.count = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < 2.0:
        app.processEvents()
    window.view.set_playing(False)
    print(f"uncapped playback, idle tracker: {counter.count / (time.perf_counter() - t0):.1f} frames drawn per second")
    window.view._update_interval()


def charts_cost(window, pairs: int) -> None:
    """Tracker time and GUI-thread CPU with the charts dock shown vs hidden, in pairs whose order
    alternates (AB BA AB ...), so neither slow drift nor a within-pair order effect favours one side."""
    runs: dict[bool, list[float]] = {True: [], False: []}
    cpu: dict[bool, list[float]] = {True: [], False: []}
    for i in range(pairs + 1):
        for show in ((True, False) if i % 2 == 0 else (False, True)):
            window.charts_dock.setVisible(show)
            settle(SETTLE_S)  # showing the dock repaints it all once: a cost of the toggle, not of the run
            polls = window.charts.polls
            ms = wait_run(window, cpu[show])
            runs[show].append(ms)
            if show:
                assert window.charts.polls > polls, "charts did not poll while shown"
        if i == 0:  # the first pair warms both conditions up
            for lists in (runs, cpu):
                for v in lists.values():
                    v.clear()
    shown, hidden = np.asarray(runs[True]), np.asarray(runs[False])
    ratios = shown / hidden
    q1, q3 = np.percentile(ratios, [25, 75])
    for show, values in ((True, shown), (False, hidden)):
        print(f"tracker time, charts {'shown' if show else 'hidden'}: median {np.median(values):.0f} ms "
              f"(runs {', '.join(f'{v:.0f}' for v in values)})")
    print(f"ratio shown/hidden over {pairs} AB/BA pairs: median of per-pair ratios {np.median(ratios):.3f} "
          f"({100 * (np.median(ratios) - 1):+.1f} %, interquartile {q1:.3f}..{q3:.3f}; shown slower in "
          f"{int((ratios > 1).sum())} of {pairs}); ratio of medians {np.median(shown) / np.median(hidden):.3f}")
    c_shown, c_hidden = statistics.median(cpu[True]), statistics.median(cpu[False])
    diffs = np.asarray(cpu[True]) - np.asarray(cpu[False])
    print(f"GUI thread CPU during runs: charts shown {c_shown:.1f} ms/s, hidden {c_hidden:.1f} ms/s (medians); "
          f"the charts' own cost, median of per-pair differences: {np.median(diffs):.1f} ms per second of run "
          f"(interquartile {np.percentile(diffs, 25):.1f}..{np.percentile(diffs, 75):.1f}; less noisy than wall time)")
    for show in (True, False):
        print(f"  GUI thread ms/s per run, charts {'shown' if show else 'hidden'}: "
              + ", ".join(f"{v:.0f}" for v in cpu[show]))

if __name__ == "__main__":
    sys.exit(main())
