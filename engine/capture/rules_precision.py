"""Capture rules for the precision the kernels compute in: float64, float32 left in a reduced-precision
run, TF32 switched off, GEMM/conv shapes tensor cores cannot take, CUDA-core GEMMs, emulated bf16.

One problem is named once: in tf32 mode an fp32 CUDA-core GEMM/conv is ``tf32_off``'s; under autocast an
fp32 GEMM kernel group is ``fp32_under_autocast``'s; ``no_tensor_cores`` keeps the rest (depthwise convs,
gemv and small-N kernels, reduced-precision kernels on CUDA cores).
"""

from __future__ import annotations

import re
from typing import Any

from engine.capture.finding import (
    FIX_GAIN,
    REPORT_SHARE,
    Context,
    Finding,
    at,
    by_site,
    finding,
    gpu_share_of,
    user_rows,
    where,
)
from engine.capture.summary import ADAPTER_STAGES, AUTOCAST_PRECISIONS, CaptureSummary, KernelRow

TENSOR_CORE_MODES = ("tf32", "fp16", "bf16")
#: elements a tensor-core tile dimension is a multiple of, by the precision a GEMM computes in (as the gatherer
#: judges misalignment, engine.capture.gather), for the title
TENSOR_CORE_GRANULE = {"fp16": 8, "bf16": 8, "tf32": 4, "int8": 16, "fp8": 16}
#: CUDA-core kernels that no TF32 setting changes: depthwise convs, matrix-vector and tiny-N GEMMs
NEVER_TENSOR_CORE = re.compile(r"depthwise|gemv|gemmSN|gemmk1|dot_kernel", re.I)
#: GEMM/conv aten ops (fp32_ops rows of these are the fp32_gemm kernel groups' when both are recorded)
GEMM_OPS = re.compile(r"^aten::(linear|addmm|mm|bmm|baddbmm|matmul|einsum|_?conv\w*|cudnn_convolution\w*)$")
#: settings (CaptureSummary.evidence.settings) that say TF32 is off, with the value that says so
TF32_OFF_SETTINGS = {"allow_tf32_matmul": "False", "allow_tf32_cudnn": "False", "float32_matmul_precision": "highest"}


def _kernel_rows(s: CaptureSummary) -> list[KernelRow]:
    return [k for k in s.top_kernels if k.stage not in ADAPTER_STAGES]


def float64(s: CaptureSummary, ctx: Context) -> list[Finding]:
    """float64 work on the GPU path (or in a CPU run): half the rate or less, twice the bytes."""
    groups = [g for g in user_rows(s.evidence.kernel_groups) if g.kind == "fp64"]
    out = []
    for site, rows in by_site(groups).items():
        ms = sum(g.ms for g in rows)
        share = gpu_share_of(s, FIX_GAIN * ms)
        if share < REPORT_SHARE:
            continue
        top = max(rows, key=lambda g: g.ms)
        names = sorted({n for g in rows for n in g.names})[:3]
        out.append(finding("float64", share,
                           f"float64 work{at(site)}: {sum(g.count for g in rows)} "
                           f"{'kernels' if s.has_gpu else 'ops'}, {ms:.2f} ms ({', '.join(names)})"
                           f"{where(top.module, top.stage)}",
                           {"kernels": sum(g.count for g in rows), "ms": ms, "names": names},
                           "make the tensors float32 (or the run's dtype): look for torch.float64 / .double(), "
                           "numpy float64 arrays passed to torch.from_numpy/torch.tensor, or Python floats "
                           "promoted with dtype=torch.float64",
                           typical_wall_ms=ctx["typical"], stage=top.stage, module=top.module, call_site=site))
    if out or groups:
        return out
    kernels = [k for k in _kernel_rows(s) if k.precision == "fp64"]  # a summary from before the kernel groups
    ms = sum(k.total_ms for k in kernels)
    if not kernels or gpu_share_of(s, FIX_GAIN * ms) < REPORT_SHARE:
        return []
    costliest = max(kernels, key=lambda k: k.total_ms)
    return [finding("float64", gpu_share_of(s, FIX_GAIN * ms),
                    f"float64 kernels on the GPU: {ms:.2f} ms ({costliest.name[:60]})"
                    f"{where(costliest.module, costliest.stage)}",
                    {"kernels": sum(k.count for k in kernels), "ms": ms, "names": [k.name for k in kernels[:3]]},
                    "make the tensors float32 (look for torch.float64 / .double() / numpy float64 inputs)",
                    typical_wall_ms=ctx["typical"], stage=costliest.stage, module=costliest.module)]


