"""The session's run history: one entry per run made here and per report opened (each report of a bench
file), with what tells runs apart (video, tracker, precision, batch sizes, machine, status).

Qt-free: ``AppState`` owns a ``RunHistory`` and announces its changes; the Runs panel, the A/B pick and
the trade-off table read it. Entries are kept to MAX_HISTORY (the oldest go first) so memory stays bounded.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from engine.api import (
    DEFAULT_TUNABLE,
    PRECISION_UNUSED,
    Analysis,
    Report,
    RunConfig,
    tunable_settings,
    values_taken,
)
from gui.model import RunData

MAX_HISTORY = 50  # entries kept (runs and opened reports); each may hold a run's tracks
#: reports write queries rounded to 2 decimals (up to 0.005 px off): queries closer than this are the same
QUERY_MATCH_PX = 0.005 + 1e-4
VALUE_CHANGE = "→"  # joins the values a setting took during one run: "p64→32"
NO_VIDEO = "(no file)"
#: an entry's status
FINISHED, STOPPED, FAILED, OPENED = "finished", "stopped", "failed", "report"
_TITLE_PREFIX = {"precision": "", "points_per_batch": "p", "frames_per_batch": "f"}


def _distinct(values: Iterable[Any]) -> tuple[Any, ...]:
    out: list[Any] = []
    for v in values:
        if v not in out:
            out.append(v)
    return tuple(out)


def sized_title(tracker: str, settings: Mapping[str, Sequence[Any]]) -> str:
    """A run's title with every value each setting took: 'corrtrack fp32 p64→32 f16' ('lk' without any).

    settings: the tracker's tunable settings (RunConfig field names) and the values each took, in order.
    """
    parts = [tracker]
    for name in DEFAULT_TUNABLE:
        values = settings.get(name)
        if values:
            parts.append(_TITLE_PREFIX[name] + VALUE_CHANGE.join(str(v) for v in values))
    return " ".join(parts)


def video_name(path: str | None) -> str:
    """How an entry names its video: the file name (the same video opened from another folder matches)."""
    return Path(path).name if path else NO_VIDEO


@dataclass
class HistoryEntry:
    """One run of the session, or one report opened from a file.

    settings: each tunable setting's values in the order the run used them (a live toggle adds one);
    run: its tracks (None for a report that left them out); analysis: what the Diagnosis tab shows for it.
    """

    id: int
    video: str
    tracker: str
    settings: dict[str, tuple[Any, ...]]
    machine: str
    status: str
    source: str  # "run" (made here) or the file it was opened from
    run: RunData | None = None
    report: Report | None = None
    analysis: Analysis | None = None
    recorder: Any = None  # the RunRecorder of a run made here (an export rebuilds its report with tracks)
    created: float = field(default_factory=time.time)
    num_frames: int = 0

    @property
    def title(self) -> str:
        return sized_title(self.tracker, self.settings)

    @property
    def precision(self) -> str:
        """Its precision ('fp32→bf16' when toggled during the run; 'n/a' when the tracker has none)."""
        values = self.settings.get("precision")
        return VALUE_CHANGE.join(values) if values else PRECISION_UNUSED

    @property
    def points_per_batch(self) -> tuple[int, ...]:
        """Points per batch, every size used in order (empty when the tracker has none)."""
        return tuple(self.settings.get("points_per_batch", ()))

    @property
    def queries(self) -> np.ndarray | None:
        return None if self.run is None else self.run.queries

    @property
    def time_text(self) -> str:
        """When it ran: a run of this session by the clock; an opened report by when it was recorded (UTC)."""
        recorded = self.report.created if self.report is not None and self.source != "run" else ""
        if recorded:
            return recorded.replace("T", " ")[:16] + (" UTC" if recorded.endswith("Z") else "")
        return time.strftime("%H:%M:%S", time.localtime(self.created))

    def describe(self) -> str:
        """One line for lists and messages: '#3 corrtrack fp16 p256 f16 on sample.mp4 (NVIDIA H200)'."""
        return f"#{self.id} {self.title} on {self.video} ({self.machine})"


def _settings(tunable: Iterable[str], configs: Iterable[RunConfig | Mapping[str, Any]]) -> dict[str, tuple]:
    fields = [c.to_dict() if isinstance(c, RunConfig) else dict(c) for c in configs]
    return {name: _distinct(f[name] for f in fields if name in f) for name in DEFAULT_TUNABLE if name in tunable}


def run_settings(tracker: Mapping[str, Any] | None, configs: Sequence[RunConfig | Mapping[str, Any]]) -> dict:
    """The tunable settings of a run made here and the values each took (configs: the batches', in order)."""
    tunable = (tracker or {}).get("tunable", DEFAULT_TUNABLE)
    return _settings(tunable, configs)


def report_settings(report: Report) -> dict[str, tuple]:
    """The tunable settings of a report's tracker and the values each took over its batches."""
    tunable = tunable_settings(report)
    return {name: values_taken(report, name) for name in DEFAULT_TUNABLE if name in tunable}


def analysis_for(analysis: Analysis, report: Report) -> Analysis:
    """A file's analysis with ``report`` first (its roofline is the one the Diagnosis tab uses); findings of
    the whole file (growth across a bench's batch sizes) stay."""
    pairs = list(zip(analysis.reports, analysis.costs))
    first = [p for p in pairs if p[0] is report]
    if not first:
        return analysis
    rest = [p for p in pairs if p[0] is not report]
    ordered = first + rest
    return dataclasses.replace(analysis, reports=tuple(r for r, _ in ordered), costs=tuple(c for _, c in ordered))


class RunHistory:
    """The entries of the session, oldest first, at most ``limit``; ids are never reused."""

    def __init__(self, limit: int = MAX_HISTORY) -> None:
        self.limit = limit
        self._entries: list[HistoryEntry] = []
        self._next_id = 1

    def new_id(self) -> int:
        value, self._next_id = self._next_id, self._next_id + 1
        return value

    def add(self, entry: HistoryEntry) -> list[HistoryEntry]:
        """Keep ``entry``; returns the entries dropped to stay within the limit."""
        self._entries.append(entry)
        dropped = self._entries[:-self.limit]
        del self._entries[:-self.limit]
        return dropped

    def get(self, entry_id: int | None) -> HistoryEntry | None:
        return next((e for e in self._entries if e.id == entry_id), None)

    def runs(self) -> list[RunData]:
        """The entries' tracked runs, oldest first."""
        return [e.run for e in self._entries if e.run is not None]

    def previous_match(self, entry: HistoryEntry) -> HistoryEntry | None:
        """The latest earlier entry that can be compared with ``entry`` (same video and queries)."""
        for e in reversed(self._entries):
            if (e.id < entry.id and e.status in (FINISHED, OPENED) and e.run is not None and e.run.complete
                    and why_not_comparable(e, entry) is None):
                return e
        return None

    def __iter__(self) -> Iterator[HistoryEntry]:
        return iter(list(self._entries))

    def __len__(self) -> int:
        return len(self._entries)


def queries_match(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two query sets [N, 3] are the same queries (within a report's 2-decimal rounding)."""
    return a.shape == b.shape and float(np.nanmax(np.abs(a - b), initial=0.0)) <= QUERY_MATCH_PX


def why_not_comparable(a: HistoryEntry, b: HistoryEntry) -> str | None:
    """None when A and B can be set side by side (both tracked, same video, same queries), else why not."""
    if a.id == b.id:
        return f"A and B are the same entry ({a.describe()}): pick two different ones"
    for side, e in (("A", a), ("B", b)):
        if e.run is None:
            return f"{side} ({e.describe()}) has no tracks to compare (its report left them out)"
    assert a.run is not None and b.run is not None
    if a.video != b.video:
        return f"A is on {a.video} and B on {b.video}: only runs of the same video can be compared"
    if a.run.tracks.shape != b.run.tracks.shape or not queries_match(a.run.queries, b.run.queries):
        return (f"A ({a.run.num_points} points) and B ({b.run.num_points} points) tracked different query points: "
                "only runs of the same queries can be compared")
    return None
