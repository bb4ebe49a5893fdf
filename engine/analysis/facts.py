"""Diagnosis building blocks: the Finding record and the numbers (Facts) the rules read from a report."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from engine.telemetry.environment import environment_capability

SEVERITIES = ("critical", "warning", "info")
STAGE_SHARE_MIN = 0.15  # a stage must take this share of the run to be worth a finding
STAGE_MS_MIN = 1.0
ROOFLINE_LOW_PCT = 5.0  # a stage under this percent of its roofline
GPU_IDLE_BUSY_PCT = 40.0  # mean GPU busy under this is "the GPU waits"
BUSY_SAMPLE_PCT = 20.0  # a telemetry sample counts as "busy" above this GPU busy
WINDOW_MIN_SAMPLES = 3  # utilisation rules judge the warm runs only when this many samples cover them
WINDOW_LAG_S = 0.1  # NVML utilisation describes the period before its sample: one sample past the end counts


@dataclass
class Finding:
    """One diagnosis: what is wrong, how sure (severity), the numbers behind it, what to change."""

    rule: str
    severity: str
    title: str
    evidence: dict[str, float]
    suggestion: str
    stage: str | None = None
    label: str | None = None  # the report it concerns (diagnose_many)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"rule": self.rule, "severity": self.severity, "title": self.title,
                               "evidence": {k: _num(v) for k, v in self.evidence.items()},
                               "suggestion": self.suggestion}
        if self.stage is not None:
            out["stage"] = self.stage
        if self.label is not None:
            out["label"] = self.label
        return out


def _num(value: Any) -> float | None:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return round(v, 4) if math.isfinite(v) else None


def _f(value: Any) -> float:
    """A float, NaN for None or junk."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


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
    stage_ms: dict[str, float]  # warm median per stage
    cold_stage_ms: dict[str, float]
    num_points: int
    num_frames: int
    batch_points: list[tuple[int, dict[str, float]]]  # (points in batch, stage ms) of warm runs
    batches_per_run: int
    peak_memory: float
    memory_total: float
    telemetry: dict[str, np.ndarray]
    static: dict[str, Any]
    cost: dict[str, dict[str, Any]]
    peak: dict[str, Any]
    config: dict[str, Any] = field(default_factory=dict)
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


def _series(values: Any) -> np.ndarray:
    if not isinstance(values, list):
        return np.zeros(0)
    try:
        return np.array([np.nan if v is None else v for v in values], dtype=np.float64)
    except (TypeError, ValueError):
        return np.zeros(0)


def facts(report: dict[str, Any]) -> Facts:
    """Pull the numbers the rules need out of a report dict."""
    env = report.get("environment") or {}
    gpu = env.get("gpu") if isinstance(env.get("gpu"), dict) else None
    config = report.get("config") or {}
    totals = report.get("totals") or {}
    runs = [r for r in report.get("runs") or [] if isinstance(r, dict) and r.get("status", "finished") == "finished"]
    warm = [r for r in runs if not r.get("cold")] or runs
    cold = [r for r in runs if r.get("cold")]
    stage_ms = {k: _f(v) for k, v in (totals.get("stage_ms") or {}).items()}
    if not stage_ms and warm:
        names = {n for r in warm for n in r.get("stage_ms", {})}
        stage_ms = {n: statistics.median([_f(r["stage_ms"].get(n, 0.0)) for r in warm]) for n in names}
    warm_ms = _f(totals.get("warm_ms_median"))
    if not math.isfinite(warm_ms) and warm:
        warm_ms = statistics.median([_f(r.get("wall_ms")) for r in warm])
    cold_ms = _f(totals.get("cold_ms"))
    if not math.isfinite(cold_ms) and cold:
        cold_ms = _f(cold[0].get("wall_ms"))
    batch_points = [(int(b.get("stop", 0)) - int(b.get("start", 0)),
                     {k: _f(v) for k, v in b.get("stage_ms", {}).items()})
                    for r in warm for b in r.get("batches", [])]
    tel = report.get("telemetry") or {}
    metrics = {k: _series(v) for k, v in (tel.get("metrics") or {}).items()}
    starts = [(_f(r.get("start_s")), _f(r.get("wall_ms")) / 1e3) for r in warm]
    window = ((min(a for a, _ in starts), max(a + d for a, d in starts))
              if starts and all(math.isfinite(a) and math.isfinite(d) for a, d in starts) else None)
    device = str(env.get("device") or config.get("device") or "")
    cost = report.get("cost") or {}
    return Facts(
        label=str(report.get("label") or ""),
        precision=str(config.get("precision", "fp32")),
        is_gpu=gpu is not None and not device.startswith("cpu"),
        capability=environment_capability(env),
        warm_ms=warm_ms, cold_ms=cold_ms, stage_ms=stage_ms,
        cold_stage_ms={k: _f(v) for k, v in (cold[0].get("stage_ms") or {}).items()} if cold else {},
        num_points=int(totals.get("num_points") or 0), num_frames=int(totals.get("num_frames") or 0),
        batch_points=batch_points, batches_per_run=max(1, len(warm[0].get("batches", []))) if warm else 1,
        peak_memory=_f(totals.get("peak_memory_bytes")),
        memory_total=_f((gpu or {}).get("memory_total_bytes")),
        telemetry=metrics, static=tel.get("static") or {},
        cost=cost.get("stages") or {}, peak=cost.get("peak") or {}, config=config,
        telemetry_t=_series(tel.get("t")), warm_window=window,
    )


def _mean(values: np.ndarray) -> float:
    values = values[np.isfinite(values)]
    return float(values.mean()) if values.size else math.nan


def _busy_mask(f: Facts) -> np.ndarray:
    busy = f.metric("gpu_busy_pct")
    return np.nan_to_num(busy, nan=0.0) > BUSY_SAMPLE_PCT


def _cc(f: Facts) -> float:
    return f.capability[0] + f.capability[1] / 10 if f.capability else math.nan
