"""The Runs panel: the session's run history as a list (every run made here, every report opened), with
Show (its report in the Diagnosis tab, its tracks on the video), Set as A / Set as B (the A/B tab) and
Diff A and B (the Diff tab; enabled once both are picked).

It reads and changes the ``AppState``'s history only (``select``, ``set_ab``); the state refuses an A/B of
two entries of different videos or queries with a plain message. Its rows are a model
(``gui.panels.runs_model``) changed one row at a time, so a new run costs the list one row, not all of them.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QSize, Qt, Signal
from PySide6.QtWidgets import QHBoxLayout, QMenu, QPushButton, QVBoxLayout, QWidget

from gui.panels.runs_model import RunsModel
from gui.state import AB_SIDES, AppState
from gui.widgets.tables import row_view
from gui.widgets.text import plain_label

PREFERRED_SIZE = (480, 170)  # px: a few rows in a bottom dock; the video keeps the height


class HistoryPanel(QWidget):
    """The run history, newest last; one row per entry."""

    ab_requested = Signal()  # A and B were compared from here (the window shows the A/B tab)
    diff_requested = Signal()  # diff the entries picked as A and B (the window's diff controller does)

    def __init__(self, state: AppState, parent: QWidget | None = None):
        super().__init__(parent)
        self.state = state
        self.model = RunsModel(state, self)
        self.table = row_view(self.model)
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
        self.diff_button = QPushButton("Diff A and B")
        self.diff_button.setToolTip("Diff A and B by stage, module, function and kernel class (the Diff tab)")
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
        """The id of the row the user picked in the list, or None."""
        rows = self.table.selectionModel().selectedRows()
        return None if not rows else self.model.entry_id(rows[0].row())

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
        """Whether both A and B are picked (what Diff A and B needs)."""
        return all(self.state.ab.get(side) is not None for side in AB_SIDES)

    def request_diff(self) -> None:
        if self.ab_picked:
            self.diff_requested.emit()

    def _context_menu(self, pos: Any) -> None:
        index = self.table.indexAt(pos)
        if not index.isValid():
            return
        self.table.selectRow(index.row())
        menu = QMenu(self)
        menu.addAction("Show", self.show_picked)
        for side in AB_SIDES:
            action = menu.addAction(f"Set as {side}")
            action.triggered.connect(lambda _=False, side=side: self.pick_as(side))
        diff = menu.addAction("Diff A and B", self.request_diff)
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
