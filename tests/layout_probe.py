"""Opens the main window on a screen of a given size (a subprocess of tests/test_gui_layout.py) and prints its layout.

python -m tests.layout_probe SETTINGS.ini [--squeeze-charts PX] [--geometry X,Y,W,H]
Run with QT_QPA_PLATFORM=offscreen:configfile=SCREENS.json for the screen; closing saves the layout.
"""

from __future__ import annotations

import argparse
import json

from PySide6.QtCore import QSettings, Qt
from PySide6.QtWidgets import QApplication

from gui.main_window import MainWindow
from gui.settings import Settings


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("ini")
    parser.add_argument("--squeeze-charts", type=int)
    parser.add_argument("--geometry")
    args = parser.parse_args()
    app = QApplication([])
    window = MainWindow(settings=Settings(QSettings(args.ini, QSettings.Format.IniFormat)), sampler=None)
    note = window.statusBar().currentMessage()
    window.show()
    app.processEvents()
    if args.geometry:
        x, y, w, h = (int(v) for v in args.geometry.split(","))
        window.setGeometry(x, y, w, h)
        app.processEvents()
    if args.squeeze_charts:
        window.resizeDocks([window.charts_dock], [args.squeeze_charts], Qt.Orientation.Horizontal)
        app.processEvents()
    g = window.frameGeometry()
    print(json.dumps({"frame": [g.x(), g.y(), g.width(), g.height()], "note": note,
                      "run_dock": window.run_dock.width(), "charts_dock": window.charts_dock.width(),
                      "central": window.centralWidget().width()}))
    window.close()


if __name__ == "__main__":
    main()
