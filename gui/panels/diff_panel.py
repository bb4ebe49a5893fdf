"""Diff: two runs aligned by stage, module, function and kernel class, the deltas ranked by time, and the
total ratio split into what the two devices' specs explain and the named rest (a waterfall).

The panel draws one ``engine.api.Diff`` (``engine.analysis.diff``'s model; ``diff_runs`` fills it, the diff
controller calls it): a header (A vs B, their typical ms, the split in words, a "projection" badge on a
projected side), the waterfall of the split's steps, a sortable table of the rows with a level filter, and
the evidence of the row selected (its plain-JSON dict, pretty-printed). The delta column sorts by size
(|B - A|), largest first, as the engine ranks them. Without a diff it says how to make one; a diff that
could not be made says why (``show_error``), in the panel itself.
"""

from __future__ import annotations

import json
import math
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QFont
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QHeaderView,
    QPlainTextEdit,
    QSplitter,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from engine.api import Diff, DiffRow, ms_value, ratio_value
from gui.panels.tradeoff_parts import SORT_ROLE, SortItem
from gui.widgets.tables import row_table
from gui.widgets.text import esc, plain_label, plain_tip, rich_label
from gui.widgets.waterfall import WaterfallChart

EMPTY_TEXT = ("No diff yet. Select two runs in the Runs list (Ctrl-click; the upper one is A) or pick A and B, "
              "and choose Diff; or open two reports with Compare > Diff two reports…")
BUSY_TEXT = "computing the diff of {} and {}…"
NO_STEPS = "no waterfall: the diff has no split of the total into steps"
NO_EVIDENCE = "select a row to see its evidence"
#: the level filter: (what it shows, the row level it keeps; None: every row)
LEVEL_CHOICES: tuple[tuple[str, str | None], ...] = (
    ("all levels", None), ("stage", "stage"), ("module", "module"), ("function", "function"),
    ("kernel class", "kernel_class"),
)
LEVEL_NAMES = {"total": "total", "stage": "stage", "module": "module", "function": "function",
               "kernel_class": "kernel class"}
COLUMNS = ("level", "name", "A ms", "B ms", "Δ ms", "B/A", "reason")
COL = {name: i for i, name in enumerate(COLUMNS)}
HEADER_TIPS = {"Δ ms": "B minus A (a side missing counts 0); sorts by size, largest move first",
               "B/A": "B's time over A's (blank when a side is missing or 0)",
               "reason": "why it moved, from the kernel facts"}
ROW_ROLE = Qt.ItemDataRole.UserRole + 2  # a table row's index into the diff's rows (on its name cell)
PROJECTION_BADGE = ("<span style='background-color:#ffe7a8; color:#6a4a00; font-weight:bold'>"
                    "&nbsp;projection&nbsp;</span>")
ERROR_COLOUR = "#b71c1c"
FASTER_TEXT, SLOWER_TEXT = "#1b7a30", "#b71c1c"  # the delta cell's text: B faster, B slower
REASON_MAX_CHARS = 160  # a reason cell shows this much; the tooltip has all of it
EVIDENCE_HEIGHT_PX = 150
WATERFALL_HEIGHT_PX = 260


def _finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def ms_cell(value: float | None) -> str:
    return ms_value(value, missing="—")


def delta_cell(delta: float) -> str:
    return f"{'+' if delta > 0 else ''}{ms_value(delta, missing='—')}"


def split_text(diff: Diff) -> str:
    """The split in words: 'B/A 3.4x: specs explain 2.1x, named rest 1.6x' (the rest is total over spec)."""
    split = diff.split
    total = split.total_ratio
    if not _finite(total) or total is None or total <= 0:
        return "B/A unknown (a side has no typical time)"
    text = f"B/A {ratio_value(total)}x"
    spec = split.spec_ratio
    if _finite(spec) and spec is not None and spec > 0:
        text += f": specs explain {ratio_value(spec)}x, named rest {ratio_value(total / spec)}x"
    else:
        text += ": the specs explain none of it (same device, or its specs are unknown)"
    text += f" ({ms_value(split.explained_ms)} ms explained, {ms_value(split.rest_ms)} ms rest)"
    return text


def evidence_text(row: DiffRow) -> str:
    """A row's reason and evidence for people: the reason, then the evidence as indented JSON."""
    head = f"{LEVEL_NAMES.get(row.level, row.level)} {row.name}" + (f" (in {row.parent})" if row.parent else "")
    parts = [head]
    if row.reason:
        parts.append(f"reason: {row.reason}")
    if row.evidence:
        parts.append(json.dumps(row.evidence, indent=2, sort_keys=True, default=str, ensure_ascii=False))
    else:
        parts.append("(no evidence recorded for this row)")
    return "\n".join(parts)


