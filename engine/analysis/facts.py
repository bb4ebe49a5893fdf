"""Diagnosis building blocks: the numbers (Facts) the rules read from a report, and the Finding they make (the one
finding type, engine.report.finding)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from engine.analysis.roofline import Cost, StageRoofline, report_cost
from engine.report.finding import Finding
from engine.report.schema import Report
from engine.telemetry.specs import GPUSpec

SEVERITIES = ("critical", "warning", "info")
__all__ = ["Facts", "Finding", "SEVERITIES", "facts"]
STAGE_SHARE_MIN = 0.15  # a stage must take this share of the run to be worth a finding
STAGE_MS_MIN = 1.0
ROOFLINE_LOW_PCT = 5.0  # a stage under this percent of its roofline
GPU_IDLE_BUSY_PCT = 40.0  # mean GPU busy under this is "the GPU waits"
BUSY_SAMPLE_PCT = 20.0  # a telemetry sample counts as "busy" above this GPU busy
WINDOW_MIN_SAMPLES = 3  # utilisation rules judge the warm runs only when this many samples cover them
WINDOW_LAG_S = 0.1  # NVML utilisation describes the period before its sample: one sample past the end counts


# -- facts pulled out of a report -------------------------------------------------------------
@dataclass
class Facts:
    """The numbers the rules read, taken once from a report (missing ones are NaN or empty)."""

    label: str
    precision: str
    is_gpu: bool
    capability: tuple[int, int] | None
    warm_ms: float
    cold_ms: float
    stage_ms: dict[str, float]  # per stage, of the typical run
    cold_stage_ms: dict[str, float]
    num_points: int
    num_frames: int
    batch_points: list[tuple[int, dict[str, float]]]  # (points in batch, stage ms) of warm runs
    batches_per_run: int
    peak_memory: float
    memory_total: float
    telemetry: dict[str, np.ndarray]
    static: dict[str, Any]
    cost: dict[str, StageRoofline]  # the counted stages on the device's roofline
    peak: GPUSpec | None  # the device's peaks (None when nothing was counted)
    telemetry_t: np.ndarray = field(default_factory=lambda: np.zeros(0))
    warm_window: tuple[float, float] | None = None  # seconds, on the telemetry's clock

    @property
    def stage_total_ms(self) -> float:
        return float(sum(v for v in self.stage_ms.values() if math.isfinite(v)))

    def share(self, stage: str) -> float:
        """The stage's share of the warm run (wall time, or the stage sum when larger)."""
        total = max(self.warm_ms if math.isfinite(self.warm_ms) else 0.0, self.stage_total_ms)
        return self.stage_ms.get(stage, 0.0) / total if total > 0 else 0.0

    def metric(self, key: str) -> np.ndarray:
        return self.telemetry.get(key, np.zeros(0))

    def ops(self, stage: str | None) -> float:
        """Counted ops of a stage per run; NaN when not counted."""
        c = self.cost.get(stage) if stage is not None else None
        return float(c.ops) if c is not None else math.nan

    def peak_tflops(self, precision: str) -> float:
        """The device's peak TFLOP/s at a precision (``fp32_tflops`` etc. of its spec); NaN when unknown."""
        value = getattr(self.peak, f"{precision}_tflops", None) if self.peak is not None else None
        return float(value) if value is not None else math.nan

    def warm_samples(self) -> np.ndarray:
        """Mask of the telemetry samples that describe the warm runs (all samples when the report does not
        say when its runs happened)."""
        t = self.telemetry_t
        if self.warm_window is None or t.size == 0:
            return np.ones(t.size, dtype=bool)
        lo, hi = self.warm_window
        return (t >= lo) & (t <= hi + WINDOW_LAG_S)

    def warm_metric(self, key: str) -> np.ndarray:
        """A utilisation series over the warm runs only; empty when fewer than WINDOW_MIN_SAMPLES cover
        them (setup and the cold run must not stand in for them)."""
        values = self.metric(key)
        mask = self.warm_samples()
        if values.size != mask.size:
            return values
        values = values[mask]
        return values if np.isfinite(values).sum() >= WINDOW_MIN_SAMPLES else np.zeros(0)


def _nan(value: float | None) -> float:
    return math.nan if value is None else float(value)


def _f(value: Any) -> float:
    """A float from opaque JSON (telemetry's static facts), NaN for None or junk."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def facts(report: Report, cost: Cost | None = None) -> Facts:
    """The numbers the rules need, from a report (and its roofline: derived here when not given)."""
    cost = cost if cost is not None else report_cost(report)
    warm = report.warm_runs or report.finished_runs  # no warm run: the cold ones stand in
    cold = report.cold_run
    tel = report.telemetry
    window = None
    if warm:
        window = (min(r.start_s for r in warm), max(r.start_s + r.wall_ms / 1e3 for r in warm))
    return Facts(
        label=report.label, precision=report.precision, is_gpu=report.is_gpu, capability=report.capability,
        warm_ms=_nan(report.typical_run_ms), cold_ms=_nan(report.totals.cold_ms if report.totals.cold_ms
                                                         is not None else cold.wall_ms if cold else None),
        stage_ms=report.stage_ms, cold_stage_ms=dict(cold.stage_ms) if cold else {},
        num_points=report.totals.num_points, num_frames=report.totals.num_frames,
        batch_points=[(b.num_points, dict(b.stage_ms)) for r in warm for b in r.batches],
        batches_per_run=max(1, len(warm[0].batches)) if warm else 1,
        peak_memory=_nan(report.totals.peak_memory_bytes),
        memory_total=_nan(report.gpu.memory_total_bytes if report.gpu else None),
        telemetry=dict(tel.metrics) if tel else {}, static=dict(tel.static) if tel else {},
        cost=dict(cost.stages) if cost else {}, peak=cost.spec if cost else None,
        telemetry_t=tel.t if tel else np.zeros(0), warm_window=window,
    )


def _mean(values: np.ndarray) -> float:
    values = values[np.isfinite(values)]
    return float(values.mean()) if values.size else math.nan


def _busy_mask(f: Facts) -> np.ndarray:
    busy = f.metric("gpu_busy_pct")
    return np.nan_to_num(busy, nan=0.0) > BUSY_SAMPLE_PCT


def _cc(f: Facts) -> float:
    return f.capability[0] + f.capability[1] / 10 if f.capability else math.nan
