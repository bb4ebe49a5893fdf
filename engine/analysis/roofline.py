"""Each stage's place on its device's roofline, derived on load from a report's counted work and stage times.

The roofline places a stage from its FLOPs F, bytes B and measured time t against the device's
peak P (FLOP/s, for the precision the stage ran in) and bandwidth W (B/s):
roofline time = max(F / P, B / W); percent of roofline = roofline time / t; the stage is
"memory" bound when F / B is below the ridge point P / W, else "compute" bound, and "latency"
bound when it reaches under LATENCY_FRACTION of both roofs (launches, syncs, tiny kernels). A stage
with no torch ops is "host" bound. The device's peaks come from the spec table by the report's GPU
name, an NVML estimate from its recorded static facts, or the CPU pseudo-spec.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from engine.report.parts import Environment
from engine.report.schema import Report
from engine.telemetry import specs

#: a stage achieving less than this share of both its compute and its bandwidth roof is "latency" bound
LATENCY_FRACTION = 0.10
BYTES_NOTE = "bytes = inputs + outputs of every op (an upper bound: no cache reuse or fusion)"
BOUNDS = ("compute", "memory", "latency", "host", "unknown")


@dataclass(frozen=True)
class StageRoofline:
    """One stage on the roofline: its work, time, achieved rates and what bounds it (None: unknown)."""

    flops: float
    bytes: float
    ms: float | None
    achieved_tflops: float | None = None
    achieved_gbps: float | None = None
    intensity: float | None = None  # FLOP per byte
    ridge: float | None = None  # the device's FLOP per byte where the roofs meet
    roofline_ms: float | None = None
    pct_of_roofline: float | None = None
    bound: str = "unknown"  # one of BOUNDS
    ops: int = 0
    precision: str = "fp32"
    peak_tflops: float | None = None
    peak_path: str = ""
    peak_note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Cost:
    """The roofline of every counted stage of a report, and the peaks of the device they are placed on."""

    stages: dict[str, StageRoofline]
    spec: specs.GPUSpec
    latency_fraction: float = LATENCY_FRACTION

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON (the shape v1 reports stored as "cost")."""
        return {"stages": {k: v.to_dict() for k, v in self.stages.items()}, "peak": peak_block(self.spec),
                "latency_fraction": self.latency_fraction, "bytes_note": BYTES_NOTE}


def roofline(flops: float, nbytes: float, ms: float | None, peak_flops: float, peak_bytes_per_s: float,
             **details: Any) -> StageRoofline:
    """Place one stage: achieved rates, arithmetic intensity vs ridge, percent of roofline, bound."""
    if flops == 0 and nbytes == 0:
        return StageRoofline(flops, nbytes, ms, bound="host", **details)
    intensity = flops / nbytes if nbytes else math.inf
    known = math.isfinite(peak_flops) and peak_flops > 0 and math.isfinite(peak_bytes_per_s) \
        and peak_bytes_per_s > 0
    ridge = peak_flops / peak_bytes_per_s if known else None
    roof_ms = max(flops / peak_flops, nbytes / peak_bytes_per_s) * 1e3 if known else None
    if not ms or ms <= 0:
        return StageRoofline(flops, nbytes, ms, intensity=intensity, ridge=ridge, roofline_ms=roof_ms, **details)
    seconds = ms / 1e3
    tflops, gbps = flops / seconds / 1e12, nbytes / seconds / 1e9
    if not known or roof_ms is None or ridge is None:
        return StageRoofline(flops, nbytes, ms, achieved_tflops=tflops, achieved_gbps=gbps, intensity=intensity,
                             **details)
    compute_share = flops / seconds / peak_flops
    memory_share = nbytes / seconds / peak_bytes_per_s
    if compute_share < LATENCY_FRACTION and memory_share < LATENCY_FRACTION:
        bound = "latency"
    else:
        bound = "memory" if intensity < ridge else "compute"
    return StageRoofline(flops, nbytes, ms, achieved_tflops=tflops, achieved_gbps=gbps, intensity=intensity,
                         ridge=ridge, roofline_ms=roof_ms, pct_of_roofline=100.0 * roof_ms / ms, bound=bound,
                         **details)


def device_spec(environment: Environment) -> specs.GPUSpec:
    """The peak table entry of a report's device: the table, an NVML estimate, or the CPU pseudo-spec."""
    gpu = environment.gpu
    if gpu is None:
        cores = environment.cpu.physical_cores if environment.cpu else None
        return specs.cpu_spec(cores=cores)
    name = gpu.name or "CPU"
    found = specs.lookup(name)
    if found is not None:
        return found
    nvml = gpu.extra
    return specs.spec_from_nvml(name, gpu.multiprocessor_count, nvml.get("max_sm_clock_mhz"),
                                nvml.get("max_mem_clock_mhz"), nvml.get("memory_bus_width_bits"),
                                gpu.compute_capability, gpu.memory_total_bytes)


def peak_block(spec: specs.GPUSpec) -> dict[str, Any]:
    """A spec's peaks as plain JSON."""
    return {"device": spec.name, "kind": spec.kind, "compute_capability": spec.compute_capability,
            "fp32_tflops": spec.fp32_tflops, "tf32_tflops": spec.tf32_tflops, "fp16_tflops": spec.fp16_tflops,
            "bf16_tflops": spec.bf16_tflops, "int8_tops": spec.int8_tops, "bandwidth_gbps": spec.bandwidth_gbps,
            "bf16_emulated": spec.bf16_emulated, "estimated": spec.estimated, "source": spec.source}


def report_cost(report: Report, spec: specs.GPUSpec | None = None) -> Cost | None:
    """Each counted stage of the report placed on its device's roofline; None when nothing was counted."""
    if not report.work:
        return None
    spec = spec or device_spec(report.environment)
    bandwidth = specs.peak_bandwidth(spec)
    stage_ms = report.stage_ms
    stages = {}
    for name, work in report.work.items():
        precision = work.precision or report.precision
        pk = specs.peak(spec, precision)
        stages[name] = roofline(work.flops, work.bytes, stage_ms.get(name), pk.flops, bandwidth, ops=work.ops,
                                precision=precision, peak_tflops=pk.flops / 1e12, peak_path=pk.path,
                                peak_note=pk.note)
    return Cost(stages=stages, spec=spec)


def format_roofline(cost: Cost) -> str:
    """Aligned text: each counted stage's work, achieved rates, percent of its roofline and bound."""
    from engine.core.units import ms_value

    def num(value: float | None) -> str:
        if value is None:
            return "-"
        return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"

    rows = [("stage", "bound", "precision", "GFLOP", "MB", "ms", "TFLOP/s", "GB/s", "% of roofline")]
    for name, s in cost.stages.items():
        rows.append((name, s.bound, f"{s.precision} {s.peak_path}".strip(), num(s.flops / 1e9), num(s.bytes / 1e6),
                     ms_value(s.ms), num(s.achieved_tflops), num(s.achieved_gbps),
                     f"{s.pct_of_roofline:.0f}" if s.pct_of_roofline is not None else "-"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [f"roofline on {cost.spec.name} ({cost.spec.source}); {BYTES_NOTE}"]
    for r in rows:
        lines.append("  ".join([r[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(r[1:], widths[1:])]).rstrip())
    return "\n".join(lines)
