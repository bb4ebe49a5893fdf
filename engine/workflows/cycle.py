"""Cycle error of a tracker on videos without ground truth: a grid tracked forward over a clip and back
(``engine.analysis.cycle`` defines the metric), each run through a ``Session`` like any other.
``cycle_precisions`` runs a tracker at several precisions (loaded once; LK beside it once) and
``cycle_accuracy_file`` makes their accuracy file (``engine.report.accuracy_file``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from engine.analysis.cycle import CycleScores, backward_queries, cycle_scores, shared_medians
from engine.core.config import PRECISION_UNUSED, RunConfig
from engine.core.errors import OutOfMemory, TrackerError, UserError
from engine.io.trackio import grid_queries
from engine.report.accuracy_file import CYCLE_KIND, AccuracyEntry, AccuracyFile, CycleSummary, CycleVideo
from engine.run.session import Failed, Session
from engine.trackers.base import Tracker
from engine.workflows.precision_runs import (
    PlannedRun,
    TrackerFacts,
    baseline_config,
    check_precisions,
    machine_of,
    plan_runs,
    settings_of,
)

DEFAULT_GRID = 12  # 12 x 12 points on frame 0
DEFAULT_FRAMES = 48  # the clip: the first 48 frames
MIN_FRAMES = 2


@dataclass
class CycleResult:
    """One tracker's cycle error on one video."""

    video: str
    tracker: str
    frames: int
    scores: CycleScores
    wall_ms: float  # forward and backward runs
    precision: str = PRECISION_UNUSED  # the run's precision (PRECISION_UNUSED: a tracker without one, LK)

    def to_dict(self) -> dict[str, Any]:
        return {"video": self.video, "tracker": self.tracker, "precision": self.precision, "frames": self.frames,
                "wall_ms": round(self.wall_ms, 2), **self.scores.to_dict()}


def _run(frames: np.ndarray, queries: np.ndarray, config: RunConfig, tracker: Tracker, what: str):
    last = Session(frames, queries, config, tracker=tracker).run()
    if isinstance(last, Failed):
        cls = {"oom": OutOfMemory, "tracker": TrackerError}.get(last.kind, UserError)
        raise cls(f"{what}: tracker {config.tracker!r} failed: {last.message}", last.suggestion)
    return last


def cycle_error(frames: np.ndarray, config: RunConfig, tracker: Tracker, grid: int = DEFAULT_GRID,
                video: str = "video") -> CycleResult:
    """Track a ``grid`` x ``grid`` grid from frame 0 to the last of ``frames`` and back; -> its cycle error."""
    if len(frames) < MIN_FRAMES:
        raise UserError(f"{video}: {len(frames)} frame(s); a cycle needs at least {MIN_FRAMES}")
    height, width = frames.shape[1:3]
    queries = grid_queries(grid, width, height)
    forward = _run(frames, queries, config, tracker, f"{video} (forward)")
    back_q, index = backward_queries(forward.tracks, forward.visible)
    wall = float(forward.wall_ms)
    if len(index):
        backward = _run(np.ascontiguousarray(frames[::-1]), back_q, config, tracker, f"{video} (backward)")
        back_tracks, back_visible, wall = backward.tracks, backward.visible, wall + float(backward.wall_ms)
    else:
        back_tracks, back_visible = np.zeros((0, len(frames), 2)), np.zeros((0, len(frames)), dtype=bool)
    return CycleResult(video, config.tracker, len(frames), cycle_scores(queries, index, back_tracks, back_visible),
                       wall, config.precision)


@dataclass
class CycleRuns:
    """The runs of one ``cycle`` command: ``table`` {video: {run label: result}}, the planned runs in order."""

    runs: list[PlannedRun]
    facts: dict[str, TrackerFacts]  # by tracker name
    baseline: str | None  # the baseline tracker's name
    table: dict[str, dict[str, CycleResult]] = field(default_factory=dict)

    def baseline_run(self, run: PlannedRun) -> PlannedRun | None:
        """The baseline run ``run`` is compared with (the one at its precision when the baseline has several);
        None for no baseline, or for a run of the baseline itself."""
        if self.baseline is None or run.tracker == self.baseline:
            return None
        mine = [r for r in self.runs if r.tracker == self.baseline]
        same = [r for r in mine if r.precision == run.precision]
        return next(iter(same or mine), None)

    @property
    def baseline_label(self) -> str | None:
        """The label of the baseline's (first) run, as ``format_table`` takes it."""
        return next((r.label for r in self.runs if r.tracker == self.baseline), None)


