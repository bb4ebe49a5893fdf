"""Screenshot the main window after real runs on the bundled sample, or replaying a report (for docs/).

    xvfb-run -s "-screen 0 1600x1000x24" python scripts/gui_screenshots.py [--out docs/main_window.png]

Runs each configuration of --runs (tracker:precision:points_per_batch) in the window, the way a user
would, then shows frame --frame with its trails and grabs the window. A configuration that fails (for
example a tracker whose weights are missing) is reported and skipped. ``--report FILE`` opens a
recorded report instead (``--runs ""`` to run nothing), ``--tradeoff FILE`` adds reports to the
trade-off tab, and ``--shot TAB=PNG`` (repeatable) grabs several tabs of the same window. The docs
screenshots:

    X="xvfb-run -s '-screen 0 1600x1000x24' python scripts/gui_screenshots.py"; H=tests/data/h200
    $X --runs corrtrack:fp32:256
    $X --runs corrtrack:fp32:256,corrtrack-nopolish:fp32:256 --shot A/B=docs/ab_view.png
    $X --runs "" --report $H/corrtrack_bf16_p256_sample.json --tradeoff $H/corrtrack_fp32_p256_sample.json \
        --tradeoff ... (tf32, fp16) --shot Video=docs/main_window_h200_replay.png \
        --shot Precision=docs/tradeoff_panel.png
    $X --runs "" --report $H/planted/tf32_off_fp32_p128_f16.json --shot Diagnosis=docs/diagnosis_panel.png
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from PySide6.QtCore import QEventLoop, QSettings, QTimer  # noqa: E402
from PySide6.QtGui import QCursor  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

RUN_TIMEOUT_MS = 600_000
WINDOW_SIZE = (1560, 940)
SETTLE_MS = 1500  # charts poll and everything paints before a grab
MAX_PNG_BYTES = 300_000  # docs screenshots stay small: larger ones are saved with fewer colours
REDUCED_BITS = (6, 5)  # bits per channel tried, in turn, for a screenshot over MAX_PNG_BYTES


def run_once(window, loop_timeout_ms: int = RUN_TIMEOUT_MS) -> str:
    """Run with the window's current toggles; returns "" or the error shown."""
    loop = QEventLoop()
    outcome = {"error": ""}
    ctl = window.controller
    slots = [(ctl.failed, lambda e: outcome.update(error=e.message)),
             (ctl.running_changed, lambda: None if ctl.running else loop.quit())]
    for signal, slot in slots:
        signal.connect(slot)
    QTimer.singleShot(loop_timeout_ms, loop.quit)
    if window.start_run():
        loop.exec()
    else:
        outcome["error"] = window.banner.message
    for signal, slot in slots:
        signal.disconnect(slot)
    return outcome["error"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="docs/main_window.png")
    parser.add_argument("--runs", default="lk:fp32:16,corrtrack:fp32:256,corrtrack:bf16:256",
                        help="comma-separated tracker:precision:points_per_batch")
    parser.add_argument("--frame", type=int, default=30)
    parser.add_argument("--device", default="cpu", help="device for every run (auto, cpu, cuda)")
    parser.add_argument("--tab", default="Video", help="tab to show in the screenshot")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each configuration (fills the charts)")
    parser.add_argument("--report", help="open this report (replay) after the runs")
    parser.add_argument("--tradeoff", action="append", default=[], help="report or bench file to add to the "
                        "trade-off tab (repeatable)")
    parser.add_argument("--shot", action="append", default=[], metavar="TAB=PNG",
                        help="grab tab TAB (its title's start) into PNG (repeatable; replaces --tab/--out)")
    parser.add_argument("--size", default="x".join(map(str, WINDOW_SIZE)), help="window size WxH")
    args = parser.parse_args()

    from engine.api import RunConfig
    from gui.app import sample_video_path
    from gui.main_window import MainWindow
    from gui.settings import Settings

    app = QApplication.instance() or QApplication(sys.argv[:1])
    store = Path(tempfile.mkdtemp()) / "settings.ini"
    window = MainWindow(settings=Settings(QSettings(str(store), QSettings.Format.IniFormat)))
    window.resize(*(int(v) for v in args.size.lower().split("x")))
    window.show()
    window.load_path(sample_video_path())
    for spec in filter(None, args.runs.split(",")):
        tracker, precision, points = spec.rsplit(":", 2)  # the tracker may be module:factory
        window.toggles.set_config(RunConfig(tracker=tracker, device=args.device, precision=precision,
                                            points_per_batch=int(points)))
        for _ in range(args.repeat):
            error = run_once(window)
            if error:
                break
        print(f"{spec}: {'failed: ' + error if error else 'ok'}")
    if args.report:
        window.load_path(args.report)
    for path in args.tradeoff:
        window.tradeoff.add_bench(path)
    window.banner.hide()
    QCursor.setPos(0, 0)  # keep the X pointer out of the picture
    window.view.set_frame(args.frame)
    if window.ab_view is not None and window.ab_view.divergence is not None:
        window.ab_view.select_point(int(window.ab_view.divergence.most_divergent(1)[0]))
    shots = [spec.split("=", 1) for spec in args.shot] or [(args.tab, args.out)]
    for tab, out in shots:
        for i in range(window.tabs.count()):
            if window.tabs.tabText(i).lower().startswith(tab.lower()):
                window.tabs.setCurrentIndex(i)
        settle(app)
        path = save_png(window, Path(out))
        print(f"saved {path} ({window.width()}x{window.height()}, {path.stat().st_size // 1000} KB, "
              f"platform {app.platformName()})")
    window.close()
    return 0


def settle(app) -> None:
    """Let the charts poll and everything paint."""
    app.processEvents()
    loop = QEventLoop()
    QTimer.singleShot(SETTLE_MS, loop.quit)
    loop.exec()


def save_png(window, out: Path) -> Path:
    """Grab the window into ``out``; a full-colour PNG over MAX_PNG_BYTES is saved again with fewer bits per
    channel (6, then 5: invisible on UI and video frames, unlike a 256-colour palette)."""
    import numpy as np
    from PySide6.QtGui import QImage

    out.parent.mkdir(parents=True, exist_ok=True)
    image = window.grab().toImage().convertToFormat(QImage.Format.Format_RGB888)
    image.save(str(out), "PNG", 0)  # quality 0: the strongest compression
    for keep_bits in REDUCED_BITS:
        if out.stat().st_size <= MAX_PNG_BYTES:
            break
        h, w, stride = image.height(), image.width(), image.bytesPerLine()
        rgb = np.frombuffer(image.constBits(), np.uint8).reshape(h, stride)[:, :w * 3]  # [H, W*3]
        mask = np.uint8((0xFF << (8 - keep_bits)) & 0xFF)
        reduced = np.ascontiguousarray(rgb & mask)
        QImage(reduced.data, w, h, w * 3, QImage.Format.Format_RGB888).save(str(out), "PNG", 0)
    return out


if __name__ == "__main__":
    os.environ.setdefault("QT_QPA_PLATFORM", "xcb" if os.environ.get("DISPLAY") else "offscreen")
    sys.exit(main())
