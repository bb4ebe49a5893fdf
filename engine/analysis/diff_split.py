"""What the two devices' datasheets explain of a diff: B's time as A's work would take on B's peaks.

The explained time is A's run priced on B's device at A's own precision (a precision change is the user's,
not the hardware's, so it stays in the named rest), in the first of these ways that applies:

1. the same device on both sides: the specs explain nothing (ratio 1.0);
2. B is a projection of A (same run label and source device): its own per-stage ratios;
3. A has a cost model and B's GPU is in the spec table: the what-if itself (``engine.analysis.whatif``:
   each stage's roofline time and efficiency carried over; latency- and host-bound stages kept), so a
   measured pair and a run beside its projection read the same way;
4. A has a deep capture: each of its kernel classes scaled by the peaks it runs at (GEMM and conv kernels
   on tensor cores by their precision's peak, on CUDA cores by the fp32 rate, the rest by bandwidth); host
   time and idle gaps do not follow the peaks;
5. otherwise: unknown (None), and the whole delta is the rest.

Per-stage (or per-kernel-kind) explained ms come with the total, so the named deltas are what each row
moved beyond the specs.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from engine.analysis.diff_side import KINDS, OUTSIDE, UNSTAGED, KernelLabel, Side, from_report
from engine.analysis.whatif_by_batch import project_by_batch
from engine.core.errors import UserError
from engine.report.projection import PRICED_BY_KERNELS, ProjectedStage, Projection
from engine.report.schema import Report
from engine.telemetry import specs

#: how a capture's kernel classes are priced, in words
CAPTURE_BASIS = ("each kernel class on the peak it runs at (GEMM/conv on tensor cores at their precision, on "
                 "CUDA cores at fp32, the rest at bandwidth); host time and idle gaps kept")
#: the precisions of a compute-bound part whose peaks the basis names
_PEAK_WORDS = {"fp32": "fp32", "tf32": "tf32", "fp16": "fp16", "bf16": "bf16", "int8": "int8", "fp8": "fp8"}


@dataclass(frozen=True)
class Explained:
    """The specs' share of a diff: the total explained ms, per stage and per kernel kind (where known)."""

    ratio: float | None  # (A + explained) / A; None when the specs cannot be placed
    ms: float
    basis: str
    by_stage: dict[str, float] = field(default_factory=dict)  # stage -> explained ms
    by_kind: dict[str, float] = field(default_factory=dict)  # kernel kind -> explained ms (a capture basis)
    how: str = "none"  # same_device | projection | whatif | capture | none
    notes: tuple[str, ...] = ()
    peaks: str = ""  # the peaks compared, in words ("fp32 peak 67 vs 8.1 TF/s, bandwidth 4.8 vs 0.32 TB/s")


def same_device(a: Side, b: Side) -> bool:
    if a.spec is not None and b.spec is not None:
        return a.spec.name == b.spec.name
    return specs.normalize_name(a.device_name) == specs.normalize_name(b.device_name)


def _tf(flops: float) -> str:
    return f"{flops / 1e12:.3g}"


def _tb(bytes_per_s: float) -> str:
    return f"{bytes_per_s / 1e12:.2g}"


def peaks_words(a: specs.GPUSpec, b: specs.GPUSpec, precisions: list[str], memory: bool) -> str:
    """'fp32 peak 67 vs 8.1 TF/s, bandwidth 4.8 vs 0.32 TB/s' for the precisions and roofs that matter."""
    parts = []
    for p in dict.fromkeys(precisions):
        pa, pb = specs.peak(a, p), specs.peak(b, p)
        if math.isfinite(pa.flops) and math.isfinite(pb.flops):
            via = f", {pb.path} on {b.name}" if pb.path in ("emulated", "fp32 rate") else ""
            parts.append(f"{_PEAK_WORDS.get(p, p)} peak {_tf(pa.flops)} vs {_tf(pb.flops)} TF/s{via}")
    wa, wb = specs.peak_bandwidth(a), specs.peak_bandwidth(b)
    if memory and math.isfinite(wa) and math.isfinite(wb):
        parts.append(f"bandwidth {_tb(wa)} vs {_tb(wb)} TB/s")
    return ", ".join(parts)


def _ratio(a_ms: float | None, explained: float) -> float | None:
    return (a_ms + explained) / a_ms if a_ms else None


def _from_projection(a: Side, p: Projection, how: str, b_spec: specs.GPUSpec | None) -> Explained:
    """A's stages scaled by the projection's per-stage ratios (projected over observed)."""
    by_stage: dict[str, float] = {}
    for name, a_ms in a.stage_ms.items():
        row = p.stages.get(UNSTAGED if name == OUTSIDE else name)
        ratio = row.ratio if row is not None else None  # no row: the time outside stages, kept
        by_stage[name] = a_ms * (ratio - 1.0) if ratio is not None else 0.0
    total = sum(by_stage.values())
    precisions = sorted({r.precision for r in p.stages.values() if r.bound.startswith("compute") and r.precision})
    memory = any("memory" in r.bound for r in p.stages.values())
    src = specs.lookup(p.source) or a.spec
    words = peaks_words(src, b_spec, precisions, memory) if src and b_spec else ""
    source = "the projection's own stages" if how == "projection" else "the what-if (engine.analysis.whatif)"
    basis = f"{source}: each stage's roofline on both devices, latency- and host-bound time kept"
    if p.priced_by == PRICED_BY_KERNELS:
        words = p.peaks
        basis = f"{source}: A's deep capture, {CAPTURE_BASIS}"
    return Explained(_ratio(a.total_ms, total), total, basis, by_stage, how=how, peaks=words)


