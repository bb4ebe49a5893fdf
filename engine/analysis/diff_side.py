"""One side of a diff, read once: a measured run (a report, a deep capture) or a projection, as the numbers
``engine.analysis.diff`` aligns (typical ms, stage ms, the device's peaks, per-stage precision and bound, the
capture's kernel classes).

Kernel classes are read from the capture summary's ``kernel_class_ms`` labels (``engine.capture.kernels.
KernelClass.label``: "gemm tc bf16 sm75"), grouped by kind (gemm, conv, other) so that two runs whose GEMMs
changed precision still meet in one row.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from engine.analysis.roofline import device_spec, report_cost
from engine.capture.kernels import is_legacy_arch
from engine.capture.summary import CaptureSummary
from engine.report.projection import Projection, is_projection
from engine.report.schema import Report, as_report
from engine.telemetry import specs

log = logging.getLogger(__name__)

#: the kernel kinds a capture's classes group into (engine.capture.kernels)
KINDS = ("gemm", "conv", "other")
#: the pseudo-stage of a run's time outside every stage (the session's loop; the capture's label too)
OUTSIDE = "(outside stages)"
#: the what-if's name for the work counted outside every stage (engine.analysis.whatif.UNSTAGED)
UNSTAGED = "(unstaged)"
#: below this (ms) a run's time outside its stages is rounding, not a row
OUTSIDE_MIN_MS = 1e-6
#: precisions a kernel-class label may carry
LABEL_PRECISIONS = ("fp64", "fp32", "tf32", "fp16", "bf16", "int8", "fp8")


@dataclass(frozen=True)
class KernelLabel:
    """A capture's kernel-class label taken apart: 'gemm tc bf16 sm75' -> gemm, True, bf16, 75."""

    kind: str
    tensor_core: bool | None
    precision: str | None
    arch: int | None

    @classmethod
    def parse(cls, label: str) -> KernelLabel:
        words = label.split()
        kind = words[0] if words else "other"
        tc = True if "tc" in words else False if "simt" in words else None
        precision = next((w for w in words if w in LABEL_PRECISIONS), None)
        arch = next((int(w[2:]) for w in words if w.startswith("sm") and w[2:].isdigit()), None)
        return cls(kind if kind in KINDS else "other", tc, precision, arch)


@dataclass(frozen=True)
class KindFacts:
    """What one side's capture says about one kernel kind: ms per class label, the dominant precision,
    the tensor-core share, the time in kernels built for an older architecture than the card."""

    ms: float
    classes: dict[str, float]
    precision: str | None  # the precision most of its time ran at
    tensor_core_share: float | None  # of its time (None for "other", which has no tensor-core notion)
    legacy_ms: float = 0.0
    legacy_arches: tuple[int, ...] = ()