class DiffPanel(QWidget):
    """One diff of two runs: header, waterfall, rows, evidence, notes."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.diff: Diff | None = None
        self.error: str = ""

        self.empty_note = plain_label(EMPTY_TEXT)
        self.empty_note.setWordWrap(True)
        self.empty_note.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.empty_note.setStyleSheet("color: gray;")

        self.header = rich_label("")
        self.header.setWordWrap(True)
        self.header.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.waterfall = WaterfallChart()
        self.waterfall.setMinimumHeight(WATERFALL_HEIGHT_PX // 2)

        self.level_combo = QComboBox()
        for text, level in LEVEL_CHOICES:
            self.level_combo.addItem(text, level)
        self.level_combo.setToolTip("Show the rows of one level of alignment")
        self.level_combo.currentIndexChanged.connect(lambda _: self._fill_table())
        self.count_label = plain_label("")
        self.table = row_table(COLUMNS)
        for name, tip in HEADER_TIPS.items():
            header_item = self.table.horizontalHeaderItem(COL[name])
            if header_item is not None:
                header_item.setToolTip(tip)
        self.table.horizontalHeader().setSectionResizeMode(COL["reason"], QHeaderView.ResizeMode.Stretch)
        self.table.setSortingEnabled(True)
        self.table.sortItems(COL["Δ ms"], Qt.SortOrder.DescendingOrder)
        self.table.itemSelectionChanged.connect(self._show_evidence)
        self.evidence = QPlainTextEdit()
        self.evidence.setReadOnly(True)
        self.evidence.setPlaceholderText(NO_EVIDENCE)
        mono = QFont("monospace")
        mono.setStyleHint(QFont.StyleHint.Monospace)
        self.evidence.setFont(mono)
        self.evidence.setMinimumHeight(EVIDENCE_HEIGHT_PX // 2)
        self.notes = plain_label("")
        self.notes.setWordWrap(True)
        self.notes.setStyleSheet("color: #555;")

        filter_row = QHBoxLayout()
        filter_row.addWidget(plain_label("Level:"))
        filter_row.addWidget(self.level_combo)
        filter_row.addWidget(self.count_label)
        filter_row.addStretch(1)
        rows_box = QWidget()
        rows_layout = QVBoxLayout(rows_box)
        rows_layout.setContentsMargins(0, 0, 0, 0)
        rows_layout.addLayout(filter_row)
        rows_layout.addWidget(self.table, 1)
        self.splitter = QSplitter(Qt.Orientation.Vertical)
        self.splitter.addWidget(self.waterfall)
        self.splitter.addWidget(rows_box)
        self.splitter.addWidget(self.evidence)
        self.splitter.setStretchFactor(0, 2)
        self.splitter.setStretchFactor(1, 3)
        self.splitter.setStretchFactor(2, 1)
        self.splitter.setSizes([WATERFALL_HEIGHT_PX, int(1.3 * WATERFALL_HEIGHT_PX), EVIDENCE_HEIGHT_PX])
        content = QWidget()
        content_layout = QVBoxLayout(content)
        content_layout.setContentsMargins(0, 0, 0, 0)
        content_layout.addWidget(self.header)
        content_layout.addWidget(self.splitter, 1)
        content_layout.addWidget(self.notes)

        self.pages = QStackedWidget()
        self.pages.addWidget(self.empty_note)
        self.pages.addWidget(content)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(self.pages)
        self.clear()

    # -- states ---------------------------------------------------------------------------------------------
    @property
    def showing_diff(self) -> bool:
        return self.pages.currentIndex() == 1

    def clear(self) -> None:
        """No diff: the note on how to make one."""
        self._to_note(EMPTY_TEXT, error="")

    def show_busy(self, a_label: str, b_label: str) -> None:
        """A diff is being computed (the one shown, if any, stays until it is ready)."""
        if self.diff is None:
            self._to_note(BUSY_TEXT.format(a_label, b_label), error="")

    def show_error(self, message: str) -> None:
        """A diff could not be made: why, in the panel (the diff shown before is dropped)."""
        self._to_note(f"The diff could not be made: {message}", error=message)
        self.empty_note.setStyleSheet(f"color: {ERROR_COLOUR};")

    def _to_note(self, text: str, error: str) -> None:
        self.diff = None
        self.error = error
        self.empty_note.setText(text)
        self.empty_note.setStyleSheet("color: gray;")
        self.table.setRowCount(0)
        self.evidence.clear()
        self.waterfall.set_steps(())
        self.pages.setCurrentIndex(0)

    def set_diff(self, diff: Diff) -> None:
        """Show ``diff``: its header, waterfall, rows (the level filter kept) and notes."""
        self.diff = diff
        self.error = ""
        self.header.setText(self._header_html(diff))
        self.header.setToolTip(plain_tip(diff.split.basis) if diff.split.basis else "")
        self.waterfall.set_steps(diff.split.steps, empty_text=NO_STEPS)
        self.notes.setText("\n".join(f"• {n}" for n in diff.notes))
        self.notes.setVisible(bool(diff.notes))
        self.evidence.clear()
        self._fill_table()
        self.pages.setCurrentIndex(1)

    def _header_html(self, diff: Diff) -> str:
        def side(name: str, label: str, ms: float | None, projected: bool) -> str:
            badge = f" {PROJECTION_BADGE}" if projected else ""
            return f"<b>{name}</b> {esc(label)}{badge} <span style='color:#555'>({esc(ms_cell(ms))} ms)</span>"

        sides = (f"{side('A', diff.a_label, diff.a_ms, diff.a_is_projection)} &nbsp;vs&nbsp; "
                 f"{side('B', diff.b_label, diff.b_ms, diff.b_is_projection)}")
        basis = f"<br><span style='color:#555'>{esc(diff.split.basis)}</span>" if diff.split.basis else ""
        return f"{sides}<br><b>{esc(split_text(diff))}</b>{basis}"

    # -- rows -------------------------------------------------------------------------------------------------
    @property
    def level(self) -> str | None:
        """The level the table shows (None: every level)."""
        level = self.level_combo.currentData()
        return level if isinstance(level, str) else None

    def set_level(self, level: str | None) -> None:
        """Show the rows of ``level`` only (None: all)."""
        index = self.level_combo.findData(level) if level is not None else 0
        if index >= 0:
            self.level_combo.setCurrentIndex(index)

    def _fill_table(self) -> None:
        diff = self.diff
        table = self.table
        header = table.horizontalHeader()
        column, order = header.sortIndicatorSection(), header.sortIndicatorOrder()
        table.setSortingEnabled(False)  # filled unsorted, then sorted once
        table.clearSelection()
        table.setRowCount(0)
        self.evidence.clear()
        if diff is None:
            self.count_label.setText("")
            return
        level = self.level
        shown = [(i, r) for i, r in enumerate(diff.rows) if level is None or r.level == level]
        table.setRowCount(len(shown))
        for row, (index, r) in enumerate(shown):
            self._fill_row(row, index, r)
        table.setSortingEnabled(True)
        table.sortItems(column, order)
        total = len(diff.rows)
        self.count_label.setText(f"{len(shown)} of {total} rows" if level is not None else f"{total} rows")

    def _fill_row(self, row: int, index: int, r: DiffRow) -> None:
        ratio = r.ratio
        delta = r.delta_ms
        cells: list[tuple[str, Any, str]] = [  # (text, sort key, tooltip)
            (LEVEL_NAMES.get(r.level, r.level), self._level_rank(r.level), ""),
            (r.name, r.name.lower(), r.name + (f"\nin {r.parent}" if r.parent else "")),
            (ms_cell(r.a_ms), r.a_ms if _finite(r.a_ms) else None, "" if r.a_ms is not None else "absent in A"),
            (ms_cell(r.b_ms), r.b_ms if _finite(r.b_ms) else None, "" if r.b_ms is not None else "absent in B"),
            (delta_cell(delta), abs(delta) if math.isfinite(delta) else None, ""),
            (ratio_value(ratio, missing="—") + ("x" if _finite(ratio) and ratio else ""),
             ratio if _finite(ratio) else None, ""),
            (self._short(r.reason), r.reason.lower(), r.reason),
        ]
        for column, (text, key, tip) in enumerate(cells):
            item = SortItem(text)
            item.setData(SORT_ROLE, key)
            if tip:
                item.setToolTip(plain_tip(tip))
            if column in (COL["A ms"], COL["B ms"], COL["Δ ms"], COL["B/A"]):
                item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            if column == COL["Δ ms"] and delta:
                item.setForeground(QColor(FASTER_TEXT if delta < 0 else SLOWER_TEXT))
            if column == COL["name"]:
                item.setData(ROW_ROLE, index)
            self.table.setItem(row, column, item)

    @staticmethod
    def _level_rank(level: str) -> int:
        order = [lv for _, lv in LEVEL_CHOICES if lv is not None]
        return order.index(level) if level in order else -1

    @staticmethod
    def _short(text: str) -> str:
        return text if len(text) <= REASON_MAX_CHARS else text[:REASON_MAX_CHARS - 1] + "…"

    def shown_rows(self) -> list[DiffRow]:
        """The diff's rows in the table's order now (filtered and sorted)."""
        if self.diff is None:
            return []
        out = []
        for row in range(self.table.rowCount()):
            item = self.table.item(row, COL["name"])
            if item is not None:
                out.append(self.diff.rows[int(item.data(ROW_ROLE))])
        return out

    def select_row(self, name: str, level: str | None = None) -> bool:
        """Select the table row of ``name`` (of ``level`` when given); False when it is not shown."""
        for row, r in enumerate(self.shown_rows()):
            if r.name == name and (level is None or r.level == level):
                self.table.selectRow(row)
                return True
        return False

    def selected_row(self) -> DiffRow | None:
        """The diff row selected in the table, or None."""
        if self.diff is None:
            return None
        picked = self.table.selectionModel().selectedRows()
        if not picked:
            return None
        item = self.table.item(picked[0].row(), COL["name"])
        return None if item is None else self.diff.rows[int(item.data(ROW_ROLE))]

    def _show_evidence(self) -> None:
        row = self.selected_row()
        self.evidence.setPlainText("" if row is None else evidence_text(row))