def _kind_ratio(label: KernelLabel, a: specs.GPUSpec, b: specs.GPUSpec) -> tuple[float, str | None, bool]:
    """B/A time of one kernel class on the two devices' peaks: (ratio, precision whose peak, memory?)."""
    if label.kind in ("gemm", "conv"):
        precision = label.precision if label.tensor_core and label.precision in specs.PRECISIONS else "fp32"
        pa, pb = specs.peak_flops(a, precision), specs.peak_flops(b, precision)
        if math.isfinite(pa) and math.isfinite(pb) and pb > 0:
            return pa / pb, precision, False
    wa, wb = specs.peak_bandwidth(a), specs.peak_bandwidth(b)
    if math.isfinite(wa) and math.isfinite(wb) and wb > 0:
        return wa / wb, None, True
    return 1.0, None, False


def _from_capture(a: Side, b_spec: specs.GPUSpec) -> Explained:
    assert a.capture is not None and a.spec is not None
    by_kind: dict[str, float] = {}
    precisions: list[str] = []
    memory = False
    for text, ms in a.capture.kernel_class_ms.items():
        label = KernelLabel.parse(text)
        ratio, precision, mem = _kind_ratio(label, a.spec, b_spec)
        by_kind[label.kind] = by_kind.get(label.kind, 0.0) + ms * (ratio - 1.0)
        if precision:
            precisions.append(precision)
        memory = memory or mem
    total = sum(by_kind.values())
    # per stage: the explained kernel time shared by each stage's kernel time in the capture
    kernel_by_stage = {r.stage: r.kernel_ms for r in a.capture.stages if r.kernel_ms > 0}
    kernel_sum = sum(kernel_by_stage.values())
    by_stage = {s: total * ms / kernel_sum for s, ms in kernel_by_stage.items() if s in a.stage_ms} \
        if kernel_sum else {}
    words = peaks_words(a.spec, b_spec, sorted(set(precisions), key=precisions.index), memory)
    basis = f"A's deep capture: {CAPTURE_BASIS}"
    return Explained(_ratio(a.total_ms, total), total, basis, by_stage,
                     {k: by_kind.get(k, 0.0) for k in KINDS if k in by_kind}, how="capture", peaks=words)


def explain(a: Side, b: Side) -> Explained:
    """What B's device explains of B - A (see the module docstring for the order of the ways)."""
    if same_device(a, b):
        name = b.spec.name if b.spec else b.device_name
        return Explained(1.0, 0.0, f"same device ({name}): the specs explain nothing",
                         {s: 0.0 for s in a.stage_ms}, {k: 0.0 for k in KINDS}, how="same_device")
    notes: list[str] = []
    p = b.projection
    if p is not None and a.report is not None and p.report == a.label and a.spec is not None \
            and specs.lookup(p.source) is not None and specs.lookup(p.source) == specs.lookup(a.spec.name):
        return _from_projection(a, p, "projection", b.spec)
    if a.report is not None and a.report.work and b.spec is not None and specs.lookup(b.spec.name) is not None:
        try:
            projection = Projection.from_dict(project_by_batch(a.report, b.spec.name))
        except UserError as exc:
            notes.append(f"the what-if cannot price A on {b.spec.name}: {exc.message}")
        else:
            return _from_projection(a, projection, "whatif", b.spec)
    if a.capture is not None and a.capture.kernel_class_ms and a.spec is not None and b.spec is not None:
        found = _from_capture(a, b.spec)
        return dataclasses.replace(found, notes=tuple(notes))
    if b.spec is None:
        why = f"{b.device_name} is not in the spec table"
    elif a.spec is None:
        why = f"{a.device_name} is not in the spec table"
    else:
        why = "A has neither a cost model (FLOPs and bytes per stage) nor a deep capture"
    notes.append(f"the specs cannot be placed: {why}; the whole delta is left to the rows")
    return Explained(None, 0.0, why, how="none", notes=tuple(notes))


def capture_projection(report: Report, target: specs.GPUSpec) -> Projection:
    """A run without a cost model projected onto ``target`` from its deep capture's kernel classes (way 4 above),
    as a Projection that ``diff`` reads like the what-if's; UserError without a capture to price."""
    side = from_report(report)
    if side.capture is None or not side.capture.kernel_class_ms or side.spec is None:
        raise UserError(f"report {report.short_label()!r} has neither a cost model (FLOPs and bytes per stage) nor "
                        "a deep capture with kernel classes, so it cannot be projected",
                        "count it: trackscope compare REPORT --what-if GPU, or record it with trackscope bench "
                        "(--deep for a capture)")
    ex = _from_capture(side, target)
    stages: dict[str, ProjectedStage] = {}
    outside = side.stage_ms.get(OUTSIDE, 0.0)
    for name, ms in side.stage_ms.items():
        moved = ex.by_stage.get(name, 0.0)
        if name == OUTSIDE and not moved:
            continue  # kept, as the what-if keeps the time outside every stage
        stages[UNSTAGED if name == OUTSIDE else name] = ProjectedStage(
            observed_ms=ms, projected_ms=ms + moved, bound="kernel classes" if moved else "unknown",
            precision=side.stage_precision.get(name, report.precision), kept=not moved)
    placed = UNSTAGED in stages
    projected = sum(s.projected_ms or 0.0 for s in stages.values()) + (0.0 if placed else outside)
    assumptions = (f"no cost model: priced from the deep capture's kernel classes ({ex.peaks})",
                   "kernel times as captured under the profiler, host time and GPU idle gaps kept as observed; "
                   "overlapping streams count each kernel in full")
    return Projection(report=side.label, source=side.spec.name, target=target.name, precision=report.precision,
                      stages=stages, observed_ms=side.total_ms, projected_ms=projected,
                      outside_stages_ms=outside, assumptions=assumptions, priced_by=PRICED_BY_KERNELS,
                      peaks=ex.peaks)
