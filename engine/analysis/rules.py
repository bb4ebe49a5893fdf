"""Diagnosis: rules that turn a run report into findings with evidence (numbers) and a suggested change.

``diagnose(report)`` runs the single-report rules; ``diagnose_many(reports)`` adds the rules that need
several reports of one configuration at different batch sizes (how a stage's time grows with its
work, in engine.diagnose_growth). Each rule is a small function of the report's :class:`Facts` with
named thresholds. ``trackscope diagnose REPORT.json`` prints the findings of a report or bench file.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any, Callable

import numpy as np

from engine.analysis.facts import (
    GPU_IDLE_BUSY_PCT,
    ROOFLINE_LOW_PCT,
    SEVERITIES,
    STAGE_MS_MIN,
    STAGE_SHARE_MIN,
    Facts,
    Finding,
    _busy_mask,
    _cc,
    _f,
    _mean,
    _nan,
    facts,
)
from engine.analysis.growth import HOST_SYNC_US_PER_POINT, LAUNCH_MANY_OPS, group_growth, rule_batch_growth
from engine.analysis.quantised import rule_quantised_slower
from engine.analysis.roofline import Cost, StageRoofline, report_cost
from engine.core.precision import gate
from engine.core.units import GIB
from engine.report.schema import Report, as_report
from engine.telemetry.sampler import clock_reason_mask

__all__ = ["Finding", "Facts", "facts", "diagnose", "diagnose_many", "format_findings", "SEVERITIES",
           "HOST_SYNC_US_PER_POINT", "GPU_IDLE_BUSY_PCT", "ROOFLINE_LOW_PCT"]

# -- thresholds -------------------------------------------------------------------------------
COLD_WARM_RATIO = 3.0  # cold run this many times the warm median: first-run setup worth naming ...
COLD_EXCESS_MIN_MS = 20.0  # ... and at least this many ms slower (or COLD_WARNING_SETUP_S, whatever the ratio)
#: the severity of cold_start is the first-run setup itself (cold minus warm), which a user sits through once
#: per process start, not its ratio to a fast warm run. Under a second it hides in opening the video and
#: loading the model (CorrTrack's handles, graph capture and cuDNN choices on the H200: 0.06-1.4 s): info. A
#: few seconds is felt at every launch of a script or the app (the plugin that compiles: 6 s): a warning.
#: Tens of seconds dominate any short job: critical.
COLD_WARNING_SETUP_S = 2.0
COLD_CRITICAL_SETUP_S = 20.0
MS_PER_S = 1000.0
MEMORY_NEAR_FRACTION = 0.90  # peak or used memory over this share of the total
MEMORY_CRITICAL_FRACTION = 0.97
PROCESS_CPU_BUSY_PCT = 70.0  # process CPU over this (100 = one core) is "the host is busy"
PER_POINT_OPS_HINT = 1.0  # a stage running this many ops per point per batch loops over points
LAUNCH_SM_ACTIVE_MAX_PCT = 15.0  # GPM SM active under this while the GPU is "busy": tiny kernels
LAUNCH_GPU_BUSY_MIN_PCT = 20.0
LAUNCH_BYTES_PER_OP = 256 * 1024  # at least LAUNCH_MANY_OPS ops of at most this many bytes on average ...
LAUNCH_MAX_PCT_OF_ROOFLINE = 25.0  # ... well below its roofline: per-op overhead is most of the time
TF32_COMPUTE_SHARE_MIN = 0.20  # fp32 matmul/conv stages taking this share of the run
TF32_MIN_INTENSITY = 8.0  # FLOP per byte: above this a stage is matmul-like
TF32_GPM_SM_ACTIVE_MIN_PCT = 50.0
TF32_GPM_TENSOR_MAX_PCT = 2.0
UNTIMED_RATIO = 1.5  # wall time this many times the sum of stage times
UNTIMED_MIN_MS = 5.0
CLOCK_LIMIT_SAMPLE_SHARE = 0.30  # share of busy samples with a power/thermal limit bit
CLOCK_BELOW_MAX_FRACTION = 0.90  # mean SM clock under this share of its maximum
PCIE_DOWN_SAMPLE_SHARE = 0.50  # share of busy samples with the link below its maximum

# NVML clock-limit reason bits (names in engine.telemetry.CLOCK_REASONS) that mean power or heat
POWER_MASK = clock_reason_mask("SW power cap", "HW power brake slowdown")
THERMAL_MASK = clock_reason_mask("SW thermal slowdown", "HW thermal slowdown", "HW slowdown")
TRANSFER_STAGES = ("upload", "download")


# -- single-report rules ----------------------------------------------------------------------
def rule_precision_gate(f: Facts) -> list[Finding]:
    """bf16/tf32/fp16 requested where the hardware lacks it: emulated or silently fp32."""
    if f.precision == "fp32":
        return []
    if f.is_gpu and f.capability is None:
        return []
    g = gate(f.precision, "cuda" if f.is_gpu else "cpu", f.capability)
    if g.native or not g.runnable:
        return []
    severity = "critical" if f.precision == "bf16" else "warning" if f.is_gpu else "info"
    suggestion = {"bf16": "use fp16 (tensor cores from CC 7.0) or fp32 on this card",
                  "tf32": "expect fp32 speed; use fp16 for tensor cores, or a CC >= 8.0 card for TF32",
                  "fp16": "use fp32 on this card"}.get(f.precision, "use fp32")
    if not f.is_gpu:
        suggestion = "on the CPU choose fp32 (or bf16); tf32 changes nothing here"
    return [Finding("precision_unsupported", severity, g.reason,
                    {"compute_capability": _cc(f), "warm_ms": f.warm_ms}, suggestion, stake_ms=f.warm_ms)]


def _compute_stages(f: Facts, any_bound: bool = False) -> dict[str, StageRoofline]:
    """Matmul-like stages: compute-bound, or of high arithmetic intensity (any bound when ``any_bound``)."""
    out = {}
    for name, c in f.cost.items():
        intensity = c.flops / c.bytes if c.bytes > 0 else math.nan
        dense = math.isfinite(intensity) and intensity >= TF32_MIN_INTENSITY
        if c.bound == "compute" or (dense and (any_bound or c.bound == "unknown")):
            out[name] = c
    return out


def rule_tf32_off(f: Facts) -> list[Finding]:
    """fp32 with TF32 off on a card with TF32, while matmul-like stages take much of the time."""
    if not f.is_gpu or f.precision != "fp32" or not f.capability or f.capability < (8, 0):
        return []
    heavy = _compute_stages(f)
    share = sum(f.share(s) for s in heavy)
    fp32, tf32 = f.peak_tflops("fp32"), f.peak_tflops("tf32")
    sm_active, tensor = _mean(f.warm_metric("sm_active_pct")), _mean(f.warm_metric("tensor_active_pct"))
    gpm_says = sm_active >= TF32_GPM_SM_ACTIVE_MIN_PCT and tensor <= TF32_GPM_TENSOR_MAX_PCT
    if share < TF32_COMPUTE_SHARE_MIN:
        if not gpm_says:
            return []
        heavy = _compute_stages(f, any_bound=True)  # SMs busy without tensor cores: name the dense stages
        share = sum(f.share(s) for s in heavy)
    flops = sum(c.flops for c in heavy.values())
    ms = sum(f.stage_ms.get(s, 0.0) for s in heavy)
    evidence = {"compute_capability": _cc(f), "matmul_stage_share": share, "matmul_stage_ms": ms,
                "matmul_gflop": flops / 1e9, "achieved_tflops": flops / ms / 1e9 if ms > 0 else math.nan,
                "fp32_peak_tflops": fp32, "tf32_peak_tflops": tf32, "sm_active_pct": sm_active,
                "tensor_active_pct": tensor}
    stages = ", ".join(sorted(heavy, key=lambda s: -f.stage_ms.get(s, 0.0))) or "the run"
    # severity follows the share of the run the matmul-like stages take (GPM alone can fire on a few %)
    severity = "warning" if share >= TF32_COMPUTE_SHARE_MIN else "info"
    return [Finding("tf32_off", severity,
                    f"fp32 with TF32 off on a CC {_cc(f):.1f} card: matmul-heavy {stages} use no tensor cores",
                    evidence, "run with --precision tf32 (TF32 tensor cores, ~1e-3 relative error) or bf16; "
                    "compare accuracy in the bench table", stage=max(heavy, key=f.share) if heavy else None,
                    stake_ms=ms)]


def rule_host_bound(f: Facts) -> list[Finding]:
    """GPU mostly idle while this process keeps a CPU core busy: input- or host-bound."""
    if not f.is_gpu:
        return []
    busy, proc = _mean(f.warm_metric("gpu_busy_pct")), _mean(f.warm_metric("process_cpu_pct"))
    if not (busy < GPU_IDLE_BUSY_PCT and proc >= PROCESS_CPU_BUSY_PCT):
        return []
    evidence = {"gpu_busy_pct": busy, "process_cpu_pct": proc, "cpu_pct": _mean(f.warm_metric("cpu_pct"))}
    title = f"the GPU is busy {busy:.0f}% of the time while the process keeps {proc / 100:.1f} CPU cores busy"
    top = max(f.stage_ms, key=lambda s: f.stage_ms[s]) if f.stage_ms else None
    points = max((p for p, _ in f.batch_points), default=0)
    ops = f.ops(top) / f.batches_per_run
    if top is not None and points and ops / points >= PER_POINT_OPS_HINT:
        # one report cannot tell a per-point loop from a fixed op count on few points: say what would
        evidence.update({"ops_per_point": ops / points, "ops_per_batch": ops, "stage_share": f.share(top)})
        title += (f"; stage {top} issues {ops:.0f} ops per batch of {points} points: if that count grows with "
                  "the points it is a per-point loop (bench two --points-per-batch values to tell)")
    else:
        title += ": the host is the bottleneck"
    return [Finding("host_bound", "warning", title, evidence,
                    "find the host work between kernels (a profiler's CPU trace): Python loops over points, "
                    ".item()/.cpu() syncs, decoding; batch it into larger tensor ops or capture it in CUDA "
                    "graphs", stage=top if "ops_per_point" in evidence else None,
                    stake_ms=f.warm_ms * (1.0 - busy / 100.0) if math.isfinite(busy) else f.warm_ms)]


def rule_launch_bound(f: Facts) -> list[Finding]:
    """Many short ops: per-launch overhead dominates (from op counts, or GPM SM active vs busy)."""
    out = []
    for name, c in f.cost.items():
        ops, nbytes, pct = float(c.ops), c.bytes, _nan(c.pct_of_roofline)
        ms = f.stage_ms.get(name, math.nan)
        if not (ops >= LAUNCH_MANY_OPS and ms >= STAGE_MS_MIN and f.share(name) >= STAGE_SHARE_MIN):
            continue
        bytes_per_op = nbytes / ops
        if bytes_per_op > LAUNCH_BYTES_PER_OP or not (pct < LAUNCH_MAX_PCT_OF_ROOFLINE or math.isnan(pct)):
            continue
        out.append(Finding("launch_bound", "warning", f"stage {name} is launch-bound: {ops:.0f} ops of "
                           f"{bytes_per_op / 1024:.1f} KiB on average, {ms * 1e3 / ops:.1f} us per op",
                           {"ops": ops, "us_per_op": ms * 1e3 / ops, "bytes_per_op": bytes_per_op,
                            "stage_ms": ms, "stage_share": f.share(name), "pct_of_roofline": pct},
                           "fuse the small ops (vectorise the loop over frames/iterations, torch.compile, "
                           "or CUDA graphs on the GPU)", stage=name, stake_ms=ms))
    busy, sm = _mean(f.warm_metric("gpu_busy_pct")), _mean(f.warm_metric("sm_active_pct"))
    if f.is_gpu and not out and busy >= LAUNCH_GPU_BUSY_MIN_PCT and sm <= LAUNCH_SM_ACTIVE_MAX_PCT:
        out.append(Finding("launch_bound", "warning", f"GPU 'busy' {busy:.0f}% but SMs active only {sm:.1f}%: "
                           "many tiny kernels", {"gpu_busy_pct": busy, "sm_active_pct": sm},
                           "fuse small kernels (torch.compile, CUDA graphs) and batch points and frames",
                           stake_ms=f.warm_ms))
    return out


def rule_untimed_host_work(f: Facts) -> list[Finding]:
    """Wall time far above the sum of the stage times: work outside any stage."""
    total = f.stage_total_ms
    if not (math.isfinite(f.warm_ms) and total > 0 and f.warm_ms >= UNTIMED_RATIO * total
            and f.warm_ms - total >= UNTIMED_MIN_MS):
        return []
    return [Finding("untimed_work", "info", f"{f.warm_ms - total:.1f} ms of each run is outside every stage",
                    {"warm_ms": f.warm_ms, "stage_sum_ms": total, "ratio": f.warm_ms / total},
                    "time the rest as stages (declare stages, or split the module into submodules) to see it",
                    stake_ms=f.warm_ms - total)]


def rule_cold_start(f: Facts) -> list[Finding]:
    """The first run far slower than warm ones: compilation, autotuning, lazy init."""
    if not (math.isfinite(f.cold_ms) and math.isfinite(f.warm_ms) and f.warm_ms > 0):
        return []
    ratio, extra = f.cold_ms / f.warm_ms, f.cold_ms - f.warm_ms
    if extra < COLD_WARNING_SETUP_S * MS_PER_S and (ratio < COLD_WARM_RATIO or extra < COLD_EXCESS_MIN_MS):
        return []
    excess = {s: ms - f.stage_ms.get(s, 0.0) for s, ms in f.cold_stage_ms.items()}
    worst = max(excess, key=lambda s: excess[s]) if excess else None
    evidence = {"cold_ms": f.cold_ms, "warm_ms": f.warm_ms, "ratio": ratio, "threshold_ratio": COLD_WARM_RATIO}
    if worst is not None:
        evidence.update({"stage_cold_ms": f.cold_stage_ms[worst], "stage_warm_ms": f.stage_ms.get(worst, 0.0)})
    where = f" (mostly stage {worst}: +{excess[worst]:.0f} ms)" if worst else ""
    seconds = extra / MS_PER_S
    severity = "critical" if seconds >= COLD_CRITICAL_SETUP_S else "warning" if seconds >= COLD_WARNING_SETUP_S \
        else "info"
    evidence["excess_ms"] = extra
    return [Finding("cold_start", severity, f"the first run took {seconds:.2g} s more than a warm one "
                    f"({ratio:.1f}x the warm median){where}: compilation, autotuning or lazy initialisation", evidence,
                    "warm up before timing; cache compiled kernels/autotune results across runs "
                    "(TORCHINDUCTOR cache, cudnn.benchmark once per shape)", stage=worst, stake_ms=extra)]


def rule_memory_near_capacity(f: Facts) -> list[Finding]:
    """Peak or used device memory near the card's total."""
    if not f.is_gpu:
        return []
    used = f.metric("mem_used_bytes")
    total = f.memory_total if math.isfinite(f.memory_total) else _mean(f.metric("mem_total_bytes"))
    peak_used = float(np.nanmax(used)) if used.size and np.isfinite(used).any() else math.nan
    frac = np.nanmax([f.peak_memory / total if total > 0 else math.nan,
                      peak_used / total if total > 0 else math.nan, -1.0])
    if frac < MEMORY_NEAR_FRACTION:
        return []
    severity = "critical" if frac >= MEMORY_CRITICAL_FRACTION else "warning"
    return [Finding("memory_near_capacity", severity, f"device memory reached {frac:.0%} of the card's "
                    f"{total / GIB:.0f} GiB", {"fraction": frac, "peak_allocated_bytes": f.peak_memory,
                                               "peak_used_bytes": peak_used, "total_bytes": total},
                    "lower points or frames per batch; free caches; expect OOM or allocator thrash")]


