"""A report's deep capture as a typed part: the capture summary (engine.capture.summary.CaptureSummary) and
what the capture pass wrote beside it (its trace file, how long it took, why it stopped, its bounds).

A report keeps its ``capture`` as the JSON it read or was given (``Report.capture``, a dict: what the app
and the capture pass hand around); ``Report.capture_part`` reads it once into this type. Reading never
fails the report: a capture this version cannot read is a part with ``summary`` None and the ``error``
saying why, and its JSON is written back as it was. ``to_dict`` writes exactly what ``from_dict`` read.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from engine.core.errors import ReportError
from engine.report.fields import json_copy

if TYPE_CHECKING:  # imported where a capture is read: engine.capture pulls in torch, a report alone does not
    from engine.capture.summary import CaptureSummary

#: what the capture pass writes beside the summary's own fields (engine.workflows.deep, engine.cli.track)
PASS_KEYS = ("trace_file", "trace_bytes", "capture_seconds", "stopped", "ops", "limits")


@dataclass(frozen=True)
class CapturePart:
    """One run's deep capture: the typed summary (None when unreadable: ``read_error`` says why) and the
    capture pass's own facts."""

    summary: CaptureSummary | None
    trace_file: str | None = None  # the Chrome trace beside the report (its name)
    trace_bytes: int | None = None
    capture_seconds: float | None = None  # how long the capture pass took
    stopped: str | None = None  # why the profiled run was cut short (its ops or seconds bound), None: it was not
    ops: int | None = None  # profiler events recorded
    limits: dict[str, Any] = field(default_factory=dict)  # the bounds it ran under (max_ops, max_seconds)
    extra: dict[str, Any] = field(default_factory=dict)  # keys neither the summary nor the pass know
    read_error: str | None = None  # why the summary could not be read (then ``raw`` is what is written back)
    #: the JSON as read, kept only when writing the typed values would not give it back (unreadable, or written
    #: by another version); a changed part is built anew (``CapturePart(summary=...)``), not replaced from it
    raw: dict[str, Any] | None = field(default=None, compare=False)
    nulls: tuple[str, ...] = field(default=(), compare=False)  # pass keys the JSON had as null

    @property
    def error(self) -> str | None:
        """The capture's own error (the profiled run failed), else why it could not be read."""
        return self.summary.error if self.summary is not None and self.summary.error else self.read_error

    @classmethod
    def from_dict(cls, data: Any, path: str = "capture") -> CapturePart:
        """The part from a report's ``capture`` JSON; never raises for a summary it cannot read."""
        if not isinstance(data, Mapping):
            raise ReportError(f"{path} should be an object, found {type(data).__name__}")
        from engine.capture.summary import CaptureSummary

        data = json_copy(dict(data), path)
        try:
            summary = CaptureSummary.from_dict(data)
        except ReportError as exc:
            return cls(summary=None, read_error=exc.message, raw=data)
        known = set(CaptureSummary.__dataclass_fields__)
        extra = {k: v for k, v in data.items() if k not in known and k not in PASS_KEYS}
        limits = data.get("limits")
        if limits is not None and not isinstance(limits, dict):
            raise ReportError(f"{path}.limits should be an object, found {type(limits).__name__}")
        part = cls(summary=summary, trace_file=_opt(data, "trace_file", str),
                   trace_bytes=_opt(data, "trace_bytes", int),
                   capture_seconds=_opt(data, "capture_seconds", float), stopped=_opt(data, "stopped", str),
                   ops=_opt(data, "ops", int), limits=dict(limits or {}), extra=extra,
                   nulls=tuple(k for k in PASS_KEYS if k in data and data[k] is None))
        if part.to_dict() != data:  # a summary written by another version: fields this one lacks, or defaults
            return dataclasses.replace(part, raw=data)
        return part

    def to_dict(self) -> dict[str, Any]:
        """The capture JSON: exactly as read (see ``raw``), or the summary and the pass's facts."""
        if self.raw is not None:
            return dict(self.raw)
        if self.summary is None:
            return {}
        out = self.summary.to_dict()
        values = {"trace_file": self.trace_file, "trace_bytes": self.trace_bytes,
                  "capture_seconds": self.capture_seconds, "stopped": self.stopped, "ops": self.ops,
                  "limits": dict(self.limits) if self.limits else None}
        for key in PASS_KEYS:
            if values[key] is not None or key in self.nulls:
                out[key] = values[key]
        return {**out, **self.extra}


def _opt(data: Mapping[str, Any], key: str, kind: type) -> Any:
    value = data.get(key)
    if value is None:
        return None
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ReportError(f"capture.{key} should be a {kind.__name__}, found {type(value).__name__}")
    return value
