"""Grade a tracker on an evaluation set: a folder of NAME.mp4 + NAME.queries.csv + NAME.gt.npz.

Each video is run through a ``Session`` (so batching, precision and stage timing are the same as an
interactive run) and scored with the TAP-Vid metrics of ``engine.metrics``; the set's score is the mean
over videos. In query mode "first" the queries CSV is used as is; in "strided" the queries are sampled
from the ground truth every 5 frames, as TAP-Vid does. ``evaluate_precisions`` grades a tracker at several
precisions (loaded once; LK beside it once) and ``eval_accuracy_file`` makes their accuracy file
(``engine.report.accuracy_file``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, NoReturn

import numpy as np

from engine.analysis.metrics import (
    QUERY_MODES,
    TapVidScores,
    finite_or_none,
    mean_scores,
    sample_queries,
    tapvid_metrics,
)
from engine.core.config import RunConfig
from engine.core.errors import OutOfMemory, TrackerError, UserError
from engine.core.paths import GROUND_TRUTH_SUFFIX as GT_SUFFIX
from engine.core.paths import QUERIES_SUFFIX, VIDEO_SUFFIX
from engine.io.trackio import load_ground_truth, read_queries_csv
from engine.report.accuracy_file import EVAL_KIND, AccuracyEntry, AccuracyFile, EvalScores, EvalVideo
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

#: columns format_table prints for each tracker: (heading, key in a scores dict)
TABLE_SCORES = (("AJ", "aj"), ("d_avg", "delta_avg"), ("OA", "oa"))

#: progress(done, total, video name), called after each video
Progress = Callable[[int, int, str], None]


@dataclass
class VideoItem:
    """The three files of one video of an evaluation set."""

    name: str
    video: Path
    queries: Path
    ground_truth: Path


@dataclass
class VideoResult:
    """One video's scores and run facts."""

    name: str
    scores: TapVidScores
    num_frames: int
    width: int
    height: int
    num_queries: int
    wall_ms: float

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "num_frames": self.num_frames, "width": self.width, "height": self.height,
                "num_queries": self.num_queries, "wall_ms": self.wall_ms, **self.scores.to_dict()}


