"""Capture rules over the kernels themselves: layout transposes and copies, launches, fusable chains,
old-architecture kernels and cuDNN's algorithm choice.

The kernel groups (``CaptureSummary.evidence.kernel_groups``) come with the user's call site; the
summary's kernel table (``top_kernels``, ``kernel_class_ms``) serves the rules that predate the evidence.
Precision rules (float64, fp32 in reduced runs, TF32, tensor-core shapes) are in ``rules_precision``.
"""

from __future__ import annotations

from typing import Any

from engine.capture.attribution import OUTSIDE_STAGES
from engine.capture.evidence import GemmShape, KernelGroup
from engine.capture.finding import (
    FIX_GAIN,
    REPORT_SHARE,
    Context,
    Finding,
    at,
    by_site,
    device_bandwidth_gbps,
    finding,
    gpu_share_of,
    share_of,
    size,
    user_rows,
    where,
)
from engine.capture.kernels import generation
from engine.capture.settings_ab import CUDNN_AB_OVERRIDDEN, CUDNN_AB_RUNS, cudnn_ab, cudnn_ab_runs, separated
from engine.capture.summary import ADAPTER_STAGES, CaptureSummary

LAUNCH_COST_MS = 0.01  # host time per kernel launch from Python (measured ~10-15 us on the H200)
LAUNCHES_PER_MS = 10.0  # launch rate above which a run with an idle GPU is launch-bound
LAUNCH_BUSY_MAX = 0.5  # kernels busy under this share of the wall
#: CPU runs: an eager op's own host cost (dispatch, allocation, the Python call) is ~5-10 us; the low end, since
#: the profiler counts nested ops too (an aten op calling another counts twice)
CPU_OP_OVERHEAD_MS = 0.005
CPU_TINY_OP_MS = 0.02  # a cell whose wall per op is under this does little work per op: overhead-bound
CPU_TINY_OPS_MIN = 1000  # ops per run in such cells before a CPU run reads as launch-bound
#: a fused chain still reads its inputs and writes its output once: about two of the chain's ops' traffic
FUSED_PASSES = 2
#: a GPU chain moving data at this share of the DRAM peak or more is memory-bound: fusing saves its passes over
#: memory; below it the kernels are too small for their traffic to matter (their launches are
#: launch_bound_capture's), so the finding stays info. A CPU chain over large tensors (the evidence keeps only
#: those) counts as memory-bound: the estimated default peak is too rough to judge it by
MEMORY_BOUND_OF_PEAK = 0.3
#: cudnn.benchmark picks the fastest algorithm per shape; the capture measures what it gains (the tracker rerun
#: with it on against off). Where that A/B is missing (older captures, compiled code, a tracker that sets the flag
#: itself), an assumed tenth of the conv time (NVIDIA's and PyTorch's guides report 0-30 % on fixed-shape
#: convnets; on the H200 the session-18 sweep of 32 fixed-shape convs read -1.7 % to +8 %), capped at info
CUDNN_BENCHMARK_GAIN = 0.1
CONV_MOST_OF_RUN = 0.5  # below this share of the run in convs, cudnn_benchmark_off stays at info


def _groups(s: CaptureSummary, kind: str) -> list[KernelGroup]:
    return [g for g in user_rows(s.evidence.kernel_groups) if g.kind == kind]


def _names(groups: list[KernelGroup], n: int = 3) -> list[str]:
    seen: list[str] = []
    for g in sorted(groups, key=lambda g: -g.ms):
        seen.extend(name for name in g.names if name not in seen)
    return seen[:n]


def _group_findings(s: CaptureSummary, ctx: Context, kind: str, rule: str, saved: float, title: str,
                    suggestion: str) -> list[Finding]:
    """One finding per call site of a kernel group ``kind``; ``saved``: share of its time the fix saves."""
    out = []
    for site, groups in by_site(_groups(s, kind)).items():
        ms, count = sum(g.ms for g in groups), sum(g.count for g in groups)
        share = gpu_share_of(s, saved * ms)
        if share < REPORT_SHARE:
            continue
        top = max(groups, key=lambda g: g.ms)
        names = _names(groups)
        out.append(finding(rule, share, title.format(count=count, ms=ms, names=", ".join(names) or kind,
                                                     site=at(site), where=where(top.module, top.stage)),
                           {"kernels": count, "ms": ms, "names": names, "bytes": sum(g.bytes for g in groups)},
                           suggestion, typical_wall_ms=ctx["typical"], stage=top.stage, module=top.module,
                           call_site=site))
    return out


