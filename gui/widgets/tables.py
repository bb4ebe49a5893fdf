"""Read-only tables of rows: the one setup the app's lists share (Runs, A/B points, trade-offs, what-if)."""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import QAbstractItemModel
from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QTableView, QTableWidget, QWidget


def _read_only_rows(table: QTableView, select_rows: bool) -> None:
    table.verticalHeader().hide()
    table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
    if select_rows:
        table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
    table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)


def row_table(columns: Sequence[str], select_rows: bool = True, parent: QWidget | None = None) -> QTableWidget:
    """A table the user reads and selects whole rows of (one at a time), never edits; columns as wide as
    their contents. ``select_rows`` False: cells are not selectable as rows (a plain read-out)."""
    table = QTableWidget(0, len(columns), parent)
    table.setHorizontalHeaderLabels(list(columns))
    _read_only_rows(table, select_rows)
    return table


def row_view(model: QAbstractItemModel, parent: QWidget | None = None) -> QTableView:
    """The same table over a model of its own (a list that changes one row at a time, never rebuilt)."""
    table = QTableView(parent)
    table.setModel(model)
    _read_only_rows(table, select_rows=True)
    return table