def rule_clocks_limited(f: Facts) -> list[Finding]:
    """SM clocks held below their maximum by power or temperature while busy."""
    reasons, clock = f.metric("clock_reasons"), f.metric("sm_clock_mhz")
    busy = _busy_mask(f)
    if not f.is_gpu or reasons.size == 0 or not busy.any() or reasons.shape != busy.shape:
        return []
    bits = np.nan_to_num(reasons[busy], nan=0).astype(np.int64)
    power = (bits & POWER_MASK) != 0
    thermal = (bits & THERMAL_MASK) != 0
    limited = (power | thermal).mean()
    max_clock = _f(f.static.get("max_sm_clock_mhz"))
    mean_clock = _mean(clock[busy]) if clock.shape == busy.shape else math.nan
    below = mean_clock / max_clock if max_clock > 0 else math.nan
    if limited < CLOCK_LIMIT_SAMPLE_SHARE or below >= CLOCK_BELOW_MAX_FRACTION:
        return []
    cause = "temperature" if thermal.mean() >= power.mean() else "power"
    return [Finding("clocks_limited", "warning" if cause == "temperature" else "info",
                    f"SM clock held to {below:.0%} of its maximum by {cause} in {limited:.0%} of busy samples",
                    {"mean_sm_clock_mhz": mean_clock, "max_sm_clock_mhz": max_clock, "limited_share": limited,
                     "power_limited_share": float(power.mean()), "thermal_limited_share": float(thermal.mean()),
                     "temperature_c": _mean(f.metric("temperature_c")), "power_w": _mean(f.metric("power_w")),
                     "power_limit_w": _mean(f.metric("power_limit_w"))},
                    "check cooling and the power limit (nvidia-smi -q -d PERFORMANCE); lower precision "
                    "cuts power per FLOP",
                    stake_ms=f.warm_ms * (1.0 - below) if math.isfinite(below) else None)]


