"""A quantised mode that loses: int8/fp8 slower than the half-precision mode of the same configuration.

Quantising small matmuls costs scale computation, quantisation, padding and a rescale pass per GEMM; on
a fast card that overhead can exceed what the int8/fp8 GEMM saves (measured on the H200: CorrTrack's
cost volume 0.86 ms in bf16, 3.04 ms in int8 at 1024 queries). Judged across the reports of a sweep:
the same tracker, video, device, frames and points per batch, in int8/fp8 and in fp16/bf16.
"""

from __future__ import annotations

from collections.abc import Sequence

from engine.analysis.facts import Finding
from engine.core.precision import QUANT_MODES
from engine.report.schema import Report

#: the float modes a quantised one must beat to be worth it
HALF_MODES = ("bf16", "fp16")
#: slower than the best half mode by this factor, and by this many ms, is a finding
SLOWER_RATIO = 1.05
SLOWER_MIN_MS = 0.5
#: stages named in the finding: those that lost at least this many ms
STAGE_LOSS_MIN_MS = 0.1


def _key(report: Report) -> tuple:
    c = report.config
    return (c.tracker, c.points_per_batch, c.frames_per_batch, report.device, report.video.path or report.video.name,
            report.totals.num_points, report.totals.num_frames)


def rule_quantised_slower(reports: Sequence[Report]) -> list[Finding]:
    """int8/fp8 runs slower than bf16/fp16 of the same configuration: which stages lost, by how much."""
    half: dict[tuple, Report] = {}
    for r in reports:
        ms = r.typical_run_ms
        if r.precision in HALF_MODES and ms is not None:
            best = half.get(_key(r))
            if best is None or ms < (best.typical_run_ms or float("inf")):
                half[_key(r)] = r
    out = []
    for r in reports:
        base = half.get(_key(r))
        ms = r.typical_run_ms
        if r.precision not in QUANT_MODES or base is None or ms is None or base.typical_run_ms is None:
            continue
        base_ms = base.typical_run_ms
        if ms < SLOWER_RATIO * base_ms or ms - base_ms < SLOWER_MIN_MS:
            continue
        q_stages, b_stages = r.stage_ms, base.stage_ms
        losses = {s: q_stages[s] - b_stages.get(s, 0.0) for s in q_stages
                  if q_stages[s] - b_stages.get(s, 0.0) >= STAGE_LOSS_MIN_MS}
        worst = max(losses, key=lambda s: losses[s]) if losses else None
        named = ", ".join(f"{s} +{d:.2f} ms" for s, d in sorted(losses.items(), key=lambda kv: -kv[1])[:3])
        share = (ms - base_ms) / ms
        out.append(Finding(
            "quantised_slower", "warning" if share >= 0.05 else "info",
            f"{r.precision} runs {ms / base_ms:.2f}x slower than {base.precision} ({ms:.2f} vs {base_ms:.2f} ms)"
            + (f": {named}" if named else ""),
            {"ms": ms, "half_ms": base_ms, "ratio": ms / base_ms, "share": share,
             **{f"{s}_extra_ms": d for s, d in losses.items()}},
            f"quantisation overhead (scales, quantise, pad, rescale per GEMM) exceeds what the {r.precision} "
            f"GEMMs save at these sizes: keep {base.precision}, or quantise only the largest matmuls",
            stage=worst, label=r.label or None, stake_ms=ms - base_ms))
    return out
