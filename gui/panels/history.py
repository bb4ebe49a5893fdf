"""The Runs panel: the session's run history as a list (every run made here, every report opened), with
Show (its report in the Diagnosis tab, its tracks on the video) and Set as A / Set as B (the A/B tab).

It reads and changes the ``AppState``'s history only (``select``, ``set_ab``); the state refuses an A/B of
two entries of different videos or queries with a plain message.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QSize, Qt, Signal
from PySide6.QtWidgets import (
    QHBoxLayout,
    QMenu,
    QPushButton,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from gui.history import VALUE_CHANGE, HistoryEntry
from gui.state import AB_SIDES, AppState
from gui.widgets.tables import row_table
from gui.widgets.text import plain_label, plain_tip

COLUMNS = ("#", "A/B", "video", "tracker", "precision", "points/batch", "machine", "status", "time")
COL = {name: i for i, name in enumerate(COLUMNS)}
ID_ROLE = Qt.ItemDataRole.UserRole
SELECTED_MARK = "▶ "
PREFERRED_SIZE = (480, 170)  # px: a few rows in a bottom dock; the video keeps the height


class HistoryPanel(QWidget):
    """The run history, newest last; one row per entry."""

    ab_requested = Signal()  # A and B were compared from here (the window shows the A/B tab)

    def __init__(self, state: AppState, parent: QWidget | None = None):
        super().__init__(parent)
        self.state = state
        self.table = row_table(COLUMNS)
        self.table.horizontalHeader().setStretchLastSection(False)  # columns as wide as what they hold
        self.table.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.table.customContextMenuRequested.connect(self._context_menu)
        self.table.itemDoubleClicked.connect(lambda _: self.show_picked())
        self.table.itemSelectionChanged.connect(self._update_buttons)
        self.show_button = QPushButton("Show")
        self.show_button.setToolTip("Show this run: its report in the Diagnosis tab, its tracks on the video")
        self.show_button.clicked.connect(self.show_picked)
        self.a_button = QPushButton("Set as A")
        self.b_button = QPushButton("Set as B")
        for side, button in zip(AB_SIDES, (self.a_button, self.b_button)):
            button.setToolTip(f"Compare in the A/B tab: this run as {side} (same video and queries as the other)")
            button.clicked.connect(lambda _=False, side=side: self.pick_as(side))
        self.empty_note = plain_label("No runs yet: run the tracker or open a report")
        self.empty_note.setStyleSheet("color: gray;")
        buttons = QHBoxLayout()
        for b in (self.show_button, self.a_button, self.b_button):
            buttons.addWidget(b)
        buttons.addStretch(1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(2, 2, 2, 2)
        layout.addWidget(self.empty_note)
        layout.addWidget(self.table, 1)
        layout.addLayout(buttons)
        state.entry_added.connect(lambda _: self.refresh())
        state.entries_dropped.connect(lambda _: self.refresh())
        state.selection_changed.connect(self.refresh)
        state.ab_changed.connect(self.refresh)
        self.refresh()

    def sizeHint(self) -> QSize:  # noqa: N802 (Qt name)
        return QSize(*PREFERRED_SIZE)

    # -- reading ---------------------------------------------------------------------------------------
    def _row_id(self, row: int) -> int:
        item = self.table.item(row, 0)
        return -1 if item is None else int(item.data(ID_ROLE))

    def entry_ids(self) -> list[int]:
        """The ids of the rows, top to bottom."""
        return [self._row_id(r) for r in range(self.table.rowCount())]

    def picked(self) -> int | None:
        """The id of the row the user picked in the list, or None."""
        rows = self.table.selectionModel().selectedRows()
        return None if not rows else self._row_id(rows[0].row())

    def pick(self, entry_id: int) -> None:
        """Pick (highlight) the row of ``entry_id`` in the list."""
        for r, i in enumerate(self.entry_ids()):
            if i == entry_id:
                self.table.selectRow(r)

    # -- commands --------------------------------------------------------------------------------------
    def show_picked(self) -> None:
        entry_id = self.picked()
        if entry_id is not None:
            self.state.select(entry_id)

    def pick_as(self, side: str) -> None:
        entry_id = self.picked()
        if entry_id is not None and self.state.set_ab(side, entry_id):
            self.ab_requested.emit()

    def _context_menu(self, pos: Any) -> None:
        item = self.table.itemAt(pos)
        if item is None:
            return
        self.table.selectRow(item.row())
        menu = QMenu(self)
        menu.addAction("Show", self.show_picked)
        for side in AB_SIDES:
            action = menu.addAction(f"Set as {side}")
            action.triggered.connect(lambda _=False, side=side: self.pick_as(side))
        menu.exec(self.table.viewport().mapToGlobal(pos))

    # -- drawing ---------------------------------------------------------------------------------------
    def refresh(self) -> None:
        picked = self.picked()
        entries = list(self.state.runs)
        self.table.setRowCount(len(entries))
        for r, entry in enumerate(entries):
            for c, (text, tip) in enumerate(self._cells(entry)):
                item = QTableWidgetItem(text)
                item.setData(ID_ROLE, entry.id)
                if tip:
                    item.setToolTip(plain_tip(tip))
                self.table.setItem(r, c, item)
        self.empty_note.setVisible(not entries)
        if picked is not None:
            self.pick(picked)
        self._update_buttons()

    def _cells(self, e: HistoryEntry) -> list[tuple[str, str]]:
        sides = "".join(side for side in AB_SIDES if self.state.ab[side] == e.id)
        mark = SELECTED_MARK if self.state.selected == e.id else ""
        sizes = VALUE_CHANGE.join(str(p) for p in e.points_per_batch) or "—"
        where = "run here" if e.source == "run" else f"opened from {e.source}"
        return [(f"{mark}{e.id}", "▶: shown now" if mark else ""), (sides, ""), (e.video, ""),
                (e.tracker, e.title), (e.precision, ""), (sizes, ""), (e.machine or "?", ""),
                (e.status, where), (e.time_text, "")]

    def _update_buttons(self) -> None:
        has = self.picked() is not None
        for b in (self.show_button, self.a_button, self.b_button):
            b.setEnabled(has)
