"""Waits on conditions for GUI tests, so a negative is asserted only after the system provably handled
the input (never after a fixed sleep that passes whether or not the event came)."""

from __future__ import annotations

import time
from collections.abc import Callable

from PySide6.QtCore import QMetaObject, QObject, Qt, Slot

#: the longest any wait here waits for its condition (a bound on waiting, not a measurement)
WAIT_LIMIT_S = 30.0


class _Marker(QObject):
    def __init__(self) -> None:
        super().__init__()
        self.reached = False

    @Slot()
    def mark(self) -> None:
        self.reached = True


def wait_posted_events_delivered(qtbot, timeout_ms: int = int(WAIT_LIMIT_S * 1000)) -> None:
    """Return once every event posted to the GUI thread before this call (queued signals of a worker that has
    ended, say) has been delivered: a queued call posted now is delivered after them, in order."""
    marker = _Marker()
    QMetaObject.invokeMethod(marker, "mark", Qt.ConnectionType.QueuedConnection)
    qtbot.waitUntil(lambda: marker.reached, timeout=timeout_ms)


def wait_without_events(condition: Callable[[], bool], what: str, limit_s: float = WAIT_LIMIT_S) -> None:
    """Wait for ``condition`` (set by another thread) while the GUI thread processes no events, so what that
    thread posts in the meantime stays queued; AssertionError naming ``what`` past ``limit_s``."""
    deadline = time.monotonic() + limit_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {limit_s:.0f} s")
        time.sleep(0.005)