def rule_pcie_below_max(f: Facts) -> list[Finding]:
    """The PCIe link trained below its maximum generation or width while the GPU was busy."""
    gen, width = f.metric("pcie_gen"), f.metric("pcie_width")
    max_gen, max_width = _f(f.static.get("pcie_max_gen")), _f(f.static.get("pcie_max_width"))
    busy = _busy_mask(f)
    if not f.is_gpu or not busy.any() or gen.shape != busy.shape or width.shape != busy.shape:
        return []
    down = (gen[busy] < max_gen) | (width[busy] < max_width)
    if down.mean() < PCIE_DOWN_SAMPLE_SHARE:
        return []
    transfer = sum(f.share(s) for s in TRANSFER_STAGES)
    return [Finding("pcie_below_max", "warning" if transfer >= STAGE_SHARE_MIN else "info",
                    f"PCIe link at gen {np.nanmedian(gen[busy]):.0f} x{np.nanmedian(width[busy]):.0f} while busy, "
                    f"the card supports gen {max_gen:.0f} x{max_width:.0f}",
                    {"pcie_gen": float(np.nanmedian(gen[busy])), "pcie_max_gen": max_gen,
                     "pcie_width": float(np.nanmedian(width[busy])), "pcie_max_width": max_width,
                     "down_share": float(down.mean()), "transfer_stage_share": transfer},
                    "reseat the card or check the slot/BIOS link settings; keep data on the GPU between runs",
                    stake_ms=transfer * f.warm_ms)]