@dataclass
class EvalResult:
    """A tracker's scores on an evaluation set: per video and the mean over videos."""

    tracker: str
    config: RunConfig
    query_mode: str
    set_dir: str
    videos: dict[str, VideoResult] = field(default_factory=dict)
    mean: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dict."""
        mean = {k: {str(t): finite_or_none(x) for t, x in v.items()} if isinstance(v, dict)
                else finite_or_none(v) if isinstance(v, float) else v for k, v in self.mean.items()}
        return {"tracker": self.tracker, "config": self.config.to_dict(), "query_mode": self.query_mode,
                "set_dir": self.set_dir, "videos": [v.to_dict() for v in self.videos.values()], "mean": mean}


def find_set(set_dir: str | Path) -> list[VideoItem]:
    """The videos of an evaluation set, by name; UserError naming what is missing."""
    set_dir = Path(set_dir)
    if not set_dir.is_dir():
        raise UserError(f"{set_dir}: evaluation set folder not found")
    videos = sorted(p for p in set_dir.iterdir() if p.is_file() and p.name.lower().endswith(VIDEO_SUFFIX))
    if not videos:
        raise UserError(f"{set_dir}: no {VIDEO_SUFFIX} videos in the evaluation set folder",
                        f"expected NAME{VIDEO_SUFFIX}, NAME{QUERIES_SUFFIX} and NAME{GT_SUFFIX} per video")
    items = []
    for video in videos:
        name = video.name[: -len(VIDEO_SUFFIX)]
        queries = set_dir / f"{name}{QUERIES_SUFFIX}"
        gt = set_dir / f"{name}{GT_SUFFIX}"
        for path, what in ((queries, "queries"), (gt, "ground truth")):
            if not path.is_file():
                raise UserError(f"{path}: {what} file missing for video {video.name}")
        items.append(VideoItem(name, video, queries, gt))
    return items


def _load_item(item: VideoItem, query_mode: str) -> tuple[np.ndarray, Any, np.ndarray, np.ndarray, np.ndarray]:
    """Frames, video info, queries [M, 3], gt tracks [M, T, 2] and gt visible [M, T] of one video."""
    from engine.io.video import load_video

    gt = load_ground_truth(item.ground_truth)
    gt_tracks = np.asarray(gt["tracks"], dtype=np.float32)
    gt_visible = np.asarray(gt["visible"]).astype(bool)
    gt_query_t = np.asarray(gt["query_t"], dtype=np.float64)
    if gt_tracks.shape[0] == 0:
        raise UserError(f"{item.ground_truth}: ground truth holds no points")
    frames, info = load_video(item.video)
    if gt_tracks.shape[1] != len(frames):
        raise UserError(f"{item.ground_truth}: ground truth has {gt_tracks.shape[1]} frames but "
                        f"{item.video.name} decodes to {len(frames)}")
    if query_mode == "strided":
        queries, points = sample_queries(gt_tracks, gt_visible, "strided")
        if len(queries) == 0:
            raise UserError(f"{item.ground_truth}: no point is visible on a strided query frame")
        return frames, info, queries, gt_tracks[points], gt_visible[points]
    queries = read_queries_csv(item.queries)
    if len(queries) != len(gt_tracks):
        raise UserError(f"{item.queries}: {len(queries)} queries but {item.ground_truth.name} has "
                        f"{len(gt_tracks)} ground-truth points")
    mismatch = np.flatnonzero(np.round(queries[:, 0]) != np.round(gt_query_t))
    if mismatch.size:
        i = int(mismatch[0])
        raise UserError(f"{item.queries}: query {i} is on frame {queries[i, 0]:g} but "
                        f"{item.ground_truth.name} says frame {gt_query_t[i]:g}")
    return frames, info, queries, gt_tracks, gt_visible


def _raise_failed(item: VideoItem, tracker_name: str, failed: Failed) -> NoReturn:
    cls = {"oom": OutOfMemory, "tracker": TrackerError}.get(failed.kind, UserError)
    raise cls(f"{item.video}: tracker {tracker_name!r} failed: {failed.message}", failed.suggestion)


def evaluate_set(
    set_dir: str | Path,
    tracker_name: str,
    config: RunConfig,
    query_mode: str = "first",
    progress: Progress | None = None,
    tracker: Tracker | None = None,
) -> EvalResult:
    """Run ``tracker_name`` on every video of the set and grade it (TAP-Vid, mean over videos)."""
    if query_mode not in QUERY_MODES:
        raise UserError(f"unknown query mode {query_mode!r}", f"use one of {', '.join(QUERY_MODES)}")
    items = find_set(set_dir)
    config = config.with_changes(tracker=tracker_name)
    if tracker is None:
        from engine.trackers import load_tracker

        tracker = load_tracker(tracker_name)  # once for the whole set: weights load once
    result = EvalResult(tracker_name, config, query_mode, str(set_dir))
    for done, item in enumerate(items, start=1):
        frames, info, queries, gt_tracks, gt_visible = _load_item(item, query_mode)
        session = Session(frames, queries, config, tracker=tracker, video_info=info.to_dict())
        last = session.run()
        if isinstance(last, Failed):
            _raise_failed(item, tracker_name, last)
        try:
            scores = tapvid_metrics(last.tracks, last.visible, gt_tracks, gt_visible, queries[:, 0],
                                    size=(info.width, info.height), query_mode=query_mode)
        except ValueError as exc:
            raise UserError(f"{item.ground_truth}: cannot score: {exc}") from exc
        result.videos[item.name] = VideoResult(item.name, scores, len(frames), info.width, info.height,
                                               len(queries), float(last.wall_ms))
        if progress is not None:
            progress(done, len(items), item.name)
    result.mean = mean_scores([v.scores for v in result.videos.values()])
    return result


@dataclass
class EvalRuns:
    """The runs of one ``eval`` command: each planned run (tracker, precision) with its result, in order."""

    runs: list[tuple[PlannedRun, EvalResult]]
    facts: dict[str, TrackerFacts]  # by tracker name

    def by_label(self) -> dict[str, EvalResult]:
        """{run label: result}, as ``format_table`` takes them."""
        return {run.label: result for run, result in self.runs}


def evaluate_precisions(set_dir: str | Path, config: RunConfig, precisions: list[str], baseline: str | None = "lk",
                        query_mode: str = "first", log: Callable[[str], None] | None = None) -> EvalRuns:
    """``config.tracker`` at each of ``precisions`` and ``baseline`` beside it (a tracker without a precision
    setting, as LK, once); each tracker loaded once."""
    from engine.trackers import load_tracker

    find_set(set_dir)  # a bad set is said before any tracker loads
    names = list(dict.fromkeys([config.tracker, *([baseline] if baseline else [])]))
    trackers = {name: load_tracker(name) for name in names}
    facts = {name: TrackerFacts.of(name, tracker) for name, tracker in trackers.items()}
    check_precisions(trackers, facts, precisions, config)
    out = EvalRuns([], facts)
    for run in plan_runs(facts.values(), precisions):
        t0 = time.perf_counter()
        run_config = run.config(config)
        if baseline is not None and run.tracker == baseline and run.tracker != config.tracker:
            run_config = baseline_config(run_config, trackers[run.tracker])
        result = evaluate_set(set_dir, run.tracker, run_config, query_mode=query_mode,
                              tracker=trackers[run.tracker])
        out.runs.append((run, result))
        if log is not None:
            log(f"{run.label} done in {time.perf_counter() - t0:.1f} s")
    return out


def _eval_scores(scores: dict[str, Any], num_points: int) -> EvalScores:
    """A scores dict (TapVidScores.to_dict, mean_scores) as an accuracy file's scores (NaN: None)."""
    return EvalScores(aj=finite_or_none(scores.get("aj")), delta_avg=finite_or_none(scores.get("delta_avg")),
                      oa=finite_or_none(scores.get("oa")), num_points=int(num_points))