def fp32_under_autocast(s: CaptureSummary, ctx: Context) -> list[Finding]:
    """Ops and GEMM/conv kernels left in float32 in an fp16/bf16 run (autocast off, or an op it keeps fp32)."""
    precision = ctx["precision"]
    if precision not in AUTOCAST_PRECISIONS or not s.wall_ms:
        return []
    out = []
    gemms = [g for g in user_rows(s.evidence.kernel_groups) if g.kind == "fp32_gemm"]
    for site, rows in by_site(gemms).items():
        ms = sum(g.ms for g in rows)
        share = gpu_share_of(s, FIX_GAIN * ms)
        if share < REPORT_SHARE:
            continue
        top = max(rows, key=lambda g: g.ms)
        out.append(finding(
            "fp32_under_autocast", share,
            f"{ms:.1f} ms of float32 GEMM/conv kernels in a {precision} run{at(site)}{where(top.module, top.stage)}",
            {"ms": ms, "kernels": sum(g.count for g in rows), "names": list(top.names[:3])},
            f"run this region under torch.autocast('cuda', dtype=torch.{_dtype(precision)}) (a disabled autocast or "
            f"a .float() upcast keeps it in float32), or cast the inputs and weights to {precision}",
            typical_wall_ms=ctx["typical"], stage=top.stage, module=top.module, call_site=site))
    covered = {g.module for g in gemms}
    by_op: dict[str, list[Any]] = {}
    for row in s.fp32_ops:
        if GEMM_OPS.match(row.op) and row.module in covered:
            continue  # the fp32_gemm kernels of the same module say it, with their call site
        by_op.setdefault(row.op, []).append(row)
    for op, ops_rows in by_op.items():
        ms = sum((r.gpu_ms if s.has_gpu else r.cpu_ms) for r in ops_rows)
        share = gpu_share_of(s, FIX_GAIN * ms)
        if share < REPORT_SHARE:
            continue
        top = max(ops_rows, key=lambda r: r.gpu_ms if s.has_gpu else r.cpu_ms)
        out.append(finding(
            "fp32_under_autocast", share,
            f"{op} runs in float32 under {precision} autocast ({ms:.1f} ms, in {top.module})",
            {"ms": ms, "calls": sum(r.count for r in ops_rows)},
            f"cast its inputs to {precision} explicitly (autocast leaves {op} in float32), or check that "
            "the float32 result is needed",
            typical_wall_ms=ctx["typical"], module=top.module))
    return out


def _dtype(precision: str) -> str:
    return {"fp16": "float16", "bf16": "bfloat16"}.get(precision, "bfloat16")


def _tf32_settings_off(s: CaptureSummary) -> dict[str, str]:
    return {k: v for k, v in s.evidence.settings.items() if TF32_OFF_SETTINGS.get(k) == v}


def _tf32_candidates(s: CaptureSummary, ctx: Context) -> list[KernelRow]:
    """GEMM/conv kernels computing in IEEE fp32 in a tf32 run: CUDA-core fp32 kernels, and every fp32-input
    kernel of a kind whose TF32 switch the run's settings show off (a kernel name need not say it)."""
    if ctx["precision"] != "tf32" or not s.has_gpu:
        return []
    off = _tf32_settings_off(s)
    kinds_off = {"gemm"} if ("allow_tf32_matmul" in off or "float32_matmul_precision" in off) else set()
    kinds_off |= {"conv"} if "allow_tf32_cudnn" in off else set()
    return [k for k in _kernel_rows(s) if k.kind in ("gemm", "conv") and not NEVER_TENSOR_CORE.search(k.name)
            and ((k.tensor_core is False and k.precision == "fp32")
                 or (k.kind in kinds_off and k.precision in ("fp32", "tf32")))]


def tf32_off(s: CaptureSummary, ctx: Context) -> list[Finding]:
    """fp32 GEMMs/convs on CUDA cores in a tf32 run: TF32 is off for them (a setting, or a path without it)."""
    rows = _tf32_candidates(s, ctx)
    ms = sum(k.total_ms for k in rows)
    share = gpu_share_of(s, FIX_GAIN * ms)
    if not rows or share < REPORT_SHARE:
        return []
    top = max(rows, key=lambda k: k.total_ms)
    off = _tf32_settings_off(s)
    said = ", ".join(f"{k}={v}" for k, v in off.items())
    return [finding("tf32_off", share,
                    f"{ms:.1f} ms of fp32 {top.kind} on CUDA cores in tf32 mode ({top.name[:50]})"
                    + (f"; at the end of the run {said}" if off else "") + where(top.module, top.stage),
                    {"ms": ms, "kernels": len(rows), "top_kernel_ms": top.total_ms, "settings": off},
                    ("something in the tracker switches TF32 off: remove the torch.backends.cuda.matmul.allow_tf32 "
                     "= False / cudnn.allow_tf32 = False / set_float32_matmul_precision('highest') call"
                     if off else
                     "let these run on TF32 tensor cores: torch.backends.cuda.matmul.allow_tf32 = True and "
                     "torch.backends.cudnn.allow_tf32 = True (or torch.set_float32_matmul_precision('high'))"),
                    typical_wall_ms=ctx["typical"], stage=top.stage, module=top.module)]