def rule_below_roofline(f: Facts, explained: set[str]) -> list[Finding]:
    """A stage that takes much of the run at a few percent of its roofline (not explained elsewhere)."""
    out = []
    for name, c in sorted(f.cost.items(), key=lambda kv: -f.stage_ms.get(kv[0], 0.0)):
        pct, ms = _nan(c.pct_of_roofline), f.stage_ms.get(name, math.nan)
        if name in explained or not (pct < ROOFLINE_LOW_PCT and ms >= STAGE_MS_MIN
                                     and f.share(name) >= STAGE_SHARE_MIN):
            continue
        out.append(Finding("below_roofline", "info", f"stage {name} runs at {pct:.1f}% of its roofline "
                           f"({c.bound}-bound)",
                           {"pct_of_roofline": pct, "stage_ms": ms, "roofline_ms": _nan(c.roofline_ms),
                            "achieved_tflops": _nan(c.achieved_tflops),
                            "achieved_gbps": _nan(c.achieved_gbps), "stage_share": f.share(name)},
                           "profile this stage (Nsight Systems shows it by name); look for layout copies, "
                           "gathers and ops in fp32 under autocast", stage=name,
                           stake_ms=ms - _nan(c.roofline_ms) if math.isfinite(_nan(c.roofline_ms)) else ms))
    return out


