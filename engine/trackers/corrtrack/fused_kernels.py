"""The Triton kernels behind fused.py, imported on first use (Triton's import took 0.4 s on the development machine)."""

from __future__ import annotations

import triton
import triton.language as tl


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
def ln_taps_kernel(x_ptr, out_ptr, w_ptr, b_ptr, taps_ptr, tap_bias_ptr, rows, frames, dilation, eps,
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
