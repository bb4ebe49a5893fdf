"""Accuracy files: what ``trackscope eval --json`` and ``trackscope cycle --json`` write, read back strictly.

One JSON object, versioned, for one command: its ``kind`` (EVAL_KIND: TAP-Vid scores on an evaluation set
with ground truth; CYCLE_KIND: forward-backward cycle error on videos without), the machine it ran on, the
tracker (and its weights' sha256 when its description has one), the command's settings, the set or clips
it graded, and one entry per (tracker, precision) run: the summary over every video and the same per video.
A tracker without a precision setting (LK) has one entry, precision PRECISION_UNUSED.

    {"kind": "trackscope-eval", "version": 1, "machine": "NVIDIA H200", "device": "cuda:0",
     "tracker": "corrtrack", "weights_sha256": "6547...", "baseline": "lk",
     "source": {"name": "heldout", "videos": ["a", "b"]}, "settings": {...},
     "entries": [{"tracker": "corrtrack", "precision": "bf16", "untrained": false,
                  "mean": {"aj": 0.69, "delta_avg": 0.80, "oa": 0.95, "num_points": 256},
                  "videos": [{"name": "a", "aj": ..., "delta_avg": ..., "oa": ..., "num_points": 128,
                              "num_frames": 24, "wall_ms": 41.0}, ...]}, ...]}

A cycle entry has ``overall`` and ``videos`` of cycle summaries (points, kept, median / p90 px, share within
1 px, and the medians of this run and the baseline on the points both kept). Other keys at the top (a cycle
file's ``grid``, ``frames``, ``config`` and ``results``: the layout ``cycle --json`` had before it had a
kind, kept for its readers) are kept as ``extra``, never interpreted.

Reading goes through ``engine.report.files.read_json`` (size-limited) and ``engine.report.fields``: malformed
JSON, another kind, a missing or mistyped field, a newer version are each a ReportError naming the file and
the field. Plain JSON only, never pickle.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.core.atomic import atomic_open
from engine.core.config import PRECISION_UNUSED, PRECISIONS
from engine.core.errors import ReportError
from engine.core.outputs import write_error
from engine.report.fields import Fields, describe, fail, to_json
from engine.report.files import read_json
from engine.report.migrate import CYCLE_KIND, EVAL_KIND

ACCURACY_KINDS = (EVAL_KIND, CYCLE_KIND)
#: the version this code writes, and the newest it reads
ACCURACY_FILE_VERSION = 1
#: an accuracy file larger than this is refused before it is read (bytes; a 1,000-video set is ~1 MiB)
MAX_ACCURACY_FILE_BYTES = 64 * 2**20
#: entries, videos per entry, names in a list: more is not a file trackscope wrote
MAX_ITEMS = 100_000
#: what each kind's file is, in messages
KIND_WORDS = {EVAL_KIND: "held-out accuracy file (trackscope eval --json)",
              CYCLE_KIND: "cycle-error file (trackscope cycle --json)"}
#: the precisions an entry may have
ENTRY_PRECISIONS = (*PRECISIONS, PRECISION_UNUSED)


def _num(value: float | None) -> float | None:
    """A score for JSON, rounded (None stays None)."""
    return None if value is None else round(float(value), 6)


@dataclass(frozen=True)
class EvalScores:
    """TAP-Vid scores of one video, or their mean over a set (None: undefined there)."""

    aj: float | None
    delta_avg: float | None
    oa: float | None
    num_points: int

    def to_dict(self) -> dict[str, Any]:
        return {"aj": _num(self.aj), "delta_avg": _num(self.delta_avg), "oa": _num(self.oa),
                "num_points": self.num_points}

    @classmethod
    def read(cls, f: Fields) -> EvalScores:
        return cls(aj=f.opt_number("aj"), delta_avg=f.opt_number("delta_avg"), oa=f.opt_number("oa"),
                   num_points=f.integer("num_points", minimum=0))


@dataclass(frozen=True)
class EvalVideo:
    """One video's scores in an eval entry."""

    name: str
    scores: EvalScores
    num_frames: int
    wall_ms: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, **self.scores.to_dict(), "num_frames": self.num_frames,
                "wall_ms": None if self.wall_ms is None else round(self.wall_ms, 2)}

    @classmethod
    def read(cls, f: Fields) -> EvalVideo:
        return cls(name=f.string("name"), scores=EvalScores.read(f), num_frames=f.integer("num_frames", minimum=0),
                   wall_ms=f.opt_number("wall_ms", minimum=0))


