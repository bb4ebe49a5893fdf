"""Logging for the command line and the app: one stderr handler with a plain format, its level from ``-v``.

Without ``-v`` a command shows warnings and errors; ``-v`` adds INFO, ``-vv`` DEBUG. The handler is
installed for the length of a command and removed after it (a caller's own ``main([...])`` leaves the
logging as it found it). The app adds a file beside this (gui/app.py).
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator

#: one line per record on stderr: who said it and what
LOG_FORMAT = "trackscope: %(levelname)s: %(name)s: %(message)s"
#: the level shown for each -v given (0, 1, 2 or more)
VERBOSITY_LEVELS = (logging.WARNING, logging.INFO, logging.DEBUG)


def level_for(verbosity: int) -> int:
    """The logging level of ``verbosity`` -v flags (0: WARNING, 1: INFO, 2 or more: DEBUG)."""
    return VERBOSITY_LEVELS[max(0, min(int(verbosity), len(VERBOSITY_LEVELS) - 1))]


@contextlib.contextmanager
def stderr_logging(verbosity: int = 0) -> Iterator[logging.Handler]:
    """Log records at ``level_for(verbosity)`` and above to stderr while the block runs."""
    level = level_for(verbosity)
    root = logging.getLogger()
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    handler.setLevel(level)
    previous = root.level
    root.addHandler(handler)
    root.setLevel(level)
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        root.setLevel(previous)
