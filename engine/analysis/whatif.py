"""What-if: a report's per-stage times projected onto another GPU from the spec table.

For each stage with a counted cost (FLOPs F, bytes B) and an observed time t on the source device:

    source roofline time  r_s = max(F / P_s, B / W_s)     (P: peak FLOP/s at the stage's precision,
    target roofline time  r_t = max(F / P_t, B / W_t)      W: peak bandwidth, bytes/s)
    efficiency            e   = min(1, r_s / t)           (what the stage reached of its own roof)
    projected             t'  = r_t / e

The precision is taken as it would run on the target: tf32 below compute capability 8.0 runs IEEE
fp32, bf16 without bf16 units is emulated (priced at the fp32 rate: a best case). Latency- and
host-bound stages keep their observed time (latency-bound ones at least the target's roofline time):
launches, syncs and host work do not follow the peaks.

A quantised mode (int8, fp8) takes the path the target really has: fp8 without fp8 units runs on int8
tensor cores where there are some, else fp16 (``engine.telemetry.specs.peak``), and its unquantised ops,
counted in bf16 on the source, run under fp16 autocast on a card without bf16 units (below CC 8.0), as
the quantised trackers do there. The path is named in the result (``mode_path``) and the assumptions.

The work counted while no stage was open (``(unstaged)``) is placed against the time of a run spent
outside every stage, and projected like a stage.

The efficiency must come from warm runs: a report with only a cold run (``track --report``) has setup in
every stage, which reads as latency-bound and projects nothing, so it is refused here with the command
that records warm runs (``trackscope compare --what-if`` times them first, on the report's own device:
``engine.workflows.warm_runs``). A projection in which every stage is kept is refused too, with the reason:
a table of 1.00x would read as an answer.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from engine.analysis.roofline import report_cost, roofline
from engine.core.errors import UserError
from engine.core.units import format_time_ratio, ms_value, ratio_value
from engine.report.schema import Report, as_report
from engine.telemetry import specs

#: bounds whose time does not follow the device's peaks; kept at the observed time
KEPT_BOUNDS = ("latency", "host", "unknown")
#: the stage work done outside every stage is booked to (engine.analysis.cost.UNSTAGED)
UNSTAGED = "(unstaged)"
#: modes whose GEMMs are quantised; their other ops run under a float autocast
QUANTISED_MODES = ("int8", "fp8")
#: where a report's extra says how its work was counted on demand (engine.workflows.count writes it)
COUNTED_KEY = "work_counted"
#: where a report's extra says its warm runs were timed after the fact (engine.workflows.warm_runs writes it)
WARM_MEASURED_KEY = "warm_runs_measured"
#: the output folder bench_command names
BENCH_OUT = "bench-out"


def bench_command(report: Report) -> str:
    """The exact ``trackscope bench`` command that records ``report``'s configuration with warm runs."""
    c = report.config
    parts = ["trackscope", "bench", report.video.path or "VIDEO", "--tracker", c.tracker, "--device", c.device,
             "--precisions", c.precision, "--points-per-batch", str(c.points_per_batch),
             "--frames-per-batch", str(c.frames_per_batch)]
    source = report.queries_source or ""
    if source.endswith(".csv"):
        parts += ["--queries", source]
    elif report.totals.num_points:
        parts += ["--points", str(report.totals.num_points)]
    return " ".join(shlex.quote(p) for p in parts + ["--out", BENCH_OUT])


def is_cold_only(report: Report) -> bool:
    """Whether the report's times are a cold run's only (no warm run, no warm median)."""
    return report.totals.warm_ms_median is None and not report.warm_runs


def warm_notes(report: Report) -> list[str]:
    """Where warm runs timed after the fact were measured, as assumption lines ([] when the run had them)."""
    info = report.extra.get(WARM_MEASURED_KEY)
    if not isinstance(info, Mapping):
        return []
    return [f"warm times measured now on this machine ({info.get('device', '?')}, host {info.get('host', '?')}, "
            f"{info.get('measured', '?')}): {info.get('runs', '?')} runs after {info.get('warmup_runs', '?')} "
            f"warm-up, the report's configuration on {info.get('inputs', '?')}; the report itself holds only a "
            "cold run"]


def counted_notes(report: Report) -> list[str]:
    """How the report's work was counted on demand, as assumption lines ([] when the run counted it)."""
    info = report.extra.get(COUNTED_KEY)
    if not isinstance(info, Mapping):
        return []
    shape = "x".join(str(v) for v in info.get("shape") or ()) or "?"
    lines = [f"cost model counted on demand on {info.get('device', '?')} from {info.get('inputs', '?')} "
             f"({shape} frames x height x width, {info.get('num_points', '?')} points): FLOPs and bytes follow "
             "the shapes, not the pixel values"]
    lines.extend(str(n) for n in info.get("notes") or ())
    return lines