@dataclass(frozen=True)
class Side:
    """One side of a diff as plain numbers."""

    label: str
    total_ms: float | None
    stage_ms: dict[str, float]
    device_name: str
    spec: specs.GPUSpec | None
    precision: str
    tracker: str
    report: Report | None = None
    projection: Projection | None = None
    capture: CaptureSummary | None = None
    stage_precision: dict[str, str] = field(default_factory=dict)
    stage_bound: dict[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    @property
    def is_projection(self) -> bool:
        return self.projection is not None

    @property
    def capability(self) -> tuple[int, int] | None:
        if self.capture is not None and self.capture.capability and len(self.capture.capability) >= 2:
            return int(self.capture.capability[0]), int(self.capture.capability[1])
        if self.report is not None and self.report.capability:
            return self.report.capability
        return self.spec.compute_capability if self.spec else None

    def kinds(self) -> dict[str, KindFacts]:
        """Per kernel kind, what the capture says (empty without a capture)."""
        if self.capture is None:
            return {}
        return kind_facts(self.capture.kernel_class_ms, self.capability)


def kind_facts(class_ms: Mapping[str, float], capability: tuple[int, int] | None) -> dict[str, KindFacts]:
    """Kernel classes grouped by kind, with the facts a reason is made of."""
    grouped: dict[str, dict[str, float]] = {}
    for label, ms in class_ms.items():
        grouped.setdefault(KernelLabel.parse(label).kind, {})[label] = float(ms)
    out = {}
    for kind, classes in grouped.items():
        total = sum(classes.values())
        by_precision: dict[str, float] = {}
        tc_ms = legacy_ms = 0.0
        legacy: set[int] = set()
        for label, ms in classes.items():
            k = KernelLabel.parse(label)
            by_precision[k.precision or "?"] = by_precision.get(k.precision or "?", 0.0) + ms
            tc_ms += ms if k.tensor_core else 0.0
            if is_legacy_arch(k.arch, capability):
                legacy_ms += ms
                legacy.add(int(k.arch or 0))
        known = {p: ms for p, ms in by_precision.items() if p != "?"}
        precision = max(known, key=lambda p: known[p]) if known else None
        share = tc_ms / total if total > 0 and kind != "other" else None
        out[kind] = KindFacts(total, dict(sorted(classes.items(), key=lambda kv: -kv[1])), precision, share,
                              legacy_ms, tuple(sorted(legacy)))
    return out


def _capture(report: Report) -> tuple[CaptureSummary | None, tuple[str, ...]]:
    part = report.capture_part if report.capture else None
    if part is None:
        return None, ()
    if part.summary is None:
        log.warning("capture of %s not read: %s", report.short_label(), part.read_error)
        return None, (f"the deep capture of {report.short_label()} cannot be read ({part.read_error}): left out",)
    return part.summary, ()


def with_outside(stage_ms: Mapping[str, float], total_ms: float | None) -> dict[str, float]:
    """Stage ms and, when the run took longer than its stages, the rest as OUTSIDE: the rows add up to the run."""
    out = dict(stage_ms)
    rest = (total_ms or 0.0) - sum(out.values())
    if rest > OUTSIDE_MIN_MS and OUTSIDE not in out:
        out[OUTSIDE] = rest
    return out


def from_report(report: Report) -> Side:
    """A measured run (its time outside every stage as the stage OUTSIDE)."""
    cost = report_cost(report)
    capture, notes = _capture(report)
    precision_of = {name: w.precision or report.precision for name, w in report.work.items()}
    bounds = {name: s.bound for name, s in cost.stages.items()} if cost else {}
    return Side(label=report.short_label(), total_ms=report.typical_run_ms,
                stage_ms=with_outside(report.stage_ms, report.typical_run_ms),
                device_name=report.device_name, spec=device_spec(report.environment), precision=report.precision,
                tracker=report.config.tracker, report=report, capture=capture, stage_precision=precision_of,
                stage_bound=bounds, notes=notes)


def from_projection(projection: Projection) -> Side:
    """A run's projection onto another GPU: its projected stage times on the target's peaks (the work counted
    outside every stage, or the time kept there, as the stage OUTSIDE)."""
    stage_ms = {OUTSIDE if k == UNSTAGED else k: v for k, v in projection.stage_ms.items()}
    return Side(label=projection.short_label(), total_ms=projection.projected_ms,
                stage_ms=with_outside(stage_ms, projection.projected_ms),
                device_name=projection.target, spec=specs.lookup(projection.target),
                precision=projection.precision, tracker="", projection=projection,
                stage_precision={OUTSIDE if k == UNSTAGED else k: v.precision
                                 for k, v in projection.stages.items() if v.precision},
                stage_bound={OUTSIDE if k == UNSTAGED else k: v.bound for k, v in projection.stages.items()})


def read_side(value: Report | Projection | Mapping[str, Any]) -> Side:
    """A Report, a Projection, or decoded JSON of either (parsed once, here)."""
    if isinstance(value, Projection):
        return from_projection(value)
    if isinstance(value, Report):
        return from_report(value)
    if is_projection(value):
        return from_projection(Projection.from_dict(value))
    return from_report(as_report(value))
