"""Held-out AJ and real-clip cycle error beside the precision trade-off's runs, from accuracy files.

An accuracy file (``trackscope eval --json``: TAP-Vid scores on a held-out set with ground truth;
``trackscope cycle --json``: forward-backward cycle error on real clips without) holds one entry per
(tracker, precision). The trade-off shows each beside every run row of the same tracker and precision,
whatever that row's video, machine or batch sizes: the figure is the tracker's at that precision, measured
on the file's set or clips and machine (which the source says). An entry no run row matches is a row of its
own, speed empty, so nothing loaded is invisible. A later file's entry of the same kind, tracker and
precision replaces the earlier one.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from engine.analysis.tradeoff import UNTRAINED_MARK
from engine.core.config import PRECISIONS
from engine.report.accuracy_file import (
    CYCLE_KIND,
    EVAL_KIND,
    AccuracyEntry,
    AccuracyFile,
    CycleSummary,
    EvalScores,
    accuracy_from_data,
    is_accuracy_data,
)
from engine.report.files import read_json, reports_from_data
from engine.report.schema import Report

#: clip names a source's text lists before it says how many more
MAX_NAMED_CLIPS = 3


@dataclass(frozen=True)
class AccuracySource:
    """Where an accuracy figure came from: the file, what it graded, and on which machine."""

    path: str
    kind: str  # EVAL_KIND or CYCLE_KIND
    name: str  # the evaluation set's folder name, or the clip ("N clips" for several)
    videos: tuple[str, ...]
    machine: str

    @property
    def num_videos(self) -> int:
        return len(self.videos)

    @property
    def text(self) -> str:
        """'held-out set heldout (32 videos, NVIDIA H200; acc.json)', '2 real clips: a.mp4, b.mp4 (CPU; c.json)'."""
        where = f"{self.machine}; {Path(self.path).name}"
        n = self.num_videos
        if self.kind == EVAL_KIND:
            return f"held-out set {self.name} ({n} video{'s' if n != 1 else ''}, {where})"
        named = ", ".join(self.videos[:MAX_NAMED_CLIPS]) + (f" and {n - MAX_NAMED_CLIPS} more"
                                                            if n > MAX_NAMED_CLIPS else "")
        return f"{n} real clip{'s' if n != 1 else ''}: {named} ({where})"


@dataclass(frozen=True)
class HeldOutAccuracy:
    """A tracker's mean TAP-Vid scores over a held-out set at one precision."""

    scores: EvalScores
    source: AccuracySource

    @property
    def aj(self) -> float | None:
        return self.scores.aj


@dataclass(frozen=True)
class CycleAccuracy:
    """A tracker's cycle error over real clips (every clip's points pooled) at one precision."""

    summary: CycleSummary
    source: AccuracySource
    baseline: str | None  # the tracker the shared-points medians compare with (LK), None without one

    @property
    def median_px(self) -> float | None:
        return self.summary.median_px

    @property
    def kept_text(self) -> str:
        """'130/144'."""
        return f"{self.summary.kept}/{self.summary.points}"


@dataclass(frozen=True)
class AccuracyOnlyRow:
    """Accuracy of a (tracker, precision) that no run row of the table has: shown alone, speed empty."""

    tracker: str
    precision: str
    held_out: HeldOutAccuracy | None
    cycle: CycleAccuracy | None

    @property
    def machine(self) -> str:
        """The machine(s) the figures were measured on."""
        names = [a.source.machine for a in (self.held_out, self.cycle) if a is not None]
        return " / ".join(dict.fromkeys(names))


def entry_tracker(entry: AccuracyEntry) -> str:
    """An entry's tracker as the trade-off's rows name it (an untrained learned tracker marked)."""
    return entry.tracker + (UNTRAINED_MARK if entry.untrained else "")


def _order(key: tuple[str, str]) -> tuple[str, int]:
    tracker, precision = key
    return tracker, PRECISIONS.index(precision) if precision in PRECISIONS else len(PRECISIONS)


class TradeoffAccuracy:
    """The accuracy files added to the trade-off, by (tracker, precision)."""

    def __init__(self) -> None:
        self.held_out: dict[tuple[str, str], HeldOutAccuracy] = {}
        self.cycle: dict[tuple[str, str], CycleAccuracy] = {}

    def add(self, file: AccuracyFile, path: str | Path) -> int:
        """Every entry of an accuracy file (replacing those of the same kind, tracker and precision); -> how
        many."""
        source = AccuracySource(str(path), file.kind, file.source_name, file.videos, file.machine)
        for entry in file.entries:
            key = (entry_tracker(entry), entry.precision)
            if isinstance(entry.summary, EvalScores):
                self.held_out[key] = HeldOutAccuracy(entry.summary, source)
            else:
                self.cycle[key] = CycleAccuracy(entry.summary, source,
                                                file.baseline if entry.tracker != file.baseline else None)
        return len(file.entries)

    def of(self, tracker: str, precision: str) -> tuple[HeldOutAccuracy | None, CycleAccuracy | None]:
        """The held-out and cycle accuracy of a run row's tracker and precision (None where none was added)."""
        key = (tracker, precision)
        return self.held_out.get(key), self.cycle.get(key)

    def unmatched(self, rows: Iterable[tuple[str, str]]) -> list[AccuracyOnlyRow]:
        """The (tracker, precision) pairs with accuracy but not among ``rows`` (the run rows shown), each as a row
        of its own, by tracker and precision."""
        have = set(rows)
        keys = sorted({*self.held_out, *self.cycle} - have, key=_order)
        return [AccuracyOnlyRow(k[0], k[1], self.held_out.get(k), self.cycle.get(k)) for k in keys]

    def sources(self, kind: str) -> list[AccuracySource]:
        """The files of ``kind`` (EVAL_KIND, CYCLE_KIND) whose figures are in the table, in the order added."""
        found = self.held_out.values() if kind == EVAL_KIND else self.cycle.values() if kind == CYCLE_KIND else ()
        return list(dict.fromkeys(a.source for a in found))

    def clear(self) -> None:
        self.held_out.clear()
        self.cycle.clear()

    def __len__(self) -> int:
        return len(self.held_out) + len(self.cycle)


def load_tradeoff_file(path: str | Path) -> list[Report] | AccuracyFile:
    """What the trade-off adds from a file, read once: an accuracy file, or the reports of a bench or report
    file; ReportError naming the file when it is none of them."""
    data = read_json(path)
    if is_accuracy_data(data):
        return accuracy_from_data(data, path)
    return reports_from_data(data, path)