def cycle_precisions(paths: list[Path], config: RunConfig, precisions: list[str], baseline: str | None = "lk",
                     grid: int = DEFAULT_GRID, max_frames: int = DEFAULT_FRAMES,
                     progress: Callable[[str], None] | None = None) -> CycleRuns:
    """``config.tracker`` at each of ``precisions`` and ``baseline`` beside it (a tracker without a precision
    setting, as LK, once) over the first ``max_frames`` frames of each video; each tracker loaded once, each
    video decoded once."""
    from engine.io.video import open_video
    from engine.trackers import load_tracker

    names = list(dict.fromkeys([config.tracker, *([baseline] if baseline else [])]))
    trackers = {name: load_tracker(name) for name in names}  # weights load once
    facts = {name: TrackerFacts.of(name, tracker) for name, tracker in trackers.items()}
    check_precisions(trackers, facts, precisions, config)
    out = CycleRuns(plan_runs(facts.values(), precisions), facts, baseline if baseline in names[1:] else None)
    for path in paths:
        with open_video(path) as reader:
            frames = reader.read(0, min(max_frames, reader.info.num_frames) or None)
        for run in out.runs:
            run_config = run.config(config)
            if run.tracker == out.baseline:
                run_config = baseline_config(run_config, trackers[run.tracker])
            result = cycle_error(frames, run_config, trackers[run.tracker], grid, path.name)
            result.precision = run.precision
            out.table.setdefault(path.name, {})[run.label] = result
            if progress is not None:
                progress(f"{path.name}: {run.label} done")
    return out


def _finite(x: float) -> float | None:
    return float(x) if np.isfinite(x) else None


def _summary(scores: CycleScores, base: CycleScores | None) -> CycleSummary:
    """One run's cycle summary, with the medians on the points both it and ``base`` kept."""
    shared: tuple[int | None, float | None, float | None] = (None, None, None)
    if base is not None:
        n, mine, theirs = shared_medians(scores, base)
        shared = (n, _finite(mine), _finite(theirs))
    return CycleSummary(points=scores.num_points, kept=scores.kept, median_px=_finite(scores.median_px),
                        p90_px=_finite(scores.p90_px), within_1px=_finite(scores.within(1.0)),
                        shared_points=shared[0], shared_median_px=shared[1], baseline_shared_median_px=shared[2])


def _pooled(results: list[CycleResult]) -> CycleScores:
    """Every video's points as one set (in video order)."""
    errors = [r.scores.errors_px for r in results]
    return CycleScores(np.concatenate(errors) if errors else np.zeros(0), sum(r.scores.num_points for r in results))


def cycle_accuracy_file(runs: CycleRuns, config: RunConfig, precisions: list[str], grid: int,
                        max_frames: int) -> AccuracyFile:
    """The accuracy file (CYCLE_KIND) of a ``cycle`` command's runs: per (tracker, precision) and video, and over
    every video's points pooled, the points kept, median / p90 px, share within 1 px and the medians on the
    points the baseline kept too. The layout of ``cycle --json`` before it had a kind stays beside it
    (``grid``, ``frames``, ``config``, ``results``)."""
    entries = []
    for run in runs.runs:
        base_run = runs.baseline_run(run)
        mine = [by[run.label] for by in runs.table.values()]
        base = [by[base_run.label] for by in runs.table.values()] if base_run is not None else None
        videos = tuple(CycleVideo(r.video, r.frames, _summary(r.scores, b.scores if b is not None else None),
                                  r.wall_ms)
                       for r, b in zip(mine, base if base is not None else [None] * len(mine)))
        overall = _summary(_pooled(mine), _pooled(base) if base is not None else None)
        entries.append(AccuracyEntry(run.tracker, run.precision, overall, videos,
                                     untrained=runs.facts[run.tracker].untrained))
    names = tuple(runs.table)
    machine, device = machine_of(config)
    main = runs.facts.get(config.tracker)
    legacy = {"grid": grid, "frames": max_frames, "config": config.to_dict(),
              "results": [r.to_dict() for by in runs.table.values() for r in by.values()]}
    return AccuracyFile(kind=CYCLE_KIND, machine=machine, device=device, tracker=config.tracker,
                        weights_sha256=main.weights_sha256 if main else None, baseline=runs.baseline,
                        source_name=names[0] if len(names) == 1 else f"{len(names)} clips", videos=names,
                        entries=tuple(entries), extra=legacy,
                        settings=settings_of(config, precisions, runs.baseline, grid=grid, frames=max_frames))


def _px(x: float) -> str:
    return "-" if not np.isfinite(x) else f"{x:.2f}"


def format_table(results: dict[str, dict[str, CycleResult]], baseline: str | None = None) -> str:
    """A row per video and tracker: points kept, median / p90 cycle error; with a baseline, both medians on the
    points both kept."""
    rows = ["| video | tracker | frames | kept | median px | p90 px | within 1 px | shared points | median px "
            "(shared) | baseline median px (shared) |", "|---|---|---|---|---|---|---|---|---|---|"]
    for video, by_tracker in results.items():
        base = by_tracker.get(baseline) if baseline else None
        for name, res in by_tracker.items():
            s = res.scores
            within = s.within(1.0)
            shared = ["-", "-", "-"]
            if base is not None and name != baseline:
                n, mine, theirs = shared_medians(s, base.scores)
                shared = [str(n), _px(mine), _px(theirs)]
            rows.append(f"| {video} | {name} | {res.frames} | {s.kept}/{s.num_points} | {_px(s.median_px)} | "
                        f"{_px(s.p90_px)} | {'-' if not np.isfinite(within) else f'{100 * within:.0f} %'} | "
                        + " | ".join(shared) + " |")
    return "\n".join(rows)