def layout_transpose(s: CaptureSummary, ctx: Context) -> list[Finding]:
    """Layout transposes (nchwToNhwc / nhwcToNchw, permute copies) around convs: mixed memory formats."""
    out = []
    for f in _group_findings(
            s, ctx, "layout_transpose", "layout_transpose", 1.0,
            "{count} memory-layout transposes ({ms:.2f} ms: {names}){site}{where}",
            "use one memory format for the model and its input: model.to(memory_format=torch.channels_last) "
            "together with x.contiguous(memory_format=torch.channels_last) once at the input (or neither), so "
            "cuDNN does not convert before and after every conv"):
        count = f["evidence"]["kernels"]
        if count > 1:  # converting the input once still costs one transpose: the rest is what is saved
            f = finding(f["rule"], f["evidence"]["share"] * (count - 1) / count, f["title"],
                        {k: v for k, v in f["evidence"].items() if k not in ("share", "ms_at_stake")},
                        f["suggestion"], typical_wall_ms=ctx["typical"], stage=f["stage"], module=f["module"],
                        call_site=f["call_site"])
            out.append(f)
    return [f for f in out if f["evidence"]["share"] >= REPORT_SHARE]


def contiguous_copy(s: CaptureSummary, ctx: Context) -> list[Finding]:
    """Copy kernels from .contiguous() / .clone() / copy_ on the hot path."""
    return _group_findings(
        s, ctx, "contiguous_copy", "contiguous_copy", FIX_GAIN,
        "{count} copy kernels on the hot path ({ms:.2f} ms: {names}){site}{where}",
        "avoid the copy: keep tensors in the layout the next op reads (transpose/permute the weights once, "
        "not the activations per call), drop .contiguous()/.clone() where the op accepts strided input, "
        "and write into a preallocated output (out=) instead of copy_")


def launch_bound_capture(s: CaptureSummary, ctx: Context) -> list[Finding]:
    """Many short launches keep the GPU idle (GPU runs); many tiny ops dominate the host (CPU runs)."""
    if not s.wall_ms:
        return []
    if not s.has_gpu:
        return _tiny_ops_on_the_cpu(s, ctx)
    if not s.counts.launches:
        return []
    busy = s.kernel_ms / s.wall_ms
    rate = s.counts.launches / s.wall_ms
    mean_us = 1e3 * s.kernel_ms / s.counts.kernels if s.counts.kernels else 0.0
    if busy >= LAUNCH_BUSY_MAX or rate < LAUNCHES_PER_MS:
        return []
    host_idle = s.gpu_idle_ms - s.idle_by_cause_ms.get("sync", 0.0) - s.idle_by_cause_ms.get("copy", 0.0)
    at_stake = min(max(0.0, host_idle), s.counts.launches * LAUNCH_COST_MS)
    ctx["launch_at_stake"] = at_stake
    tracker_cells = [c for c in s.cells if c.stage not in ADAPTER_STAGES]
    top = max(tracker_cells, key=lambda c: c.launches) if tracker_cells else None
    return [finding("launch_bound_capture", at_stake / s.wall_ms,
                    f"launch-bound: {s.counts.launches} launches, kernels busy {100 * busy:.0f} % of the run"
                    + (f" (most in {top.module})" if top else ""),
                    {"launches": s.counts.launches, "kernels": s.counts.kernels, "mean_kernel_us": mean_us,
                     "kernel_busy": busy, "launches_per_ms": rate, "launches_x_mean_kernel_ms":
                     s.counts.launches * mean_us / 1e3, "wall_ms": s.wall_ms},
                    "fuse the small ops (vectorise the Python loop over points/frames, torch.compile the loop "
                    "body) or capture the step in a CUDA graph",
                    typical_wall_ms=ctx["typical"], stage=top.stage if top else None,
                    module=top.module if top else None)]


def _tiny_ops_on_the_cpu(s: CaptureSummary, ctx: Context) -> list[Finding]:
    cells = [c for c in s.cells if c.stage not in ADAPTER_STAGES and c.module != OUTSIDE_STAGES
             and c.cpu_ops and c.wall_ms / c.cpu_ops < CPU_TINY_OP_MS]
    ops = sum(c.cpu_ops for c in cells)
    if ops < CPU_TINY_OPS_MIN:
        return []
    wall = sum(c.wall_ms for c in cells)
    at_stake = min(wall, ops * CPU_OP_OVERHEAD_MS)
    top = max(cells, key=lambda c: c.cpu_ops)
    mean_us = 1e3 * wall / ops
    return [finding("launch_bound_capture", share_of(s, at_stake),
                    f"overhead-bound on the CPU: {ops} ops averaging {mean_us:.1f} us each "
                    f"(most in {top.module})",
                    {"cpu_ops": ops, "mean_op_us": mean_us, "ops_wall_ms": wall,
                     "op_overhead_ms": CPU_OP_OVERHEAD_MS, "wall_ms": s.wall_ms},
                    "vectorise the Python loop (one op over all points/frames instead of one per item) or "
                    "torch.compile the loop body: each eager op costs microseconds of dispatch whatever its size",
                    typical_wall_ms=ctx["typical"], stage=top.stage, module=top.module)]


