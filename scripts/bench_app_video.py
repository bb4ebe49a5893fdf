"""Open a long 1080p video in the real app (offscreen) and measure what the user feels.

    python scripts/bench_app_video.py [--frames 500] [--video PATH] [--points 256] [--tracker corrtrack]
                                      [--no-run] [--keep]

Makes (or takes) a 1920x1080 video of ``--frames`` frames at 30 fps (500 by default; 3600 is two minutes),
starts MainWindow, opens the video, and prints: the time to the first frame on screen, the time to the
last frame decoded, the longest event-loop stall while opening (a 10 ms QTimer heartbeat), the app's
peak RSS (psutil, sampled every 20 ms from a thread) while opening and during a run, and, during a
CorrTrack run over every frame with ``--points`` points, the playback rate with 10-frame trails (the view
asked for 60 fps; frames drawn are counted as paint events of the video view).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen" if not os.environ.get("DISPLAY") else "xcb")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import cv2  # noqa: E402
import numpy as np  # noqa: E402
import psutil  # noqa: E402
from gui_bench import PLAYBACK_SPEED, Heartbeat, PaintCounter, settle, timed_run  # noqa: E402  (the GUI bench's own tools)
from PySide6.QtCore import QEventLoop, QSettings, QTimer  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

WIDTH, HEIGHT, FPS = 1920, 1080, 30.0
RSS_EVERY_S = 0.02
OPEN_TIMEOUT_S = 1200.0


class PeakRss:
    """The process's peak resident memory, sampled from a thread; ``mark()`` starts a new window."""

    def __init__(self) -> None:
        self._proc = psutil.Process()
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(RSS_EVERY_S):
            self.peak = max(self.peak, self._proc.memory_info().rss)

    def mark(self) -> int:
        """The peak since the last mark (then reset to the current RSS)."""
        peak = max(self.peak, self._proc.memory_info().rss)
        self.peak = self._proc.memory_info().rss
        return peak

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def make_video(path: Path, frames: int) -> None:
    """A 1080p mp4 of a noise texture panning 3 px per frame with a bright square crossing it."""
    rng = np.random.default_rng(0)
    texture = cv2.resize(rng.integers(0, 255, (HEIGHT // 8, WIDTH // 8 + frames, 3), dtype=np.uint8),
                         None, fx=8, fy=8, interpolation=cv2.INTER_LINEAR)
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), FPS, (WIDTH, HEIGHT))  # type: ignore[attr-defined]
    try:
        for t in range(frames):
            x = (3 * t) % (texture.shape[1] - WIDTH)
            frame = np.ascontiguousarray(texture[:HEIGHT, x:x + WIDTH])
            cv2.rectangle(frame, (100 + 2 * t % 1600, 400), (200 + 2 * t % 1600, 500), (255, 255, 255), -1)
            writer.write(frame)
    finally:
        writer.release()


def gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=500)
    parser.add_argument("--video", type=Path, help="use this video instead of making one")
    parser.add_argument("--points", type=int, default=256)
    parser.add_argument("--tracker", default="corrtrack")
    parser.add_argument("--no-run", action="store_true", help="only open the video")
    parser.add_argument("--keep", action="store_true", help="keep the made video (printed path)")
    args = parser.parse_args()

    from engine.api import RunConfig, grid_queries
    from gui.main_window import MainWindow
    from gui.settings import Settings

    tmp = Path(tempfile.mkdtemp(prefix="bench_app_video_"))
    video = args.video
    if video is None:
        video = tmp / f"clip_{args.frames}.mp4"
        t0 = time.perf_counter()
        make_video(video, args.frames)
        print(f"made {video} ({args.frames} frames {WIDTH}x{HEIGHT} at {FPS:g} fps, "
              f"{video.stat().st_size / 2**20:.0f} MiB) in {time.perf_counter() - t0:.1f} s")

    app = QApplication.instance() or QApplication(sys.argv[:1])  # noqa: F841 (kept alive for the window)
    settings = Settings(QSettings(str(tmp / "settings.ini"), QSettings.Format.IniFormat))
    config = RunConfig(tracker=args.tracker, device="cpu", points_per_batch=args.points)
    window = MainWindow(settings=settings, sampler=None, config=config)
    window.resize(1500, 900)
    window.show()
    settle(0.5)
    rss = PeakRss()
    base = rss.mark()
    print(f"app started: RSS {gib(base)}")

    beat, counter = Heartbeat(), PaintCounter()
    window.view.plot.viewport().installEventFilter(counter)
    beat.start()
    settle(0.05)
    t0 = time.perf_counter()
    at0 = beat.clock.nsecsElapsed() / 1e6  # the heartbeat's clock when opening starts, ms
    if not window.load_path(video):
        raise SystemExit(f"could not open: {window.banner.message}")
    returned = time.perf_counter() - t0
    shown: list[float] = []  # when the video's first frame went into the view (the store reached the state)

    def first_frame() -> None:
        if not shown and window.state.video_path == str(video):
            shown.append(time.perf_counter() - t0)

    window.state.video_changed.connect(first_frame)
    first_frame()  # a small file is opened in place: shown before load_path returned
    loop = QEventLoop()
    poll = QTimer()
    poll.timeout.connect(lambda: None if window.files.decoding or not shown else loop.quit())
    poll.start(20)
    QTimer.singleShot(int(OPEN_TIMEOUT_S * 1e3), loop.quit)
    loop.exec()
    poll.stop()
    decoded = time.perf_counter() - t0
    first = shown[0] if shown else float("nan")
    beat.stop()
    open_peak = rss.mark()
    gaps = np.asarray(beat.gaps)
    s = window.state
    print(f"opened {video.name}: {len(s.video)} frames kept at {s.video.size[0]}x{s.video.size[1]} "
          f"({s.video.nbytes / 2**20:.0f} MiB) for a {s.geometry.source_width}x{s.geometry.source_height} source")
    print(f"  first frame on screen after {first * 1e3:.0f} ms (load_path returned after {returned * 1e3:.0f} ms); "
          f"all frames decoded after {decoded:.1f} s")
    print(f"  event loop while opening: max gap {gaps.max():.1f} ms, p99 {np.percentile(gaps, 99):.1f} ms, "
          f"median {np.median(gaps):.1f} ms over {len(gaps)} ticks of {beat.timer.interval()} ms")
    worst = np.argsort(gaps)[-3:][::-1]
    print("  worst gaps (ms, ending at ms after opening began): "
          + ", ".join(f"{gaps[i]:.0f} at {beat.at[i] - at0:.0f}" for i in worst)
          + f"; first frame shown at {first * 1e3:.0f}")
    print(f"  peak RSS while opening {gib(open_peak)} (app before opening {gib(base)})")
    if window.files.decoding:
        raise SystemExit("decoding did not finish in time")

    if not args.no_run:
        k = int(np.ceil(np.sqrt(args.points)))
        w, h = s.geometry.source_size
        window.set_queries(grid_queries(k, w, h)[: args.points])
        window.view.trail = 10
        run_ms, elapsed, gaps = timed_run(window, counter, beat)
        run_peak = rss.mark()
        tracked = np.isfinite(window.current.tracks).all(-1).mean() if window.current is not None else 0.0
        print(f"run: {args.tracker} on the CPU, {len(window.queries)} points x {len(s.video)} frames, "
              f"{run_ms / 1e3:.1f} s; {tracked:.0%} of track positions filled")
        print(f"  playback during the run with {window.view.trail}-frame trails: "
              f"{counter.count / elapsed:.1f} frames drawn per second (asked for "
              f"{window.view.fps * PLAYBACK_SPEED:.0f})")
        worst = np.argsort(gaps)[-3:][::-1]
        print(f"  event loop during the run: max gap {gaps.max():.1f} ms, p99 {np.percentile(gaps, 99):.1f} ms; "
              "worst (ms, ending at s into the run): "
              + ", ".join(f"{gaps[i]:.0f} at {(beat.at[i]) / 1e3:.1f}" for i in worst) + f" of {elapsed:.1f}")
        print(f"  peak RSS during the run {gib(run_peak)}")
    rss.stop()
    window.close()
    if args.video is None and not args.keep:
        video.unlink()
    elif args.keep:
        print(f"kept {video}")
    print(f"machine: {os.cpu_count()} cores, load average {', '.join(f'{v:.1f}' for v in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
