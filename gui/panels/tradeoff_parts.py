"""Pieces of the trade-off panel: a log-ms axis, a number-sorting cell, tick choice and cell formatting."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QTableWidgetItem

from engine.api import GIB, MIB, format_ms

SORT_ROLE = Qt.ItemDataRole.UserRole + 1
MAX_TICKS = 9
TICK_MARGIN = 1.3  # ticks cover the data range widened by this factor each side


class LogMsAxis(pg.AxisItem):
    """A log-scale axis whose ticks read as plain milliseconds (20, 30) rather than 2·10¹."""

    def tickStrings(self, values: list[float], scale: float, spacing: float) -> list[str]:  # noqa: N802
        if not self.logMode:
            return super().tickStrings(values, scale, spacing)
        return [f"{10 ** v:.3g}" for v in values]


class SortItem(QTableWidgetItem):
    """A cell that sorts by a number (None last) instead of its text."""

    def __lt__(self, other: QTableWidgetItem) -> bool:
        a, b = self.data(SORT_ROLE), other.data(SORT_ROLE)
        if isinstance(a, (int, float)) and isinstance(b, (int, float)):
            return a < b
        if isinstance(a, (int, float)) != isinstance(b, (int, float)):
            return isinstance(a, (int, float))  # numbers before blanks
        return self.text() < other.text()


def overlap(a: tuple[float, float, float, float], b: tuple[float, float, float, float]) -> bool:
    """Whether two (left, top, right, bottom) rectangles overlap."""
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def nice_ticks(lo: float, hi: float) -> list[tuple[float, str]]:
    """Ticks at 1-1.5-2-3-5-7 x 10^k (1-2-5 when that makes too many) around [lo, hi] ms, in log10 units."""
    lo, hi = lo / TICK_MARGIN, hi * TICK_MARGIN
    for steps in ((1, 1.5, 2, 3, 5, 7), (1, 2, 5), (1,)):
        values = [m * 10.0 ** k for k in range(int(np.floor(np.log10(lo))), int(np.ceil(np.log10(hi))) + 1)
                  for m in steps]
        values = [v for v in values if lo <= v <= hi]
        if len(values) <= MAX_TICKS:
            break
    return [(float(np.log10(v)), f"{v:g}") for v in values]


def fmt_ms(value: float | None) -> str:
    """A time as engine.api.format_ms writes it, "—" when missing."""
    return format_ms(value, missing="—")


def fmt_px(value: float | None) -> str:
    """Pixels to 3 significant digits: small divergences (0.0039 px) must not read as 0.00."""
    return "—" if value is None else "0" if value == 0 else f"{value:.3g}"


def fmt(value: float | None, pattern: str) -> str:
    return "—" if value is None else pattern.format(value)


def fmt_bytes(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value / GIB:.2f} GiB" if value >= GIB else f"{value / MIB:.0f} MiB"
