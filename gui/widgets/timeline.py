"""A timeline of one captured run: one row per lane of an engine ``TimelineData``, zoom and pan in x.

Each lane is ONE graphics item that paints all its rectangles (grouped by colour, ``drawRects`` per
group; a cached QPicture for lanes up to ``DIRECT_MAX`` items, a per-pixel level of detail for bigger
ones), never one item per kernel; the highlight of a selection is one more such item. Rectangles get
a 1 px cosmetic outline, so a kernel narrower than a pixel still shows. Host syncs are red ticks and
memcpys coloured ticks (DtoH orange, HtoD blue, DtoD brown) in two marker rows at the top. Stages
have the colours the live charts give them (``gui.widgets.stage_colours``). The y range is fixed;
the wheel and a drag zoom and pan the time axis only. The time axis labels one level of ticks, as
many as fit their widest label (``TimeAxis``); the lane names' font shrinks to the row height, so
every lane keeps its name (pyqtgraph drops a label that would leave the axis). Hover shows the item under the
cursor in the line below the plot (plain text: names come from a file); a click emits
``itemClicked`` with it.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, QRectF, Qt, Signal
from PySide6.QtGui import QColor, QFont, QFontMetricsF, QPainter, QPen, QPicture
from PySide6.QtWidgets import QGridLayout, QSizePolicy, QVBoxLayout, QWidget

from engine.api import TimelineData
from gui.widgets.stage_colours import stage_colour
from gui.widgets.text import plain_label

ROW_FILL = 0.8  # share of a row's height its bars fill
LEFT_AXIS_PX = 170
SYNC_ROW, COPY_ROW = "host syncs", "memcpy"
HIGHLIGHT = QColor(255, 214, 0, 120)  # translucent: the item's own colour and name stay readable
HIGHLIGHT_EDGE = QColor("#d50000")
LABEL_MIN_PX = 28  # a range this wide on screen gets its name painted in it
MAX_LABELLED = 2000  # lanes with more items than this paint no names
LEGEND_COLUMNS = 5
DIRECT_MAX = 4000  # lanes up to this many items replay a QPicture; bigger ones draw with a level of detail
#: pixels kept free between two time labels
TICK_GAP_PX = 18
#: the lane names' font never gets smaller than this, px (rows shorter than it are rare: 40 lanes in 300 px)
LANE_FONT_MIN_PX = 7
#: share of a row's height the lane name's font may take
LANE_FONT_FILL = 0.85
#: pixels a lane name keeps free inside the name axis
LANE_NAME_MARGIN_PX = 6
#: the plot's height beside its rows (time axis and margins), px: with it, rows never get below the minimum font
PLOT_MARGIN_PX = 60
MODULE_COLOURS = ("#b39ddb", "#9fa8da", "#90caf9", "#80deea", "#a5d6a7", "#e6ee9c")
#: colour by class; a kernel class is looked up by its words (kind, tc/simt, precision)
CLASS_COLOURS = {
    "cpu op": "#90a4ae",
    "api launch": "#b0bec5", "api sync": "#e53935", "api copy": "#fb8c00", "api memset": "#bdbdbd",
    "api other": "#cfd8dc",
    "memset": "#9e9e9e", "DtoH": "#fb8c00", "HtoD": "#1e88e5", "DtoD": "#8d6e63",
    "sync": "#e53935",
}
KERNEL_COLOURS = {  # (kind, tensor cores) -> colour; SIMT GEMM/conv in warm colours: they are findings
    ("gemm", "tc"): "#2e7d32", ("conv", "tc"): "#00897b",
    ("gemm", "simt"): "#d84315", ("conv", "simt"): "#ef6c00",
}
OTHER_KERNEL_COLOURS = {"fp32": "#5c6bc0", "bf16": "#42a5f5", "fp16": "#42a5f5", "fp64": "#6d4c41"}


def class_colour(cls: str) -> QColor:
    """The colour of a timeline class (``kernel gemm tc bf16``, ``memcpy DtoH pageable``, ``api sync``...)."""
    if cls in CLASS_COLOURS:
        return QColor(CLASS_COLOURS[cls])
    words = cls.split()
    if words[:1] == ["kernel"]:
        if len(words) > 2 and (words[1], words[2]) in KERNEL_COLOURS:
            return QColor(KERNEL_COLOURS[(words[1], words[2])])
        return QColor(OTHER_KERNEL_COLOURS.get(words[-1], "#78909c"))
    if words[:1] == ["memcpy"] and len(words) > 1:
        return QColor(CLASS_COLOURS.get(words[1], "#8d6e63"))
    return QColor("#78909c")


def module_tail(path: str) -> str:
    """A module range's name in its lane (the lanes above show its parents): 'updater.blocks.2.attn' -> 'attn',
    'updater.blocks.2' -> 'blocks.2'."""
    parts = path.split(".")
    if len(parts) > 1 and parts[-1].isdigit():
        return ".".join(parts[-2:])
    return parts[-1]


def nice_step(raw: float) -> float:
    """The smallest 1, 2 or 5 x 10^k at least ``raw``."""
    if raw <= 0 or not math.isfinite(raw):
        return 1.0
    exp = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 5, 10):
        if m * exp >= raw * (1 - 1e-9):
            return m * exp
    return 10 * exp


class TimeAxis(pg.AxisItem):
    """The time axis: one labelled level of ticks, as many as fit their widest label (a narrow timeline at
    1366x768 ran pyqtgraph's two levels together: "200400600800"); one tick in the middle when two do not fit."""

    def label_px(self, value: float, spacing: float) -> float:
        """The width of the label of ``value`` at ``spacing``, px."""
        font = self.style.get("tickFont") or QFont()
        text = self.tickStrings([value], self.autoSIPrefixScale * self.scale, spacing)[0]
        return QFontMetricsF(font).horizontalAdvance(text)

    def tickValues(self, minVal: float, maxVal: float, size: float) -> list[tuple[float, list[float]]]:  # noqa: N802,N803
        lo, hi = min(minVal, maxVal), max(minVal, maxVal)
        span = hi - lo
        if span <= 0 or size <= 0 or not math.isfinite(span):
            return super().tickValues(minVal, maxVal, size)
        widest = max(abs(lo), abs(hi))
        spacing = nice_step(span / max(1.0, size / 60))
        fits = 1.0
        for _ in range(8):  # a wider step can need fewer decimals, a narrower one more: settle
            fits = size / (self.label_px(widest, spacing) + TICK_GAP_PX)
            wanted = nice_step(span / max(1.0, fits))
            if wanted == spacing:
                break
            spacing = wanted
        first = math.ceil(lo / spacing) * spacing
        values = [first + k * spacing for k in range(int((hi - first) / spacing * (1 + 1e-9)) + 1)]
        inside = [v for v in values if lo + 0.1 * span < v < hi - 0.1 * span]
        if len(values) < 3 and not inside:  # only the ends, whose labels leave the axis: one in the middle
            step = nice_step(span / 4)
            return [(step, [round((lo + hi) / 2 / step) * step])]
        return [(spacing, values)]


class RectsItem(pg.GraphicsObject):
    """Many rectangles in one item, grouped by colour and drawn with ``drawRects``.

    Up to ``DIRECT_MAX`` rectangles are recorded once into a QPicture that every repaint replays. A
    bigger lane is drawn from its arrays at paint time with a level of detail: only the visible
    rectangles, and of those narrower than 2 px one 1 px column per pixel, row and colour, so a
    zoomed-out view of 200,000 kernels costs about one rectangle per pixel column.
    """

    def __init__(self, x0: np.ndarray, width: np.ndarray, y0: np.ndarray, height: float,
                 colour_keys: np.ndarray, colours: list[QColor], outline: QColor | None = None,
                 labels: list[str] | None = None, elide: Qt.TextElideMode = Qt.TextElideMode.ElideRight):
        super().__init__()
        self.count = int(x0.size)
        # names drawn inside rects wide enough on screen (ranges only: a few hundred at most)
        self._labels = labels if labels is not None and len(labels) == self.count <= MAX_LABELLED else None
        self._x0, self._x1, self._y0, self._h = x0, x0 + width, y0, height
        self._keys = colour_keys
        self._colours = colours
        self._outline = outline
        self._elide = elide
        self._picture: QPicture | None = None
        if self.count <= DIRECT_MAX:
            self._picture = QPicture()
            painter = QPainter(self._picture)
            self._draw(painter, np.arange(self.count))
            painter.end()
        if self.count:
            self._bounds = QRectF(float(x0.min()), float(y0.min()), float(self._x1.max() - x0.min()),
                                  float(y0.max() - y0.min() + height))
        else:
            self._bounds = QRectF()

    @staticmethod
    def _pen(colour: QColor) -> QPen:
        pen = QPen(colour)
        pen.setCosmetic(True)
        pen.setWidth(0)
        return pen

    def _draw(self, painter: QPainter, idx: np.ndarray) -> None:
        keys = self._keys[idx]
        for key in np.unique(keys):
            sel = idx[keys == key]
            colour = self._colours[int(key)]
            painter.setPen(self._pen(self._outline if self._outline is not None else colour.darker(125)))
            painter.setBrush(colour)
            painter.drawRects([QRectF(float(x), float(y), float(e - x), self._h)
                               for x, y, e in zip(self._x0[sel], self._y0[sel], self._x1[sel])])

    def _draw_lod(self, painter: QPainter) -> None:
        view = self.viewRect()
        px_per_ms = abs(painter.transform().m11())
        if view is None or not px_per_ms:
            return
        vis = np.flatnonzero((self._x1 >= view.left()) & (self._x0 <= view.right()))
        if vis.size <= DIRECT_MAX:
            self._draw(painter, vis)
            return
        width_px = (self._x1[vis] - self._x0[vis]) * px_per_ms
        self._draw(painter, vis[width_px >= 2])
        narrow = vis[width_px < 2]
        if not narrow.size:
            return
        cols = np.floor((self._x0[narrow] - view.left()) * px_per_ms).astype(np.int64)
        rows = np.round(self._y0[narrow] * 8).astype(np.int64)
        _, first = np.unique(np.stack([rows, cols, self._keys[narrow].astype(np.int64)], 1), axis=0,
                             return_index=True)
        pick, cols = narrow[first], cols[first]
        step = 1.0 / px_per_ms
        keys = self._keys[pick]
        for key in np.unique(keys):
            sel = keys == key
            colour = self._colours[int(key)]
            painter.setPen(self._pen(colour))
            painter.setBrush(colour)
            painter.drawRects([QRectF(view.left() + c * step, float(y), step, self._h)
                               for c, y in zip(cols[sel], self._y0[pick[sel]])])

    def paint(self, painter: QPainter, *args: Any) -> None:
        if self._picture is not None:
            self._picture.play(painter)
        else:
            self._draw_lod(painter)
        if self._labels is None:
            return
        view = self.viewRect()  # the visible part of the view, in data coordinates
        if view is None:
            return
        x0, x1 = np.maximum(self._x0, view.left()), np.minimum(self._x1, view.right())
        t = painter.transform()
        left, right = x0 * t.m11() + t.m31(), x1 * t.m11() + t.m31()
        show = np.flatnonzero(right - left >= LABEL_MIN_PX)
        if not show.size:
            return
        painter.save()
        painter.resetTransform()
        painter.setPen(QColor("#111"))
        metrics = painter.fontMetrics()
        for i in show[:MAX_LABELLED]:
            top = self._y0[i] * t.m22() + t.m32()
            bottom = (self._y0[i] + self._h) * t.m22() + t.m32()
            box = QRectF(float(left[i]) + 3, min(top, bottom), float(right[i] - left[i]) - 6, abs(bottom - top))
            text = metrics.elidedText(self._labels[i], self._elide, int(box.width()))
            painter.drawText(box, int(Qt.AlignmentFlag.AlignVCenter | Qt.AlignmentFlag.AlignLeft), text)
        painter.restore()

    def boundingRect(self) -> QRectF:
        return self._bounds


class TimelineWidget(QWidget):
    """The lanes of one capture on one time axis (ms from the run's start)."""

    itemClicked = Signal(dict)  # the item under a click: lane, name, cls, start_ms, dur_ms, stage, module

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.data: TimelineData | None = None
        self.highlighted_count = 0
        self._rows: list[tuple[str, Any]] = []  # (kind, lane index | marker set) per row, top to bottom
        self._items: list[pg.GraphicsObject] = []
        self._highlight: RectsItem | None = None

        self.plot = pg.PlotWidget(background="w", axisItems={"bottom": TimeAxis("bottom")})
        self.plot.setMenuEnabled(False)
        self.plot.hideButtons()
        self.vb: pg.ViewBox = self.plot.getPlotItem().getViewBox()
        self.vb.setMouseEnabled(x=True, y=False)
        self.vb.invertY(True)
        self.vb.disableAutoRange()
        item = self.plot.getPlotItem()
        item.setLabel("bottom", "time from the run's start", units="ms")
        item.getAxis("bottom").enableAutoSIPrefix(False)
        self.left = item.getAxis("left")
        self.left.setWidth(LEFT_AXIS_PX)
        self.left.setStyle(tickLength=0)
        self.left.setPen(pg.mkPen("#888"))
        self.left.setTextPen(pg.mkPen("#222"))
        item.getAxis("bottom").setTextPen(pg.mkPen("#222"))
        item.showGrid(x=True, y=False, alpha=0.15)
        self.vb.sigResized.connect(self._fit_lane_font)

        self.info = plain_label("")
        self.info.setTextFormat(Qt.TextFormat.PlainText)
        self.info.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.info.setWordWrap(False)
        self.info.setMinimumWidth(50)
        legend = QWidget()  # its labels must not widen the widget: ignored size hint, more rows instead
        legend.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.legend = QGridLayout(legend)
        self.legend.setContentsMargins(4, 0, 4, 0)
        self.legend.setHorizontalSpacing(4)
        self.legend.setVerticalSpacing(2)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.plot, 1)
        layout.addWidget(legend)
        layout.addWidget(self.info)

        self.plot.scene().sigMouseMoved.connect(self._on_moved)
        self.plot.scene().sigMouseClicked.connect(self._on_clicked)

    # -- data -------------------------------------------------------------------------------------
    def clear(self) -> None:
        for it in self._items:
            self.plot.removeItem(it)
        self._items = []
        self._clear_highlight()
        self._rows = []
        self.data = None
        self.left.setTicks([[]])
        self._set_legend([])
        self.info.setText("")

    def set_data(self, data: TimelineData | None) -> None:
        """Show a timeline (None clears it); the whole run in view."""
        self.clear()
        if data is None:
            return
        self.data = data
        if len(data.syncs):
            self._rows.append(("marker", "syncs"))
        if len(data.copies):
            self._rows.append(("marker", "copies"))
        self._rows += [("lane", i) for i in range(len(data.lanes))]
        colours = [class_colour(c) for c in data.classes]
        pad = (1 - ROW_FILL) / 2
        for row, (kind, ref) in enumerate(self._rows):
            if kind == "marker":
                self._add_markers(row, getattr(data, ref), colours)
                continue
            lane = data.lanes[ref]
            y0 = np.full(len(lane), row + pad)
            if lane.kind == "stage":  # stages by name (the live charts' colours), modules by depth, the rest by class
                rank = {v: k for k, v in enumerate(dict.fromkeys(lane.label.tolist()))}
                keys = np.array([rank[v] for v in lane.label.tolist()], np.int64)
                stage_colours = [QColor(*stage_colour(data.names[int(v)])) for v in rank]
                item = RectsItem(lane.start_ms, lane.dur_ms, y0, ROW_FILL, keys, stage_colours, QColor("#555"),
                                 [data.names[int(v)] for v in lane.label])
            elif lane.kind == "module":
                depth = sum(1 for li in range(ref) if data.lanes[li].kind == "module")
                c = QColor(MODULE_COLOURS[depth % len(MODULE_COLOURS)])
                names = [module_tail(data.names[int(v)]) for v in lane.label] if len(lane) <= MAX_LABELLED else None
                item = RectsItem(lane.start_ms, lane.dur_ms, y0, ROW_FILL, np.zeros(len(lane), np.int64), [c],
                                 QColor("#555"), names)
            else:
                item = RectsItem(lane.start_ms, lane.dur_ms, y0, ROW_FILL, lane.cls.astype(np.int64), colours)
            self.plot.addItem(item)
            self._items.append(item)
        self.plot.setMinimumHeight(PLOT_MARGIN_PX + math.ceil(len(self._rows) * LANE_FONT_MIN_PX / LANE_FONT_FILL))
        self._fit_lane_font()
        rows = max(1, len(self._rows))
        span = max(data.window_ms, 1e-3)
        self.vb.setLimits(xMin=-0.02 * span, xMax=1.02 * span, minXRange=1e-4, yMin=0, yMax=rows)
        self.vb.setYRange(0, rows, padding=0)
        self.show_all()
        present = sorted({data.classes[int(c)] for lane in data.lanes if lane.kind not in ("stage", "module")
                          for c in np.unique(lane.cls)})
        self._set_legend(present)
        dropped = f"; {data.dropped:,} shortest items not drawn (limit {data.max_items:,})" if data.dropped else ""
        self.info.setText(f"{data.items:,} items in {len(data.lanes)} lanes, {data.window_ms:.2f} ms{dropped}")

    def _fit_lane_font(self, *_args: Any) -> None:
        """Lane names that fit: a font no taller than a row, each name elided (in the middle) to the axis width.
        pyqtgraph drops a name that would leave the axis: a long one ('CPU ops 0 (thread 1234567)') vanished."""
        rows = max(1, len(self._rows))
        row_px = self.vb.height() / rows if self.vb.height() > 0 else 0.0
        font = QFont()
        if row_px > 0:
            default_px = QFontMetricsF(font).height()
            px = max(LANE_FONT_MIN_PX, min(default_px, row_px * LANE_FONT_FILL))
            font.setPixelSize(max(1, int(px)))
        self.left.setStyle(tickFont=font)
        room = LEFT_AXIS_PX - self.left.style["tickTextOffset"][0] - LANE_NAME_MARGIN_PX
        metrics = QFontMetricsF(font)
        self.left.setTicks([[(row + 0.5, metrics.elidedText(self._row_name(row), Qt.TextElideMode.ElideMiddle, room))
                             for row in range(len(self._rows))]])

    def _add_markers(self, row: int, marks: Any, colours: list[QColor]) -> None:
        brushes = [pg.mkBrush(colours[int(c)]) for c in marks.cls]
        pens = [pg.mkPen(colours[int(c)], width=2) for c in marks.cls]
        item = pg.ScatterPlotItem(x=marks.time_ms, y=np.full(len(marks), row + 0.5), symbol="|", size=16,
                                  pen=pens, brush=brushes, pxMode=True, hoverable=False)
        self.plot.addItem(item)
        self._items.append(item)

    def _row_name(self, row: int) -> str:
        kind, ref = self._rows[row]
        if kind == "marker":
            return SYNC_ROW if ref == "syncs" else COPY_ROW
        return self.data.lanes[ref].name if self.data else ""

    def _set_legend(self, classes: list[str]) -> None:
        while self.legend.count():
            w = self.legend.takeAt(0).widget()
            if w is not None:
                w.deleteLater()
        by_colour: dict[str, list[str]] = {}  # one entry per colour: "kernel: conv simt bf16, fp32"
        for cls in classes:
            by_colour.setdefault(class_colour(cls).name(), []).append(cls)
        for n, (colour, names) in enumerate(by_colour.items()):
            row, col = divmod(n, LEGEND_COLUMNS)
            swatch = plain_label()
            swatch.setFixedSize(10, 10)
            swatch.setStyleSheet(f"background: {colour}; border: 1px solid #555;")
            first = names[0].replace("kernel ", "kernel: ").replace("api ", "API: ")
            rest = [n.removeprefix("kernel ") for n in names[1:]]
            text = plain_label(", ".join([first, *rest]))
            text.setTextFormat(Qt.TextFormat.PlainText)
            text.setStyleSheet("font-size: 8pt;")
            self.legend.addWidget(swatch, row, 2 * col)
            self.legend.addWidget(text, row, 2 * col + 1)

    @property
    def row_names(self) -> list[str]:
        return [self._row_name(r) for r in range(len(self._rows))]

    # -- view -------------------------------------------------------------------------------------
    def show_all(self) -> None:
        if self.data is not None:
            span = max(self.data.window_ms, 1e-3)
            self.vb.setXRange(0, span, padding=0.01)

    def x_range(self) -> tuple[float, float]:
        (x0, x1), _ = self.vb.viewRange()
        return float(x0), float(x1)

    def zoom(self, factor: float, center: float | None = None) -> None:
        """Zoom the time axis by ``factor`` (> 1 zooms in) around ``center`` ms (the view's middle)."""
        x0, x1 = self.x_range()
        c = (x0 + x1) / 2 if center is None else center
        half = (x1 - x0) / 2 / factor
        self.vb.setXRange(c - half, c + half, padding=0)

    def _clear_highlight(self) -> None:
        if self._highlight is not None:
            self.plot.removeItem(self._highlight)
            self._highlight = None
        self.highlighted_count = 0

    def select(self, name: str, stage: str | None = None, zoom: bool = True) -> int:
        """Highlight the items about ``name`` (a module path or bucket, a stage, a kernel or op name),
        optionally only in ``stage``, and zoom to them; returns how many are highlighted."""
        self._clear_highlight()
        if self.data is None or not name:
            return 0
        hits = self.data.matches(name, stage)
        row_of = {ref: row for row, (kind, ref) in enumerate(self._rows) if kind == "lane"}
        xs, ws, ys = [], [], []
        pad = (1 - ROW_FILL) / 2
        for li, idx in hits.items():
            lane = self.data.lanes[li]
            xs.append(lane.start_ms[idx])
            ws.append(lane.dur_ms[idx])
            ys.append(np.full(idx.size, row_of[li] + pad))
        if not xs:
            self.info.setText(f"nothing in the timeline for {name}")
            return 0
        x, w, y = np.concatenate(xs), np.concatenate(ws), np.concatenate(ys)
        self._highlight = RectsItem(x, w, y, ROW_FILL, np.zeros(x.size, np.int64), [HIGHLIGHT], HIGHLIGHT_EDGE)
        self._highlight.setZValue(10)
        self.plot.addItem(self._highlight)
        self.highlighted_count = int(x.size)
        span = self.data.extent(hits)
        assert span is not None  # hits is not empty: xs was filled from it
        start, end = span
        if zoom:
            margin = max((end - start) * 0.05, 0.005)
            self.vb.setXRange(start - margin, end + margin, padding=0)
        self.info.setText(f"{name}: {self.highlighted_count:,} items highlighted, {start:.3f}-{end:.3f} ms")
        return self.highlighted_count

    # -- mouse ------------------------------------------------------------------------------------
    def item_at(self, x_ms: float, row: int, tol_px: float = 3.0) -> dict[str, Any] | None:
        """The item in ``row`` under ``x_ms`` (within ``tol_px`` screen pixels), as a dict, or None."""
        if self.data is None or not 0 <= row < len(self._rows):
            return None
        px = self.vb.viewPixelSize()[0] or 0.0
        tol = px * tol_px
        kind, ref = self._rows[row]
        if kind == "marker":
            marks = getattr(self.data, ref)
            if not len(marks):
                return None
            j = int(np.argmin(np.abs(marks.time_ms - x_ms)))
            if abs(marks.time_ms[j] - x_ms) > max(tol, 1e-9):
                return None
            return {"lane": self._row_name(row), "kind": ref, "name": self.data.names[int(marks.label[j])],
                    "cls": self.data.classes[int(marks.cls[j])], "start_ms": float(marks.time_ms[j]),
                    "dur_ms": float(marks.dur_ms[j]), "stage": "", "module": ""}
        i = self.data.item_at(ref, x_ms, tol)
        return None if i is None else self.data.item(ref, i)

    @staticmethod
    def describe(item: dict[str, Any]) -> str:
        where = " / ".join(p for p in (item.get("stage"), item.get("module")) if p)
        dur = item["dur_ms"]
        dur_text = f"{dur * 1e3:.1f} us" if dur < 1 else f"{dur:.3f} ms"
        return (f"{item['lane']}: {item['name']}  [{item['cls']}]  {dur_text} at {item['start_ms']:.3f} ms"
                + (f"  in {where}" if where else ""))

    def _hit(self, scene_pos: QPointF) -> dict[str, Any] | None:
        if not self.vb.sceneBoundingRect().contains(scene_pos):
            return None
        p = self.vb.mapSceneToView(scene_pos)
        return self.item_at(p.x(), int(math.floor(p.y())))

    def _on_moved(self, scene_pos: QPointF) -> None:
        item = self._hit(scene_pos)
        if item is not None:
            self.info.setText(self.describe(item))

    def _on_clicked(self, event: Any) -> None:
        item = self._hit(event.scenePos())
        if item is not None:
            self.info.setText(self.describe(item))
            self.itemClicked.emit(item)
