"""The precision trade-off model: one row per run configuration, its speedup and divergence from fp32.

Rows come from run reports (a session's runs, or the reports of a ``bench`` file). A setting the
tracker does not use (LK: precision and batch sizes) reads PRECISION_UNUSED / None, never whatever the
config held; a setting changed during a run reads as every value it took ("64→32"). The baseline rule,
shared with ``trackscope bench``: a row's baseline is the fp32 run of the same video, tracker, device,
number of points *and* batch sizes. Only then does the speedup measure the precision alone; an fp32 run
at other batch sizes would mix the batch-size effect into it, so a row without such a run has none.
Accuracy is AJ against ground truth when the report has it, else the mean px divergence from the
baseline (from the report's accuracy block, or computed from both runs' tracks).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from engine.analysis.metrics import divergence
from engine.core.config import DEFAULT_TUNABLE, PRECISION_UNUSED
from engine.report.schema import Report, as_report

BASELINE_PRECISION = "fp32"
UNTRAINED_MARK = " (untrained)"
#: where a row's px divergence from fp32 came from
PX_FROM_REPORT, PX_FROM_TRACKS, PX_BASELINE = "report", "tracks", "baseline"
#: what a row's memory figure measures
MEMORY_DEVICE_PEAK, MEMORY_PROCESS_RSS = "device peak", "process RSS"
MS_WARM, MS_COLD = "warm median", "cold"
VALUE_CHANGE = "→"  # joins the values a setting took during a run: "fp32→bf16", "64→32"


def number(value: Any) -> float | None:
    """A finite float, or None for anything else (missing, NaN, a bool, text)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if np.isfinite(value) else None


def typical_ms(report: Report) -> tuple[float | None, str]:
    """A run's typical wall time (Report.typical_run_ms) and its basis: MS_WARM, MS_COLD, or (None, '')."""
    ms = number(report.typical_run_ms)
    if ms is None:
        return None, ""
    warm = report.totals.warm_ms_median is not None or bool(report.warm_runs)
    return ms, MS_WARM if warm else MS_COLD


def speedup_over(baseline_ms: float | None, ms: float | None) -> float | None:
    """How many times faster than its baseline a run is (None when either time is missing or zero)."""
    if not baseline_ms or not ms:
        return None
    return baseline_ms / ms


def device_of(report: Report) -> str:
    """The machine a report ran on (Report.device_name: the recorded name, else the GPU's, else "CPU")."""
    return report.device_name


@dataclass
class TradeoffRow:
    """One run configuration's numbers; ``None`` where the report does not say."""

    key: tuple
    report: Report
    tracker: str
    device: str
    precision: str
    points_per_batch: int | None
    frames_per_batch: int | None
    video: str | None
    num_points: int | None
    ms: float | None
    ms_basis: str  # MS_WARM | MS_COLD | ""
    frames_per_s: float | None
    peak_memory_bytes: float | None
    memory_kind: str  # MEMORY_DEVICE_PEAK (allocator), MEMORY_PROCESS_RSS (telemetry, CPU runs) or ""
    aj: float | None
    px_vs_fp32: float | None = None
    px_source: str = ""
    speedup: float | None = None
    baseline: TradeoffRow | None = field(default=None, repr=False)
    num_runs: int = 0
    arrays: tuple[np.ndarray, np.ndarray] | None = field(default=None, repr=False)  # a live run's tracks
    #: every batch size the run used, in order (one value: a fixed size; empty: the tracker has none)
    points_per_batch_seen: tuple[int, ...] = ()
    frames_per_batch_seen: tuple[int, ...] = ()

    def tracks(self) -> tuple[np.ndarray, np.ndarray] | None:
        """(tracks [N, T, 2], visible [N, T]): the live run's, else the report's, else None."""
        if self.arrays is not None:
            return self.arrays
        found = self.report.tracks_arrays()
        return None if found is None else (found[1], found[2])

    @property
    def vs_direct(self) -> float | None:
        """The report's session/direct ratio (1.02: the session path 2 % slower than the tracker called alone);
        None when the report has no direct reference."""
        return self.report.session_vs_direct

    @property
    def points_per_batch_text(self) -> str:
        """The points per batch as a cell: '256', '64→32' (changed during the run), '' (not a setting)."""
        return joined(self.points_per_batch_seen)

    @property
    def frames_per_batch_text(self) -> str:
        """The frames per batch as a cell (as ``points_per_batch_text``)."""
        return joined(self.frames_per_batch_seen)

    @property
    def label(self) -> str:
        """Precision and batch sizes, e.g. 'fp16 p256 f16' (only the settings the tracker uses)."""
        parts = [self.precision] if self.precision != PRECISION_UNUSED else [self.tracker]
        parts += [f"p{self.points_per_batch_text}"] if self.points_per_batch_seen else []
        parts += [f"f{self.frames_per_batch_text}"] if self.frames_per_batch_seen else []
        return " ".join(parts)

    @property
    def baseline_key(self) -> tuple:
        """What a baseline must share with this row: video, tracker, device, points and batch sizes (a run
        whose batch size changed shares them with no fixed-size run)."""
        return (self.video, self.tracker, self.device, self.num_points, self.points_per_batch_seen,
                self.frames_per_batch_seen)


def tunable_settings(report: Report) -> tuple[str, ...]:
    """The run settings the report's tracker uses (its description's ``tunable``; all of them when unsaid)."""
    tunable = report.tracker.details.get("tunable", DEFAULT_TUNABLE)
    return tuple(tunable) if isinstance(tunable, (list, tuple)) else DEFAULT_TUNABLE


