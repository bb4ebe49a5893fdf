"""Screenshot the main window after real runs on the bundled sample (for docs/).

    xvfb-run -s "-screen 0 1600x1000x24" python scripts/gui_screenshots.py [--out docs/main_window.png]

Runs each configuration of --runs (tracker:precision:points_per_batch) in the window, the way a user
would, then shows frame --frame with its trails and grabs the window. A configuration that fails (for
example a tracker whose weights are missing) is reported and skipped.
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
    args = parser.parse_args()

    from engine.config import RunConfig
    from gui.app import sample_video_path
    from gui.main_window import MainWindow
    from gui.settings import Settings

    app = QApplication.instance() or QApplication(sys.argv[:1])
    store = Path(tempfile.mkdtemp()) / "settings.ini"
    window = MainWindow(settings=Settings(QSettings(str(store), QSettings.Format.IniFormat)))
    window.resize(*WINDOW_SIZE)
    window.show()
    window.load_path(sample_video_path())
    for spec in args.runs.split(","):
        tracker, precision, points = spec.rsplit(":", 2)  # the tracker may be module:factory
        window.toggles.set_config(RunConfig(tracker=tracker, device=args.device, precision=precision,
                                            points_per_batch=int(points)))
        for _ in range(args.repeat):
            error = run_once(window)
            if error:
                break
        print(f"{spec}: {'failed: ' + error if error else 'ok'}")
    window.banner.hide()
    QCursor.setPos(0, 0)  # keep the X pointer out of the picture
    for i in range(window.tabs.count()):
        if window.tabs.tabText(i).lower().startswith(args.tab.lower()):
            window.tabs.setCurrentIndex(i)
    window.view.set_frame(args.frame)
    for _ in range(20):  # let the charts poll and everything paint
        app.processEvents()
        QTimer.singleShot(50, lambda: None)
    loop = QEventLoop()
    QTimer.singleShot(1500, loop.quit)
    loop.exec()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    window.grab().save(str(out), "PNG")
    print(f"saved {out} ({window.width()}x{window.height()}, platform {app.platformName()})")
    window.close()
    return 0


if __name__ == "__main__":
    os.environ.setdefault("QT_QPA_PLATFORM", "xcb" if os.environ.get("DISPLAY") else "offscreen")
    sys.exit(main())