@dataclass(frozen=True)
class CycleSummary:
    """Cycle error of one video, or of every video's points pooled (px; None: no point kept).

    shared_*: this run's and the baseline's medians on the points both kept (None: no baseline, or this is it).
    """

    points: int
    kept: int
    median_px: float | None
    p90_px: float | None
    within_1px: float | None
    shared_points: int | None = None
    shared_median_px: float | None = None
    baseline_shared_median_px: float | None = None

    @property
    def kept_share(self) -> float | None:
        """Share of the points kept both ways (None for no points)."""
        return self.kept / self.points if self.points else None

    def to_dict(self) -> dict[str, Any]:
        return {"points": self.points, "kept": self.kept, "median_px": _num(self.median_px),
                "p90_px": _num(self.p90_px), "within_1px": _num(self.within_1px),
                "shared_points": self.shared_points, "shared_median_px": _num(self.shared_median_px),
                "baseline_shared_median_px": _num(self.baseline_shared_median_px)}

    @classmethod
    def read(cls, f: Fields) -> CycleSummary:
        points = f.integer("points", minimum=0)
        kept = f.integer("kept", minimum=0)
        if kept > points:
            raise fail(f.at("kept"), f"at most points ({points})", kept)
        return cls(points=points, kept=kept, median_px=f.opt_number("median_px", minimum=0),
                   p90_px=f.opt_number("p90_px", minimum=0), within_1px=f.opt_number("within_1px", minimum=0),
                   shared_points=f.opt_integer("shared_points", minimum=0),
                   shared_median_px=f.opt_number("shared_median_px", minimum=0),
                   baseline_shared_median_px=f.opt_number("baseline_shared_median_px", minimum=0))


@dataclass(frozen=True)
class CycleVideo:
    """One video's cycle error in a cycle entry."""

    video: str
    frames: int
    summary: CycleSummary
    wall_ms: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"video": self.video, "frames": self.frames, **self.summary.to_dict(),
                "wall_ms": None if self.wall_ms is None else round(self.wall_ms, 2)}

    @classmethod
    def read(cls, f: Fields) -> CycleVideo:
        return cls(video=f.string("video"), frames=f.integer("frames", minimum=0), summary=CycleSummary.read(f),
                   wall_ms=f.opt_number("wall_ms", minimum=0))


@dataclass(frozen=True)
class AccuracyEntry:
    """One (tracker, precision) run of the command: ``summary`` over every video (an EvalScores mean, or a
    CycleSummary of the pooled points) and per video."""

    tracker: str
    precision: str  # one of PRECISIONS, or PRECISION_UNUSED for a tracker without the setting
    summary: EvalScores | CycleSummary
    videos: tuple[EvalVideo, ...] | tuple[CycleVideo, ...]
    untrained: bool = False  # a learned tracker run without trained weights

    def to_dict(self) -> dict[str, Any]:
        key = "mean" if isinstance(self.summary, EvalScores) else "overall"
        return {"tracker": self.tracker, "precision": self.precision, "untrained": self.untrained,
                key: self.summary.to_dict(), "videos": [v.to_dict() for v in self.videos]}

    @classmethod
    def read(cls, f: Fields, kind: str) -> AccuracyEntry:
        precision = f.string("precision")
        if precision not in ENTRY_PRECISIONS:
            raise fail(f.at("precision"), "one of " + ", ".join(ENTRY_PRECISIONS), precision)
        videos: tuple[EvalVideo, ...] | tuple[CycleVideo, ...]
        summary: EvalScores | CycleSummary
        if kind == EVAL_KIND:
            summary = EvalScores.read(_required_obj(f, "mean"))
            videos = tuple(EvalVideo.read(Fields(item, path)) for path, item in f.items("videos", MAX_ITEMS, True))
        else:
            summary = CycleSummary.read(_required_obj(f, "overall"))
            videos = tuple(CycleVideo.read(Fields(item, path)) for path, item in f.items("videos", MAX_ITEMS, True))
        return cls(tracker=f.string("tracker"), precision=precision, summary=summary, videos=videos,
                   untrained=f.boolean("untrained", False))


def _required_obj(f: Fields, key: str) -> Fields:
    found = f.obj(key)
    assert found is not None  # required=True raises instead
    return found


