"""Labels whose text format is set, never guessed: the one place the app decides plain vs rich text.

A QLabel left in its default (auto-detect) format renders anything that looks like HTML, so a
report's label or device name such as ``<img src='/dev/zero'>`` would make Qt read that file. Every
label is made here: plain text, or rich text whose interpolated values pass through ``esc``.
"""

from __future__ import annotations

import html
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QWidget


def plain_label(text: str = "", parent: QWidget | None = None) -> QLabel:
    """A label that shows its text as it is."""
    label = QLabel(parent)
    label.setTextFormat(Qt.TextFormat.PlainText)
    label.setText(text)
    return label


def rich_label(text: str = "", parent: QWidget | None = None) -> QLabel:
    """A label for markup this app writes; every value from a file in it must go through ``esc``."""
    label = QLabel(parent)
    label.setTextFormat(Qt.TextFormat.RichText)
    label.setText(text)
    return label


def esc(value: Any) -> str:
    """A value as HTML text (tags and entities escaped), for a rich label."""
    return html.escape(str(value), quote=True)


def plain_tip(text: Any) -> str:
    """A tooltip that shows ``text`` as it is: Qt guesses a tooltip's format, so it is escaped and marked up."""
    return f"<p style='white-space: pre-wrap'>{esc(text)}</p>"
