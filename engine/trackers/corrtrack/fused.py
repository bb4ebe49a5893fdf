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

import importlib
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from engine.core import flags
from engine.core.flags import env_flag

_NOT_LOADED = object()
_kernels: Any = _NOT_LOADED  # fused_kernels, None where Triton is not installed or its import failed
_load_error = ""  # why it is None

ENV = flags.CORRTRACK_FUSED
ROWS_PER_PROGRAM = 16  # rows per program: 16 rows x 4 warps was the fastest or tied of five tilings on the H200
NUM_WARPS = 4  # (scripts/refine_micro.py, docs/records/session22/micro_*.json)

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


def kernels() -> Any:
    """The kernels' module, or None without Triton (Triton ships with torch's CUDA wheels on Linux; without it
    the eager code runs). Imported once, on first use."""
    global _kernels, _load_error
    if _kernels is _NOT_LOADED:
        with _lock:
            if _kernels is _NOT_LOADED:
                try:
                    _kernels = importlib.import_module("engine.trackers.corrtrack.fused_kernels")
                except ImportError:
                    _kernels, _load_error = None, "Triton is not installed"
                except Exception as exc:  # a broken install: the eager code still runs
                    _kernels, _load_error = None, f"Triton failed to import ({type(exc).__name__}: {exc})"
    return _kernels


def triton_version() -> str | None:
    """Triton's version, or None when it is not installed."""
    found = kernels()
    return None if found is None else str(found.triton.__version__)


def available() -> bool:
    """The switch is on and Triton importable (a GPU is checked per call)."""
    return _disabled_depth == 0 and env_flag(ENV, default=True) and kernels() is not None


def status() -> str:
    """What a report says about the kernels: on (with Triton's version) or why not."""
    if not env_flag(ENV, default=True):
        return f"off: {ENV} is false"
    version = triton_version()
    if version is None:
        return f"off: {_load_error} (the eager code runs)"
    return f"on for CUDA inference (Triton {version})"


def status_text(tracker: dict, device: str, short: bool = False) -> str:
    """What a run on ``device`` ran, from a tracker's description (its ``fused_kernels``): 'CorrTrack: fused
    kernels on for CUDA inference (Triton 3.6.0)', or with ``short`` 'fused kernels' / 'fused kernels off';
    '' for a tracker that does not say or a run off the GPU (the eager code runs there)."""
    status = tracker.get("fused_kernels")
    if not isinstance(status, str) or not device.startswith("cuda"):
        return ""
    if short:
        return "fused kernels" if status.startswith("on") else "fused kernels off"
    return f"CorrTrack: fused kernels {status}"


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
    k = kernels()
    assert k is not None, "fused.ln_taps without Triton"
    x = x.contiguous()
    m, t, d = x.shape
    out = torch.empty((m, t, d), device=x.device, dtype=dtype)
    rows = m * t
    with_taps = taps is not None and tap_bias is not None
    grid = ((rows + ROWS_PER_PROGRAM - 1) // ROWS_PER_PROGRAM,)
    k.ln_taps_kernel[grid](
        x, out, norm.weight, norm.bias, taps if with_taps else norm.weight, tap_bias if with_taps else norm.bias,
        rows, t, max(int(dilation), 1), float(norm.eps),
        D=d, BLOCK=ROWS_PER_PROGRAM, TAPS=with_taps, num_warps=NUM_WARPS)
    return out
