"""A waterfall from A's time to B's: a start bar, the step the two devices' specs explain, the named deltas,
the unnamed rest, and an end bar, each delta floating on the running sum of the bars before it.

Drawn with one pyqtgraph ``BarGraphItem`` (one brush per bar), one curve of dotted connectors between the
bars' levels and one text item per bar with its value; the x axis names the bars (elided to the room each
bar has; the full name and value are the bar's tooltip). The geometry is a plain function
(``waterfall_bars``) so it is tested without drawing. Steps are ``engine.api.WaterfallStep``-like: any
object with ``kind``, ``label`` and ``ms``; a missing or non-finite ``ms`` draws as 0 and reads "—".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, Qt
from PySide6.QtGui import QFontMetrics
from PySide6.QtWidgets import QStackedLayout, QToolTip, QVBoxLayout, QWidget

from engine.api import ms_value
from gui.widgets.text import plain_label, rich_label

RGB = tuple[int, int, int]
#: bars of absolute times (A's, B's) and the kinds of step between them
ABSOLUTE_KINDS = ("start", "end")
START_COLOUR: RGB = (70, 100, 150)  # A's time
END_COLOUR: RGB = (110, 80, 160)  # B's time
SPEC_COLOUR: RGB = (90, 160, 220)  # what the datasheets explain
FASTER_COLOUR: RGB = (46, 160, 67)  # a named delta where B is faster
SLOWER_COLOUR: RGB = (214, 39, 40)  # a named delta where B is slower
REST_COLOUR: RGB = (150, 150, 150)  # the unnamed rest
CONNECTOR_COLOUR: RGB = (120, 120, 120)
TEXT_COLOUR: RGB = (40, 40, 40)
BAR_WIDTH = 0.7  # of the 1.0 between bar centres
Y_HEADROOM = 0.08  # share of the range left above the highest bar (its value label) ...
VALUE_ROOM_PX = 22  # ... and at least this many pixels, however short the chart
TICK_MARGIN_PX = 6  # a bar's axis label keeps this far from its neighbours'
MIN_TICK_PX = 24  # below this a label is not elided further (the tooltip has it)
EMPTY_TEXT = "no waterfall: the diff has no steps"
#: the legend under the chart: (colour, what it means)
LEGEND: tuple[tuple[RGB, str], ...] = (
    (START_COLOUR, "A"), (SPEC_COLOUR, "what the specs explain"), (FASTER_COLOUR, "B faster"),
    (SLOWER_COLOUR, "B slower"), (REST_COLOUR, "not named"), (END_COLOUR, "B"),
)
MISSING = "—"


class Bar(NamedTuple):
    """One bar as drawn: its x (0, 1, …), kind, label, value (None: unknown), its bottom and top in ms, and the
    running sum after it (where the next delta starts)."""

    x: int
    kind: str
    label: str
    ms: float | None
    bottom: float
    top: float
    level: float
    colour: RGB


def _finite(value: Any) -> float | None:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def step_colour(kind: str, ms: float | None) -> RGB:
    """The colour of a step: A and B their own, the spec step its own, named deltas by sign, the rest grey."""
    if kind == "start":
        return START_COLOUR
    if kind == "end":
        return END_COLOUR
    if kind == "spec":
        return SPEC_COLOUR
    if kind == "named" and ms:
        return FASTER_COLOUR if ms < 0 else SLOWER_COLOUR
    return REST_COLOUR


def waterfall_bars(steps: Sequence[Any]) -> list[Bar]:
    """The bars of ``steps``: a start or end bar stands on 0 and sets the running sum to its ms; any other step
    floats from the running sum to the sum plus its (signed) ms. Without a start the sum begins at 0."""
    bars: list[Bar] = []
    level = 0.0
    for i, step in enumerate(steps):
        kind = str(getattr(step, "kind", ""))
        ms = _finite(getattr(step, "ms", None))
        value = ms or 0.0
        if kind in ABSOLUTE_KINDS:
            bottom, top = min(0.0, value), max(0.0, value)
            level = value
        else:
            bottom, top = min(level, level + value), max(level, level + value)
            level += value
        bars.append(Bar(i, kind, str(getattr(step, "label", "") or kind), ms, bottom, top, level,
                        step_colour(kind, ms)))
    return bars


def bar_value_text(bar: Bar) -> str:
    """What a bar's text says: an absolute time plainly, a delta with its sign."""
    if bar.ms is None:
        return MISSING
    if bar.kind in ABSOLUTE_KINDS:
        return f"{ms_value(bar.ms)} ms"
    return f"{'+' if bar.ms > 0 else ''}{ms_value(bar.ms)}"


