"""Precision trade-off: one row per (video, tracker, machine, precision, batch sizes) run, and speed vs accuracy.

The rows come from the run history (each finished run and each report opened, ``add_entry``) or a bench
file; their fp32 baseline, speedup and divergence are ``engine.analysis.tradeoff``'s (through
``engine.api``). Accuracy files (``trackscope eval/cycle --json``) add the held-out AJ and the real-clip
cycle error of each tracker and precision beside its rows, and a row of its own (speed empty) for a tracker
and precision no run row has (``engine.analysis.tradeoff_accuracy``). This module only draws them: a
sortable table and a speed-vs-accuracy scatter, of one video at a time (the one open; "All videos" shows
every row with its video).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QHBoxLayout,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from engine.api import (
    CYCLE_KIND,
    EVAL_KIND,
    MEMORY_PROCESS_RSS,
    PRECISION_UNUSED,
    AccuracyFile,
    AccuracyOnlyRow,
    CycleAccuracy,
    HeldOutAccuracy,
    Report,
    ReportError,
    TradeoffAccuracy,
    TradeoffRow,
    TradeoffTable,
    as_report,
    load_tradeoff_file,
    tradeoff_accuracy_axis,
)
from gui.history import FINISHED, OPENED, HistoryEntry, video_name
from gui.panels.tradeoff_parts import (
    SORT_ROLE,
    TICK_MARGIN,
    LogMsAxis,
    SortItem,
    fmt,
    fmt_bytes,
    fmt_ms,
    fmt_px,
    nice_ticks,
    overlap,
)
from gui.widgets.tables import row_table
from gui.widgets.text import esc, plain_label, plain_tip, rich_label

#: one colour per precision in the scatter (and the precision cell)
PRECISION_COLOURS = {"fp32": (70, 130, 230), "tf32": (40, 170, 90), "fp16": (240, 140, 30),
                     "bf16": (170, 70, 200), "int8": (220, 50, 50), "fp8": (120, 120, 120)}
OTHER_COLOUR = (128, 128, 128)
COLUMNS = ("video", "tracker", "machine", "precision", "points/batch", "frames/batch", "ms / run", "frames/s",
           "speedup", "vs direct", "peak memory", "AJ", "held-out AJ", "real-clip cycle px", "cycle kept",
           "px vs fp32", "runs")  # the loaded accuracy files' columns beside AJ: in view without scrolling
HEADER_TIPS = {"machine": "the device the run ran on (a report opened here says where it was recorded)",
               "precision": f"{PRECISION_UNUSED}: the tracker has no precision setting (LK)",
               "points/batch": "points tracked per batch (the run tracks all its points, batch by batch; "
                               "64→32: changed during the run)",
               "frames/batch": "frames per batch",
               "ms / run": "median wall time of the warm runs (the cold run when there is no warm one)",
               "speedup": "fp32 ms / this ms, same tracker, device, video, points and batch sizes",
               "vs direct": "this ms / the tracker called alone in the same process (no session, guard, hooks "
                            "or telemetry), from a bench; blank when the report has no direct reference",
               "AJ": "average Jaccard against ground truth (TAP-Vid)",
               "px vs fp32": "mean distance in video pixels from the fp32 run's tracks",
               "held-out AJ": "mean AJ over a held-out evaluation set with ground truth (trackscope eval --json) of "
                              "this tracker at this precision",
               "real-clip cycle px": "median forward-backward cycle error of the points kept, every clip's points "
                                     "pooled, on real clips without ground truth (trackscope cycle --json), of this "
                                     "tracker at this precision",
               "cycle kept": "points the tracker kept both ways (seen at the clip's end forward and back at frame 0): "
                             "the cycle px is of these only",
               "runs": "runs recorded in the report"}
#: the accuracy-file columns, each shown once a file of its kind is added
ACCURACY_COLUMNS = {"held-out AJ": EVAL_KIND, "real-clip cycle px": CYCLE_KIND, "cycle kept": CYCLE_KIND}
#: columns an accuracy-only row has no value in (left out when deciding whether a column is constant)
NO_RUN_COLUMNS = ("video", "points/batch", "frames/batch", "runs")
ROW_KIND_ROLE = Qt.ItemDataRole.UserRole + 2  # ACCURACY_ONLY on the cells of an accuracy-only row
ACCURACY_ONLY = "accuracy only"
COL = {name: i for i, name in enumerate(COLUMNS)}
SYMBOL_SIZE = 12
PLOT_PADDING = 0.15  # share of the data range left above and below the points
MIN_AJ_SPAN = 0.05  # the AJ axis spans at least this much
MIN_PX_SPAN = 0.5  # px axis height when every run matches fp32 exactly
LABEL_ROOM = 1.25  # the x range reaches this factor past the slowest run, room for its label
LABEL_GAP_PX = 7  # a point's label keeps this far from its dot
MARKER_HALF_PX = SYMBOL_SIZE / 2 + 1  # labels keep off every dot
TABLE_MAX_SHARE = 0.5  # the table never takes more of the height than this
TABLE_SLACK_PX = 24  # room for a horizontal scroll bar under the rows
NEAR_SPOTS = 8  # the first spots tried touch the dot; a label further away gets a leader line
LEGEND_MARGIN_PX = 10  # the legend keeps this far from the plot's edges
#: corners the legend may take, (x, y) as fractions of the plot: the first that covers no dot is used
LEGEND_CORNERS = ((0, 0), (1, 0), (0, 1), (1, 1))
#: columns hidden (and named once above the table) when every row has the same value
CONSTANT_COLUMNS = ("video", "tracker", "machine", "points/batch", "frames/batch", "runs")
ALL_VIDEOS = "All videos"
_MEMORY_TIPS = {"device peak": "peak allocated device memory (torch allocator)",
                "process RSS": "largest resident memory of the whole process (telemetry): no device allocator",
                "": "not measured (no allocator stats and no telemetry)"}
_PX_SOURCES = {"report": "from the report's accuracy block", "tracks": "mean px between this run's tracks and "
               "the fp32 run's", "baseline": "the fp32 baseline itself"}


def _held_out_cell(acc: HeldOutAccuracy | None) -> tuple[str, float | None, str]:
    """(text, sort key, tip) of a held-out AJ cell."""
    if acc is None:
        return "—", None, "no held-out accuracy file of this tracker and precision"
    s = acc.scores
    return (fmt(s.aj, "{:.3f}"), s.aj, f"mean AJ over the {acc.source.text}: delta_avg {fmt(s.delta_avg, '{:.3f}')}, "
            f"OA {fmt(s.oa, '{:.3f}')}, {s.num_points} points")


def _cycle_cells(acc: CycleAccuracy | None) -> list[tuple[str, Any, str]]:
    """(text, sort key, tip) of the cycle px and cycle kept cells."""
    if acc is None:
        none = "no cycle-error file of this tracker and precision"
        return [("—", None, none), ("—", None, none)]
    s = acc.summary
    tip = f"{acc.source.text}: median {fmt_px(s.median_px)} px, p90 {fmt_px(s.p90_px)} px"
    if s.within_1px is not None:
        tip += f", {100 * s.within_1px:.0f} % within 1 px"
    if acc.baseline and s.shared_points is not None:
        tip += (f"; on the {s.shared_points} points {acc.baseline} kept too: {fmt_px(s.shared_median_px)} px, "
                f"{acc.baseline} {fmt_px(s.baseline_shared_median_px)} px")
    kept_tip = f"{s.kept} of {s.points} points kept both ways on the {acc.source.text}"
    return [(fmt_px(s.median_px), s.median_px, tip), (acc.kept_text, s.kept_share, kept_tip)]


def _direct_tip(row: TradeoffRow) -> str:
    """Where a row's 'vs direct' comes from, or why it is blank."""
    direct = row.report.direct
    if direct is None or direct.ms_median is None:
        return "no direct-call reference in this report (a bench records one unless --no-direct)"
    return (f"direct call ({direct.what or 'the tracker alone'}): median {fmt_ms(direct.ms_median)} of "
            f"{direct.num_runs} run(s)")