SINGLE_RULES: tuple[Callable[[Facts], list[Finding]], ...] = (
    rule_precision_gate, rule_tf32_off, rule_host_bound, rule_launch_bound, rule_untimed_host_work,
    rule_cold_start, rule_memory_near_capacity, rule_clocks_limited, rule_pcie_below_max, rule_batch_growth,
)
_ORDER = {s: i for i, s in enumerate(SEVERITIES)}


def _explained(findings: list[Finding]) -> set[str]:
    return {x.stage for x in findings if x.stage and x.rule in ("launch_bound", "host_sync_per_point", "tf32_off")}


def _rank(x: Finding) -> tuple[int, float]:
    """Most severe first; within a severity, the finding that explains the most time first."""
    stake = x.stake_ms if x.stake_ms is not None and math.isfinite(x.stake_ms) else 0.0
    return _ORDER.get(x.severity, 9), -stake


def _sorted(findings: list[Finding]) -> list[Finding]:
    seen, out = set(), []
    for x in sorted(findings, key=_rank):
        key = (x.rule, x.stage, x.label)
        if key not in seen:
            seen.add(key)
            out.append(x)
    return out


def diagnose(report: Report | Mapping[str, Any], cost: Cost | None = None) -> list[Finding]:
    """Findings of one report, most severe first (cost: its roofline, derived here when not given)."""
    f = facts(as_report(report), cost)
    findings: list[Finding] = []
    for rule in SINGLE_RULES:
        findings += rule(f)
    if not any(x.severity in ("critical", "warning") for x in findings):  # a fallback when nothing explains it
        findings += rule_below_roofline(f, _explained(findings))[:1]
    return _sorted([dataclasses.replace(x, label=x.label or f.label or None) for x in findings])


