"""The precision trade-off model: one row per run configuration, its speedup and divergence from fp32.

Rows come from run reports (a session's runs, or the reports of a ``bench`` file). The baseline rule,
shared with ``trackscope bench``: a row's baseline is the fp32 run of the same video, tracker, device,
number of points *and* batch sizes. Only then does the speedup measure the precision alone; an fp32 run
at other batch sizes would mix the batch-size effect into it, so a row without such a run has none.
Accuracy is AJ against ground truth when the report has it, else the mean px divergence from the
baseline (from the report's accuracy block, or computed from both runs' tracks).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from engine.analysis.metrics import divergence
from engine.report.recorder import report_tracks

BASELINE_PRECISION = "fp32"
UNTRAINED_MARK = " (untrained)"
#: where a row's px divergence from fp32 came from
PX_FROM_REPORT, PX_FROM_TRACKS, PX_BASELINE = "report", "tracks", "baseline"
#: what a row's memory figure measures
MEMORY_DEVICE_PEAK, MEMORY_PROCESS_RSS = "device peak", "process RSS"
MS_WARM, MS_COLD = "warm median", "cold"


def number(value: Any) -> float | None:
    """A finite float, or None for anything else (missing, NaN, a bool, text)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if np.isfinite(value) else None


def typical_ms(totals: dict[str, Any]) -> tuple[float | None, str]:
    """A run's typical wall time and its basis: the warm median, else the cold run, else (None, '')."""
    warm, cold = number(totals.get("warm_ms_median")), number(totals.get("cold_ms"))
    if warm is not None:
        return warm, MS_WARM
    if cold is not None:
        return cold, MS_COLD
    return None, ""


def speedup_over(baseline_ms: float | None, ms: float | None) -> float | None:
    """How many times faster than its baseline a run is (None when either time is missing or zero)."""
    if not baseline_ms or not ms:
        return None
    return baseline_ms / ms


def device_of(report: dict[str, Any]) -> str:
    """The machine a report ran on: its device name, else the environment's GPU, else the config's device."""
    name = report.get("device_name")
    if name:
        return str(name)
    gpu = (report.get("environment") or {}).get("gpu")
    if isinstance(gpu, dict) and gpu.get("name"):
        return str(gpu["name"])
    return str((report.get("config") or {}).get("device", "?"))


@dataclass
class TradeoffRow:
    """One run configuration's numbers; ``None`` where the report does not say."""

    key: tuple
    report: dict[str, Any]
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

    def tracks(self) -> tuple[np.ndarray, np.ndarray] | None:
        """(tracks [N, T, 2], visible [N, T]): the live run's, else the report's, else None."""
        if self.arrays is not None:
            return self.arrays
        found = report_tracks(self.report)
        return None if found is None else (found[1], found[2])

    @property
    def label(self) -> str:
        """Precision and batch sizes, e.g. 'fp16 p256 f16'."""
        return f"{self.precision} p{self.points_per_batch} f{self.frames_per_batch}"

    @property
    def baseline_key(self) -> tuple:
        """What a baseline must share with this row: video, tracker, device, points and batch sizes."""
        return (self.video, self.tracker, self.device, self.num_points, self.points_per_batch,
                self.frames_per_batch)


def _peak_rss(report: dict[str, Any]) -> float | None:
    """The largest process RSS the report's telemetry saw (the memory figure of a CPU run)."""
    metrics = (report.get("telemetry") or {}).get("metrics") or {}
    values = [v for v in metrics.get("process_rss_bytes") or [] if number(v) is not None]
    return float(max(values)) if values else None


def row_from_report(report: dict[str, Any], arrays: tuple[np.ndarray, np.ndarray] | None = None) -> TradeoffRow:
    """The row of one report (its speedup and divergence are filled in by ``compare_rows``).

    arrays: (tracks [N, T, 2], visible [N, T]) of a live run whose report leaves them out.
    """
    config = report.get("config") or {}
    totals = report.get("totals") or {}
    video_info = report.get("video") or {}
    tracker = str(config.get("tracker", "?"))
    described = report.get("tracker") or {}
    if "weights" in described and not described["weights"]:  # a learned tracker run without trained weights
        tracker += UNTRAINED_MARK
    device = device_of(report)
    precision = str(config.get("precision", "?"))
    ppb, fpb = config.get("points_per_batch"), config.get("frames_per_batch")
    video = video_info.get("name") or video_info.get("path")
    num_points = totals.get("num_points")
    ms, basis = typical_ms(totals)
    accuracy = report.get("accuracy") or {}
    px = number(accuracy.get("mean_px")) if str(accuracy.get("vs", "")) == BASELINE_PRECISION else None
    memory, memory_kind = number(totals.get("peak_memory_bytes")), MEMORY_DEVICE_PEAK
    if memory is None:
        memory, memory_kind = _peak_rss(report), MEMORY_PROCESS_RSS
    key = (tracker, device, precision, ppb, fpb, video, num_points)
    return TradeoffRow(key=key, report=report, tracker=tracker, device=device, precision=precision,
                       points_per_batch=ppb, frames_per_batch=fpb, video=video, num_points=num_points,
                       ms=ms, ms_basis=basis, frames_per_s=number(totals.get("frames_per_s")),
                       peak_memory_bytes=memory, memory_kind=memory_kind, aj=number(accuracy.get("aj")),
                       px_vs_fp32=px, px_source=PX_FROM_REPORT if px is not None else "",
                       num_runs=int(totals.get("num_runs") or len(report.get("runs") or [])), arrays=arrays)


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

    def add(self, report: dict[str, Any], arrays: tuple[np.ndarray, np.ndarray] | None = None) -> TradeoffRow:
        """Add (or replace) the row of one report and recompare every row; returns the new row."""
        row = row_from_report(report, arrays)
        self.rows[row.key] = row
        compare_rows(self.rows.values())
        return row

    def add_many(self, reports: Iterable[dict[str, Any]]) -> int:
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
