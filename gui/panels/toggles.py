"""Run configuration controls: tracker, device, precision, points and frames per batch.

Precision modes the device cannot run are listed but disabled, with the gate's reason as tooltip;
modes that run but not natively (TF32 on the CPU) stay enabled with the reason shown. Every change
emits ``config_changed`` with a ``ConfigChange`` (the one changed field, validated), which a running
session applies from its next batch.
"""

from __future__ import annotations

from typing import Any, cast

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QStandardItemModel
from PySide6.QtWidgets import QComboBox, QFormLayout, QSpinBox, QWidget

from engine.api import (
    MAX_FRAMES_PER_BATCH,
    MAX_POINTS_PER_BATCH,
    PRECISIONS,
    ConfigChange,
    RunConfig,
    available_trackers,
    device_choices,
    precision_gates,
)
from gui.widgets.text import plain_label, plain_tip

TRACKER_TIP = "Tracker: a built-in, an installed plugin, or module:factory"
POPUP_MARGIN_PX = 32  # the tracker list's room beyond its longest name (scroll bar, frame)


class TogglesPanel(QWidget):
    """Form of run settings; ``config()`` reads it, ``config_changed`` reports edits."""

    config_changed = Signal(object)  # ConfigChange

    def __init__(self, config: RunConfig | None = None, parent: QWidget | None = None):
        super().__init__(parent)
        self.tracker = QComboBox()
        self.tracker.setEditable(True)  # module:factory plugins can be typed in
        self.tracker.setToolTip(TRACKER_TIP)
        for name in available_trackers():
            self.tracker.addItem(name)
        self.device = QComboBox()
        for name in device_choices():
            self.device.addItem(name)
        self.precision = QComboBox()
        for mode in PRECISIONS:
            self.precision.addItem(mode)
        self.points = QSpinBox()
        self.points.setRange(1, MAX_POINTS_PER_BATCH)
        self.points.setToolTip("Query points tracked per batch (memory grows with it)")
        self.frames = QSpinBox()
        self.frames.setRange(1, MAX_FRAMES_PER_BATCH)
        self.frames.setToolTip("Frames processed per chunk inside the tracker")
        self.gate_note = plain_label("")
        self.gate_note.setWordWrap(True)
        self.gate_note.setStyleSheet("color: #b8860b;")

        form = QFormLayout(self)
        form.addRow(plain_label("Tracker"), self.tracker)
        form.addRow(plain_label("Device"), self.device)
        form.addRow(plain_label("Precision"), self.precision)
        form.addRow(plain_label("Points / batch"), self.points)
        form.addRow(plain_label("Frames / batch"), self.frames)
        form.addRow(self.gate_note)

        self._current = RunConfig()
        self._fallback_note = ""  # why the precision shown is not the one asked for
        self.set_config(config or RunConfig())
        self.tracker.currentTextChanged.connect(lambda v: self._changed("tracker", v.strip()))
        self.tracker.currentTextChanged.connect(self._show_tracker_name)
        self.device.currentTextChanged.connect(self._device_changed)
        self.precision.currentTextChanged.connect(lambda v: self._changed("precision", v))
        self.points.valueChanged.connect(lambda v: self._changed("points_per_batch", int(v)))
        self.frames.valueChanged.connect(lambda v: self._changed("frames_per_batch", int(v)))

    def config(self) -> RunConfig:
        return self._current

    def set_config(self, config: RunConfig) -> None:
        """Show ``config`` without emitting ``config_changed``."""
        widgets = (self.tracker, self.device, self.precision, self.points, self.frames)
        for w in widgets:
            w.blockSignals(True)
        try:
            if self.tracker.findText(config.tracker) < 0:
                self.tracker.addItem(config.tracker)
            self.tracker.setCurrentText(config.tracker)
            if self.device.findText(config.device) < 0:
                self.device.addItem(config.device)
            self.device.setCurrentText(config.device)
            self.points.setValue(config.points_per_batch)
            self.frames.setValue(config.frames_per_batch)
            self._current = config
            self._update_gates(config.device)
            self.precision.setCurrentText(config.precision)
            self._fallback_note = ""
            if self.precision.currentText() != config.precision or not self.is_enabled(config.precision):
                # a mode this device cannot run (fp16 on the CPU, from a setting or --precision): fp32, saying why
                reason = self.gate_reason(config.precision) or config.precision
                self._fallback_note = f"{reason} (fp32 selected instead)"
                self.precision.setCurrentText("fp32")
            self._current = config.with_changes(points_per_batch=self.points.value(),  # as the spin boxes hold
                                                frames_per_batch=self.frames.value(),  # them, within range
                                                precision=self.precision.currentText())
            self._show_gate_note()
            self._show_tracker_name(self.tracker.currentText())
        finally:
            for w in widgets:
                w.blockSignals(False)

    def _show_tracker_name(self, name: str) -> None:
        """Plugin names are long: the tooltip gives the whole current one, the list is as wide as the longest."""
        self.tracker.setToolTip(plain_tip(f"{name}\n{TRACKER_TIP}") if name else TRACKER_TIP)
        view = self.tracker.view()
        names = [self.tracker.itemText(i) for i in range(self.tracker.count())]
        widest = max((self.tracker.fontMetrics().horizontalAdvance(n) for n in names), default=0)
        view.setMinimumWidth(widest + POPUP_MARGIN_PX)

    def _device_changed(self, device: str) -> None:
        self._update_gates(device)
        self._changed("device", device)

    def _update_gates(self, device: str) -> None:
        """Disable precision modes that cannot run on ``device``; reasons become tooltips."""
        resolved = precision_gates(device)
        if resolved is None:
            return
        model = self.precision.model()
        assert isinstance(model, QStandardItemModel)
        for i, mode in enumerate(PRECISIONS):
            g = resolved.gates[mode]
            item = model.item(i)
            item.setEnabled(g.runnable)
            item.setToolTip(g.reason or f"{mode} runs natively on {resolved.device}")
            item.setData(g.reason, Qt.ItemDataRole.UserRole)
        current = self.precision.currentIndex()
        if current >= 0 and not model.item(current).isEnabled():
            self.precision.setCurrentText("fp32")  # emits precision change when signals are live

    def gate_reason(self, mode: str) -> str:
        i = self.precision.findText(mode)
        return "" if i < 0 else str(self.precision.itemData(i, Qt.ItemDataRole.UserRole) or "")

    def is_enabled(self, mode: str) -> bool:
        model = cast(QStandardItemModel, self.precision.model())  # a combo box's own model (see above)
        i = self.precision.findText(mode)
        return i >= 0 and model.item(i).isEnabled()

    def _show_gate_note(self) -> None:
        reason = self._fallback_note or self.gate_reason(self._current.precision)
        self.gate_note.setText(reason)
        self.gate_note.setVisible(bool(reason))

    def _changed(self, key: str, value: Any) -> None:
        if not value and key == "tracker":
            return
        try:
            change = ConfigChange.of({key: value})
            new = change.applied_to(self._current)
        except ValueError:  # ConfigError: the widgets' ranges keep this from happening
            return
        if new == self._current:
            return
        self._current = new
        self._fallback_note = ""
        self._show_gate_note()
        self.config_changed.emit(change)
