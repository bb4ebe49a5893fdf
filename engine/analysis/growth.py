"""Diagnosis of how each stage's time grows with its work across batch sizes.

Within one report (batches of different sizes) or across the reports of one configuration at several
points-per-batch (a bench sweep): a stage growing faster than its points is superlinear; one growing
linearly at a high per-point cost with the GPU waiting has a host sync per point; one that barely
grows while its counted work does is dominated by per-op overhead.
"""

from __future__ import annotations

import dataclasses
import math

from engine.analysis.facts import (
    GPU_IDLE_BUSY_PCT,
    ROOFLINE_LOW_PCT,
    STAGE_MS_MIN,
    STAGE_SHARE_MIN,
    Facts,
    Finding,
    _mean,
    facts,
)
from engine.analysis.roofline import Cost
from engine.report.schema import Report

SUPERLINEAR_EXPONENT = 1.3  # time ~ work^b: above this the stage grows faster than its work
LINEAR_EXPONENT_RANGE = (0.7, 1.3)
FLAT_EXPONENT = 0.3  # time barely grows with work: fixed per-op overhead
MIN_WORK_RATIO = 1.5  # batch sizes must differ at least this much to judge growth
HOST_SYNC_US_PER_POINT = 10.0  # serial per-point cost on a GPU: a host round trip per point
PER_POINT_WORK_RATIO_MIN = 1.2  # counted work growing less than this with points: per-video stage
LAUNCH_MANY_OPS = 500  # a stage launching at least this many ops per run (see diagnose.rule_launch_bound)


def _growth(samples: list[tuple[float, float]]) -> tuple[float, float, float, float, float] | None:
    """(exponent, work_small, work_large, ms_small, ms_large) from (work, ms) samples.

    The fastest sample per work size is used: interference from other processes only adds time.
    """
    by_work: dict[float, list[float]] = {}
    for work, ms in samples:
        if work > 0 and math.isfinite(ms) and ms > 0:
            by_work.setdefault(work, []).append(ms)
    if len(by_work) < 2:
        return None
    lo, hi = min(by_work), max(by_work)
    if hi / lo < MIN_WORK_RATIO:
        return None
    ms_lo, ms_hi = min(by_work[lo]), min(by_work[hi])
    return math.log(ms_hi / ms_lo) / math.log(hi / lo), lo, hi, ms_lo, ms_hi


def growth_findings(stage_samples: dict[str, list[tuple[float, float]]], f: Facts,
                    flops_ratio: dict[str, float] | None = None,
                    counted_ratio: dict[str, float] | None = None) -> list[Finding]:
    """Findings from how each stage's time grows with its points per batch.

    ``counted_ratio``: per stage, how much its counted work (FLOPs or bytes) grew between the batch
    sizes; a stage whose work does not grow with points (per-video work) is left out.
    """
    out = []
    for stage, samples in stage_samples.items():
        g = _growth(samples)
        if g is None:
            continue
        b, lo, hi, ms_lo, ms_hi = g
        if ms_hi < STAGE_MS_MIN or f.share(stage) < STAGE_SHARE_MIN / 2:
            continue
        if (counted_ratio or {}).get(stage, math.inf) < PER_POINT_WORK_RATIO_MIN:
            continue
        evidence = {"points_small": lo, "points_large": hi, "ms_small": ms_lo, "ms_large": ms_hi,
                    "work_ratio": hi / lo, "time_ratio": ms_hi / ms_lo, "exponent": b,
                    "us_per_point_large": ms_hi * 1e3 / hi}
        fr = (flops_ratio or {}).get(stage, math.nan)
        if math.isfinite(fr):
            evidence["flops_ratio"] = fr
        if b >= SUPERLINEAR_EXPONENT:
            why = (f"its FLOPs grew {fr:.1f}x too: the algorithm is superlinear in points"
                   if math.isfinite(fr) and fr >= (hi / lo) ** SUPERLINEAR_EXPONENT else "")
            out.append(Finding("superlinear_growth", "warning",
                               f"stage {stage} grows as points^{b:.2f}: {hi / lo:.0f}x the points took "
                               f"{ms_hi / ms_lo:.0f}x the time" + (f" ({why})" if why else ""), evidence,
                               "use smaller points per batch for this stage, or replace its all-pairs work "
                               "by a local/neighbourhood version", stage=stage, stake_ms=ms_hi))
        elif f.is_gpu and LINEAR_EXPONENT_RANGE[0] <= b < LINEAR_EXPONENT_RANGE[1] \
                and ms_hi * 1e3 / hi >= HOST_SYNC_US_PER_POINT and _latency_like(f, stage):
            out.append(Finding("host_sync_per_point", "critical",
                               f"stage {stage} costs {ms_hi * 1e3 / hi:.0f} us per point, linear in points, "
                               "with the GPU mostly waiting: a serial loop with a host sync per point",
                               {**evidence, "gpu_busy_pct": _mean(f.metric("gpu_busy_pct"))},
                               "remove .item()/.cpu()/.tolist() and Python control flow on GPU values from "
                               "the per-point loop; process all points as one tensor", stage=stage,
                               stake_ms=ms_hi))
        elif b <= FLAT_EXPONENT and _latency_like(f, stage) and f.share(stage) >= STAGE_SHARE_MIN \
                and f.ops(stage) >= LAUNCH_MANY_OPS \
                and stage in (counted_ratio or {}):  # only a stage whose counted work grew
            out.append(Finding("launch_bound", "warning",
                               f"stage {stage} takes about the same time for {hi / lo:.0f}x the points: fixed "
                               "per-op overhead dominates", evidence,
                               "fuse or vectorise its small ops (torch.compile, CUDA graphs)", stage=stage,
                               stake_ms=ms_hi))
    return out


