"""The play / step / scrub bar shared by the video view and the A/B view."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QIcon
from PySide6.QtWidgets import QHBoxLayout, QSlider, QStyle, QToolButton, QWidget

from gui.widgets.text import plain_label

#: the style's own media icons: a font may lack the pause glyph (U+23F8 drew as an empty box)
PLAY_ICON, PAUSE_ICON = QStyle.StandardPixmap.SP_MediaPlay, QStyle.StandardPixmap.SP_MediaPause


class Transport(QWidget):
    """Play/pause, previous/next frame, a scrubber and 'frame / count'; extra widgets go on the right.

    It owns no state of its own: the view connects ``play_button.toggled``, ``slider.valueChanged``
    and the step buttons, and calls ``show_frame``/``show_playing`` to reflect its state.
    """

    def __init__(self, play_tip: str, step_tips: tuple[str, str], label_width: int,
                 parent: QWidget | None = None):
        super().__init__(parent)
        self.play_button = QToolButton()
        self.play_button.setIcon(self.media_icon(PLAY_ICON))
        self.play_button.setToolTip(play_tip)
        self.play_button.setCheckable(True)
        self.back_button = QToolButton(text="◀|")
        self.back_button.setToolTip(step_tips[0])
        self.forward_button = QToolButton(text="|▶")
        self.forward_button.setToolTip(step_tips[1])
        self.slider = QSlider(Qt.Orientation.Horizontal)
        self.slider.setRange(0, 0)
        self.frame_label = plain_label("0 / 0")
        self.frame_label.setMinimumWidth(label_width)
        self.row = QHBoxLayout(self)
        self.row.setContentsMargins(0, 0, 0, 0)
        for w in (self.play_button, self.back_button, self.forward_button):
            self.row.addWidget(w)
        self.row.addWidget(self.slider, 1)
        self.row.addWidget(self.frame_label)

    def connect_view(self, set_playing, step, set_frame) -> None:
        """Wire the controls to a view's ``set_playing(bool)``, ``step(int)`` and ``set_frame(int)``."""
        self.play_button.toggled.connect(set_playing)
        self.back_button.clicked.connect(lambda: step(-1))
        self.forward_button.clicked.connect(lambda: step(1))
        self.slider.valueChanged.connect(set_frame)

    def media_icon(self, which: QStyle.StandardPixmap) -> QIcon:
        """The style's play or pause icon."""
        return self.style().standardIcon(which)

    def add(self, widget: QWidget) -> None:
        self.row.addWidget(widget)

    def set_count(self, num_frames: int) -> None:
        """Range 0..num_frames-1, without emitting a frame change."""
        self.slider.blockSignals(True)
        self.slider.setRange(0, max(0, num_frames - 1))
        self.slider.blockSignals(False)

    def show_frame(self, t: int, num_frames: int) -> None:
        """Move the scrubber to t (no signal) and show 't+1 / count'."""
        if self.slider.value() != t:
            self.slider.blockSignals(True)
            self.slider.setValue(t)
            self.slider.blockSignals(False)
        self.frame_label.setText(f"{t + 1 if num_frames else 0} / {num_frames}")

    def show_playing(self, playing: bool) -> None:
        self.play_button.blockSignals(True)
        self.play_button.setChecked(playing)
        self.play_button.setIcon(self.media_icon(PAUSE_ICON if playing else PLAY_ICON))
        self.play_button.blockSignals(False)
