"""Which run configurations have already run: the first run of a configuration is cold, later ones warm.

Warmness is a property of a process (compiled kernels, autotuning, allocator pools), so the CLI and any
caller that passes none share ``PROCESS_WARM``; a caller that wants its own notion (a test) passes its own.
"""

from __future__ import annotations

import threading
from typing import Hashable

#: a warm key: (tracker, device, precision, frames per batch, points per batch)
WarmKey = tuple[Hashable, ...]


class WarmCache:
    """A thread-safe set of warm keys."""

    def __init__(self) -> None:
        self._keys: set[WarmKey] = set()
        self._lock = threading.Lock()

    def is_warm(self, key: WarmKey) -> bool:
        """True when a batch with this key has run before."""
        with self._lock:
            return key in self._keys

    def add(self, key: WarmKey) -> None:
        """Record that a batch with this key has run."""
        with self._lock:
            self._keys.add(key)

    def clear(self) -> None:
        """Forget every key: the next run of any configuration is cold."""
        with self._lock:
            self._keys.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._keys)


#: the process's warm cache (the default of every Session)
PROCESS_WARM = WarmCache()
