"""Quantised modes (int8, fp8): recipes, quantised layers and matmuls, and swapping them into a module.

A mode is a **recipe** (:class:`QuantRecipe`, chosen per device by :func:`recipe_for`):

| mode | kernel (CUDA)                    | kernel (CPU, torch 2.13)          | scales                          |
| int8 | torch._int_mm (cuBLAS, int32 acc) | integer-exact fp32 GEMM of int8s | dynamic per row x per channel   |
| fp8  | torch._scaled_mm (e4m3, fp32 acc) | torch._scaled_mm's CPU kernel    | rowwise (CC 9.0), tensor (8.9)  |

What runs quantised: every ``nn.Linear`` with at least ``min_features`` inputs and outputs, every 1x1
``nn.Conv2d`` (stride 1, no groups: a matmul over pixels) and the matmuls a tracker routes through
:func:`quantized_matmul` (CorrTrack's correlation volume). What does not: k x k convolutions (torch has
no int8/fp8 conv kernel for them: cuDNN's int8 convs are not exposed, torchao's fp8 conv needs SM100),
normalisations, elementwise ops, gathers, softmax, and layers too small for a tensor-core tile. On the
GPU those run under autocast (bf16 from CC 8.0, fp16 below, where bf16 is emulated); on the CPU in fp32.

Scales are **dynamic**: symmetric absmax per row of the activations, computed on every call on the
device (no host sync, so a quantised stage can be captured in a CUDA graph), times per-output-channel
absmax weight scales fixed when a layer is quantised. No calibration pass: correlation features and
the refinement's activations vary per query and per frame, a per-row scale follows them exactly, and
its cost (one absmax and one scaled cast per matmul input) is small next to the GEMM. Calibrated
static scales would save that pass but clip outliers on frames the calibration did not see.

Shape rules of the kernels are met by zero padding (exact): on CUDA ``_int_mm`` needs m > 16 and k, n
multiples of 8; ``_scaled_mm`` needs k, n (and here m) multiples of 16; padding is counted in the report.
A kernel that gives wrong numbers on a device is caught by :func:`check_kernel` (run once per mode and
device before a module is quantised): never silently wrong.

On the CPU ``torch._int_mm`` runs (any shape) but 15-45x slower than an fp32 GEMM here, so int8 on the
CPU runs its GEMMs as fp32 GEMMs of the int8 values: every product and partial sum is an integer below
2**24 when k <= 1040, so the result is the int32 result exactly (checked against ``_int_mm`` in tests);
larger k uses ``_int_mm``. The CPU modes measure quantisation's accuracy, not its speed.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from engine.core.errors import UserError
from engine.core.precision import QUANT_MODES, autocast_dtype

INT8_MAX = 127.0
FP8_MAX = 448.0  # largest finite float8_e4m3fn
FP8_DTYPE = torch.float8_e4m3fn
SCALE_EPS = 1e-12  # absmax floor: an all-zero row gets a tiny scale, not a division by zero
MIN_FEATURES = 16  # smaller linear layers stay unquantised: a tensor-core tile would be mostly padding
EXACT_FP32_MAX_K = 1040  # k * 127**2 < 2**24: fp32 sums of int8 products are exact integers
INT_MM_MIN_M = 17  # CUDA _int_mm: m > 16
INT_MM_MULTIPLE = 8  # CUDA _int_mm: k, n multiples of 8
SCALED_MM_MULTIPLE = 16  # CUDA _scaled_mm: dimensions multiples of 16

NOT_QUANTISED_OPS = {
    "conv kxk": "k x k convolutions: torch has no int8/fp8 conv kernel for them (cuDNN's int8 convs are not "
                "exposed to PyTorch; torchao's fp8 conv needs SM100); they run under autocast",
    "norm": "normalisations (LayerNorm, BatchNorm, GroupNorm): not GEMMs; autocast keeps them in fp32",
    "small linear": f"linear layers with fewer than {MIN_FEATURES} input or output features: a tensor-core tile "
                    "would be mostly padding; they run under autocast",
    "custom": "custom layers (their own parameters, ops the quantiser cannot see): left as they are",
}


@dataclass(frozen=True)
class QuantRecipe:
    """What a quantised mode does on one device: kernel, scales, padding and what stays in float."""

    mode: str  # "int8" | "fp8"
    device_type: str  # "cuda" | "cpu"
    kernel: str  # what runs the GEMMs
    scaling: str  # "rowwise" (per row of activations x per output channel) | "tensorwise"
    float_dtype: str  # "bf16" | "fp16" | "fp32": what the other ops run in
    layers: tuple[str, ...] = ("nn.Linear", "nn.Conv2d 1x1 (as a matmul over pixels)")
    min_features: int = MIN_FEATURES
    pad_multiple: int = 1  # k and n (and for fp8 m) padded to this multiple
    min_rows: int = 1  # m padded up to this
    weights: str = "per output channel, symmetric absmax, fixed when quantised"
    activations: str = "dynamic: symmetric absmax per row, on every call (on the device, no host sync)"
    notes: tuple[str, ...] = field(default=())

    @property
    def qmax(self) -> float:
        return INT8_MAX if self.mode == "int8" else FP8_MAX

    @property
    def out_dtype(self) -> torch.dtype:
        return {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[self.float_dtype]

    def describe(self) -> dict[str, Any]:
        info = asdict(self)
        info["layers"] = list(self.layers)
        info["notes"] = list(self.notes)
        info["not_quantised"] = dict(NOT_QUANTISED_OPS)
        return info


def float_dtype_for(device: torch.device, capability: tuple[int, int] | None) -> str:
    """What the unquantised ops of a quantised mode run in: bf16 autocast from CC 8.0, fp16 below, fp32 on the CPU."""
    dtype = autocast_dtype("int8", device, capability)
    return {torch.bfloat16: "bf16", torch.float16: "fp16"}.get(dtype, "fp32") if dtype is not None else "fp32"


def recipe_for(mode: str, device: torch.device | str, capability: tuple[int, int] | None = None) -> QuantRecipe:
    """The recipe of ``mode`` on ``device`` (``capability`` overrides the query, for tests)."""
    if mode not in QUANT_MODES:
        raise ValueError(f"{mode!r} is not a quantised mode ({', '.join(QUANT_MODES)})")
    device = torch.device(device)
    if device.type == "cuda":
        cc = capability or torch.cuda.get_device_capability(device)
        fdt = float_dtype_for(device, cc)
        if mode == "int8":
            return QuantRecipe("int8", "cuda", "torch._int_mm (cuBLAS, int8 x int8 -> int32)", "rowwise", fdt,
                               pad_multiple=INT_MM_MULTIPLE, min_rows=INT_MM_MIN_M)
        rowwise = cc >= (9, 0)
        notes = () if rowwise else ("CC 8.9: per-tensor scales (rowwise _scaled_mm is a Hopper kernel)",)
        return QuantRecipe("fp8", "cuda", "torch._scaled_mm (e4m3 x e4m3, fp32 accumulate)",
                           "rowwise" if rowwise else "tensorwise", fdt,
                           pad_multiple=SCALED_MM_MULTIPLE, min_rows=SCALED_MM_MULTIPLE, notes=notes)
    if mode == "int8":
        return QuantRecipe("int8", "cpu", f"fp32 GEMM on the int8 values (integer-exact for k <= {EXACT_FP32_MAX_K}; "
                           "torch._int_mm beyond)", "rowwise", "fp32",
                           notes=("torch._int_mm runs on the CPU but 15-45x slower than fp32: accuracy, not speed",))
    return QuantRecipe("fp8", "cpu", "torch._scaled_mm (CPU kernel, e4m3 emulated)", "rowwise", "fp32",
                       notes=("no fp8 units on a CPU: accuracy, not speed",))


# -- quantising tensors ---------------------------------------------------------------------------------
def quantize_rows(x: torch.Tensor, recipe: QuantRecipe) -> tuple[torch.Tensor, torch.Tensor]:
    """x [M, K] -> (q [M, K] in the recipe's dtype, scale float32 [M, 1] (rowwise) or [] (tensorwise)),
    with x ~= q * scale."""
    xf = x.float()
    if recipe.scaling == "tensorwise":
        amax = xf.abs().amax()
    else:
        amax = xf.abs().amax(dim=1, keepdim=True)
    scale = amax.clamp(min=SCALE_EPS) / recipe.qmax
    y = xf / scale
    if recipe.mode == "int8":
        q = torch.round(y).clamp_(-INT8_MAX, INT8_MAX).to(torch.int8)
    else:
        q = y.clamp_(-FP8_MAX, FP8_MAX).to(FP8_DTYPE)
    return q, scale


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def _pad2(x: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """Zero-pad a 2-D float tensor to [rows, cols] (no copy when it already fits)."""
    if x.shape[0] == rows and x.shape[1] == cols:
        return x
    return F.pad(x, (0, cols - x.shape[1], 0, rows - x.shape[0]))


def _padded_rows(m: int, recipe: QuantRecipe) -> int:
    rows = max(m, recipe.min_rows)
    return _round_up(rows, recipe.pad_multiple) if recipe.mode == "fp8" else rows


def _out_dtype(x: torch.Tensor, recipe: QuantRecipe) -> torch.dtype:
    dev = x.device.type
    if torch.is_autocast_enabled(dev):
        return torch.get_autocast_dtype(dev)
    return x.dtype if x.is_floating_point() else torch.float32


def _gemm(aq: torch.Tensor, a_scale: torch.Tensor, bq_t: torch.Tensor, b_scale: torch.Tensor,
          recipe: QuantRecipe, out_dtype: torch.dtype) -> torch.Tensor:
    """(aq * a_scale) @ (bq_t * b_scale^T): aq [M, K] row-major, bq_t [K, N] column-major (the transpose of
    a contiguous [N, K]), scales a [M, 1] or [] and b [N, 1] or [] -> [M, N] in ``out_dtype``."""
    if (recipe.mode, aq.device.type) in _ROW_MAJOR_B:
        bq_t = bq_t.contiguous()  # this kernel gave wrong numbers with a column-major operand: check_kernel
    with torch.autocast(aq.device.type, enabled=False):
        if recipe.mode == "int8":
            if aq.device.type == "cpu" and aq.shape[1] <= EXACT_FP32_MAX_K:
                acc = aq.float() @ bq_t.float()  # integer-exact (see the module docstring)
            else:
                acc = torch._int_mm(aq, bq_t)
            scale_b = b_scale.reshape(1, -1) if b_scale.dim() else b_scale
            if out_dtype == torch.float32:
                return acc * a_scale * scale_b
            out = torch.empty(acc.shape, dtype=out_dtype, device=acc.device)
            torch.mul(acc, a_scale, out=out)  # int32 x fp32, rounded once to the output dtype
            return out.mul_(scale_b)
        scale_b = b_scale.reshape(1, -1) if b_scale.dim() else b_scale
        kernel_out = out_dtype
        if recipe.scaling == "rowwise" and aq.device.type == "cuda":
            kernel_out = torch.bfloat16  # rowwise _scaled_mm writes bf16 only
        out = torch._scaled_mm(aq, bq_t, scale_a=a_scale, scale_b=scale_b, out_dtype=kernel_out)
        return out if out.dtype == out_dtype else out.to(out_dtype)


def quantized_matmul(a: torch.Tensor, b: torch.Tensor, recipe: QuantRecipe) -> torch.Tensor:
    """a [..., M, K] @ b [..., K, N] with both operands quantised dynamically (rows of a, columns of b).

    Batch dimensions broadcast as in torch.matmul (looped: the kernels are 2-D). The result is in the
    autocast dtype when autocast is on, else a's dtype.
    """
    out_dtype = _out_dtype(a, recipe)
    if a.dim() > 2 or b.dim() > 2:
        batch = torch.broadcast_shapes(a.shape[:-2], b.shape[:-2])
        a_b = a.expand(*batch, *a.shape[-2:]).reshape(-1, *a.shape[-2:])
        b_b = b.expand(*batch, *b.shape[-2:]).reshape(-1, *b.shape[-2:])
        outs = [quantized_matmul(x, y, recipe) for x, y in zip(a_b, b_b)]
        out = outs[0].unsqueeze(0) if len(outs) == 1 else torch.stack(outs)  # one video: no copy
        return out.view(*batch, a.shape[-2], b.shape[-1])
    m, k = a.shape
    n = b.shape[1]
    kp, np_ = _round_up(k, recipe.pad_multiple), _round_up(n, recipe.pad_multiple)
    mp = _padded_rows(m, recipe)
    aq, sa = quantize_rows(_pad2(a, mp, kp), recipe)
    bq, sb = quantize_rows(_pad2(b.transpose(0, 1), np_, kp), recipe)  # rows of b^T = columns of b
    out = _gemm(aq, sa, bq.t(), sb, recipe, out_dtype)
    return out[:m, :n] if (mp, np_) != (m, n) else out


# -- quantised layers ------------------------------------------------------------------------------------
class QuantLinear(nn.Module):
    """An nn.Linear with int8/fp8 weights (per output channel) and dynamic per-row activation scales."""

    weight_q: torch.Tensor  # [N, K] int8 / float8_e4m3fn, registered as buffers below
    weight_scale: torch.Tensor  # [N, 1] or []
    bias: torch.Tensor | None

    def __init__(self, linear: nn.Linear, recipe: QuantRecipe):
        super().__init__()
        self.recipe = recipe
        self.in_features = linear.in_features
        self.out_features = linear.out_features
        w = linear.weight.detach().float()
        kp, np_ = _round_up(self.in_features, recipe.pad_multiple), _round_up(self.out_features, recipe.pad_multiple)
        wq, ws = quantize_rows(_pad2(w, np_, kp), recipe)
        self.padded = (kp != self.in_features, np_ != self.out_features)
        self.register_buffer("weight_q", wq)  # [N, K] contiguous: weight_q.t() is the column-major operand
        self.register_buffer("weight_scale", ws)
        bias = linear.bias.detach().float().clone() if linear.bias is not None else None
        self.register_buffer("bias", bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out_dtype = _out_dtype(x, self.recipe)
        lead = x.shape[:-1]
        x2 = x.reshape(-1, self.in_features)
        m = x2.shape[0]
        mp = _padded_rows(m, self.recipe)
        aq, sa = quantize_rows(_pad2(x2, mp, self.weight_q.shape[1]), self.recipe)
        y = _gemm(aq, sa, self.weight_q.t(), self.weight_scale, self.recipe, out_dtype)
        if mp != m or self.padded[1]:
            y = y[:m, :self.out_features]
        if self.bias is not None:
            y = y + self.bias.to(y.dtype)
        return y.reshape(*lead, self.out_features)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, mode={self.recipe.mode}, "
                f"scaling={self.recipe.scaling}")


class QuantConv1x1(nn.Module):
    """A 1x1 nn.Conv2d (stride 1, groups 1) as a QuantLinear over pixels; keeps a channels-last layout."""

    def __init__(self, conv: nn.Conv2d, recipe: QuantRecipe):
        super().__init__()
        linear = nn.Linear(conv.in_channels, conv.out_channels, bias=conv.bias is not None,
                           device=conv.weight.device)  # on the conv's device: a CUDA model stays on CUDA
        with torch.no_grad():
            linear.weight.copy_(conv.weight.detach().reshape(conv.out_channels, conv.in_channels))
            if conv.bias is not None:
                linear.bias.copy_(conv.bias.detach())
        self.linear = QuantLinear(linear, recipe)
        self.padded = self.linear.padded

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.linear(x.permute(0, 2, 3, 1))  # [F, H, W, Cout]
        return y.permute(0, 3, 1, 2)  # [F, Cout, H, W], channels-last in memory


def _is_1x1(conv: nn.Conv2d) -> bool:
    return (tuple(conv.kernel_size) == (1, 1) and tuple(conv.stride) == (1, 1) and conv.groups == 1
            and tuple(conv.dilation) == (1, 1) and tuple(conv.padding) in ((0, 0),) and conv.padding_mode == "zeros")


# -- quantising modules ----------------------------------------------------------------------------------
@dataclass
class QuantReport:
    """What quantize_module swapped and what it left, with reasons."""

    recipe: QuantRecipe
    quantised: list[dict[str, Any]] = field(default_factory=list)  # name, kind, shape, padded
    not_quantised: list[dict[str, Any]] = field(default_factory=list)  # name, kind, reason
    padded: int = 0  # layers whose k or n was zero-padded to the kernel's multiple
    kernel_check: dict[str, Any] = field(default_factory=dict)  # check_kernel's result on the module's device

    @property
    def quantised_parameters(self) -> int:
        return int(sum(e["parameters"] for e in self.quantised))

    def describe(self) -> dict[str, Any]:
        return {
            "recipe": self.recipe.describe(),
            "quantised": [f"{e['name']} ({e['kind']} {e['shape']})" for e in self.quantised],
            "not_quantised": [f"{e['name']} ({e['kind']}): {e['reason']}" for e in self.not_quantised],
            "quantised_layers": len(self.quantised),
            "quantised_parameters": self.quantised_parameters,
            "padded_layers": self.padded,
            "kernel_check": dict(self.kernel_check),
        }


_NORMS = (nn.LayerNorm, nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.GroupNorm, nn.InstanceNorm2d)


def _skip_reason(module: nn.Module, recipe: QuantRecipe) -> str | None:
    """Why a module with its own parameters is not quantised (None: it is, or has no parameters)."""
    if isinstance(module, nn.Linear):
        if min(module.in_features, module.out_features) < recipe.min_features:
            return (f"{module.in_features} -> {module.out_features} features: smaller than {recipe.min_features}, "
                    f"runs in {recipe.float_dtype}")
        return None
    if isinstance(module, nn.Conv2d):
        if _is_1x1(module):
            return None
        return (f"{'x'.join(map(str, module.kernel_size))} conv: no int8/fp8 conv kernel in torch; runs in "
                f"{recipe.float_dtype}")
    if isinstance(module, nn.modules.conv._ConvNd):
        return f"{type(module).__name__}: no int8/fp8 kernel; runs in {recipe.float_dtype}"
    if isinstance(module, _NORMS):
        return "normalisation: not a GEMM"
    if isinstance(module, nn.Embedding):
        return "embedding: a gather, not a GEMM"
    if any(True for _ in module.parameters(recurse=False)):
        return "custom layer (own parameters, ops the quantiser cannot see): left as is"
    return None


def quantize_module(module: nn.Module, recipe: QuantRecipe, *, check: bool = True,
                    keep: dict[str, str] | None = None) -> QuantReport:
    """Swap ``module``'s nn.Linear layers (and 1x1 convs) for quantised ones, **in place**; quantise a
    copy (``copy.deepcopy``) to keep the float reference. Returns what was swapped and what was not.

    keep: qualified names of submodules to leave in float, each with its reason (a recipe's choice).
    """
    keep = keep or {}
    if not isinstance(module, nn.Module):
        raise UserError(f"cannot quantise a plugin that is not an nn.Module ({type(module).__name__})",
                        "return a torch.nn.Module with nn.Linear layers from the factory, or use fp32/bf16")
    report = QuantReport(recipe)
    if check:
        device = next((p.device for p in module.parameters()), torch.device(recipe.device_type))
        report.kernel_check = check_kernel(recipe, device)

    def visit(parent: nn.Module, prefix: str) -> None:
        for name, child in list(parent.named_children()):
            full = f"{prefix}{name}"
            if full in keep:
                report.not_quantised.append({"name": full, "kind": type(child).__name__,
                                             "reason": f"kept in {recipe.float_dtype} by the recipe: {keep[full]}"})
                continue
            reason = _skip_reason(child, recipe)
            swappable = isinstance(child, nn.Linear) or (isinstance(child, nn.Conv2d) and _is_1x1(child))
            if swappable and reason is None:
                q: QuantLinear | QuantConv1x1
                if isinstance(child, nn.Linear):
                    q = QuantLinear(child, recipe)
                    shape = f"{child.in_features}->{child.out_features}"
                else:
                    assert isinstance(child, nn.Conv2d)  # _quantisable: a Linear or a 1x1 conv
                    q = QuantConv1x1(child, recipe)
                    shape = f"{child.in_channels}->{child.out_channels} 1x1"
                q._forward_pre_hooks.update(child._forward_pre_hooks)  # the user's (and stage timers') hooks
                q._forward_hooks.update(child._forward_hooks)
                setattr(parent, name, q)
                report.quantised.append({"name": full, "kind": type(child).__name__, "shape": shape,
                                         "padded": any(q.padded),
                                         "parameters": sum(p.numel() for p in child.parameters())})
                report.padded += int(any(q.padded))
                continue
            if reason is not None:
                report.not_quantised.append({"name": full, "kind": type(child).__name__, "reason": reason})
            if not swappable:
                visit(child, f"{full}.")

    if _skip_reason(module, recipe) is not None and not isinstance(module, (nn.Linear, nn.Conv2d)):
        report.not_quantised.append({"name": "(root)", "kind": type(module).__name__,
                                     "reason": _skip_reason(module, recipe)})
    visit(module, "")
    return report


# -- checking the kernels --------------------------------------------------------------------------------
_CHECKED: dict[tuple, dict[str, Any]] = {}
#: (mode, device type) whose kernel needs its second operand row-major (found by check_kernel)
_ROW_MAJOR_B: set[tuple[str, str]] = set()
#: relative Frobenius error bounds of a quantised GEMM against the float one on Gaussian data (measured
#: on the CPU, k = 64..256: int8 ~0.9e-2, fp8 rowwise ~3.5e-2, tensorwise ~4e-2), with headroom
REL_ERROR_BOUND = {"int8": 2e-2, "fp8": 6e-2}


def relative_error(approx: torch.Tensor, reference: torch.Tensor) -> float:
    ref = reference.detach().float()
    return float((approx.detach().float() - ref).norm() / ref.norm().clamp(min=SCALE_EPS))


def check_kernel(recipe: QuantRecipe, device: torch.device | str) -> dict[str, Any]:
    """Run one small quantised GEMM on ``device`` and compare it with the float GEMM; RuntimeError when
    the kernel is missing or its numbers are off. The second operand goes in column-major (the layout
    cuBLAS wants); if that fails or gives wrong numbers, row-major is tried and, when right, used from
    then on (recorded). Cached per recipe and device; returns {"relative_error", "operand_layout"}."""
    device = torch.device(device)
    key = (recipe, str(device))
    if key in _CHECKED:
        return _CHECKED[key]
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(40, 72, generator=gen).to(device)  # m, k, n off the kernels' multiples: padding runs too
    w = torch.randn(24, 72, generator=gen).to(device)
    lin = nn.Linear(72, 24, bias=False).to(device)
    with torch.no_grad():
        lin.weight.copy_(w)
    ref = a @ w.t()
    bound = REL_ERROR_BOUND[recipe.mode]
    failures = []
    for layout in ("column-major", "row-major"):
        if layout == "row-major":
            _ROW_MAJOR_B.add((recipe.mode, device.type))
        try:
            with torch.no_grad(), torch.autocast(device.type, enabled=False):
                got = QuantLinear(lin, recipe)(a)
                got_mm = quantized_matmul(a, w.t(), recipe)
            err = max(relative_error(got, ref), relative_error(got_mm, ref))
        except Exception as exc:
            failures.append(f"{layout}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
            continue
        if math.isfinite(err) and err <= bound:
            _CHECKED[key] = {"relative_error": round(err, 5), "operand_layout": layout, "device": str(device)}
            return _CHECKED[key]
        failures.append(f"{layout}: wrong numbers, relative error {err:.3g} > {bound}")
    _ROW_MAJOR_B.discard((recipe.mode, device.type))
    raise RuntimeError(f"{recipe.mode} kernel ({recipe.kernel}) on {device}: " + "; ".join(failures))