def _latency_like(f: Facts, stage: str) -> bool:
    c = f.cost.get(stage)
    if c is not None:
        pct = c.pct_of_roofline
        return c.bound in ("latency", "host") or (pct is not None and pct < ROOFLINE_LOW_PCT)
    busy = _mean(f.metric("gpu_busy_pct"))
    return not f.is_gpu or math.isnan(busy) or busy < 100.0 - GPU_IDLE_BUSY_PCT


def rule_batch_growth(f: Facts) -> list[Finding]:
    """Within one report: batches of different sizes (a partial last batch)."""
    samples: dict[str, list[tuple[float, float]]] = {}
    for points, stage_ms in f.batch_points:
        for stage, ms in stage_ms.items():
            samples.setdefault(stage, []).append((float(points), ms))
    return growth_findings(samples, f)


def group_growth(group: list[tuple[Report, Cost | None]]) -> list[Finding]:
    """Growth findings across (report, its roofline) of one configuration at different points per batch.

    The findings carry the label of the report with the largest batches.
    """
    group = sorted(group, key=lambda rc: rc[0].config.points_per_batch)
    all_facts = [facts(r, cost) for r, cost in group]
    largest = all_facts[-1]
    samples: dict[str, list[tuple[float, float]]] = {}
    counted: dict[str, dict[float, tuple[float, float]]] = {}  # stage -> points -> (flops, bytes) per batch
    for f in all_facts:
        for points, stage_ms in f.batch_points:
            for stage, ms in stage_ms.items():
                samples.setdefault(stage, []).append((float(points), ms))
        per_batch_points = max((p for p, _ in f.batch_points), default=0)
        for stage, c in f.cost.items():
            if per_batch_points:
                counted.setdefault(stage, {})[float(per_batch_points)] = (
                    c.flops / f.batches_per_run, c.bytes / f.batches_per_run)
    flops_ratio, counted_ratio = {}, {}
    for stage, by_points in counted.items():
        if len(by_points) >= 2:
            (f_lo, b_lo), (f_hi, b_hi) = by_points[min(by_points)], by_points[max(by_points)]
            if f_lo > 0:
                flops_ratio[stage] = f_hi / f_lo
            ratios = [hi / lo for lo, hi in ((f_lo, f_hi), (b_lo, b_hi)) if lo > 0 and math.isfinite(hi)]
            if ratios:
                counted_ratio[stage] = max(ratios)
    found = growth_findings(samples, largest, flops_ratio, counted_ratio)
    return [dataclasses.replace(x, label=largest.label or None) for x in found]
