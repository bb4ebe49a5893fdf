"""A/B: two runs of the same queries side by side, tracks coloured by how far A and B disagree.

Two frame views share one frame index and one zoom/pan (linked view boxes); each draws its side's
points coloured by the point's mean px divergence (green -> red, in COLOUR_BINS steps; hollow when
occluded) and optional trails with one curve item. Each colour step is one uniformly styled
ScatterPlotItem (filled) plus one (hollow): per-frame updates are then plain numpy ``setData(x, y)``
calls, several times faster than one item with a pen and brush per spot. A ranked table lists the most divergent points;
clicking a row (or a point in either view) selects it: a ring in both views, both sides' full paths,
and the frame where the two sides are furthest apart. Numbers come from engine.metrics.
"""

from __future__ import annotations

import html
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QRectF, Qt, QTimer, Signal
from PySide6.QtGui import QColor, QFont, QFontMetrics
from PySide6.QtWidgets import (
    QCheckBox,
    QSplitter,
    QTableWidgetItem,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from engine.api import Divergence, VideoGeometry, divergence, tapvid_metrics
from gui.history import QUERY_MATCH_PX
from gui.model import RunData
from gui.panels.ab_parts import ResizeWatch, SideView
from gui.widgets.tables import row_table
from gui.widgets.text import plain_label, plain_tip, rich_label
from gui.widgets.transport import Transport
from gui.widgets.video_view import IMAGE_LEVELS

#: colour scale of divergence: green (agree) -> yellow -> red (far apart)
DIVERGENCE_COLOURS = [(40, 200, 70), (240, 215, 40), (230, 40, 40)]
NO_DIVERGENCE_COLOUR = (150, 150, 150)  # points never visible in both runs
#: the colour scale tops out at this percentile of the per-point divergences (outliers saturate red) ...
SCALE_PERCENTILE = 95
#: ... but never below this many pixels, so two near-identical runs stay green
MIN_SCALE_PX = 1.0
TOP_K = 100  # rows in the most-divergent list
COLOUR_BINS = 10  # steps of the colour scale the points are drawn in (one scatter item each)
CLICK_RADIUS_PX = 10  # a click this close (screen pixels) to a point selects it
DEFAULT_TRAIL = 8
PLAY_FPS = 25.0
#: queries of A and B further apart than this are "different queries" (reports round queries to 2 decimals)
QUERIES_MATCH_PX = QUERY_MATCH_PX
BACKGROUND = (20, 20, 20)
TITLE_COLOUR = "#e0e0e0"
TITLE_PT = 10  # plot titles; elided to the plot's width (a long label must not spill into the other view)
TITLE_PX = 30  # height pyqtgraph reserves for a plot title
TITLE_MARGIN_PX = 12
TABLE_MIN_WIDTH = 330
PLOT_MIN_WIDTH = 120
#: the list of points sits beside the views when the A/B tab is at least this wide, else below them
WIDE_LAYOUT_PX = 1150
TABLE_SHARE_WIDE = 0.24  # share of the width the list gets beside the views
VIEWS_MIN_SHARE = 0.45  # below: the views take at least this share of the height ...
COLOUR_BAR_PX = 75  # the colour bar with its axis and label
VIEWS_MAX_SHARE = 0.75  # ... and at most this
VIEWS_SLACK_PX = 16  # below: height the views get beyond frame + title
COLUMNS = ("#", "point", "mean px", "vis. agree", "query")


class ABView(QWidget):
    """Two runs (A, B) of the same queries in two synchronised views, coloured by divergence."""

    pointSelected = Signal(int)  # index of the selected point (into the queries)
    frameChanged = Signal(int)

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.frames: np.ndarray | None = None  # uint8 [T, H, W, 3]
        self.video_geometry = VideoGeometry.unscaled(1, 1)  # source vs frame pixels of ``frames``
        self.run_a: RunData | None = None
        self.run_b: RunData | None = None
        self.divergence: Divergence | None = None
        self.distance: np.ndarray | None = None  # [N, T] px between A and B, NaN unless both visible
        self.aj: dict[str, float | None] = {"a": None, "b": None}
        self.frame = 0
        self.selected: int | None = None
        self.trail = DEFAULT_TRAIL
        self.colour_max_px = MIN_SCALE_PX
        self._cmap = pg.ColorMap(np.linspace(0.0, 1.0, len(DIVERGENCE_COLOURS)), DIVERGENCE_COLOURS)
        #: colour of each bin: COLOUR_BINS steps of the scale, then grey for "never both visible"
        self.bin_rgb = np.vstack([self._cmap.map((np.arange(COLOUR_BINS) + 0.5) / COLOUR_BINS, mode="byte")[:, :3],
                                  NO_DIVERGENCE_COLOUR])
        self.point_bin = np.zeros(0, np.int64)  # [N] bin index per point

        self.summary = rich_label("no runs to compare")
        self.summary.setWordWrap(True)
        self.warning = plain_label("")
        self.warning.setStyleSheet("color: #d08000;")
        self.warning.setWordWrap(True)
        self.warning.hide()

        self.canvas = pg.GraphicsLayoutWidget()
        self.canvas.setBackground(BACKGROUND)
        self.side_a = SideView(self.canvas.addPlot(row=0, col=0), self.bin_rgb)
        self.side_b = SideView(self.canvas.addPlot(row=0, col=1), self.bin_rgb)
        for col, side in enumerate((self.side_a, self.side_b)):  # equal widths: linked views show the same region
            self.canvas.ci.layout.setColumnStretchFactor(col, 1)
            side.plot.setMinimumWidth(PLOT_MIN_WIDTH)
            side.plot.setPreferredWidth(PLOT_MIN_WIDTH)
        self.side_b.plot.setXLink(self.side_a.plot)
        self.side_b.plot.setYLink(self.side_a.plot)
        self.colour_bar = pg.ColorBarItem(values=(0.0, MIN_SCALE_PX), colorMap=self._cmap, interactive=False,
                                          label="mean divergence per point (px)", width=14)
        self.canvas.addItem(self.colour_bar, row=0, col=2)
        self.stacked = False  # A above B (True) or A beside B (False): whichever shows the frames larger
        self._titles = {"A": "", "B": ""}
        self._title_font = QFont()
        self._title_font.setPointSizeF(TITLE_PT)
        for side in (self.side_a, self.side_b):
            side.plot.geometryChanged.connect(self._elide_titles)
        self._fitted = True  # the views show the whole frame (refit on resize until the user zooms or pans)
        for side in (self.side_a, self.side_b):
            side.plot.getViewBox().sigRangeChangedManually.connect(self._on_manual_zoom)
        self.side_a.plot.getViewBox().sigResized.connect(self._refit)
        self._resize_watch = ResizeWatch(self._on_canvas_resized, self)
        self.canvas.installEventFilter(self._resize_watch)
        self.canvas.scene().sigMouseClicked.connect(self._on_scene_click)

        self.table = row_table(COLUMNS)
        self.table.horizontalHeader().setStretchLastSection(True)
        self.table.setToolTip("The most divergent points, largest mean distance first; click one to select it")
        self.table.itemSelectionChanged.connect(self._on_table_selection)
        self.table.setMinimumWidth(TABLE_MIN_WIDTH)
        table_box = QWidget()
        table_layout = QVBoxLayout(table_box)
        table_layout.setContentsMargins(0, 0, 0, 0)
        table_layout.addWidget(plain_label("Most divergent points"))
        table_layout.addWidget(self.table)

        self.splitter = splitter = QSplitter(Qt.Orientation.Horizontal)
        splitter.addWidget(self.canvas)
        splitter.addWidget(table_box)
        splitter.setStretchFactor(0, 4)
        splitter.setStretchFactor(1, 1)
        splitter.setChildrenCollapsible(False)
        self._user_split = False  # the user dragged the splitter: keep their sizes
        splitter.splitterMoved.connect(lambda *_: setattr(self, "_user_split", True))

        self.transport = Transport("Play / pause both views", ("Previous frame", "Next frame"), 70)
        self.transport.connect_view(self.set_playing, self.step, self.set_frame)
        self.play_button, self.slider = self.transport.play_button, self.transport.slider
        self.trails_box = QCheckBox("trails")
        self.trails_box.setChecked(True)
        self.trails_box.toggled.connect(lambda _: self._draw())
        fit = QToolButton(text="Fit")
        fit.setToolTip("Reset zoom (wheel zooms, drag pans; both views follow)")
        fit.clicked.connect(self.fit)
        self._timer = QTimer(self)
        self._timer.setInterval(int(1000 / PLAY_FPS))
        self._timer.timeout.connect(self._advance)

        legend = plain_label("filled: visible · hollow: occluded · colour: mean px divergence of the point · "
                        "selected: ring, path in A solid cyan, in B dashed magenta")
        legend.setStyleSheet("color: gray;")
        legend.setWordWrap(True)
        self.transport.add(self.trails_box)
        self.transport.add(fit)
        layout = QVBoxLayout(self)
        layout.addWidget(self.summary)
        layout.addWidget(self.warning)
        layout.addWidget(splitter, 1)
        layout.addWidget(legend)
        layout.addWidget(self.transport)

    # -- inputs ------------------------------------------------------------------------------
    @property
    def num_frames(self) -> int:
        if self.frames is not None:
            return int(self.frames.shape[0])
        if self.run_a is not None:
            return self.run_a.num_frames
        return 0

    def set_frames(self, frames: np.ndarray | None, geometry: VideoGeometry | None = None) -> None:
        """The video both runs tracked, uint8 [T, H, W, 3], placed in its source pixels (tracks are in them)."""
        self.frames = None if frames is None else np.ascontiguousarray(frames, dtype=np.uint8)
        if not self._user_split:
            self._size_splitter()
        self._arrange()
        self._update_slider()
        self._draw()
        if self.frames is not None:  # after _draw: an ImageItem places its rect relative to the image it has
            h, w = self.frames.shape[1:3]
            self.video_geometry = geometry or VideoGeometry.unscaled(w, h)
            for side in (self.side_a, self.side_b):  # centre-aligned, as the video view places it
                side.image.setRect(QRectF(*self.video_geometry.frame_extent))
        self.fit()

    def set_runs(self, a: RunData, b: RunData, ground_truth: dict[str, np.ndarray] | None = None) -> None:
        """Compare run A with run B; ground_truth: {"tracks" [N,T,2], "visible" [N,T], "query_t" [N]}."""
        self.run_a, self.run_b = a, b
        self.selected = None
        self._titles = {"A": f"A: {a.label}", "B": f"B: {b.label}"}
        self.canvas.setToolTip(plain_tip(f"{self._titles['A']}\n{self._titles['B']}"))
        self._elide_titles()
        problems = []
        if a.tracks.shape != b.tracks.shape:
            self.divergence = None
            self.distance = None
            problems.append(f"A has {a.num_points} points x {a.num_frames} frames, B has {b.num_points} x "
                            f"{b.num_frames}: they cannot be compared point by point")
        else:
            if np.nanmax(np.abs(a.queries - b.queries), initial=0.0) > QUERIES_MATCH_PX:
                problems.append("A and B were run from different query points: the divergence mixes "
                                "tracker differences with query differences")
            self.divergence = divergence(a.tracks, a.visible, b.tracks, b.visible)
            both = a.visible & b.visible
            with np.errstate(invalid="ignore"):
                dist = np.linalg.norm(a.tracks.astype(np.float64) - b.tracks, axis=-1)  # [N, T]
            self.distance = np.where(both, dist, np.nan)
        if not (a.complete and b.complete):
            problems.append("a run is incomplete (cancelled or still running): missing points are left out")
        if self.frames is not None and self.frames.shape[0] != a.num_frames:
            problems.append(f"the video has {self.frames.shape[0]} frames but the runs have {a.num_frames}")
        self.aj = {"a": self._aj(a, ground_truth), "b": self._aj(b, ground_truth)}
        self.warning.setText("\n".join(problems))
        self.warning.setVisible(bool(problems))
        self._build_styles()
        self._fill_table()
        self._update_summary(ground_truth is not None)
        self._update_slider()
        self._draw()

    def clear(self) -> None:
        """No comparison (another video was opened): no runs, no table, no warning."""
        self.run_a = self.run_b = None
        self.divergence = None
        self.distance = None
        self.selected = None
        self.aj = {"a": None, "b": None}
        self._titles = {"A": "", "B": ""}  # as built
        self.canvas.setToolTip("")
        self._elide_titles()
        self.warning.hide()
        self.table.setRowCount(0)
        self.summary.setText("no runs to compare")
        self._update_slider()
        self._draw()

    def _aj(self, run: RunData, ground_truth: dict[str, np.ndarray] | None) -> float | None:
        """AJ of a run against ground truth; from its report when no ground truth is given."""
        if ground_truth is None:
            acc = run.report.accuracy if run.report is not None else None
            return acc.aj if acc is not None and acc.vs in ("", "ground truth") else None
        size = self._video_size(run)
        if size is None:
            return None
        query_t = ground_truth.get("query_t")
        query_t = run.queries[:, 0] if query_t is None else np.asarray(query_t)
        try:
            scores = tapvid_metrics(run.tracks, run.visible, ground_truth["tracks"], ground_truth["visible"],
                                    query_t, size=size)
        except (KeyError, ValueError):
            return None
        return None if not np.isfinite(scores.aj) else float(scores.aj)

    def _video_size(self, run: RunData) -> tuple[int, int] | None:
        if self.frames is not None:
            return self.video_geometry.source_size
        geometry = run.report.video.geometry if run.report is not None else None
        return geometry.source_size if geometry is not None else None

    # -- layout ------------------------------------------------------------------------------
    def resizeEvent(self, event: Any) -> None:  # noqa: N802 (Qt name)
        """The list of points goes beside the views on a wide tab, below them on a narrow one."""
        super().resizeEvent(event)
        wide = self.width() >= WIDE_LAYOUT_PX
        orientation = Qt.Orientation.Horizontal if wide else Qt.Orientation.Vertical
        if orientation != self.splitter.orientation():
            self.splitter.setOrientation(orientation)
            self._user_split = False
        if not self._user_split:
            self._size_splitter()

    def _size_splitter(self) -> None:
        """Beside: the list takes TABLE_SHARE_WIDE of the width. Below: the views take the height their
        frames need side by side (VIEWS_MIN_SHARE .. VIEWS_MAX_SHARE of it), the list the rest."""
        wide = self.splitter.orientation() == Qt.Orientation.Horizontal
        total = self.splitter.width() if wide else self.splitter.height()
        if wide:
            views = int(total * (1 - TABLE_SHARE_WIDE))
        else:
            need = (self.splitter.width() - COLOUR_BAR_PX) / 2 / self._frame_aspect() + TITLE_PX + VIEWS_SLACK_PX
            views = int(np.clip(need, total * VIEWS_MIN_SHARE, total * VIEWS_MAX_SHARE))
        self.splitter.setSizes([views, total - views])

    def _frame_aspect(self) -> float:
        """Width / height of the video (1 before there is one)."""
        if self.frames is not None:
            return self.frames.shape[2] / max(1, self.frames.shape[1])
        return 1.0

    def _on_manual_zoom(self, *_: Any) -> None:
        self._fitted = False

    def _on_canvas_resized(self) -> None:
        self._arrange()
        self._refit()

    def _refit(self, *_: Any) -> None:
        """Show the whole frame again after a resize, unless the user zoomed or panned."""
        if self._fitted:
            self.fit()

    def _arrange(self) -> None:
        """Put A beside B or above it, whichever draws the frames larger in the canvas as it is now."""
        w, h = max(1, self.canvas.width() - COLOUR_BAR_PX), max(1, self.canvas.height())
        aspect = self._frame_aspect()
        beside = min(w / 2 / aspect, h - TITLE_PX)  # frame height each way
        above = min(w / aspect, h / 2 - TITLE_PX)
        stacked = above > beside
        if stacked == self.stacked:
            return
        self.stacked = stacked
        layout = self.canvas.ci
        for item in (self.side_b.plot, self.colour_bar):
            layout.removeItem(item)
        grid = layout.layout
        if stacked:
            layout.addItem(self.side_b.plot, row=1, col=0)
            layout.addItem(self.colour_bar, row=0, col=1, rowspan=2)
        else:
            layout.addItem(self.side_b.plot, row=0, col=1)
            layout.addItem(self.colour_bar, row=0, col=2)
        for i in range(3):
            grid.setColumnStretchFactor(i, 1 if i == 0 or (i == 1 and not stacked) else 0)
        for i in range(2):
            grid.setRowStretchFactor(i, 1 if i == 0 or stacked else 0)
        self._elide_titles()

    def _elide_titles(self, *_: Any) -> None:
        """Each plot's title cut to its width with an ellipsis (the full labels are the canvas tooltip)."""
        metrics = QFontMetrics(self._title_font)
        for key, side in (("A", self.side_a), ("B", self.side_b)):
            full = self._titles[key]
            if not full:
                continue
            room = max(0, int(side.plot.geometry().width()) - TITLE_MARGIN_PX)
            text = metrics.elidedText(full, Qt.TextElideMode.ElideMiddle, room) if room else full
            if side.title_text == text:
                continue
            side.title_text = text
            side.plot.setTitle(html.escape(text), color=TITLE_COLOUR, size=f"{TITLE_PT}pt")
            side.plot.titleLabel.setMinimumWidth(0)  # never let the title widen its plot

    def titles(self) -> tuple[str, str]:
        """The plot titles as drawn (elided to fit)."""
        return self.side_a.title_text, self.side_b.title_text

    # -- derived display state ---------------------------------------------------------------
    def _build_styles(self) -> None:
        """Colour bin per point from its divergence on the colour scale (grey when never both visible)."""
        n = self.run_a.num_points if self.run_a is not None else 0
        grey = COLOUR_BINS
        if self.divergence is None:
            self.point_bin = np.full(n, grey, np.int64)
            self.colour_max_px = MIN_SCALE_PX
        else:
            per_point = self.divergence.per_point_px
            finite = np.isfinite(per_point)
            top = float(np.percentile(per_point[finite], SCALE_PERCENTILE)) if finite.any() else 0.0
            self.colour_max_px = max(MIN_SCALE_PX, top)
            scaled = np.clip(np.nan_to_num(per_point, nan=0.0) / self.colour_max_px, 0.0, 1.0)
            self.point_bin = np.where(finite, np.minimum((scaled * COLOUR_BINS).astype(np.int64), COLOUR_BINS - 1),
                                      grey)
        self.colour_bar.setLevels((0.0, self.colour_max_px))
        self.point_rgba = np.column_stack([self.bin_rgb[self.point_bin], np.full(n, 255)]).astype(np.uint8)

    def _fill_table(self) -> None:
        self.table.blockSignals(True)
        self.table.setRowCount(0)
        if self.divergence is not None and self.run_a is not None:
            order = self.divergence.most_divergent(min(TOP_K, self.run_a.num_points))
            self.table.setRowCount(len(order))
            for row, i in enumerate(order):
                px = self.divergence.per_point_px[i]
                agree = self.divergence.per_point_visibility_agreement[i]
                t, x, y = self.run_a.queries[i]
                cells = (str(row + 1), str(int(i)), "—" if not np.isfinite(px) else f"{px:.2f}",
                         f"{100 * agree:.0f} %", f"t={t:g} ({x:.0f}, {y:.0f})")
                for col, text in enumerate(cells):
                    item = QTableWidgetItem(text)
                    item.setData(Qt.ItemDataRole.UserRole, int(i))
                    if col == 2:
                        item.setBackground(QColor(*map(int, self.point_rgba[i][:3])))
                        item.setForeground(QColor(0, 0, 0))
                    if col in (2, 3):
                        item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                    self.table.setItem(row, col, item)
        self.table.blockSignals(False)

    def _update_summary(self, have_ground_truth: bool) -> None:
        div = self.divergence
        if div is None:
            self.summary.setText("no comparison")
            return
        parts = [f"mean |A−B| <b>{_px(div.mean_px)}</b>", f"max {_px(div.max_px)}",
                 f"visibility agreement <b>{100 * div.visibility_agreement:.1f} %</b>"]
        if self.aj["a"] is not None or self.aj["b"] is not None:
            parts.append(f"AJ vs ground truth: A <b>{_num(self.aj['a'])}</b>, B <b>{_num(self.aj['b'])}</b>")
        elif not have_ground_truth:
            parts.append("AJ: no ground truth for this video")
        self.summary.setText(" · ".join(parts))

    def row_points(self) -> list[int]:
        """Point indices in the order the most-divergent list shows them."""
        return [int(self.table.item(r, 0).data(Qt.ItemDataRole.UserRole)) for r in range(self.table.rowCount())]

    # -- frame, playback ---------------------------------------------------------------------
    def _update_slider(self) -> None:
        last = max(0, self.num_frames - 1)
        self.transport.set_count(self.num_frames)
        self.set_frame(min(self.frame, last))

    def set_frame(self, t: int) -> None:
        """Show frame t in both views."""
        t = int(np.clip(t, 0, max(0, self.num_frames - 1)))
        changed = t != self.frame
        self.frame = t
        self.transport.show_frame(t, self.num_frames)
        self._draw()
        if changed:
            self.frameChanged.emit(t)

    def step(self, delta: int) -> None:
        self.set_frame(self.frame + delta)

    def set_playing(self, playing: bool) -> None:
        """Play both views together (loops at the end)."""
        if playing and self.num_frames > 1:
            self._timer.start()
        else:
            self._timer.stop()
        self.transport.show_playing(self._timer.isActive())

    def _advance(self) -> None:
        self.set_frame((self.frame + 1) % max(1, self.num_frames))

    def hideEvent(self, event: Any) -> None:  # noqa: N802 (Qt name)
        self.set_playing(False)
        super().hideEvent(event)

    def fit(self) -> None:
        """Zoom both views to the whole frame."""
        if self.frames is not None:
            w, h = self.video_geometry.source_size
        elif self.run_a is not None:
            pts = self.run_a.tracks[np.isfinite(self.run_a.tracks).all(-1)]
            if not len(pts):
                return
            w, h = pts.max(0) + 1
        else:
            return
        self.side_a.plot.getViewBox().setRange(xRange=(-0.5, w - 0.5), yRange=(-0.5, h - 0.5), padding=0)
        self._fitted = True

    # -- selection ---------------------------------------------------------------------------
    def select_point(self, index: int, jump: bool = True) -> None:
        """Select point ``index`` in both views (ring + both paths); jump to its worst frame when paused."""
        if self.run_a is None or not 0 <= index < self.run_a.num_points:
            return
        self.selected = int(index)
        if jump and not self._timer.isActive() and self.distance is not None:
            row = self.distance[index]
            if np.isfinite(row).any():
                self.set_frame(int(np.nanargmax(row)))
        self._sync_table_selection()
        self._draw_selection()
        self._draw()
        self.pointSelected.emit(self.selected)

    def _sync_table_selection(self) -> None:
        rows = [r for r, i in enumerate(self.row_points()) if i == self.selected]
        self.table.blockSignals(True)
        self.table.clearSelection()
        if rows:
            self.table.selectRow(rows[0])
            self.table.scrollToItem(self.table.item(rows[0], 0))
        self.table.blockSignals(False)

    def _on_table_selection(self) -> None:
        items = self.table.selectedItems()
        if items:
            self.select_point(int(items[0].data(Qt.ItemDataRole.UserRole)))

    def _on_scene_click(self, event: Any) -> None:
        """Select the point nearest to a click in either view (within CLICK_RADIUS_PX on screen)."""
        if event.button() != Qt.MouseButton.LeftButton:
            return
        for side, run in ((self.side_a, self.run_a), (self.side_b, self.run_b)):
            vb = side.plot.getViewBox()
            if run is None or not vb.sceneBoundingRect().contains(event.scenePos()):
                continue
            here = vb.mapSceneToView(event.scenePos())
            xy = run.tracks[:, min(self.frame, run.num_frames - 1)]  # [N, 2]
            px_per_unit = vb.viewPixelSize()  # (x, y) view units per screen pixel
            d = np.hypot((xy[:, 0] - here.x()) / px_per_unit[0], (xy[:, 1] - here.y()) / px_per_unit[1])
            d = np.where(np.isfinite(d), d, np.inf)
            if d.size and d.min() <= CLICK_RADIUS_PX:
                event.accept()
                self.select_point(int(np.argmin(d)))
            return

    def _draw_selection(self) -> None:
        for side in (self.side_a, self.side_b):
            if self.selected is None or self.run_a is None or self.run_b is None or self.divergence is None:
                side.path_a.setData([], [])
                side.path_b.setData([], [])
                continue
            xy_a = self.run_a.tracks[self.selected]  # [T, 2]
            xy_b = self.run_b.tracks[self.selected]
            side.path_a.setData(xy_a[:, 0], xy_a[:, 1], connect="finite")
            side.path_b.setData(xy_b[:, 0], xy_b[:, 1], connect="finite")

    # -- drawing -----------------------------------------------------------------------------
    def _draw(self) -> None:
        t = self.frame
        for side, run in ((self.side_a, self.run_a), (self.side_b, self.run_b)):
            if self.frames is not None and t < len(self.frames):
                side.image.setImage(self.frames[t], autoLevels=False, levels=IMAGE_LEVELS)  # as the video view
            if run is None or t >= run.num_frames or len(self.point_bin) != run.num_points:
                side.clear_tracks()
                continue
            xy = run.tracks[:, t]  # [N, 2]
            finite = np.isfinite(xy).all(axis=1)
            vis = run.visible[:, t]
            for b in range(len(self.bin_rgb)):
                in_bin = finite & (self.point_bin == b)
                for item, mask in ((side.filled[b], in_bin & vis), (side.hollow[b], in_bin & ~vis)):
                    if mask.any():
                        item.setData(x=xy[mask, 0], y=xy[mask, 1])
                    elif len(item.data):
                        item.clear()
            self._draw_trails(side, run, t)
            if self.selected is not None and np.isfinite(xy[self.selected]).all():
                side.ring.setData(x=xy[self.selected, :1], y=xy[self.selected, 1:])
            else:
                side.ring.clear()

    def _draw_trails(self, side: SideView, run: RunData, t: int) -> None:
        t0 = max(0, t - self.trail)
        if not self.trails_box.isChecked() or t0 == t:
            side.trails.setData([], [])
            return
        seg = run.tracks[:, t0:t + 1]  # [N, K+1, 2]
        pairs = np.stack([seg[:, :-1], seg[:, 1:]], axis=2).reshape(-1, 2, 2)  # [N*K, 2 ends, 2]
        pairs = pairs[np.isfinite(pairs).all(axis=(1, 2))].reshape(-1, 2)
        side.trails.setData(pairs[:, 0], pairs[:, 1])


def _px(value: float) -> str:
    return "—" if value is None or not np.isfinite(value) else f"{value:.2f} px"


def _num(value: float | None) -> str:
    return "—" if value is None or not np.isfinite(value) else f"{value:.3f}"
