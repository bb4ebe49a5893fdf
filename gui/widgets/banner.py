"""A non-modal message strip: the problem in bold, the suggested fix under it, a close button."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFrame, QHBoxLayout, QToolButton, QWidget

from gui.widgets.text import esc, rich_label

BANNER_STYLES = {
    "error": "background: #fde2e1; border: 1px solid #e0a3a0; color: #611a15;",
    "warning": "background: #fff4d6; border: 1px solid #e5c66b; color: #5c4400;",
    "info": "background: #e3f0fd; border: 1px solid #9cc3ea; color: #0c3559;",
}


class MessageBanner(QFrame):
    """A non-modal message strip above the video: the problem, the suggested fix, a close button."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.text = rich_label()
        self.text.setWordWrap(True)
        self.text.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        close = QToolButton(text="✕")
        close.setAutoRaise(True)
        close.clicked.connect(self.hide)
        row = QHBoxLayout(self)
        row.setContentsMargins(8, 4, 4, 4)
        row.addWidget(self.text, 1)
        row.addWidget(close, 0, Qt.AlignmentFlag.AlignTop)
        self.level = ""
        self.message = ""
        self.hide()

    def show_message(self, message: str, suggestion: str | None = None, level: str = "error") -> None:
        self.level, self.message = level, message
        html = f"<b>{esc(message)}</b>"
        if suggestion:
            html += f"<br>Try: {esc(suggestion)}"
        self.text.setText(html)
        self.setStyleSheet(f"MessageBanner {{{BANNER_STYLES.get(level, BANNER_STYLES['info'])}}}")
        self.show()


