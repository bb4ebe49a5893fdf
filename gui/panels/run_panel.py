"""The left dock: run settings (toggles), Run / Stop / Loop, run progress, and query tools."""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QFrame,
    QGridLayout,
    QHBoxLayout,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from engine.api import RunConfig
from gui.panels.toggles import TogglesPanel
from gui.widgets.text import plain_label, rich_label

DEFAULT_GRID = 8
MAX_GRID = 100


class RunPanel(QWidget):
    """Controls only: it emits what the user asked for; the main window acts on it."""

    run_requested = Signal()
    stop_requested = Signal()
    grid_requested = Signal(int)
    load_queries_requested = Signal()
    clear_queries_requested = Signal()

    def __init__(self, config: RunConfig, grid: int = DEFAULT_GRID, parent: QWidget | None = None):
        super().__init__(parent)
        self.toggles = TogglesPanel(config)
        self.run_button = QPushButton("Run")
        self.run_button.setToolTip("Track the queries (Ctrl+R)")
        self.run_button.clicked.connect(self.run_requested)
        self.stop_button = QPushButton("Stop")
        self.stop_button.setToolTip("Stop after the current batch (Esc)")
        self.stop_button.clicked.connect(self.stop_requested)
        self.stop_button.setEnabled(False)
        self.loop_box = QCheckBox("Loop")
        self.loop_box.setToolTip("Run again as soon as a run finishes (live demos; toggles apply on the fly)")
        self.run_label = plain_label("")
        self.run_label.setWordWrap(True)
        self.grid_spin = QSpinBox()
        self.grid_spin.setRange(1, MAX_GRID)
        self.grid_spin.setValue(grid)
        self.grid_spin.setToolTip("Grid size k: k x k queries on the current frame")
        grid_button = QPushButton("Grid")
        grid_button.clicked.connect(lambda: self.grid_requested.emit(self.grid_spin.value()))
        csv_button = QPushButton("Load CSV…")
        csv_button.clicked.connect(self.load_queries_requested)
        clear_button = QPushButton("Clear")
        clear_button.clicked.connect(self.clear_queries_requested)
        self.click_box = QCheckBox("Click adds a query")
        self.click_box.setToolTip("Left click on the video adds a query on the current frame")
        self.click_box.setChecked(True)
        self.query_label = plain_label("0 queries")

        lay = QVBoxLayout(self)
        lay.addWidget(self.toggles)
        buttons = QHBoxLayout()
        buttons.addWidget(self.run_button)
        buttons.addWidget(self.stop_button)
        buttons.addWidget(self.loop_box)
        lay.addLayout(buttons)
        lay.addWidget(self.run_label)
        sep = QFrame()
        sep.setFrameShape(QFrame.Shape.HLine)
        lay.addWidget(sep)
        lay.addWidget(rich_label("<b>Queries</b>"))
        query_grid = QGridLayout()
        query_grid.addWidget(self.grid_spin, 0, 0)
        query_grid.addWidget(grid_button, 0, 1)
        query_grid.addWidget(csv_button, 1, 0)
        query_grid.addWidget(clear_button, 1, 1)
        lay.addLayout(query_grid)
        lay.addWidget(self.click_box)
        lay.addWidget(self.query_label)
        lay.addStretch(1)

    def set_running(self, running: bool) -> None:
        self.run_button.setEnabled(not running)
        self.stop_button.setEnabled(running)

    def set_query_count(self, n: int) -> None:
        self.query_label.setText(f"{n} queries")
