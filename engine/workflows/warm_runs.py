"""Warm timings for a report that has only a cold run, measured now on this machine, or a refusal.

A ``track --report`` file holds one run, the first in its process: compilation, autotuning and lazy setup
are in its stage times, so a what-if built on it reads every stage as latency-bound and projects nothing.
``with_warm_runs`` rebuilds the report's tracker (as ``engine.workflows.count`` does for the cost model),
feeds it the same video (or constructed frames of its shape), queries and configuration, and times a few
warm runs after a warm-up, on the report's device. The device must be the one the report ran on: warm
times of another card would be a different machine's numbers under this report's name, so on another
device it refuses with the exact ``trackscope bench`` command to run on the report's machine. The
report's ``extra["warm_runs_measured"]`` says where and when, and the what-if lists it among its
assumptions.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import platform
import statistics
from pathlib import Path
from typing import Callable

import numpy as np

from engine.analysis.whatif import WARM_MEASURED_KEY, bench_command
from engine.core.errors import UserError
from engine.report.schema import Report

#: warm runs timed for a cold-only report (after WARMUP_RUNS untimed ones): enough for a median
WARM_RUNS = 5
#: untimed runs before them: the rebuilt tracker's own first run is cold in this process
WARMUP_RUNS = 1
def this_device_name(report: Report) -> str:
    """The name of the device this machine gives the report's device string ('CPU', 'NVIDIA H200'); a
    UserError with the bench command when this machine has no such device."""
    from engine.core.devices import device_name, resolve_device

    try:
        return device_name(resolve_device(report.device))
    except UserError as exc:
        raise UserError(f"report {report.short_label()!r} holds only a cold run, and its warm runs must be timed "
                        f"on {report.device_name}: {exc.message}",
                        f"on a machine with {report.device_name}, run: {bench_command(report)}") from exc


def with_warm_runs(report: Report, runs: int = WARM_RUNS, frames: np.ndarray | None = None,
                   log: Callable[[str], None] | None = None) -> Report:
    """``report`` with ``runs`` warm runs measured now on this machine (as it is when it has warm runs).

    UserError (with the bench command) when this machine's device is not the report's, or the tracker
    cannot be rebuilt or fails. frames: the run's frames as tracked (else its video, else constructed).
    """
    if report.warm_runs or report.totals.warm_ms_median is not None:
        return report
    here = this_device_name(report)
    if here != report.device_name:
        raise UserError(f"report {report.short_label()!r} holds only a cold run on {report.device_name}; warm "
                        f"times measured here ({here}) would be another device's",
                        f"on a machine with {report.device_name}, run: {bench_command(report)}")
    if log is not None:
        log(f"{report.short_label()!r} holds only a cold run: timing {WARMUP_RUNS} + {runs} warm runs of its "
            f"tracker now on this machine ({here})")
    measured = _measure(report, runs, frames)
    warm = [dataclasses.replace(r, index=len(report.runs) + i, cold=False) for i, r in enumerate(measured)]
    walls = [r.wall_ms for r in warm]
    names = sorted({n for r in warm for n in r.stage_ms})
    totals = dataclasses.replace(
        report.totals, warm_ms_median=float(statistics.median(walls)), warm_ms_min=min(walls),
        stage_ms={n: float(statistics.median(r.stage_ms.get(n, 0.0) for r in warm)) for n in names},
        stage_ms_basis="warm median", num_runs=report.totals.num_runs + len(warm),
        num_warm_runs=len(warm))
    provenance = {"runs": len(warm), "warmup_runs": WARMUP_RUNS, "device": here, "host": platform.node(),
                  "measured": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                  "inputs": measured_inputs(report, frames)}
    return dataclasses.replace(report, runs=report.runs + tuple(warm), totals=totals,
                               extra={**report.extra, WARM_MEASURED_KEY: provenance})


def measured_inputs(report: Report, frames: np.ndarray | None) -> str:
    """What the warm runs were fed: the given frames, the run's video, or constructed frames of its shape."""
    from engine.workflows.report_inputs import INPUTS_CONSTRUCTED, INPUTS_VIDEO

    if frames is not None:
        return INPUTS_VIDEO
    path = report.video.path
    return INPUTS_VIDEO if path and Path(path).exists() else INPUTS_CONSTRUCTED


def _measure(report: Report, runs: int, frames: np.ndarray | None) -> list:
    """The warm runs (engine.report.parts.Run) of the rebuilt tracker, after the warm-up."""
    from engine.core.errors import TrackerError
    from engine.report.recorder import RunRecorder
    from engine.run.session import Failed, Session
    from engine.trackers import load_tracker
    from engine.workflows.report_inputs import constructed_frames, report_queries, report_shape, report_video_frames

    num_frames, geometry = report_shape(report)
    shape = (num_frames, geometry.frame_height, geometry.frame_width)
    if frames is None or tuple(np.shape(frames)[:3]) != shape:
        frames = report_video_frames(report, num_frames, geometry)
    if frames is None:
        frames = constructed_frames(*shape)
    queries = report_queries(report, geometry)
    try:
        tracker = load_tracker(report.config.tracker)
    except TrackerError as exc:
        raise UserError(f"cannot rebuild tracker {report.config.tracker!r} to time warm runs of "
                        f"{report.short_label()!r}: {exc.message}",
                        f"make it importable here, or run: {bench_command(report)}") from exc
    info = {"width": geometry.source_width, "height": geometry.source_height, "num_frames": num_frames,
            "name": report.video.name}
    recorder = RunRecorder()
    for i in range(WARMUP_RUNS + runs):
        events = list(Session(frames, queries, report.config, tracker=tracker, video_info=info,
                              geometry=geometry).events())
        if isinstance(events[-1], Failed):
            raise UserError(f"a warm run of {report.short_label()!r} failed: {events[-1].message}",
                            events[-1].suggestion)
        if i >= WARMUP_RUNS and not any(getattr(e, "cold", False) for e in events):
            for event in events:
                recorder.add(event)
    timed = [r for r in recorder.build(keep_tracks=False).runs if r.finished]
    if not timed:
        raise UserError(f"no warm run of {report.short_label()!r} could be timed (each one was cold)",
                        f"run: {bench_command(report)}")
    return timed
