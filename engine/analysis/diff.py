"""`trackscope diff A B`: two runs (reports, deep captures, fleet entries, or a run and its projection) aligned
by stage, module, function and kernel class; the deltas ranked by time, each with its reason from the kernel
facts; the total ratio split into what the two devices' specs explain and the named rest (a waterfall).

This module's types are the model that the CLI verb, the gate and the app's diff view read. (The interface
was fixed first so the engine and the app could be built side by side; ``diff_runs`` fills it.)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: the levels a row is aligned at, coarse to fine
LEVELS = ("total", "stage", "module", "function", "kernel_class")
#: kinds of waterfall step: where it starts (A's time), what the specs explain, a named delta, the unnamed
#: rest, where it ends (B's time)
STEP_KINDS = ("start", "spec", "named", "rest", "end")


@dataclass(frozen=True)
class DiffRow:
    """One aligned item of the two runs: per-run milliseconds on each side (None: absent on that side)."""

    level: str  # one of LEVELS
    name: str  # "cost_volume", "backbone.conv1", "model.py:88 bilinear_sampler", "gemm fp32 (SIMT)"
    a_ms: float | None
    b_ms: float | None
    reason: str = ""  # why it moved, from the kernel facts ("fp32 SIMT GEMMs on A, bf16 tensor cores on B")
    evidence: dict[str, Any] = field(default_factory=dict)  # plain JSON: counts, kernels, precisions, syncs
    parent: str = ""  # the name of the coarser row it belongs to ("" at the top)

    @property
    def delta_ms(self) -> float:
        """B minus A (a missing side counts 0)."""
        return (self.b_ms or 0.0) - (self.a_ms or 0.0)

    @property
    def ratio(self) -> float | None:
        """B over A; None when either side is missing or zero."""
        if not self.a_ms or self.b_ms is None:
            return None
        return self.b_ms / self.a_ms


@dataclass(frozen=True)
class WaterfallStep:
    """One bar of the waterfall from A's time to B's: its kind (STEP_KINDS), label and ms (signed for deltas)."""

    kind: str
    label: str
    ms: float


@dataclass(frozen=True)
class SpecSplit:
    """How much of B/A the two devices' datasheets explain, and what is left to the named deltas."""

    total_ratio: float | None  # B's typical run over A's
    spec_ratio: float | None  # what peak FLOP/s and bandwidth, per precision, explain (None: same device/unknown)
    explained_ms: float  # the part of the delta the specs explain
    rest_ms: float  # the part they do not
    basis: str = ""  # how spec_ratio was formed, in words
    steps: tuple[WaterfallStep, ...] = ()


@dataclass(frozen=True)
class Diff:
    """Two runs side by side: the labels, their typical run ms, the aligned rows ranked by |delta|, the split."""

    a_label: str
    b_label: str
    a_ms: float | None
    b_ms: float | None
    rows: tuple[DiffRow, ...]
    split: SpecSplit
    a_is_projection: bool = False
    b_is_projection: bool = False
    notes: tuple[str, ...] = ()

    def top(self, n: int = 10, level: str | None = None) -> list[DiffRow]:
        """The ``n`` rows with the largest |delta| (of one level when given)."""
        rows = [r for r in self.rows if level is None or r.level == level]
        return sorted(rows, key=lambda r: -abs(r.delta_ms))[:n]