def _group_key(report: Report) -> tuple:
    """Reports of one configuration but their points per batch (growth is judged across them)."""
    c = report.config
    return (c.tracker, c.precision, c.frames_per_batch, report.environment.device,
            report.video.path or report.video.name, report.totals.num_frames)


def diagnose_many(reports: Sequence[Report | Mapping[str, Any]],
                  costs: Sequence[Cost | None] | None = None) -> list[Finding]:
    """Findings of each report plus growth across batch sizes within groups of the same configuration."""
    typed = [as_report(r) for r in reports]
    costs = list(costs) if costs is not None else [report_cost(r) for r in typed]
    findings: list[Finding] = []
    for r, cost in zip(typed, costs):
        findings += diagnose(r, cost)
    groups: dict[tuple, list[tuple[Report, Cost | None]]] = {}
    for r, cost in zip(typed, costs):
        groups.setdefault(_group_key(r), []).append((r, cost))
    for group in groups.values():
        if len(group) < 2:
            continue
        grown = group_growth(group)
        labels = {r.label or None for r, _ in group}
        synced = {x.stage for x in grown if x.rule == "host_sync_per_point"}
        # a host sync per point explains the short ops of that stage better than launch overhead
        findings = [x for x in findings if not (synced and x.rule == "launch_bound" and x.label in labels
                                                 and (x.stage in synced or x.stage is None))]
        findings += grown
    findings += rule_quantised_slower(typed)
    return _sorted(_one_cold_start(findings, len(typed)))


def _one_cold_start(findings: list[Finding], num_reports: int) -> list[Finding]:
    """A bench's cold_start findings as one: the configuration with the most first-run setup, saying how
    many configurations had some (first-run setup comes with nearly every configuration; one finding says it)."""
    cold = [x for x in findings if x.rule == "cold_start"]
    if len(cold) < 2:
        return findings
    worst = max(cold, key=lambda x: x.stake_ms or 0.0)
    others = sorted(x.stake_ms or 0.0 for x in cold if x is not worst)
    one = dataclasses.replace(
        worst, evidence={**worst.evidence, "configurations": len(cold), "of_configurations": num_reports,
                         "next_worst_excess_ms": others[-1]},
        title=worst.title + (f"; the worst of {len(cold)} of {num_reports} configurations with first-run setup "
                             f"(the others: {others[0] / MS_PER_S:.2g}-{others[-1] / MS_PER_S:.2g} s)"))
    return [one if x is worst else x for x in findings if x.rule != "cold_start" or x is worst]


# -- CLI ---------------------------------------------------------------------------------------
def format_findings(findings: list[Finding]) -> str:
    """Findings as indented text, one block each."""
    if not findings:
        return "no findings: nothing in the rules fired"
    lines = []
    for x in findings:
        where = f" [{x.label}]" if x.label else ""
        lines.append(f"{x.severity.upper():8s} {x.rule}{where}: {x.title}")
        ev = ", ".join(f"{k}={v:.4g}" for k, v in x.evidence.items() if isinstance(v, (int, float))
                       and math.isfinite(v))
        lines.append(f"         evidence: {ev}")
        lines.append(f"         suggestion: {x.suggestion}")
    return "\n".join(lines)
