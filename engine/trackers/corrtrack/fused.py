"""Fused inference kernels for CorrTrack's refinement (Triton), with the eager code as reference and fallback.

Under CUDA graphs the refinement is bound by memory traffic over [M, T, D] tensors (M tracks, T frames,
D = 128 hidden channels). Its layer norms ran at about 0.45 TB/s in torch's kernel (56 us each at 1024
queries on the H200), and each TemporalBlock read and wrote its normalised input four more times for the
dilated temporal taps. ``ln_taps`` does a block's LayerNorm and its three taps in one kernel: it reads x
(row t and rows t-d, t+d, mostly from L2) and writes the mixed result once; ``layer_norm`` is the same
kernel without the taps. Both load the fp32 parameters themselves, rounded to the output dtype as the eager
code rounds them, so no cast kernels remain either.

Used only where it changes nothing but speed: inference (no autograd: training keeps the eager code, whose
backward torch provides), a CUDA tensor (or Triton's CPU interpreter, ``TRITON_INTERPRET=1``, for tests),
D a power of two, outside torch.compile's tracing (Inductor fuses those itself), Triton importable, and the
switch on (``TRACKSCOPE_CORRTRACK_FUSED``, default true; ``disabled()`` while the cost model counts eager
ops). The results differ from the eager code only by rounding: the taps are summed in fp32 and rounded once
(eager rounds after each of its three ops).

Triton compiles each kernel on its first launch (about a second) and keeps the binary in its own on-disk
cache (``~/.triton/cache``), so a later start loads it in milliseconds.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from engine.core import flags
from engine.core.flags import env_flag

try:  # Triton ships with torch's CUDA wheels on Linux; without it the eager code runs
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - depends on the install
    triton = None
    tl = None

ENV = flags.CORRTRACK_FUSED
ROWS_PER_PROGRAM = 16  # [16, 128] tiles: 2048 elements, one per thread pair at 4 warps
NUM_WARPS = 4

_lock = threading.Lock()
_disabled_depth = 0


@contextmanager
def disabled() -> Iterator[None]:
    """Eager code everywhere in the process meanwhile (the cost model counts the eager ops)."""
    global _disabled_depth
    with _lock:
        _disabled_depth += 1
    try:
        yield
    finally:
        with _lock:
            _disabled_depth -= 1


def available() -> bool:
    """Triton is importable and the switch is on (a GPU is checked per call)."""
    return triton is not None and _disabled_depth == 0 and env_flag(ENV, default=True)


def status() -> str:
    """What a report says about the kernels: on (with Triton's version) or why not."""
    if triton is None:
        return "off: Triton is not installed (the eager code runs)"
    if not env_flag(ENV, default=True):
        return f"off: {ENV} is false"
    return f"on for CUDA inference (Triton {triton.__version__})"


def usable(x: torch.Tensor) -> bool:
    """The fused kernel may replace the eager code for x [M, T, D]."""
    if torch.compiler.is_compiling() or torch.is_grad_enabled():  # traced code: Inductor fuses it itself
        return False
    d = x.shape[-1]
    return (available() and (x.is_cuda or (x.device.type == "cpu" and _interpreting()))
            and d >= 16 and d & (d - 1) == 0)


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "") == "1"


def ln_taps(x: torch.Tensor, norm: torch.nn.LayerNorm, taps: torch.Tensor | None, tap_bias: torch.Tensor | None,
            dilation: int, dtype: torch.dtype) -> torch.Tensor:
    """x [M, T, D] -> [M, T, D] in dtype: LayerNorm, then (with taps [3, D]) taps[1] * y_t + taps[0] * y_(t-d)
    + taps[2] * y_(t+d) + tap_bias, zero frames beyond both ends. Without taps: the LayerNorm alone."""
    assert triton is not None
    x = x.contiguous()
    m, t, d = x.shape
    out = torch.empty((m, t, d), device=x.device, dtype=dtype)
    rows = m * t
    with_taps = taps is not None and tap_bias is not None
    grid = (triton.cdiv(rows, ROWS_PER_PROGRAM),)
    _ln_taps_kernel[grid](
        x, out, norm.weight, norm.bias, taps if with_taps else norm.weight, tap_bias if with_taps else norm.bias,
        rows, t, max(int(dilation), 1), float(norm.eps),
        D=d, BLOCK=ROWS_PER_PROGRAM, TAPS=with_taps, num_warps=NUM_WARPS)
    return out


if triton is not None:

    @triton.jit
    def _norm_rows(x_ptr, row, live, col, w, b, eps, D: tl.constexpr, out_ty: tl.constexpr):
        """LayerNorm of rows [R] of x (input rounded to out_ty first, as the eager code casts it), rounded to
        out_ty as the eager kernel's output is; zero where not live."""
        offs = row.to(tl.int64)[:, None] * D + col[None, :]
        x = tl.load(x_ptr + offs, mask=live[:, None], other=0.0).to(out_ty).to(tl.float32)
        mean = tl.sum(x, axis=1) / D
        xc = x - mean[:, None]
        var = tl.sum(xc * xc, axis=1) / D
        y = xc * (1.0 / tl.sqrt(var + eps))[:, None] * w[None, :] + b[None, :]
        return tl.where(live[:, None], y.to(out_ty).to(tl.float32), 0.0)

    # one binary per dtype and variant: no specialisation on the sizes (each would compile again)
    @triton.jit(do_not_specialize=["rows", "frames", "dilation"])
    def _ln_taps_kernel(x_ptr, out_ptr, w_ptr, b_ptr, taps_ptr, tap_bias_ptr, rows, frames, dilation, eps,
                        D: tl.constexpr, BLOCK: tl.constexpr, TAPS: tl.constexpr):
        row = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        col = tl.arange(0, D)
        live = row < rows
        out_ty = out_ptr.dtype.element_ty
        w = tl.load(w_ptr + col).to(out_ty).to(tl.float32)
        b = tl.load(b_ptr + col).to(out_ty).to(tl.float32)
        y = _norm_rows(x_ptr, row, live, col, w, b, eps, D, out_ty)
        if TAPS:
            t = row % frames
            before = _norm_rows(x_ptr, row - dilation, live & (t >= dilation), col, w, b, eps, D, out_ty)
            after = _norm_rows(x_ptr, row + dilation, live & (t + dilation < frames), col, w, b, eps, D, out_ty)
            tap0 = tl.load(taps_ptr + col).to(out_ty).to(tl.float32)
            tap1 = tl.load(taps_ptr + D + col).to(out_ty).to(tl.float32)
            tap2 = tl.load(taps_ptr + 2 * D + col).to(out_ty).to(tl.float32)
            bias = tl.load(tap_bias_ptr + col).to(out_ty).to(tl.float32)
            y = bias[None, :] + y * tap1[None, :] + before * tap0[None, :] + after * tap2[None, :]
        out_offs = row.to(tl.int64)[:, None] * D + col[None, :]
        tl.store(out_ptr + out_offs, y.to(out_ty), mask=live[:, None])