class TradeoffPanel(QWidget):
    """Speed against accuracy per precision and batch size: a sortable table and a scatter."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.table_model = TradeoffTable()
        self.accuracy = TradeoffAccuracy()  # the accuracy files added: held-out AJ and cycle error
        self._labels: list[tuple[pg.TextItem, float, float]] = []  # (label, log10 ms, y) of each plotted point
        self._leaders: list[pg.PlotCurveItem] = []  # lines to labels placed away from their dot
        self.common = rich_label("")
        self.common.setWordWrap(True)
        self.common.hide()
        self.video_box = QComboBox()
        self.video_box.addItem(ALL_VIDEOS)
        self.video_box.setToolTip("Rows of one video (the open one), or of every video")
        self.video_box.currentTextChanged.connect(lambda _: self._refresh())

        self.table = row_table(COLUMNS)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)  # as before: several rows
        for name, tip in HEADER_TIPS.items():
            self.table.horizontalHeaderItem(COL[name]).setToolTip(tip)
        self.table.setSortingEnabled(True)
        self.table.sortByColumn(COL["ms / run"], Qt.SortOrder.AscendingOrder)

        self.plot = pg.PlotWidget(axisItems={"bottom": LogMsAxis("bottom")})
        self.plot.setBackground("w")
        self.plot.setLogMode(x=True, y=False)
        self.plot.showGrid(x=True, y=True, alpha=0.25)
        self.plot.setLabel("bottom", "ms per run (log scale)")
        self.plot.setMenuEnabled(False)
        self.plot.getAxis("left").enableAutoSIPrefix(False)
        self.plot.getViewBox().sigResized.connect(self._place_labels)
        self.legend = self.plot.addLegend(offset=(10, 10), brush=pg.mkBrush(255, 255, 255, 220), pen=pg.mkPen("k"),
                                          labelTextColor="k")
        self.note = plain_label("")
        self.note.setStyleSheet("color: gray;")
        self.note.setWordWrap(True)

        table_box = QWidget()
        table_layout = QVBoxLayout(table_box)
        table_layout.setContentsMargins(0, 0, 0, 0)
        top = QHBoxLayout()
        top.addWidget(plain_label("Video:"))
        top.addWidget(self.video_box, 1)
        table_layout.addLayout(top)
        table_layout.addWidget(self.common)
        table_layout.addWidget(self.table)
        self.splitter = splitter = QSplitter(Qt.Orientation.Vertical)
        splitter.addWidget(table_box)
        splitter.addWidget(self.plot)
        self._user_split = False  # the user dragged the splitter: keep their sizes
        splitter.splitterMoved.connect(lambda *_: setattr(self, "_user_split", True))
        splitter.setStretchFactor(0, 1)
        splitter.setStretchFactor(1, 1)
        layout = QVBoxLayout(self)
        layout.addWidget(splitter, 1)
        layout.addWidget(self.note)
        self._refresh()

    # -- inputs ------------------------------------------------------------------------------
    @property
    def rows(self) -> dict[tuple, TradeoffRow]:
        """Every row, by configuration (insertion order = first time a configuration was seen)."""
        return self.table_model.rows

    @property
    def video(self) -> str | None:
        """The video whose rows are shown (None: every video's)."""
        text = self.video_box.currentText()
        return None if text == ALL_VIDEOS else text

    def shown_rows(self) -> list[TradeoffRow]:
        """The rows in the table and the scatter: the chosen video's, grouped by video for "All videos"."""
        rows = list(self.rows.values())
        if self.video is not None:
            return [r for r in rows if video_name(r.video) == self.video]
        order = {name: i for i, name in enumerate(dict.fromkeys(video_name(r.video) for r in rows))}
        return sorted(rows, key=lambda r: order[video_name(r.video)])

    def set_video(self, name: str | None) -> None:
        """Show the rows of video ``name`` (the one just opened; None: every video's)."""
        if name is not None:
            self._know_video(name)
        self.video_box.setCurrentText(ALL_VIDEOS if name is None else name)
        self._refresh()

    def _know_video(self, name: str) -> None:
        if self.video_box.findText(name) < 0:
            self.video_box.addItem(name)

    def add_entry(self, entry: HistoryEntry) -> TradeoffRow | None:
        """A history entry's row (a finished run or an opened report; others have no timing to compare)."""
        if entry.report is None or entry.status not in (FINISHED, OPENED):
            return None
        run = entry.run
        arrays = (run.tracks, run.visible) if run is not None and entry.report.tracks is None else (None, None)
        return self.add_report(entry.report, *arrays)

    def add_report(self, report: Report | Mapping[str, Any], tracks: np.ndarray | None = None,
                   visible: np.ndarray | None = None) -> TradeoffRow:
        """Add a run report (a Report, or its JSON); replaces the row of the same configuration. ReportError if
        it is not one. tracks/visible: the run's results, for a report built without them (the app's live runs)."""
        if not isinstance(report, (Report, Mapping)):
            raise ReportError(f"not a run report: a {type(report).__name__}, not a JSON object")
        report = as_report(report)
        arrays = (tracks, visible) if tracks is not None and visible is not None else None
        row = self.table_model.add(report, arrays)
        self._know_video(video_name(row.video))
        self._refresh()
        return row

    def add_file(self, path: str | Path) -> int:
        """Add a bench or report file (every report: a row each) or an accuracy file (eval/cycle --json: its
        figures beside the rows of the same tracker and precision); returns how many reports or entries.
        ReportError when it is none of them or unreadable."""
        found = load_tradeoff_file(path)
        if isinstance(found, AccuracyFile):
            return self.add_accuracy(found, path)
        if not found:
            raise ReportError(f"bench file {path} holds no reports")
        count = self.table_model.add_many(found)
        for row in self.rows.values():
            self._know_video(video_name(row.video))
        self._refresh()
        return count

    def add_bench(self, path: str | Path) -> int:
        """``add_file`` (its name from before accuracy files)."""
        return self.add_file(path)

    def add_accuracy(self, file: AccuracyFile, path: str | Path) -> int:
        """Add an accuracy file's entries (a later file's replace those of the same kind, tracker and precision);
        returns how many. ReportError when it has none."""
        if not file.entries:
            raise ReportError(f"accuracy file {path} holds no entries")
        count = self.accuracy.add(file, path)
        self._refresh()
        return count

    def accuracy_rows(self) -> list[AccuracyOnlyRow]:
        """The accuracy of the (tracker, precision) pairs no shown run row has: rows of their own, speed empty."""
        return self.accuracy.unmatched((r.tracker, r.precision) for r in self.shown_rows())

    def clear(self) -> None:
        """Remove every row, and every accuracy file's figures."""
        self.table_model.clear()
        self.accuracy.clear()
        self._refresh()

    # -- drawing -----------------------------------------------------------------------------
    def _refresh(self) -> None:
        self._fill_table()
        self._draw_scatter()
        self._size_splitter()

    def resizeEvent(self, event: Any) -> None:  # noqa: N802 (Qt name)
        super().resizeEvent(event)
        self._size_splitter()

    def _size_splitter(self) -> None:
        """The table as tall as its rows (at most TABLE_MAX_SHARE of the height); the scatter gets the rest."""
        total = self.splitter.height()
        if self._user_split or total <= 0:
            return
        table = self.table
        rows = sum(table.rowHeight(r) for r in range(table.rowCount())) or table.verticalHeader().defaultSectionSize()
        need = (table.horizontalHeader().height() + rows + 2 * table.frameWidth() + TABLE_SLACK_PX
                + (self.common.sizeHint().height() if not self.common.isHidden() else 0))
        top = int(min(need, total * TABLE_MAX_SHARE))
        self.splitter.setSizes([top, total - top])

    def _fill_table(self) -> None:
        shown = self.shown_rows()
        alone = self.accuracy_rows()
        self.table.setSortingEnabled(False)
        self.table.setRowCount(len(shown) + len(alone))
        for r, row in enumerate(shown):
            base = row.baseline
            speed_tip = (f"over {base.label} ({fmt_ms(base.ms)})" if base is not None
                         else f"no fp32 run of {row.tracker} on {row.device} at these batch sizes to compare with")
            px_tip = _PX_SOURCES.get(row.px_source, "no fp32 run with tracks to compare with")
            cells = [
                (video_name(row.video), video_name(row.video), row.video or ""),
                (row.tracker, row.tracker, row.report.label),
                (row.device, row.device, ""),
                (row.precision, row.precision, "" if row.precision != PRECISION_UNUSED else
                 "the tracker has no precision setting"),
                (row.points_per_batch_text or "—", row.points_per_batch, ""),
                (row.frames_per_batch_text or "—", row.frames_per_batch, ""),
                (fmt_ms(row.ms), row.ms, f"{row.ms_basis} of {row.num_runs} run(s)" if row.ms_basis else ""),
                (fmt(row.frames_per_s, "{:.1f}"), row.frames_per_s, ""),
                (fmt(row.speedup, "{:.2f}x"), row.speedup, speed_tip),
                ("" if row.vs_direct is None else f"{row.vs_direct:.2f}x", row.vs_direct, _direct_tip(row)),
                (fmt_bytes(row.peak_memory_bytes) + (" RSS" if row.memory_kind == MEMORY_PROCESS_RSS else ""),
                 row.peak_memory_bytes, _MEMORY_TIPS[row.memory_kind if row.peak_memory_bytes is not None else ""]),
                (fmt(row.aj, "{:.3f}"), row.aj, "" if row.aj is not None else "no ground truth in this report"),
                *self._accuracy_cells(row.tracker, row.precision),
                (fmt_px(row.px_vs_fp32), row.px_vs_fp32, px_tip),
                (str(row.num_runs), row.num_runs, ""),
            ]
            self._set_row(r, row.precision, cells)
        for r, acc in enumerate(alone, start=len(shown)):
            self._set_row(r, acc.precision, self._accuracy_only_cells(acc), accuracy_only=True)
        self.table.setSortingEnabled(True)
        self._hide_constant_columns()
        self._show_accuracy_columns()

    def _accuracy_cells(self, tracker: str, precision: str) -> list[tuple[str, Any, str]]:
        """The held-out AJ, cycle px and cycle kept cells of a tracker at a precision."""
        held_out, cycle = self.accuracy.of(tracker, precision)
        return [_held_out_cell(held_out), *_cycle_cells(cycle)]

    def _accuracy_only_cells(self, acc: AccuracyOnlyRow) -> list[tuple[str, Any, str]]:
        """An accuracy-only row's cells: its tracker, machine, precision and accuracy; no run, so no speed."""
        why = (f"no run of {acc.tracker} at {acc.precision} in the table: accuracy only (add a bench or report "
               "for speed)")
        blank = ("—", None, why)
        return [("", None, why), (acc.tracker, acc.tracker, why),
                (acc.machine, acc.machine, "the machine the accuracy was measured on"),
                (acc.precision, acc.precision, "" if acc.precision != PRECISION_UNUSED else
                 "the tracker has no precision setting"),
                blank, blank, blank, blank, blank, ("", None, why), blank, blank,
                *self._accuracy_cells(acc.tracker, acc.precision), blank, ("", None, why)]

    def _set_row(self, r: int, precision: str, cells: list[tuple[str, Any, str]], accuracy_only: bool = False) -> None:
        """Put one row's (text, sort key, tip) cells in table row ``r``."""
        assert len(cells) == len(COLUMNS)
        for c, (text, key, tip) in enumerate(cells):
            item = SortItem(text)
            item.setData(SORT_ROLE, key)
            item.setData(Qt.ItemDataRole.UserRole, r)
            if accuracy_only:
                item.setData(ROW_KIND_ROLE, ACCURACY_ONLY)
            if tip:
                item.setToolTip(plain_tip(tip))
            if c >= COL["points/batch"]:
                item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            if c == COL["precision"]:
                item.setForeground(pg.mkColor(PRECISION_COLOURS.get(precision, OTHER_COLOUR)))
            self.table.setItem(r, c, item)

    def _show_accuracy_columns(self) -> None:
        """Each accuracy column shown once a file of its kind is added, its header saying which files."""
        for name, kind in ACCURACY_COLUMNS.items():
            sources = self.accuracy.sources(kind)
            self.table.setColumnHidden(COL[name], not sources)
            tip = HEADER_TIPS[name] + ("; from the " + "; the ".join(s.text for s in sources) if sources else "")
            self.table.horizontalHeaderItem(COL[name]).setToolTip(plain_tip(tip))

    def _hide_constant_columns(self) -> None:
        """With two rows or more, a column that is the same in every row is said once above the table."""
        common = []
        for name in CONSTANT_COLUMNS:
            c = COL[name]
            items = [self.table.item(r, c) for r in range(self.table.rowCount())]
            values = {item.text() for item in items  # an accuracy-only row has no video, batch sizes or runs
                      if not (name in NO_RUN_COLUMNS and item.data(ROW_KIND_ROLE) == ACCURACY_ONLY)}
            constant = len(items) > 1 and len(values) == 1
            self.table.setColumnHidden(c, constant or (bool(items) and not values))
            if constant:
                common.append((name, values.pop()))
        parts = {name: value for name, value in common}
        who = " on ".join(f"<b>{esc(parts.pop(k))}</b>" for k in ("tracker", "machine") if k in parts)
        if "video" in parts:
            who = (who + " " if who else "") + f"of <b>{esc(parts.pop('video'))}</b>"
        words = ([who] if who else []) + [esc(f"{value} {name}") if name != "runs"
                                          else esc(f"{value} {'run' if str(value) == '1' else 'runs'} each")
                                          for name, value in parts.items()]
        self.common.setText("Every row: " + ", ".join(words) if words else "")
        self.common.setVisible(bool(words))

    def accuracy_axis(self) -> str:
        """'aj' when any row has AJ against ground truth, else 'px'."""
        return tradeoff_accuracy_axis(self.shown_rows())

    def _draw_scatter(self) -> None:
        self.plot.clear()
        self._labels = []
        self._leaders = []
        self.legend.clear()
        axis = self.accuracy_axis()
        self.plot.setLabel("left", "AJ vs ground truth (higher is better)" if axis == "aj"
                           else "px divergence from fp32 (lower is better)")
        by_precision: dict[str, list[TradeoffRow]] = {}
        skipped = 0
        for row in self.shown_rows():
            y = row.aj if axis == "aj" else row.px_vs_fp32
            if row.ms is None or row.ms <= 0 or y is None:
                skipped += 1
                continue
            by_precision.setdefault(row.precision, []).append(row)
        order = list(PRECISION_COLOURS)
        for precision, rows in sorted(by_precision.items(),
                                      key=lambda kv: order.index(kv[0]) if kv[0] in order else len(order)):
            colour = PRECISION_COLOURS.get(precision, OTHER_COLOUR)
            xs = np.array([r.ms for r in rows])
            ys = np.array([r.aj if axis == "aj" else r.px_vs_fp32 for r in rows])
            self.plot.plot(xs, ys, pen=None, symbol="o", symbolSize=SYMBOL_SIZE, symbolBrush=colour,
                           symbolPen=pg.mkPen("k", width=1), name=precision)
        self._draw_labels(axis, [r for rows in by_precision.values() for r in rows])
        notes = []
        if not self.shown_rows():
            notes.append("accuracy only, no runs to plot: run the tracker at several precisions, or add a bench file"
                         if len(self.accuracy) else
                         "no runs yet: run the tracker at several precisions, or open a bench file")
        if skipped:
            notes.append(f"{skipped} run(s) not plotted: no timing or no accuracy "
                         f"({'ground truth' if axis == 'aj' else 'fp32 run with tracks'} needed)")
        self.note.setText("; ".join(notes))
        if by_precision:
            # by_precision holds only rows with ms and the axis's value (the loop above skipped the others)
            all_ms = [cast(float, r.ms) for rows in by_precision.values() for r in rows]
            all_y = [cast(float, r.aj if axis == "aj" else r.px_vs_fp32)
                     for rows in by_precision.values() for r in rows]
            self.plot.getAxis("bottom").setTicks([nice_ticks(min(all_ms), max(all_ms))])
            self._set_ranges(axis, all_ms, all_y)
            self._place_labels()

    def _draw_labels(self, axis: str, rows: list[TradeoffRow]) -> None:
        """A label per point (only the fields that vary), placed where it covers no dot and no other label."""
        vary_p = len({r.points_per_batch_seen for r in rows}) > 1
        vary_f = len({r.frames_per_batch_seen for r in rows}) > 1
        vary_tracker = len({r.tracker for r in rows}) > 1  # two 'fp32' points of two trackers say whose
        vary_machine = len({r.device for r in rows}) > 1
        vary_video = len({video_name(r.video) for r in rows}) > 1
        self._labels = []
        for r in sorted(rows, key=lambda r: cast(float, r.ms)):  # rows with ms and y only (_draw_scatter)
            parts = [r.tracker] if vary_tracker or r.precision == PRECISION_UNUSED else []
            parts += [r.precision] if r.precision != PRECISION_UNUSED else []
            parts += [f"p{r.points_per_batch_text}"] if vary_p and r.points_per_batch_seen else []
            parts += [f"f{r.frames_per_batch_text}"] if vary_f and r.frames_per_batch_seen else []
            parts += [f"@{r.device}"] if vary_machine else []
            parts += [f"[{video_name(r.video)}]"] if vary_video else []
            text = " ".join(parts)
            item = pg.TextItem(text, color=PRECISION_COLOURS.get(r.precision, OTHER_COLOUR), anchor=(0, 0))
            self.plot.addItem(item)
            self._labels.append((item, float(np.log10(cast(float, r.ms))),
                                 float(cast(float, r.aj if axis == "aj" else r.px_vs_fp32))))

    def _place_labels(self, *_: Any) -> None:
        """Greedy placement in screen pixels: the first spot around its dot that overlaps nothing placed."""
        vb = self.plot.getViewBox()
        width, height = vb.width(), vb.height()
        if not self._labels or width < 10 or height < 10:
            return
        (x0, x1), (y0, y1) = vb.viewRange()

        def to_px(x: float, y: float) -> tuple[float, float]:
            return (x - x0) / (x1 - x0) * width, (y1 - y) / (y1 - y0) * height

        for line in self._leaders:
            self.plot.removeItem(line)
        self._leaders = []
        dots = [to_px(x, y) for _, x, y in self._labels]
        taken = [(px - MARKER_HALF_PX, py - MARKER_HALF_PX, px + MARKER_HALF_PX, py + MARKER_HALF_PX)
                 for px, py in dots]
        legend = self._place_legend(taken, width, height)
        taken.append(legend)  # labels keep off the legend too
        for (item, x, y), (px, py) in zip(self._labels, dots):
            box = item.textItem.boundingRect()
            tw, th = box.width(), box.height()
            g = LABEL_GAP_PX
            spots = [(g, -th / 2), (g, -th), (g, 0), (-tw - g, -th / 2), (-tw / 2, -th - g), (-tw / 2, g),
                     (-tw - g, -th), (-tw - g, 0)]
            spots += [(g, -th / 2 + k * th * sign) for k in (1.5, 2.5, 3.5) for sign in (-1, 1)]
            best = spots[0]
            for dx, dy in spots:
                rect = (px + dx, py + dy, px + dx + tw, py + dy + th)
                inside = rect[0] >= 0 and rect[1] >= 0 and rect[2] <= width and rect[3] <= height
                if inside and not any(overlap(rect, other) for other in taken):
                    best = (dx, dy)
                    break
            left, top = px + best[0], py + best[1]
            taken.append((left, top, left + tw, top + th))
            item.setPos(x0 + left / width * (x1 - x0), y1 - top / height * (y1 - y0))
            if spots.index(best) >= NEAR_SPOTS:  # far from its dot: a thin line says whose label it is
                end_x = left if left > px else left + tw
                end = (x0 + end_x / width * (x1 - x0), y1 - (top + th / 2) / height * (y1 - y0))
                colour = item.textItem.defaultTextColor()
                line = pg.PlotCurveItem([x, end[0]], [y, end[1]], pen=pg.mkPen(colour, width=1))
                self.plot.addItem(line, ignoreBounds=True)
                self._leaders.append(line)

    def _place_legend(self, dots: list[tuple[float, float, float, float]], width: float,
                      height: float) -> tuple[float, float, float, float]:
        """Put the legend in the first corner where it covers no dot (else the one covering fewest); its
        rectangle in the plot's pixels."""
        box = self.legend.boundingRect()
        w, h, m = box.width(), box.height(), LEGEND_MARGIN_PX
        best: tuple[int, tuple[int, int], tuple[float, float, float, float]] | None = None
        for cx, cy in LEGEND_CORNERS:
            left = m if cx == 0 else width - m - w
            top = m if cy == 0 else height - m - h
            rect = (left, top, left + w, top + h)
            covered = sum(overlap(rect, dot) for dot in dots)
            if best is None or covered < best[0]:
                best = (covered, (cx, cy), rect)
            if covered == 0:
                break
        assert best is not None
        (cx, cy), rect = best[1], best[2]
        self.legend.anchor(itemPos=(cx, cy), parentPos=(cx, cy), offset=(m if cx == 0 else -m, m if cy == 0 else -m))
        return rect

    def _set_ranges(self, axis: str, all_ms: list[float], all_y: list[float]) -> None:
        """Fixed ranges: every point and its label inside, never a sliver of a range when values tie."""
        lo, hi = min(all_y), max(all_y)
        if axis == "aj":
            pad = max((hi - lo) * PLOT_PADDING, MIN_AJ_SPAN / 2)
            y_lo, y_hi = max(0.0, lo - pad), min(1.0, hi + pad)
        else:  # divergence: from 0 (the fp32 baseline) to a little above the largest
            y_hi = hi * (1 + 2 * PLOT_PADDING) if hi > 0 else MIN_PX_SPAN
            y_lo = -y_hi * PLOT_PADDING
        x_lo = np.log10(min(all_ms) / TICK_MARGIN)
        x_hi = np.log10(max(all_ms) * TICK_MARGIN * LABEL_ROOM)
        self.plot.getViewBox().setRange(xRange=(x_lo, x_hi), yRange=(y_lo, y_hi), padding=0)