def no_tensor_cores(s: CaptureSummary, ctx: Context) -> list[Finding]:
    """GEMM/conv kernels on CUDA cores in a tensor-core mode that tf32_off and fp32_under_autocast leave."""
    if ctx["precision"] not in TENSOR_CORE_MODES or not s.has_gpu or not s.wall_ms:
        return []
    taken = {k.name for k in _tf32_candidates(s, ctx)}
    if any(g.kind == "fp32_gemm" for g in user_rows(s.evidence.kernel_groups)):
        taken |= {k.name for k in s.top_kernels if k.precision == "fp32"}
    rows = [k for k in _kernel_rows(s) if k.kind in ("gemm", "conv") and k.tensor_core is False
            and k.precision != "fp64" and k.name not in taken]
    ms = sum(k.total_ms for k in rows)
    share = gpu_share_of(s, FIX_GAIN * ms)
    if not rows or share < REPORT_SHARE:
        return []
    top = max(rows, key=lambda k: k.total_ms)
    depthwise = "depthwise" in top.name
    return [finding("no_tensor_cores", share,
                    f"{ms:.1f} ms of GEMM/conv on CUDA cores in {ctx['precision']} mode "
                    f"({top.kind} {top.precision or ''}, in {top.module})",
                    {"ms": ms, "kernels": len(rows), "top_kernel_ms": top.total_ms},
                    "depthwise convolutions never use tensor cores: replace them by grouped/pointwise convs "
                    "or accept the cost" if depthwise else
                    "make the GEMM/conv inputs the mode's dtype (an fp32 tensor under autocast, a dimension not "
                    "a multiple of 8, or TF32 switched off keeps cuBLAS on CUDA cores)",
                    typical_wall_ms=ctx["typical"], stage=top.stage, module=top.module)]


def gemm_misaligned(s: CaptureSummary, ctx: Context) -> list[Finding]:
    """Matmul/conv shapes whose dims are not multiples of the tensor-core granule, in a tensor-core mode."""
    if ctx["precision"] not in TENSOR_CORE_MODES or not s.has_gpu:
        return []
    rows = [g for g in user_rows(s.evidence.gemm_shapes) if g.misaligned]
    out = []
    for site, group in by_site(rows).items():
        ms = sum(g.ms for g in group)
        share = gpu_share_of(s, FIX_GAIN * ms)
        if share < REPORT_SHARE:
            continue
        top = max(group, key=lambda g: g.ms)
        dims = "x".join(str(d) for d in top.dims)
        granule = TENSOR_CORE_GRANULE.get(top.dtype) or TENSOR_CORE_GRANULE.get(ctx["precision"], 8)
        out.append(finding(
            "gemm_misaligned", share,
            f"{sum(g.count for g in group)} {top.op} calls with shapes tensor cores cannot tile{at(site)}: "
            f"{dims} {top.dtype} ({', '.join(top.misaligned)} not a multiple of {granule}), {ms:.2f} ms"
            + where(top.module),
            {"ms": ms, "calls": sum(g.count for g in group), "dims": list(top.dims), "dtype": top.dtype,
             "misaligned": list(top.misaligned), "shapes": len(group),
             "tensor_core": top.tensor_core if top.tensor_core is not None else "unknown"},
            "pad the misaligned dimensions to a multiple of 8 (fp16/bf16/tf32; 16 for int8/fp8): widen the "
            "layer (channels, hidden size) or pad the batch of points/frames and slice the result",
            typical_wall_ms=ctx["typical"], module=top.module, call_site=site))
    return out


def emulated_bf16(s: CaptureSummary, ctx: Context) -> list[Finding]:
    """bf16 on a card below CC 8.0: no bf16 units, every bf16 op emulated."""
    cap = ctx["capability"]
    if not cap or tuple(cap) >= (8, 0) or not s.has_gpu or not s.wall_ms:
        return []
    ms = sum(v for label, v in s.kernel_class_ms.items() if "bf16" in label.split())
    if ms <= 0 and ctx["precision"] != "bf16":
        return []
    share = gpu_share_of(s, ms or s.kernel_ms)
    return [finding("emulated_bf16", share,
                    f"bf16 on a CC {cap[0]}.{cap[1]} card runs emulated ({ms:.1f} ms of bf16 kernels)",
                    {"bf16_kernel_ms": ms, "kernel_ms": s.kernel_ms},
                    "use fp16 autocast on this card (tensor cores from CC 7.0), or fp32",
                    typical_wall_ms=ctx["typical"])]
