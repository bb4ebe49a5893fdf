"""Why a row of a diff moved, in words, from the kernel facts of both sides: precision and tensor-core use,
the architecture kernels were built for, emulated bf16, ops left in fp32 under autocast, and sync, copy and
launch counts. Each function returns short clauses ("precision fp32 -> bf16"); ``engine.analysis.diff``
joins them into a row's reason.
"""

from __future__ import annotations

from collections.abc import Mapping

from engine.analysis.diff_side import KindFacts, Side
from engine.capture.summary import Row
from engine.core.units import ms_value

#: a count differs when it moved by at least this share of the larger one, and by at least MIN_COUNT_MOVE
COUNT_MOVE_SHARE = 0.2
MIN_COUNT_MOVE = 2
#: a tensor-core share that moved by this much is a reason
TENSOR_SHARE_MOVE = 0.25
#: the counts a reason names, in the words it uses
COUNT_WORDS = (("syncs", "syncs"), ("copies", "copies"), ("launches", "launches"), ("kernels", "kernels"))
#: compute capability from which bf16 has units (below: emulated through fp32)
BF16_MIN_CC = (8, 0)


def moved(a: float, b: float) -> bool:
    """Whether a count changed enough to name."""
    return abs(a - b) >= max(MIN_COUNT_MOVE, COUNT_MOVE_SHARE * max(abs(a), abs(b)))


def count_changes(a: Mapping[str, float], b: Mapping[str, float], keys: tuple[str, ...] | None = None) -> list[str]:
    """'syncs 325 -> 3' for each count that moved (of ``keys``, default all COUNT_WORDS)."""
    out = []
    for key, word in COUNT_WORDS:
        if keys is not None and key not in keys:
            continue
        if key in a and key in b and moved(float(a[key]), float(b[key])):
            out.append(f"{word} {a[key]:.0f} -> {b[key]:.0f}")
    return out


def row_counts(row: Row | None) -> dict[str, float]:
    """The counts of a capture table row (stage, module)."""
    if row is None:
        return {}
    return {"syncs": row.syncs, "copies": row.copies, "launches": row.launches, "kernels": row.kernels}


def _cc(side: Side) -> str:
    cc = side.capability
    return f"CC {cc[0]}.{cc[1]}" if cc else "the card"


def emulated_bf16(side: Side) -> bool:
    """bf16 on a card without bf16 units (T4, V100, P4): autocast runs it emulated through fp32."""
    if side.precision != "bf16":
        return False
    if side.spec is not None and side.spec.bf16_emulated:
        return True
    cc = side.capability
    return cc is not None and cc < BF16_MIN_CC


def precision_change(a: str | None, b: str | None) -> list[str]:
    return [f"precision {a} -> {b}"] if a and b and a != b else []


def kind_reasons(kind: str, a: Side, b: Side, fa: KindFacts | None, fb: KindFacts | None) -> list[str]:
    """Why one kernel kind (gemm, conv, other) moved."""
    if fa is None and fb is not None:
        return [f"no {kind} kernels in A"]
    if fb is None and fa is not None:
        return [f"no {kind} kernels in B"]
    if fa is None or fb is None:
        return []
    out = precision_change(fa.precision, fb.precision)
    if fa.tensor_core_share is not None and fb.tensor_core_share is not None \
            and abs(fa.tensor_core_share - fb.tensor_core_share) >= TENSOR_SHARE_MOVE:
        out.append(f"tensor cores {fa.tensor_core_share:.0%} -> {fb.tensor_core_share:.0%} of its time")
    for name, side, facts in (("A", a, fa), ("B", b, fb)):
        if facts.legacy_ms > 0:
            arches = "/".join(f"sm{x}" for x in facts.legacy_arches)
            out.append(f"{arches} kernels on a {_cc(side)} card in {name} ({facts.legacy_ms:.3g} ms)")
    for name, side, facts in (("A", a, fa), ("B", b, fb)):
        if emulated_bf16(side) and facts.precision == "bf16":
            out.append(f"bf16 emulated on {side.device_name} in {name} (no bf16 units below CC 8.0)")
    if kind == "other":
        out.extend(fp32_under_autocast(a, b))
    return out


def fp32_under_autocast(a: Side, b: Side) -> list[str]:
    """Ops a side left in fp32 under autocast (grid_sample, pooling), where the other side has none or fewer."""
    out = []
    for name, side, other in (("A", a, b), ("B", b, a)):
        if side.capture is None:
            continue
        mine = sum(x.gpu_ms for x in side.capture.fp32_ops)
        theirs = sum(x.gpu_ms for x in other.capture.fp32_ops) if other.capture is not None else 0.0
        if mine > 0 and mine > theirs:
            ops = ", ".join(dict.fromkeys(x.op.removeprefix("aten::") for x in side.capture.fp32_ops))
            out.append(f"{ops} stay fp32 under {side.precision} in {name} ({mine:.3g} ms)")
    return out


def stage_reasons(stage: str, a: Side, b: Side, a_row: Row | None, b_row: Row | None) -> list[str]:
    """Why a stage moved: its precision, its roofline bound, its sync/copy/launch counts."""
    out = precision_change(a.stage_precision.get(stage), b.stage_precision.get(stage))
    bound_a, bound_b = a.stage_bound.get(stage), b.stage_bound.get(stage)
    if bound_a and bound_b and bound_a != bound_b and "unknown" not in (bound_a, bound_b):
        out.append(f"{bound_a}-bound -> {bound_b}-bound")
    out.extend(count_changes(row_counts(a_row), row_counts(b_row), ("syncs", "copies", "launches")))
    return out


def spec_clause(bound: str | None, precision: str, explained_ms: float) -> str:
    """'compute-bound at fp32: the specs explain +59 ms' (what the device change alone does to a stage)."""
    roof = {"compute": f"compute-bound at {precision}", "memory": "memory-bound",
            "kernel classes": "its kernels on the peaks they run at"}.get(bound or "", "")
    sign = "+" if explained_ms >= 0 else "-"
    return f"{roof + ': ' if roof else ''}the specs explain {sign}{ms_value(abs(explained_ms))} ms"


def total_reasons(a: Side, b: Side) -> list[str]:
    """Why the whole run moved: device, tracker, precision, and the run's counts."""
    out = []
    if a.device_name != b.device_name:
        out.append(f"device {a.device_name} -> {b.device_name}")
    if a.tracker and b.tracker and a.tracker != b.tracker:
        out.append(f"tracker {a.tracker} -> {b.tracker}")
    out.extend(precision_change(a.precision, b.precision))
    if a.capture is not None and b.capture is not None:
        ca, cb = a.capture.counts, b.capture.counts
        out.extend(count_changes({"syncs": ca.syncs, "copies": ca.copies, "launches": ca.launches},
                                 {"syncs": cb.syncs, "copies": cb.copies, "launches": cb.launches}))
    for name, side in (("A", a), ("B", b)):
        if emulated_bf16(side):
            out.append(f"bf16 emulated on {side.device_name} in {name}")
    return out


def joined(clauses: list[str]) -> str:
    return "; ".join(dict.fromkeys(c for c in clauses if c))
