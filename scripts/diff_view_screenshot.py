"""Screenshot the main window's Diff tab on a diff built from the model (tests/diff_cases.py), for docs/.

    QT_QPA_PLATFORM=offscreen python scripts/diff_view_screenshot.py [--out docs/diff_view.png]

The two recorded H200 reports (CorrTrack fp32 and bf16, 256 points) are opened first, so the Runs list
holds them as a user would have them; the diff shown is the constructed one unless ``--real`` (both rows
selected and diffed through the Runs list's Diff, engine.api.diff_runs). ``--select NAME`` selects a row.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

H200 = ROOT / "tests" / "data" / "h200"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="docs/diff_view.png")
    parser.add_argument("--size", default="1560x940", help="window size WxH")
    parser.add_argument("--a", default=str(H200 / "corrtrack_fp32_p256_sample.json"))
    parser.add_argument("--b", default=str(H200 / "corrtrack_bf16_p256_sample.json"))
    parser.add_argument("--real", action="store_true", help="diff A and B with engine.api.diff_runs")
    parser.add_argument("--select", default="backbone", help="select this row (its evidence shows)")
    args = parser.parse_args()

    from gui_screenshots import save_png, settle
    from PySide6.QtCore import QSettings
    from PySide6.QtWidgets import QApplication

    from gui.main_window import MainWindow
    from gui.settings import Settings
    from tests.diff_cases import sample_diff

    app = QApplication.instance() or QApplication(sys.argv[:1])
    store = Path(tempfile.mkdtemp()) / "settings.ini"
    window = MainWindow(settings=Settings(QSettings(str(store), QSettings.Format.IniFormat)), sampler=None)
    window.resize(*(int(v) for v in args.size.lower().split("x")))
    window.show()
    for path in (args.a, args.b):
        if not window.load_path(path):
            print(f"{path}: {window.banner.message}")
    if args.real:  # the two rows selected in the Runs list, then Diff (as a user would)
        from PySide6.QtCore import QItemSelectionModel

        panel = window.history_panel
        flags = QItemSelectionModel.SelectionFlag.Select | QItemSelectionModel.SelectionFlag.Rows
        for row in range(panel.model.rowCount()):
            panel.table.selectionModel().select(panel.model.index(row, 0), flags)
        panel.request_diff()
        while window.differ.busy:
            app.processEvents()
        app.processEvents()
    else:
        window.show_diff(sample_diff())
    window.banner.hide()
    if args.select and window.diff_panel is not None:
        window.diff_panel.select_row(args.select)
    settle(app)
    out = save_png(window, Path(args.out))
    print(f"saved {out} ({window.width()}x{window.height()}, {out.stat().st_size // 1000} KB)")
    window.close()
    return 0


if __name__ == "__main__":
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    sys.exit(main())