def legend_html() -> str:
    """The colours of the bars and what they mean, as one line of markup (no values from files in it)."""
    items = [f"<span style='color: rgb{colour}'>&#9632;</span>&nbsp;{text}" for colour, text in LEGEND]
    return "<span style='color:#444'>" + " &nbsp; ".join(items) + "</span>"


class WaterfallChart(QWidget):
    """The waterfall of one diff's steps, or a note when there are none."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.bars: list[Bar] = []
        self.plot = pg.PlotWidget()
        self.plot.setBackground("w")
        self.plot.setMenuEnabled(False)
        self.plot.setMouseEnabled(x=False, y=False)
        self.plot.hideButtons()
        item = self.plot.getPlotItem()
        item.showGrid(x=False, y=True, alpha=0.25)
        item.setLabel("left", "ms per run")
        for name in ("left", "bottom"):
            axis = item.getAxis(name)
            axis.setPen(pg.mkPen("#888"))
            axis.setTextPen(pg.mkPen("#222"))
        self.bar_item = pg.BarGraphItem(x=[], height=[], width=BAR_WIDTH)
        self.connectors = pg.PlotCurveItem(pen=pg.mkPen(CONNECTOR_COLOUR, width=1, style=Qt.PenStyle.DotLine),
                                           connect="pairs", antialias=False)
        item.addItem(self.bar_item)
        item.addItem(self.connectors)
        self.value_items: list[pg.TextItem] = []
        self._y_range = (0.0, 1.0)  # the bars' lowest and highest ms (with 0)
        self.note = plain_label(EMPTY_TEXT)
        self.note.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.note.setStyleSheet("color: gray;")
        self.legend = rich_label(legend_html())
        chart_page = QWidget()
        chart_layout = QVBoxLayout(chart_page)
        chart_layout.setContentsMargins(0, 0, 0, 0)
        chart_layout.setSpacing(2)
        chart_layout.addWidget(self.plot, 1)
        chart_layout.addWidget(self.legend)
        self._chart_page = chart_page
        self._stack = QStackedLayout(self)
        self._stack.addWidget(self.note)
        self._stack.addWidget(chart_page)
        self.plot.scene().sigMouseMoved.connect(self._hover)
        item.getViewBox().sigResized.connect(self._view_resized)  # after the layout: its height is the real one
        self.set_steps(())

    @property
    def empty(self) -> bool:
        return not self.bars

    def set_steps(self, steps: Sequence[Any], empty_text: str = EMPTY_TEXT) -> None:
        """Draw ``steps`` (WaterfallStep-like); none: the note ``empty_text`` instead of the chart."""
        self.bars = waterfall_bars(list(steps or ()))
        item = self.plot.getPlotItem()
        for text in self.value_items:
            item.removeItem(text)
        self.value_items = []
        if not self.bars:
            self.note.setText(empty_text)
            self._stack.setCurrentWidget(self.note)
            # (pens=None: pyqtgraph 0.14 fails on an empty list of pens)
            self.bar_item.setOpts(x=[], height=[], y0=[], brushes=None, pens=None, pen=None)
            self.connectors.setData([], [])
            return
        self._stack.setCurrentWidget(self._chart_page)
        x = np.arange(len(self.bars), dtype=float)
        bottoms = np.array([b.bottom for b in self.bars])
        heights = np.array([b.top - b.bottom for b in self.bars])
        brushes = [pg.mkBrush(*b.colour) for b in self.bars]
        pens = [pg.mkPen(tuple(max(0, c - 40) for c in b.colour), width=1) for b in self.bars]
        self.bar_item.setOpts(x=x, y0=bottoms, height=heights, width=BAR_WIDTH, brushes=brushes, pens=pens)
        self._draw_connectors()
        lo = min(0.0, float(bottoms.min()))
        hi = max(0.0, float((bottoms + heights).max()))
        self._y_range = (lo, hi)
        for bar in self.bars:
            text = pg.TextItem(bar_value_text(bar), color=TEXT_COLOUR, anchor=(0.5, 1.0))
            text.setPos(bar.x, bar.top)
            item.addItem(text)
            self.value_items.append(text)
        item.setXRange(-0.6, len(self.bars) - 0.4, padding=0)
        self._fit_y()
        self._update_ticks()

    def _fit_y(self) -> None:
        """The y range: the bars and 0, with room above the highest for its value (in pixels, whatever the height)."""
        lo, hi = self._y_range
        span = (hi - lo) or 1.0
        px = max(1.0, self.plot.getPlotItem().getViewBox().height())
        share = max(Y_HEADROOM, VALUE_ROOM_PX / px)
        share = min(share, 1.0)  # a chart a few pixels high: at most as much room as bars
        self.plot.getPlotItem().setYRange(lo, hi + span * share / (1.0 - share * 0.5), padding=0)

    def _draw_connectors(self) -> None:
        """A dotted line from each bar's level (where the running sum stands after it) to the next bar (none into
        a start bar: it begins a new sum)."""
        xs: list[float] = []
        ys: list[float] = []
        for prev, nxt in zip(self.bars, self.bars[1:]):
            if nxt.kind == "start":
                continue
            xs += [prev.x + BAR_WIDTH / 2, nxt.x - BAR_WIDTH / 2]
            ys += [prev.level, prev.level]
        self.connectors.setData(np.array(xs), np.array(ys))

    def _update_ticks(self) -> None:
        """Bar names under the bars, elided to the width one bar has on screen."""
        axis = self.plot.getPlotItem().getAxis("bottom")
        if not self.bars:
            axis.setTicks([[]])
            return
        room = self.plot.getPlotItem().getViewBox().width() / max(1, len(self.bars)) - TICK_MARGIN_PX
        metrics = QFontMetrics(axis.style.get("tickFont") or self.font())
        width = max(MIN_TICK_PX, int(room))
        axis.setTicks([[(float(b.x), metrics.elidedText(b.label, Qt.TextElideMode.ElideMiddle, width))
                        for b in self.bars]])

    def tick_labels(self) -> list[str]:
        """The x axis's labels as drawn now (tests, screenshots)."""
        ticks = self.plot.getPlotItem().getAxis("bottom")._tickLevels
        return [label for _, label in (ticks[0] if ticks else [])]

    def _view_resized(self, *_: Any) -> None:
        if self.bars:
            self._fit_y()
        self._update_ticks()

    def bar_tip(self, index: int) -> str:
        """The tooltip of bar ``index``: its full label, kind and value."""
        bar = self.bars[index]
        kind = {"start": "A", "end": "B", "spec": "explained by the specs", "rest": "not named",
                "named": "named delta"}.get(bar.kind, bar.kind)
        return f"{bar.label}\n{kind}: {bar_value_text(bar)}" + ("" if bar.kind in ABSOLUTE_KINDS else " ms")

    def bar_at(self, x: float, y: float) -> int | None:
        """The bar under the view point (x, y), or None."""
        i = int(round(x))
        if not 0 <= i < len(self.bars) or abs(x - i) > BAR_WIDTH / 2:
            return None
        bar = self.bars[i]
        span = max(1e-9, bar.top - bar.bottom)
        slack = span * 0.05 + 1e-9
        return i if bar.bottom - slack <= y <= bar.top + slack or bar.top == bar.bottom else None

    def _hover(self, pos: QPointF) -> None:
        if not self.bars:
            return
        point = self.plot.getPlotItem().getViewBox().mapSceneToView(pos)
        i = self.bar_at(point.x(), point.y())
        if i is None:
            QToolTip.hideText()
            return
        global_pos = self.plot.mapToGlobal(self.plot.mapFromScene(pos))
        QToolTip.showText(global_pos, self.bar_tip(i), self.plot)