def _target_peak(target: specs.GPUSpec, prec: str, mode: str) -> tuple[str, specs.Peak]:
    """The precision a stage counted in ``prec`` runs at on ``target`` in ``mode``, and its peak there."""
    if mode in QUANTISED_MODES and prec == "bf16" and specs.peak(target, "bf16").path == "emulated":
        fp16 = specs.peak(target, "fp16")
        return "fp16", specs.Peak(fp16.flops, "fp16 instead",
                                  f"{mode} on {target.name}: its unquantised ops run under fp16 autocast there "
                                  "(bf16 needs CC 8.0), projected at fp16")
    return prec, specs.peak(target, prec)


def target_spec(name: str) -> specs.GPUSpec:
    """The spec table entry for a GPU name, or a UserError listing the known ones."""
    spec = specs.lookup(name)
    if spec is None:
        known = ", ".join(s.name for s in specs.GPUS)
        raise UserError(f"unknown GPU {name!r} for the what-if", f"choose one of: {known}")
    return spec


def _roof_s(flops: float, nbytes: float, peak_flops: float, bandwidth: float) -> float:
    """Roofline time in seconds; NaN when a needed peak is unknown."""
    compute = flops / peak_flops if flops else 0.0
    memory = nbytes / bandwidth if nbytes else 0.0
    if math.isnan(compute) or math.isnan(memory):
        return math.nan
    return max(compute, memory)


def project(report: Report | Mapping[str, Any], target_gpu: str) -> dict[str, Any]:
    """Per-stage projected ms of ``report`` on ``target_gpu``, the total, and the assumptions made."""
    target = target_spec(target_gpu)
    report = as_report(report)
    cost = report_cost(report)
    if cost is None or not cost.stages:
        raise UserError(f"report {report.short_label()!r} has no cost model (FLOPs and bytes per stage), "
                        "so it cannot be projected",
                        "count it on demand: trackscope compare REPORT --what-if GPU (the tracker must be "
                        "importable), or record it with trackscope bench, which counts it (unless --no-cost)")
    if is_cold_only(report):
        raise UserError(f"report {report.short_label()!r} holds only a cold run (the first in its process: setup, "
                        "compilation and autotuning in every stage), so it cannot be projected",
                        "trackscope compare REPORT --what-if GPU times warm runs on the report's device; or, on "
                        f"a machine with {report.device_name}, run: {bench_command(report)}")
    source = cost.spec
    mode = report.precision
    observed = report.stage_ms
    src_bw, tgt_bw = specs.peak_bandwidth(source), specs.peak_bandwidth(target)
    assumptions = [
        f"source peaks: {source.name} ({source.source}); target peaks: {target.name} ({target.source})",
        "each stage keeps the efficiency it reached on the source (its observed time vs its own roofline "
        "time, at most 100 %)",
        "bytes moved are an upper bound (inputs + outputs of every op, no cache reuse); FLOPs count "
        "matmul/conv/attention only",
    ]
    if source.kind == "cpu":
        assumptions.append("the source is a CPU, which has no kernel launches: its latency-bound stages are "
                           "projected with their CPU efficiency too (a pessimistic guess for a GPU)")
    if source.estimated:
        assumptions.append(f"the source peaks are estimates ({source.source}): the carried-over efficiency "
                           "is rough")
    assumptions.extend(warm_notes(report))
    assumptions.extend(counted_notes(report))
    mode_path = ""
    if mode in QUANTISED_MODES:
        mode_peak = specs.peak(target, mode)
        mode_path = mode_peak.path
        if mode_peak.note:
            assumptions.append(f"{mode} mode on {target.name}: {mode_peak.note}")
    observed_total = report.typical_run_ms
    staged_observed = sum(observed.values())
    outside = max(0.0, (observed_total or staged_observed) - staged_observed)
    unstaged_placed = False
    notes: set[str] = set()
    kept: list[str] = []
    stages: dict[str, dict[str, Any]] = {}
    for name, entry in cost.stages.items():
        ms = observed.get(name, entry.ms)
        prec = entry.precision or mode
        src_peak = specs.peak(source, prec)
        prec_on_target, tgt_peak = _target_peak(target, prec, mode)
        if tgt_peak.note:
            notes.add(tgt_peak.note if prec_on_target != prec else f"{prec} on {target.name}: {tgt_peak.note}")
        bound = entry.bound
        if name == UNSTAGED and ms is None and outside > 0:  # its time: the run's time outside every stage
            ms, unstaged_placed = outside, True
            bound = roofline(entry.flops, entry.bytes, ms, src_peak.flops, src_bw).bound
        row = {"observed_ms": ms, "projected_ms": ms, "bound": bound, "precision": prec,
               "target_path": tgt_peak.path, "efficiency": None, "source_roofline_ms": None,
               "target_roofline_ms": None, "kept": True}
        flops, nbytes = float(entry.flops), float(entry.bytes)
        src_roof = _roof_s(flops, nbytes, src_peak.flops, src_bw)
        tgt_roof = _roof_s(flops, nbytes, tgt_peak.flops, tgt_bw)
        movable = row["bound"] not in KEPT_BOUNDS or (row["bound"] == "latency" and source.kind == "cpu")
        usable = (ms is not None and ms > 0 and movable and src_roof > 0
                  and math.isfinite(src_roof) and math.isfinite(tgt_roof))
        if usable and ms is not None:
            efficiency = min(1.0, src_roof * 1e3 / ms)
            row.update({"efficiency": efficiency, "source_roofline_ms": src_roof * 1e3,
                        "target_roofline_ms": tgt_roof * 1e3, "projected_ms": tgt_roof * 1e3 / efficiency,
                        "kept": False})
        elif ms is not None and row["bound"] == "latency" and math.isfinite(tgt_roof):
            # launches and syncs stay, but the target's roof may become the limit
            row.update({"projected_ms": max(ms, tgt_roof * 1e3), "target_roofline_ms": tgt_roof * 1e3})
            kept.append(f"{name} (latency)")
        elif ms is not None:
            kept.append(f"{name} ({row['bound']})")
        stages[name] = row
    for name, ms in observed.items():  # timed stages the cost pass did not see
        if name not in stages:
            stages[name] = {"observed_ms": ms, "projected_ms": ms, "bound": "unknown", "precision": mode,
                            "target_path": "", "efficiency": None, "source_roofline_ms": None,
                            "target_roofline_ms": None, "kept": True}
            kept.append(f"{name} (not counted)")
    if stages and all(r["kept"] and r["projected_ms"] == r["observed_ms"] for r in stages.values()):
        raise UserError(f"nothing of {report.short_label()!r} can be projected onto {target.name}: every stage "
                        f"is kept at its observed time ({', '.join(kept)}), so the table would read 1.00x; "
                        "launches, syncs and host work do not follow a GPU's peaks",
                        "count its cost on the device it ran on, or record it with trackscope bench")
    if kept:
        assumptions.append("kept at the observed time, or the target's roofline time where that is longer "
                           "(launch, sync and host costs do not follow the peaks): " + ", ".join(kept))
    assumptions.extend(sorted(notes))
    if unstaged_placed:
        assumptions.append(f"{UNSTAGED}: the {outside:.2f} ms per run outside any stage, with the work counted "
                           "while no stage was open")
    elif outside > 0:
        assumptions.append(f"{outside:.2f} ms per run outside any stage kept as observed")
    projected_total = sum(r["projected_ms"] or 0.0 for r in stages.values()) + (0.0 if unstaged_placed else outside)
    return {
        "report": report.short_label(), "source": source.name, "target": target.name, "precision": mode,
        "mode_path": mode_path,
        "stages": stages, "observed_ms": observed_total if observed_total is not None else staged_observed,
        "projected_ms": projected_total, "outside_stages_ms": outside, "assumptions": assumptions,
    }


