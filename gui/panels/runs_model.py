"""The Runs list's rows as a Qt table model over the state's run history, changed one row at a time.

A new entry inserts one row, entries that left the history remove theirs, and a new selection or A/B pick
changes only the cells of the rows whose mark changed: the list never rebuilds its rows (rebuilding 50
rows of QTableWidgetItems on every change stalled the window about 1.5 s per run, issue 20 item 3).
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QAbstractTableModel, QModelIndex, QObject, QPersistentModelIndex, Qt

from gui.history import VALUE_CHANGE, HistoryEntry
from gui.state import AB_SIDES, AppState
from gui.widgets.text import plain_tip

COLUMNS = ("#", "A/B", "video", "tracker", "precision", "points/batch", "machine", "status", "time")
COL = {name: i for i, name in enumerate(COLUMNS)}
ID_ROLE = Qt.ItemDataRole.UserRole  # a row's entry id, on every cell
SELECTED_MARK = "▶ "
_MARKED_COLUMNS = (COL["#"], COL["A/B"])  # the cells that change after a row is added
AnyIndex = QModelIndex | QPersistentModelIndex


class RunsModel(QAbstractTableModel):
    """One row per history entry, oldest first; entries never change once added, only their marks do."""

    def __init__(self, state: AppState, parent: QObject | None = None):
        super().__init__(parent)
        self.state = state
        self._entries: list[HistoryEntry] = list(state.runs)
        self._marks = [self._mark(e) for e in self._entries]  # what the '#' and 'A/B' cells show now
        state.entry_added.connect(self._added)
        state.entries_dropped.connect(self._dropped)
        state.selection_changed.connect(self._marks_changed)
        state.ab_changed.connect(self._marks_changed)

    # -- Qt's model interface -------------------------------------------------------------------------------
    def rowCount(self, parent: AnyIndex = QModelIndex()) -> int:  # noqa: B008, N802 (Qt name)
        return 0 if parent.isValid() else len(self._entries)

    def columnCount(self, parent: AnyIndex = QModelIndex()) -> int:  # noqa: B008, N802 (Qt name)
        return 0 if parent.isValid() else len(COLUMNS)

    def headerData(self, section: int, orientation: Qt.Orientation,  # noqa: N802 (Qt name)
                   role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if orientation == Qt.Orientation.Horizontal and role == Qt.ItemDataRole.DisplayRole:
            return COLUMNS[section]
        return None

    def data(self, index: AnyIndex, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid() or index.row() >= len(self._entries):
            return None
        entry = self._entries[index.row()]
        if role == ID_ROLE:
            return entry.id
        if role == Qt.ItemDataRole.DisplayRole:
            return self._cell(entry, index.column())[0]
        if role == Qt.ItemDataRole.ToolTipRole:
            tip = self._cell(entry, index.column())[1]
            return plain_tip(tip) if tip else None
        return None

    # -- reading ---------------------------------------------------------------------------------------------
    def entry_id(self, row: int) -> int:
        return self._entries[row].id if 0 <= row < len(self._entries) else -1

    def row_of(self, entry_id: int) -> int | None:
        return next((r for r, e in enumerate(self._entries) if e.id == entry_id), None)

    def _mark(self, e: HistoryEntry) -> tuple[bool, str]:
        return self.state.selected == e.id, "".join(side for side in AB_SIDES if self.state.ab[side] == e.id)

    def _cell(self, e: HistoryEntry, column: int) -> tuple[str, str]:
        if column == COL["#"]:
            shown = self.state.selected == e.id
            return f"{SELECTED_MARK if shown else ''}{e.id}", "▶: shown now" if shown else ""
        if column == COL["A/B"]:
            return self._mark(e)[1], ""
        if column == COL["video"]:
            return e.video, ""
        if column == COL["tracker"]:
            return e.tracker, e.title
        if column == COL["precision"]:
            return e.precision, ""
        if column == COL["points/batch"]:
            return VALUE_CHANGE.join(str(p) for p in e.points_per_batch) or "—", ""
        if column == COL["machine"]:
            return e.machine or "?", ""
        if column == COL["status"]:
            return e.status, "run here" if e.source == "run" else f"opened from {e.source}"
        return e.time_text, ""

    # -- the state's changes, one row at a time ---------------------------------------------------------------
    def _added(self, entry: HistoryEntry) -> None:
        row = len(self._entries)
        self.beginInsertRows(QModelIndex(), row, row)
        self._entries.append(entry)
        self._marks.append(self._mark(entry))
        self.endInsertRows()

    def _dropped(self, dropped: list[HistoryEntry]) -> None:
        for entry in dropped:
            row = self.row_of(entry.id)
            if row is None:
                continue
            self.beginRemoveRows(QModelIndex(), row, row)
            del self._entries[row], self._marks[row]
            self.endRemoveRows()

    def _marks_changed(self) -> None:
        for row, entry in enumerate(self._entries):
            mark = self._mark(entry)
            if mark != self._marks[row]:
                self._marks[row] = mark
                self.dataChanged.emit(self.index(row, _MARKED_COLUMNS[0]), self.index(row, _MARKED_COLUMNS[-1]))
