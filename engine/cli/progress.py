"""Progress bars for long CLI runs (tqdm): drawn on a terminal, silent when stderr is not one.

A tracker batch can take many seconds with no event in between (256 points are one batch), so a bar
that only moved on events would look frozen: ``LiveBar`` also redraws itself every ``REFRESH_S`` from a
small thread, so the elapsed time keeps moving while a batch runs.
"""

from __future__ import annotations

import sys
import threading
from typing import IO, Any

from tqdm import tqdm

#: how often a live bar redraws between updates, s (tqdm itself redraws only on update)
REFRESH_S = 1.0


def is_terminal(stream: IO[str] | None = None) -> bool:
    """Whether ``stream`` (stderr by default) is a terminal."""
    stream = stream if stream is not None else sys.stderr
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except (ValueError, OSError):  # a closed or detached stream
        return False


class LiveBar:
    """A tqdm bar of ``total`` ``unit``s that also redraws every REFRESH_S; a context manager."""

    def __init__(self, total: int, desc: str, unit: str, stream: IO[str] | None = None,
                 refresh_s: float = REFRESH_S):
        stream = stream if stream is not None else sys.stderr
        self.enabled = is_terminal(stream)
        self.bar: Any = tqdm(total=max(1, int(total)), desc=desc, unit=unit, file=stream,
                             disable=not self.enabled, dynamic_ncols=True, leave=True)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if self.enabled and refresh_s > 0:
            self._thread = threading.Thread(target=self._tick, args=(refresh_s,), name="cli-progress", daemon=True)
            self._thread.start()

    def _tick(self, every: float) -> None:
        while not self._stop.wait(every):
            self.bar.refresh()

    def update_to(self, done: int, note: str = "") -> None:
        """Set the count done (absolute) and an optional note after the bar."""
        if not self.enabled:
            return
        self.bar.n = int(done)
        if note:
            self.bar.set_postfix_str(note, refresh=False)
        self.bar.refresh()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.bar.close()

    def __enter__(self) -> LiveBar:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
