"""Errors a user can act on, kept apart from bugs.

A ``UserError`` carries a one-line message naming the input and the problem, and optionally a
suggested fix. The CLI prints it and exits 2; the GUI shows it in the window. Anything else that
escapes is an internal error (exit 1). A message (and a suggestion) longer than ``MAX_MESSAGE_CHARS``
is cut there and says how much was cut: a plugin's exception text is quoted in these messages, and a
20 MiB one must not reach stderr or a report whole.
"""

from __future__ import annotations

#: longest message or suggestion a UserError keeps, characters; the rest is cut and counted
MAX_MESSAGE_CHARS = 2000


def capped(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """``text`` when it fits in ``limit`` characters, else its start and how many characters were cut."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… [{len(text) - limit} more characters cut]"


class UserError(Exception):
    """Bad input or an environment problem the user can fix."""

    def __init__(self, message: str, suggestion: str | None = None):
        message = capped(str(message))
        suggestion = capped(str(suggestion)) if suggestion is not None else None
        super().__init__(message)
        self.message = message
        self.suggestion = suggestion

    def __str__(self) -> str:
        if self.suggestion:
            return f"{self.message} ({self.suggestion})"
        return self.message


class VideoError(UserError):
    """A video or image folder that cannot be opened or decoded."""


class QueryError(UserError):
    """A queries file or query array that is malformed."""


class TrackerError(UserError):
    """A tracker that cannot be loaded, or that failed while running."""


class OutOfMemory(UserError):
    """The device ran out of memory; the suggestion names the batch sizes to lower."""


class ReportError(UserError):
    """A run report that is missing, malformed or of an unknown version."""
