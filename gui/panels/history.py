"""The Runs panel: the session's run history as a list (every run made here, every report opened), with
Show (its report in the Diagnosis tab, its tracks on the video), Set as A / Set as B (the A/B tab) and
Diff (the Diff tab): the two rows selected (Ctrl- or Shift-click; the upper one is A), else A and B once both are
picked. A diff takes any two runs with reports (other videos, other trackers): the A/B pick's rule of the same video
and queries is the track overlay's, not the diff's.

It reads and changes the ``AppState``'s history only (``select``, ``set_ab``); the state refuses an A/B of
two entries of different videos or queries with a plain message. Its rows are a model
(``gui.panels.runs_model``) changed one row at a time, so a new run costs the list one row, not all of them.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QSize, Qt, Signal
from PySide6.QtWidgets import QAbstractItemView, QHBoxLayout, QMenu, QPushButton, QVBoxLayout, QWidget

from gui.panels.runs_model import RunsModel
from gui.state import AB_SIDES, AppState
from gui.widgets.tables import row_view
from gui.widgets.text import plain_label

PREFERRED_SIZE = (480, 170)  # px: a few rows in a bottom dock; the video keeps the height


class HistoryPanel(QWidget):
    """The run history, newest last; one row per entry."""

    ab_requested = Signal()  # A and B were compared from here (the window shows the A/B tab)
    diff_requested = Signal(int, int)  # (A's entry id, B's): diff them (the window's diff controller does)

    def __init__(self, state: AppState, parent: QWidget | None = None):
        super().__init__(parent)
        self.state = state
        self.model = RunsModel(state, self)
        self.table = row_view(self.model)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)  # two rows: Diff them
        self.table.horizontalHeader().setStretchLastSection(False)  # columns as wide as what they hold
        self.table.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.table.customContextMenuRequested.connect(self._context_menu)
        self.table.doubleClicked.connect(lambda _: self.show_picked())
        self.table.selectionModel().selectionChanged.connect(self._update_buttons)
        self.show_button = QPushButton("Show")
        self.show_button.setToolTip("Show this run: its report in the Diagnosis tab, its tracks on the video")
        self.show_button.clicked.connect(self.show_picked)
        self.a_button = QPushButton("Set as A")
        self.b_button = QPushButton("Set as B")
        for side, button in zip(AB_SIDES, (self.a_button, self.b_button)):
            button.setToolTip(f"Compare in the A/B tab: this run as {side} (same video and queries as the other)")
            button.clicked.connect(lambda _=False, side=side: self.pick_as(side))
        self.diff_button = QPushButton("Diff")
        self.diff_button.setToolTip("Diff two runs by stage, module, function and kernel class (the Diff tab): the "
                                    "two rows selected (the upper is A), else A and B")
        self.diff_button.clicked.connect(self.request_diff)
        self.empty_note = plain_label("No runs yet: run the tracker or open a report")
        self.empty_note.setStyleSheet("color: gray;")
        buttons = QHBoxLayout()
        for b in (self.show_button, self.a_button, self.b_button, self.diff_button):
            buttons.addWidget(b)
        buttons.addStretch(1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(2, 2, 2, 2)
        layout.addWidget(self.empty_note)
        layout.addWidget(self.table, 1)
        layout.addLayout(buttons)
        self.model.rowsInserted.connect(self._rows_changed)
        self.model.rowsRemoved.connect(self._rows_changed)
        state.ab_changed.connect(self._update_diff_button)
        self._rows_changed()

    def sizeHint(self) -> QSize:  # noqa: N802 (Qt name)
        return QSize(*PREFERRED_SIZE)

    # -- reading ---------------------------------------------------------------------------------------
    def entry_ids(self) -> list[int]:
        """The ids of the rows, top to bottom."""
        return [self.model.entry_id(r) for r in range(self.model.rowCount())]

    def picked(self) -> int | None:
        """The id of the row the user picked in the list (the current one of a multiple selection), or None."""
        rows = self.table.selectionModel().selectedRows()
        if not rows:
            return None
        current = self.table.currentIndex()
        chosen = next((r for r in rows if r.row() == current.row()), rows[0]) if current.isValid() else rows[0]
        return self.model.entry_id(chosen.row())

    def picked_pair(self) -> tuple[int, int] | None:
        """(A, B) of the diff: the two selected rows top to bottom, else the entries picked as A and B, else None."""
        rows = sorted(r.row() for r in self.table.selectionModel().selectedRows())
        if len(rows) == 2:
            return self.model.entry_id(rows[0]), self.model.entry_id(rows[1])
        a, b = (self.state.ab.get(side) for side in AB_SIDES)
        return (a, b) if a is not None and b is not None else None

    def pick(self, entry_id: int) -> None:
        """Pick (highlight) the row of ``entry_id`` in the list."""
        row = self.model.row_of(entry_id)
        if row is not None:
            self.table.selectRow(row)

    # -- commands --------------------------------------------------------------------------------------
    def show_picked(self) -> None:
        entry_id = self.picked()
        if entry_id is not None:
            self.state.select(entry_id)

    def pick_as(self, side: str) -> None:
        entry_id = self.picked()
        if entry_id is not None and self.state.set_ab(side, entry_id):
            self.ab_requested.emit()

    @property
    def ab_picked(self) -> bool:
        """Whether there is a pair to diff (two rows selected, or A and B picked)."""
        return self.picked_pair() is not None

    def request_diff(self) -> None:
        pair = self.picked_pair()
        if pair is not None:
            self.diff_requested.emit(*pair)

    def _context_menu(self, pos: Any) -> None:
        index = self.table.indexAt(pos)
        if not index.isValid():
            return
        if not self.table.selectionModel().isRowSelected(index.row(), index.parent()):
            self.table.selectRow(index.row())  # a click outside a two-row selection picks that row alone
        menu = QMenu(self)
        menu.addAction("Show", self.show_picked)
        for side in AB_SIDES:
            action = menu.addAction(f"Set as {side}")
            action.triggered.connect(lambda _=False, side=side: self.pick_as(side))
        diff = menu.addAction("Diff", self.request_diff)
        diff.setEnabled(self.ab_picked)
        menu.exec(self.table.viewport().mapToGlobal(pos))

    # -- drawing ---------------------------------------------------------------------------------------
    def _rows_changed(self) -> None:
        self.empty_note.setVisible(self.model.rowCount() == 0)
        self._update_buttons()
        self._update_diff_button()

    def _update_diff_button(self) -> None:
        self.diff_button.setEnabled(self.ab_picked)

    def _update_buttons(self) -> None:
        has = self.picked() is not None
        for b in (self.show_button, self.a_button, self.b_button):
            b.setEnabled(has)
        self._update_diff_button()