def eval_accuracy_file(runs: EvalRuns, config: RunConfig, precisions: list[str], baseline: str | None,
                       set_dir: str | Path, query_mode: str = "first") -> AccuracyFile:
    """The accuracy file (EVAL_KIND) of an ``eval`` command's runs: per (tracker, precision) the mean over the
    set's videos and each video's AJ, delta_avg and OA."""
    entries = []
    for run, result in runs.runs:
        videos = tuple(EvalVideo(v.name, _eval_scores(v.scores.to_dict(), v.num_queries), v.num_frames, v.wall_ms)
                       for v in result.videos.values())
        mean = _eval_scores(result.mean, int(result.mean.get("num_points", 0)))
        entries.append(AccuracyEntry(run.tracker, run.precision, mean, videos,
                                     untrained=runs.facts[run.tracker].untrained))
    names = [v.name for v in runs.runs[0][1].videos.values()] if runs.runs else [i.name for i in find_set(set_dir)]
    machine, device = machine_of(config)
    main = runs.facts.get(config.tracker)
    return AccuracyFile(kind=EVAL_KIND, machine=machine, device=device, tracker=config.tracker,
                        weights_sha256=main.weights_sha256 if main else None,
                        baseline=baseline if baseline != config.tracker else None,
                        source_name=Path(set_dir).resolve().name, videos=tuple(names), entries=tuple(entries),
                        settings=settings_of(config, precisions, baseline, set_dir=str(set_dir),
                                             query_mode=query_mode))


def _cell(value: float | None) -> str:
    return "-" if value is None or not np.isfinite(value) else f"{value:.3f}"


def format_table(results: dict[str, EvalResult]) -> str:
    """Per-video rows with each tracker's AJ, delta_avg and OA side by side, then the mean row."""
    if not results:
        return "(no results)"
    names: list[str] = []
    for res in results.values():
        names += [n for n in res.videos if n not in names]
    rows: list[list[str]] = []
    header = ["video", "points"]
    for label in results:
        header += [f"{label} {head}" for head, _ in TABLE_SCORES]
    for name in names:
        counts = [r.videos[name].num_queries for r in results.values() if name in r.videos]
        row = [name, str(counts[0]) if counts else "-"]
        for res in results.values():
            video = res.videos.get(name)
            scores = video.scores.to_dict() if video else {}
            row += [_cell(scores.get(key)) for _, key in TABLE_SCORES]
        rows.append(row)
    mean_row = ["mean", str(sum(int(r[1]) for r in rows if r[1].isdigit()))]
    for res in results.values():
        mean_row += [_cell(res.mean.get(key)) for _, key in TABLE_SCORES]
    rows.append(mean_row)
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
             for r in [header, *rows]]
    lines.insert(1, "-" * len(lines[0]))
    lines.insert(len(lines) - 1, "-" * len(lines[0]))
    return "\n".join(lines)