def elementwise_chain(s: CaptureSummary, ctx: Context) -> list[Finding]:
    """Chains of elementwise kernels over large tensors: each reads and writes DRAM, a fused one once."""
    peak, source = device_bandwidth_gbps(s, ctx)
    out = []
    for site, groups in by_site(_groups(s, "elementwise_chain")).items():
        ms, nbytes = sum(g.ms for g in groups), sum(g.bytes for g in groups)
        length = max(g.length for g in groups)
        if length <= FUSED_PASSES or ms <= 0:
            continue
        saved = 1.0 - FUSED_PASSES / length
        share = gpu_share_of(s, saved * ms)
        if share < REPORT_SHARE:
            continue
        if nbytes <= 0:
            continue  # no op shapes behind the kernels (a CUDA graph replay): the traffic is unknown
        achieved = nbytes / ms / 1e6
        memory_bound = achieved >= MEMORY_BOUND_OF_PEAK * peak or not s.has_gpu
        bound = "memory-bound" if memory_bound else "latency-bound"
        top = max(groups, key=lambda g: g.ms)
        out.append(finding(
            "elementwise_chain", share,
            f"chain of {length} elementwise {'kernels' if s.has_gpu else 'ops'}{at(site)}: {ms:.2f} ms moving "
            f"{size(nbytes)} at {achieved:.0f} GB/s ({bound}; peak {peak:.0f} GB/s)"
            f"{where(top.module, top.stage)}",
            {"kernels": sum(g.count for g in groups), "chain_length": length, "ms": ms, "bytes": nbytes,
             "achieved_gbps": achieved, "peak_gbps": peak, "peak_source": source, "bound": bound,
             "names": _names(groups)},
            f"fuse the chain: torch.compile the function{at(site)} (Inductor emits one kernel that reads the "
            "inputs and writes the result once), or rewrite it with in-place / fused ops (torch.addcmul, "
            "torch.lerp, F.gelu)",
            typical_wall_ms=ctx["typical"], stage=top.stage, module=top.module, call_site=site,
            most_severe="critical" if memory_bound else "info"))
    return out


def legacy_arch_kernels(s: CaptureSummary, ctx: Context) -> list[Finding]:
    """Tensor-core kernels built for an older generation than the card (an old library path)."""
    cap = ctx["capability"]
    rows = [k for k in s.legacy_kernels if k.kind in ("gemm", "conv") and k.tensor_core
            and k.stage not in ADAPTER_STAGES]
    if not cap or not rows or not s.wall_ms:
        return []
    ms = sum(k.total_ms for k in rows)
    share = gpu_share_of(s, FIX_GAIN * ms)
    if share < REPORT_SHARE:
        return []
    top = max(rows, key=lambda k: k.total_ms)
    return [finding("legacy_arch_kernels", share,
                    f"{ms:.1f} ms of tensor-core kernels built for sm{top.arch} on a CC {cap[0]}.{cap[1]} card",
                    {"ms": ms, "kernels": len(rows), "kernel_arch": top.arch or 0,
                     "card_generation": generation(cap[0] * 10 + cap[1])},
                    "these come from an old library path (CUTLASS/cuBLAS heuristics for this shape or dtype): pad "
                    "dimensions to multiples of 16, try another dtype, or update torch/cuBLAS",
                    typical_wall_ms=ctx["typical"], stage=top.stage, module=top.module)]


