"""What-if for a run whose precision changed mid-run: each batch projected at the precision it ran with.

``engine.analysis.whatif.project`` prices a report at one precision (its config's, the first one). A run
toggled from fp32 to fp16 halfway holds batches of both; projecting all of it at fp32 prices half its
work at the wrong peak. Here the report is split by the precision each batch ran with (its recorded
config): per precision p, the stages' observed time is the share of the typical runs' stage time its
batches took, and the counted work (FLOPs, bytes, ops: counted once over all points) is the share of the
points its batches tracked. Each part is projected with ``project`` at p and the parts are added.

The work was counted at the report's precision. A float mode (fp32, tf32, fp16, bf16) changes the
rate of the same ops, so the count carries over; a quantised mode (int8, fp8) changes which ops run
and how, which a count at another precision does not know: a run that switched into or out of one
is not projected, and the error says so.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from engine.analysis.tradeoff import joined, values_taken
from engine.analysis.whatif import QUANTISED_MODES, project
from engine.core.errors import UserError
from engine.report.parts import Run, StageWork
from engine.report.schema import Report, as_report

#: a stage counted in fp32 runs its FLOPs as tf32 in tf32 mode (engine.analysis.cost.stage_precision)
_COUNTED_AS = {"tf32": "tf32"}


def _typical_runs(report: Report) -> tuple[Run, ...]:
    """The runs the report's stage times come from (the warm runs, else the cold run)."""
    return report.warm_runs or ((report.cold_run,) if report.cold_run else ())


def precision_shares(report: Report) -> dict[str, tuple[float, dict[str, float]]]:
    """Per precision its batches ran at: (share of the points tracked, {stage: share of its time}).

    From the typical runs' batches; a batch without a recorded config counts at the report's precision.
    """
    points: dict[str, int] = {}
    stage_ms: dict[str, dict[str, float]] = {}
    for run in _typical_runs(report):
        for batch in run.batches:
            p = batch.config.precision if batch.config is not None else report.precision
            points[p] = points.get(p, 0) + batch.num_points
            for name, ms in batch.stage_ms.items():
                stage_ms.setdefault(p, {})
                stage_ms[p][name] = stage_ms[p].get(name, 0.0) + ms
    total_points = sum(points.values())
    totals: dict[str, float] = {}
    for per_stage in stage_ms.values():
        for name, ms in per_stage.items():
            totals[name] = totals.get(name, 0.0) + ms
    return {p: (n / total_points if total_points else 0.0,
                {name: (ms / totals[name] if totals[name] else 0.0) for name, ms in stage_ms.get(p, {}).items()})
            for p, n in points.items()}


def _scaled(value: float | None, share: float) -> float | None:
    return None if value is None else value * share


def _part(report: Report, precision: str, point_share: float, time_share: Mapping[str, float]) -> Report:
    """The part of ``report`` its batches at ``precision`` make up, as a report of that precision."""
    counted = _COUNTED_AS.get(report.precision, report.precision)
    observed = report.stage_ms
    staged = sum(observed.values())
    part_stage_ms = {name: ms * time_share.get(name, 0.0) for name, ms in observed.items()}
    wall_share = sum(part_stage_ms.values()) / staged if staged else point_share
    work = {name: StageWork(flops=round(w.flops * point_share), bytes=round(w.bytes * point_share),
                            ops=round(w.ops * point_share),
                            precision=precision if w.precision in (None, counted) else w.precision, extra=w.extra)
            for name, w in report.work.items()}
    totals = dataclasses.replace(report.totals, stage_ms=part_stage_ms,
                                 warm_ms_median=_scaled(report.totals.warm_ms_median, wall_share),
                                 cold_ms=_scaled(report.totals.cold_ms, wall_share))
    runs = tuple(dataclasses.replace(r, wall_ms=r.wall_ms * wall_share) for r in report.runs)
    config = dataclasses.replace(report.config, precision=precision)
    return dataclasses.replace(report, config=config, totals=totals, work=work, runs=runs)


def project_by_batch(report: Report | Mapping[str, Any], target_gpu: str) -> dict[str, Any]:
    """``project``, with each batch at the precision it ran with (a report of one precision: ``project`` as is).

    Raises UserError for a run that changed into or out of a quantised mode (its count cannot be split).
    """
    report = as_report(report)
    taken = values_taken(report, "precision")
    shares = precision_shares(report)
    if len(taken) < 2 or len(shares) < 2:
        return project(report, target_gpu)
    quantised = [p for p in taken if p in QUANTISED_MODES and p != report.precision]
    if quantised or report.precision in QUANTISED_MODES:
        raise UserError(f"report {report.short_label()!r} changed precision during the run ({joined(taken)}): "
                        f"its work was counted at {report.precision}, which does not say what "
                        f"{'/'.join(quantised or [report.precision])} quantises, so it cannot be projected",
                        "project a run of one precision: run it again without changing the precision, or "
                        "trackscope bench --precision MODE")
    parts = {p: project(_part(report, p, point_share, time_share), target_gpu)
             for p, (point_share, time_share) in shares.items()}
    first = next(iter(parts.values()))
    stages: dict[str, dict[str, Any]] = {}
    for p, result in parts.items():
        for name, row in result["stages"].items():
            if name not in stages:
                stages[name] = {**row, "observed_ms": 0.0, "projected_ms": 0.0, "precision": "", "bound": "",
                                "target_path": "", "efficiency": None, "source_roofline_ms": None,
                                "target_roofline_ms": None, "kept": False, "by_precision": {}}
            merged = stages[name]
            merged["observed_ms"] += row["observed_ms"] or 0.0
            merged["projected_ms"] += row["projected_ms"] or 0.0
            merged["kept"] = merged["kept"] or row["kept"]
            merged["by_precision"][p] = row
            for key in ("precision", "bound", "target_path"):
                values = [v for v in merged[key].split(" / ") if v] + [str(row[key])]
                merged[key] = " / ".join(dict.fromkeys(v for v in values if v))
    split = ", ".join(f"{p}: {100 * shares[p][0]:.0f} % of the points" for p in parts)
    assumptions = [f"the precision changed during the run ({joined(taken)}): each batch is projected at the "
                   f"precision it ran with ({split}), with the counted work split by points"]
    for result in parts.values():
        assumptions.extend(a for a in result["assumptions"] if a not in assumptions)
    return {**first, "precision": joined(taken),
            "mode_path": " / ".join(dict.fromkeys(r["mode_path"] for r in parts.values() if r["mode_path"])),
            "stages": stages, "observed_ms": report.typical_run_ms or sum(r["observed_ms"] for r in parts.values()),
            "projected_ms": sum(r["projected_ms"] for r in parts.values()),
            "outside_stages_ms": sum(r["outside_stages_ms"] for r in parts.values()),
            "assumptions": assumptions, "report": report.short_label()}
