"""A non-modal message strip: the problem in bold, the suggested fix under it, a close button.

It floats over the top of the tab pages, just under the tab bar (``float_over``), outside every layout:
showing or hiding it moves nothing (in the layout above the tabs it pushed the tab bar down under the
pointer, issue 20 item 8).
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, QPoint, Qt
from PySide6.QtWidgets import QFrame, QHBoxLayout, QToolButton, QWidget

from gui.widgets.text import esc, rich_label

BANNER_STYLES = {
    "error": "background: #fde2e1; border: 1px solid #e0a3a0; color: #611a15;",
    "warning": "background: #fff4d6; border: 1px solid #e5c66b; color: #5c4400;",
    "info": "background: #e3f0fd; border: 1px solid #9cc3ea; color: #0c3559;",
}
FLOAT_MARGIN_PX = 6  # between the floating banner and its host's sides


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
        self._below: QWidget | None = None  # floating: it sits under this widget of its host (the tab bar)
        self.hide()

    def float_over(self, host: QWidget, below: QWidget) -> None:
        """Float over the top of ``host``, just under its child ``below``, at the host's width less margins."""
        self.setParent(host)
        self._below = below
        host.installEventFilter(self)
        below.installEventFilter(self)
        self._place()

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 (Qt name)
        if event.type() in (QEvent.Type.Resize, QEvent.Type.Move, QEvent.Type.LayoutRequest):
            self._place()
        return False

    def _place(self) -> None:
        host, below = self.parentWidget(), self._below
        if host is None or below is None:
            return
        top = below.mapTo(host, QPoint(0, below.height())).y()
        width = max(1, host.width() - 2 * FLOAT_MARGIN_PX)
        height = self.heightForWidth(width) if self.hasHeightForWidth() else self.sizeHint().height()
        self.setGeometry(FLOAT_MARGIN_PX, top, width, max(height, self.minimumSizeHint().height()))
        self.raise_()

    def show_message(self, message: str, suggestion: str | None = None, level: str = "error") -> None:
        self.level, self.message = level, message
        html = f"<b>{esc(message)}</b>"
        if suggestion:
            html += f"<br>Try: {esc(suggestion)}"
        self.text.setText(html)
        self.setStyleSheet(f"MessageBanner {{{BANNER_STYLES.get(level, BANNER_STYLES['info'])}}}")
        self._place()  # its height follows the text
        self.show()