def cudnn_benchmark_off(s: CaptureSummary, ctx: Context) -> list[Finding]:
    """Fixed-shape convs with cudnn.benchmark off: cuDNN's heuristic algorithm, not the measured fastest.

    Measured where the capture ran the tracker again with benchmark on against off (engine.capture.settings_ab):
    the saving is at stake, its severity its share; no saving is an info saying so. Without that A/B (an older
    capture, compiled code in the process, a tracker that switches the flag itself) an assumed share of the conv
    time, capped at info unless convs are most of the run.
    """
    if not s.has_gpu or not s.wall_ms or s.evidence.settings.get("cudnn_benchmark") != "False":
        return []
    shapes = [g for g in user_rows(s.evidence.gemm_shapes) if "conv" in g.op]
    conv_ms = sum(ms for label, ms in s.kernel_class_ms.items() if label.split()[:1] == ["conv"])
    if not shapes or conv_ms <= 0:
        return []
    conv_share = gpu_share_of(s, conv_ms)
    top = max(shapes, key=lambda g: g.ms)
    evidence = {"conv_ms": conv_ms, "conv_share": conv_share, "conv_shapes": len(shapes),
                "calls": sum(g.count for g in shapes)}
    measured = cudnn_ab(s.evidence.settings)
    if measured is not None:
        return _cudnn_measured(s, ctx, measured, top, evidence, CUDNN_BENCHMARK_GAIN * conv_share >= REPORT_SHARE)
    if CUDNN_BENCHMARK_GAIN * conv_share < REPORT_SHARE:
        return []
    overridden = s.evidence.settings.get(CUDNN_AB_OVERRIDDEN) == "True"
    why = ("the tracker switched it off again during the capture's A/B, so it was not measured"
           if overridden else "not measured in this capture")
    return [finding("cudnn_benchmark_off", CUDNN_BENCHMARK_GAIN * conv_share,
                    f"convolutions take {conv_ms:.1f} ms ({100 * conv_share:.0f} % of the run) with "
                    f"torch.backends.cudnn.benchmark off ({len(shapes)} conv shapes{at(top.site)}); the gain of "
                    f"turning it on is assumed, {why}",
                    {**evidence, "assumed_gain": CUDNN_BENCHMARK_GAIN, "measured": False,
                     "tracker_sets_flag": overridden},
                    "set torch.backends.cudnn.benchmark = True once at start-up (the shapes are fixed across "
                    "runs, so the search runs once per shape); the gain is unknown until tried: the estimate "
                    f"here is an assumed {100 * CUDNN_BENCHMARK_GAIN:.0f} % of the conv time"
                    + (" (the tracker sets the flag itself: remove that line)" if overridden else ""),
                    typical_wall_ms=ctx["typical"], module=top.module, call_site=top.site,
                    most_severe="critical" if conv_share >= CONV_MOST_OF_RUN else "info")]


def _cudnn_measured(s: CaptureSummary, ctx: Context, measured: tuple[float, float], top: GemmShape,
                    evidence: dict[str, Any], worth_saying: bool) -> list[Finding]:
    """The finding from the capture's benchmark on/off A/B: what turning it on saved, as a share of the run; no
    saving is an info where the convs are a share the assumption would have named (``worth_saying``), else
    nothing (every tracker with a few convs would get the line)."""
    on, off = measured
    # a saving counts where the two ways' runs separate beyond their jitter, and never beyond the run's conv
    # time: only the convs' algorithms change (a gap above it is the two threads' noise, not cuDNN)
    runs_each = cudnn_ab_runs(s.evidence.settings)
    clear = runs_each is None or separated(runs_each[0], runs_each[1])
    saved = min(off - on, evidence["conv_ms"]) if clear else 0.0
    share = saved / off if off > 0 else 0.0  # of the unprofiled run it was measured on
    runs = s.evidence.settings.get(CUDNN_AB_RUNS, "")
    evidence = {**evidence, "run_ms_benchmark_on": on, "run_ms_benchmark_off": off, "ab_runs": runs,
                "measured": True, "beyond_jitter": clear, "capped_at_conv_ms": clear and off - on > evidence["conv_ms"]}
    if runs_each is not None:
        evidence.update({"runs_ms_benchmark_on": " ".join(f"{ms:.2f}" for ms in runs_each[0]),
                         "runs_ms_benchmark_off": " ".join(f"{ms:.2f}" for ms in runs_each[1])})
    suggestion = ("set torch.backends.cudnn.benchmark = True once at start-up (the shapes are fixed across runs, "
                  "so the search runs once per shape, in the first call)")
    if share < REPORT_SHARE and not worth_saying:
        return []
    if share < REPORT_SHARE:
        gain = ("no gain beyond the runs' jitter" if not clear else "no gain" if saved <= 0
                else f"a gain of {100 * share:.1f} % of the run, under the 1 % a finding needs")
        return [finding("cudnn_benchmark_off", 0.0,
                        f"torch.backends.cudnn.benchmark off, measured: on {on:.2f} ms vs {off:.2f} ms off "
                        f"(medians of {runs} each): {gain} on this card ({evidence['conv_shapes']} conv shapes, "
                        f"{evidence['conv_ms']:.1f} ms of convs{at(top.site)})",
                        evidence, "nothing to change here: cuDNN's heuristics already pick what benchmarking picks "
                        "for these shapes on this card (another card or cuDNN version may differ)",
                        typical_wall_ms=ctx["typical"], module=top.module, call_site=top.site)]
    capped = (f", counted up to the {evidence['conv_ms']:.2f} ms the convs take" if evidence["capped_at_conv_ms"]
              else "")
    return [finding("cudnn_benchmark_off", share,
                    f"cudnn.benchmark on: {on:.2f} ms vs {off:.2f} ms off, {100 * share:.1f} % of the run "
                    f"(medians of {runs} each{capped}; {evidence['conv_shapes']} conv shapes, "
                    f"{evidence['conv_ms']:.1f} ms of convs{at(top.site)})",
                    evidence, suggestion, typical_wall_ms=ctx["typical"], module=top.module, call_site=top.site)]