def values_taken(report: Report, setting: str) -> tuple[Any, ...]:
    """Every value ``setting`` took over the report's batches, in order of first use (the config's when the
    batches do not say)."""
    seen: list[Any] = []
    for run in report.runs:
        for batch in run.batches:
            if batch.config is not None:
                value = getattr(batch.config, setting)
                if value not in seen:
                    seen.append(value)
    return tuple(seen) or (getattr(report.config, setting),)


def joined(values: Iterable[Any]) -> str:
    """Values a setting took, as one cell: '64', '64→32'."""
    return VALUE_CHANGE.join(str(v) for v in values)


def _peak_rss(report: Report) -> float | None:
    """The largest process RSS the report's telemetry saw (the memory figure of a CPU run)."""
    values = report.telemetry_series("process_rss_bytes")
    values = values[np.isfinite(values)]
    return float(values.max()) if values.size else None


def row_from_report(report: Report | Mapping[str, Any],
                    arrays: tuple[np.ndarray, np.ndarray] | None = None) -> TradeoffRow:
    """The row of one report (its speedup and divergence are filled in by ``compare_rows``).

    arrays: (tracks [N, T, 2], visible [N, T]) of a live run whose report leaves them out.
    """
    report = as_report(report)
    config, totals = report.config, report.totals
    tracker = config.tracker
    described = report.tracker.details
    if "weights" in described and not described["weights"]:  # a learned tracker run without trained weights
        tracker += UNTRAINED_MARK
    device = device_of(report)
    tunable = tunable_settings(report)
    precision = joined(values_taken(report, "precision")) if "precision" in tunable else PRECISION_UNUSED
    ppb_seen = values_taken(report, "points_per_batch") if "points_per_batch" in tunable else ()
    fpb_seen = values_taken(report, "frames_per_batch") if "frames_per_batch" in tunable else ()
    ppb = ppb_seen[0] if len(ppb_seen) == 1 else None
    fpb = fpb_seen[0] if len(fpb_seen) == 1 else None
    video = report.video.name or report.video.path
    num_points = totals.num_points
    ms, basis = typical_ms(report)
    accuracy = report.accuracy
    px = number(accuracy.mean_px) if accuracy is not None and accuracy.vs == BASELINE_PRECISION else None
    memory, memory_kind = number(totals.peak_memory_bytes), MEMORY_DEVICE_PEAK
    if memory is None:
        memory, memory_kind = _peak_rss(report), MEMORY_PROCESS_RSS
    key = (tracker, device, precision, ppb_seen, fpb_seen, video, num_points)
    return TradeoffRow(key=key, report=report, tracker=tracker, device=device, precision=precision,
                       points_per_batch=ppb, frames_per_batch=fpb, video=video, num_points=num_points,
                       points_per_batch_seen=ppb_seen, frames_per_batch_seen=fpb_seen,
                       ms=ms, ms_basis=basis, frames_per_s=number(totals.frames_per_s),
                       peak_memory_bytes=memory, memory_kind=memory_kind,
                       aj=number(accuracy.aj) if accuracy is not None else None,
                       px_vs_fp32=px, px_source=PX_FROM_REPORT if px is not None else "",
                       num_runs=totals.num_runs or len(report.runs), arrays=arrays)


def find_baseline(row: TradeoffRow, rows: Iterable[TradeoffRow]) -> TradeoffRow | None:
    """The fp32 row with the same baseline key and a time (the latest one when there are several)."""
    found = None
    for r in rows:
        if r.precision == BASELINE_PRECISION and r.ms is not None and r.baseline_key == row.baseline_key:
            found = r
    return found


def compare_rows(rows: Iterable[TradeoffRow]) -> list[TradeoffRow]:
    """Fill every row's baseline, speedup and px divergence from fp32 (in place); returns the rows."""
    rows = list(rows)
    for row in rows:
        base = find_baseline(row, rows)
        row.baseline = base
        row.speedup = speedup_over(base.ms, row.ms) if base is not None else None
        if row.px_source == PX_FROM_REPORT:
            continue
        row.px_vs_fp32, row.px_source = None, ""
        if base is None:
            continue
        if base is row:
            row.px_vs_fp32, row.px_source = 0.0, PX_BASELINE
            continue
        mine, theirs = row.tracks(), base.tracks()
        if mine is None or theirs is None or mine[0].shape != theirs[0].shape:
            continue
        div = divergence(mine[0], mine[1], theirs[0], theirs[1])
        if np.isfinite(div.mean_px):
            row.px_vs_fp32, row.px_source = float(div.mean_px), PX_FROM_TRACKS
    return rows


def accuracy_axis(rows: Iterable[TradeoffRow]) -> str:
    """'aj' when any row has AJ against ground truth, else 'px' (divergence from fp32)."""
    return "aj" if any(r.aj is not None for r in rows) else "px"


class TradeoffTable:
    """Rows by configuration: a configuration reported again replaces its row (the latest report wins)."""

    def __init__(self) -> None:
        self.rows: dict[tuple, TradeoffRow] = {}  # insertion order = first time a configuration was seen

    def add(self, report: Report | Mapping[str, Any],
            arrays: tuple[np.ndarray, np.ndarray] | None = None) -> TradeoffRow:
        """Add (or replace) the row of one report and recompare every row; returns the new row."""
        row = row_from_report(report, arrays)
        self.rows[row.key] = row
        compare_rows(self.rows.values())
        return row

    def add_many(self, reports: Iterable[Report | Mapping[str, Any]]) -> int:
        """Add several reports, comparing once at the end; returns how many."""
        count = 0
        for report in reports:
            row = row_from_report(report)
            self.rows[row.key] = row
            count += 1
        compare_rows(self.rows.values())
        return count

    def clear(self) -> None:
        """Remove every row."""
        self.rows.clear()

    def __len__(self) -> int:
        return len(self.rows)
