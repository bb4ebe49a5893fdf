"""The parts of the A/B view: one side's plot items, and a resize watcher for the layout."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QEvent, QObject, Qt

POINT_SIZE = 8
HIGHLIGHT_SIZE = 22
HIGHLIGHT_COLOUR = (0, 220, 255)  # selection ring; the selected point's path in run A
PATH_B_COLOUR = (255, 80, 255)  # the selected point's path in run B (dashed)
TRAIL_COLOUR = (255, 255, 255, 110)


class SideView:
    """One side's plot: frame image, trails, points (filled + hollow per colour bin), selection ring, paths."""

    def __init__(self, plot: pg.PlotItem, bin_rgb: np.ndarray):
        self.plot = plot
        self.title_text = ""  # the title as drawn (elided to the plot's width)
        vb = plot.getViewBox()
        vb.setAspectLocked(True)
        vb.invertY(True)
        vb.setMenuEnabled(False)
        plot.hideAxis("left")
        plot.hideAxis("bottom")
        plot.hideButtons()
        self.image = pg.ImageItem(axisOrder="row-major")
        self.trails = pg.PlotCurveItem(pen=pg.mkPen(TRAIL_COLOUR, width=1), connect="pairs", antialias=False,
                                       skipFiniteCheck=True)
        dark_pen = pg.mkPen(0, 0, 0, 200, width=1)
        no_brush = pg.mkBrush(0, 0, 0, 0)
        self.filled = [pg.ScatterPlotItem(size=POINT_SIZE, pen=dark_pen, brush=pg.mkBrush(*map(int, rgb)),
                                          antialias=False) for rgb in bin_rgb]
        self.hollow = [pg.ScatterPlotItem(size=POINT_SIZE, pen=pg.mkPen(*map(int, rgb), width=1.5), brush=no_brush,
                                          antialias=False) for rgb in bin_rgb]
        self.path_a = pg.PlotCurveItem(pen=pg.mkPen(HIGHLIGHT_COLOUR, width=2))
        self.path_b = pg.PlotCurveItem(pen=pg.mkPen(PATH_B_COLOUR, width=2, style=Qt.PenStyle.DashLine))
        self.ring = pg.ScatterPlotItem(size=HIGHLIGHT_SIZE, symbol="o", brush=pg.mkBrush(0, 0, 0, 0),
                                       pen=pg.mkPen(HIGHLIGHT_COLOUR, width=2.5), antialias=True)
        for item in (self.image, self.trails, self.path_a, self.path_b, *self.hollow, *self.filled, self.ring):
            plot.addItem(item)

    def clear_tracks(self) -> None:
        for item in (self.trails, self.path_a, self.path_b):
            item.setData([], [])
        for item in (*self.filled, *self.hollow, self.ring):
            item.clear()

    def shown_points(self) -> np.ndarray:
        """Every drawn point's (x, y), filled then hollow, bin by bin. [M, 2]"""
        xy = [np.column_stack(item.getData()) for item in (*self.filled, *self.hollow) if len(item.getData()[0])]
        return np.concatenate(xy) if xy else np.zeros((0, 2))


class ResizeWatch(QObject):
    """Calls ``callback`` after the watched widget is resized."""

    def __init__(self, callback: Any, parent: QObject):
        super().__init__(parent)
        self.callback = callback

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 (Qt name)
        if event.type() == QEvent.Type.Resize:
            self.callback()
        return False