@dataclass(frozen=True)
class AccuracyFile:
    """An accuracy file's contents (``kind`` EVAL_KIND or CYCLE_KIND)."""

    kind: str
    machine: str  # what a user calls the device: "NVIDIA H200", "CPU"
    device: str  # the torch device it resolved to: "cuda:0", "cpu"
    tracker: str  # the tracker the command graded (the baseline's entries are beside its own)
    source_name: str  # the evaluation set's folder name, or the clip (or "N clips")
    videos: tuple[str, ...]  # the set's videos or the clips, by name
    entries: tuple[AccuracyEntry, ...]
    settings: dict[str, Any] = field(default_factory=dict)  # the command's settings, as given
    weights_sha256: str | None = None
    baseline: str | None = None  # the tracker run beside it once (LK), None with --no-baseline
    version: int = ACCURACY_FILE_VERSION
    extra: dict[str, Any] = field(default_factory=dict)  # keys this version does not interpret, kept

    @property
    def num_videos(self) -> int:
        return len(self.videos)

    @property
    def what(self) -> str:
        """What the file is, for messages: 'held-out accuracy file (trackscope eval --json)'."""
        return KIND_WORDS.get(self.kind, self.kind)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "version": self.version, "machine": self.machine, "device": self.device,
                "tracker": self.tracker, "weights_sha256": self.weights_sha256, "baseline": self.baseline,
                "source": {"name": self.source_name, "videos": list(self.videos)},
                "settings": self.settings, "entries": [e.to_dict() for e in self.entries], **self.extra}

    @classmethod
    def from_dict(cls, data: Any) -> AccuracyFile:
        """From decoded JSON; ReportError naming the field for anything malformed, another kind or a newer
        version."""
        kind = check_kind(data)
        f = Fields(data, "")
        version = f.integer("version", minimum=1)
        if version > ACCURACY_FILE_VERSION:
            raise ReportError(f"version {version} was written by a newer trackscope; this one reads up to version "
                              f"{ACCURACY_FILE_VERSION}", "upgrade trackscope to open it")
        f.raw("kind")
        source = _required_obj(f, "source")
        settings = f.opaque_map("settings")
        if settings is None:
            raise ReportError("settings is missing", "an accuracy file records the command's settings")
        entries = tuple(AccuracyEntry.read(Fields(item, path), kind)
                        for path, item in f.items("entries", MAX_ITEMS, required=True))
        return cls(kind=kind, version=version, machine=f.string("machine"), device=f.string("device"),
                   tracker=f.string("tracker"), weights_sha256=f.opt_string("weights_sha256"),
                   baseline=f.opt_string("baseline"), source_name=source.string("name"),
                   videos=source.strings("videos", MAX_ITEMS, required=True), settings=settings, entries=entries,
                   extra=f.rest())


def check_kind(data: Any) -> str:
    """The kind of decoded accuracy-file JSON; ReportError when it has none, or another."""
    if not isinstance(data, Mapping):
        raise ReportError(f"not a trackscope accuracy file: a JSON object expected, found {describe(data)}")
    kind = data.get("kind")
    if kind in ACCURACY_KINDS:
        return str(kind)
    if kind is None:
        if "format" in data:
            what, hint = "a run report or bench file", "add it as a bench or report file"
        elif "results" in data and "grid" in data:
            what, hint = "no kind field", "a cycle --json written before its files had one: run the cycle again"
        else:
            what, hint = "no kind field", "write one with trackscope eval SETDIR --json OUT or trackscope cycle --json"
        raise ReportError(f"not a trackscope accuracy file ({what})", hint)
    raise ReportError(f"kind {describe(kind)} is not an accuracy file's ({' or '.join(ACCURACY_KINDS)})",
                      "is it a trackscope accuracy file?")


def is_accuracy_data(data: Any) -> bool:
    """Whether decoded JSON claims to be an accuracy file (its kind is one of ACCURACY_KINDS)."""
    return isinstance(data, Mapping) and data.get("kind") in ACCURACY_KINDS


def accuracy_from_data(data: Any, path: str | Path) -> AccuracyFile:
    """An accuracy file from its decoded JSON; the error names ``path``."""
    try:
        return AccuracyFile.from_dict(data)
    except ReportError as exc:
        raise ReportError(f"accuracy file {path}: {exc.message}", exc.suggestion) from None


def load_accuracy_file(path: str | Path) -> AccuracyFile:
    """An accuracy file from disk; ReportError (naming the file) when missing, malformed, of another kind or of a
    newer version."""
    try:
        data = read_json(path, max_bytes=MAX_ACCURACY_FILE_BYTES)
    except ReportError as exc:  # read_json speaks of reports: this is an accuracy file
        message = exc.message.replace(f"report {path}", f"accuracy file {path}", 1)
        raise ReportError(message, exc.suggestion) from None
    return accuracy_from_data(data, path)


def save_accuracy_file(value: AccuracyFile, path: str | Path) -> Path:
    """Write an accuracy file atomically (engine.core.atomic); UserError naming the file when the disk refuses."""
    path = Path(path)
    text = json.dumps(to_json(value.to_dict()), allow_nan=False, indent=1)
    try:
        with atomic_open(path, "w", encoding="utf-8") as fh:
            fh.write(text + "\n")
    except OSError as exc:
        raise write_error(path, "accuracy file", exc) from exc
    return path