_fmt_ms = ms_value  # engine.core.units owns how a time is written


def mode_label(result: Mapping[str, Any]) -> str:
    """The precision mode and, for a quantised mode the target lacks, the path it takes: 'fp8 on its int8 path'."""
    path = str(result.get("mode_path") or "")
    if path.endswith(" instead"):
        return f"{result['precision']} on its {path.removesuffix(' instead')} path"
    return str(result["precision"])


def format_projection(result: dict[str, Any]) -> str:
    """Aligned text: per stage observed vs projected ms, then the assumptions."""
    lines = [f"what-if: {result['report']}", f"  {result['source']} -> {result['target']} ({mode_label(result)})",
             ""]
    header = ("stage", "bound", "precision", "observed ms", "projected ms", "x")
    rows = [header]
    for name, r in result["stages"].items():
        ratio = (r["projected_ms"] / r["observed_ms"]) if r["observed_ms"] else None
        rows.append((name, r["bound"] + (" (kept)" if r["kept"] else ""), f"{r['precision']} {r['target_path']}",
                     _fmt_ms(r["observed_ms"]), _fmt_ms(r["projected_ms"]), ratio_value(ratio)))
    total_ratio = result["projected_ms"] / result["observed_ms"] if result["observed_ms"] else None
    rows.append(("total", "", "", _fmt_ms(result["observed_ms"]), _fmt_ms(result["projected_ms"]),
                 ratio_value(total_ratio)))
    lines.extend(_table(rows))
    lines.append("")
    lines.append(f"  {result['target']}: {format_time_ratio(result['projected_ms'], result['observed_ms'])} "
                 f"of {result['source']}")
    lines.append("")
    lines.append("assumptions:")
    lines.extend(f"  - {a}" for a in result["assumptions"])
    return "\n".join(lines)


def _table(rows: Sequence[tuple[str, ...]]) -> list[str]:
    """Left-align the first column, right-align the rest."""
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    out = []
    for row in rows:
        cells = [str(row[0]).ljust(widths[0])] + [str(c).rjust(w) for c, w in zip(row[1:], widths[1:])]
        out.append("  ".join(cells).rstrip())
    return out
