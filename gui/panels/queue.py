"""Calls to the tab panels, made when the panel is on screen, else queued until its tab is next shown."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from PySide6.QtWidgets import QTabWidget, QWidget

log = logging.getLogger(__name__)


class PanelQueue:
    """Calls to panels, made now when the panel's tab is shown, else when it is next shown (their work stays
    off the GUI thread's hot path while a run streams in: A/B divergence alone took ~23 ms per run)."""

    def __init__(self, tabs: QTabWidget, on_error: Callable[[str], None]):
        self._tabs = tabs
        self._on_error = on_error
        self._queued: dict[QWidget, list[tuple[Callable[..., Any], tuple, bool]]] = {}

    def call(self, panel: QWidget | None, method: Callable[..., Any], *args: Any, replace: bool = True,
             keep_last: int | None = None) -> None:
        """Call ``method`` (a bound method of ``panel``); ``replace``: a later call drops an earlier queued one;
        ``keep_last``: of calls that accumulate (``replace=False``), only the newest this many stay queued (the
        queue of a tab never shown must not hold every run of a long session: 500 runs kept 500 reports)."""
        if panel is None:
            return
        if self._tabs.currentWidget() is panel:
            self._invoke(panel, method, args)
            return
        queue = self._queued.setdefault(panel, [])
        if replace:
            queue[:] = [(m, a, r) for m, a, r in queue if m != method]
        queue.append((method, args, replace))
        if keep_last is not None:
            mine = [i for i, (m, _, _) in enumerate(queue) if m == method]
            for i in reversed(mine[:-keep_last] if keep_last > 0 else mine):
                del queue[i]

    def flush(self, panel: QWidget | None = None) -> None:
        """Apply the calls queued for ``panel`` (or for every panel)."""
        for p in [panel] if panel is not None else list(self._queued):
            for method, args, _ in self._queued.pop(p, []):
                self._invoke(p, method, args)

    def _invoke(self, panel: QWidget, method: Callable[..., Any], args: tuple) -> None:
        try:
            method(*args)
        except Exception as exc:  # a panel bug is shown, not fatal
            log.exception("%s.%s failed", type(panel).__name__, method.__name__)
            self._on_error(f"{type(panel).__name__}.{method.__name__} failed: {type(exc).__name__}: {exc}")
