"""Precision modes, their hardware gates, and the context each mode runs in.

| mode | does                                   | needs (CUDA)    | on CPU                      |
| fp32 | IEEE fp32; TF32 off for matmul, cuDNN  | any             | fp32                        |
| tf32 | TF32 tensor cores for matmul and conv  | CC >= 8.0       | runs as fp32 (no TF32)      |
| fp16 | autocast float16                       | CC >= 7.0       | refused: slow, poorly covered |
| bf16 | autocast bfloat16                      | CC >= 8.0       | autocast bfloat16           |
| int8 | int8 GEMMs (torch._int_mm) + autocast  | CC >= 7.5       | runs: int8 numerics, no gain |
| fp8  | e4m3 GEMMs (torch._scaled_mm) + autocast | CC >= 8.9 (else refused) | runs (CPU _scaled_mm) |

int8 and fp8 are recipes (which layers and matmuls run quantised, how scaled: engine.trackers.quant); the
ops they leave in float run under bf16 autocast on the GPU (fp16 below CC 8.0, where bf16 is emulated)
and in fp32 on the CPU. A tracker applies the recipe itself (it sees ``ctx.precision``); this module only
gates the modes and sets the float context around them.

A gated mode still runs when forced from the CLI (the diagnosis says why it is slow); only a mode
that cannot run at all (``Gate.runnable`` False) is refused.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

import torch

from engine.core.config import PRECISIONS
from engine.core.errors import UserError

AUTOCAST_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
QUANT_MODES = ("int8", "fp8")
FLOAT_MODES = tuple(m for m in PRECISIONS if m not in QUANT_MODES)  # fp32, tf32, fp16, bf16
INT8_TENSOR_CC = (7, 5)
FP8_CC = (8, 9)


@dataclass(frozen=True)
class Gate:
    """Whether a mode runs natively on a device; ``reason`` says why not."""

    mode: str
    native: bool
    runnable: bool
    reason: str = ""


def compute_capability(device: torch.device) -> tuple[int, int] | None:
    if device.type != "cuda":
        return None
    return torch.cuda.get_device_capability(device)


def gate(mode: str, device: torch.device | str, capability: tuple[int, int] | None = None) -> Gate:
    """The hardware gate of ``mode`` on ``device`` (``capability`` overrides the query, for tests)."""
    device = torch.device(device)
    if mode not in PRECISIONS:
        return Gate(mode, False, False, f"unknown precision {mode!r}")
    if mode in QUANT_MODES:
        return _quant_gate(mode, device, capability)
    if device.type != "cuda":
        if mode == "tf32":
            return Gate(mode, False, True, "TF32 is a GPU tensor-core format; on the CPU this runs as IEEE fp32")
        if mode == "fp16":
            return Gate(mode, False, False,
                        "fp16 on the CPU is refused: autocast covers few ops and runs slowly; use bf16")
        return Gate(mode, True, True)
    cc = capability or compute_capability(device)
    assert cc is not None
    ccs = f"{cc[0]}.{cc[1]}"
    if mode == "tf32" and cc < (8, 0):
        return Gate(mode, False, True,
                    f"TF32 needs compute capability 8.0; this GPU is {ccs}, so it silently runs IEEE fp32")
    if mode == "bf16" and cc < (8, 0):
        return Gate(mode, False, True, f"bf16 needs compute capability 8.0; on {ccs} it is emulated and slow")
    if mode == "fp16" and cc < (7, 0):
        return Gate(mode, False, True, f"fp16 tensor cores need compute capability 7.0; on {ccs} fp16 is slow")
    return Gate(mode, True, True)


def _quant_gate(mode: str, device: torch.device, capability: tuple[int, int] | None) -> Gate:
    if device.type != "cuda":
        if mode == "int8":
            return Gate(mode, False, True, "int8 on the CPU runs for accuracy, not speed: the GEMMs see int8 values "
                        "(an integer-exact fp32 GEMM; torch._int_mm is 15-45x slower than fp32 here), the rest fp32")
        if not cpu_scaled_mm_available():
            return Gate(mode, False, False, f"fp8 on the CPU needs torch._scaled_mm's CPU kernel, which torch "
                        f"{torch.__version__} lacks")
        return Gate(mode, False, True, "fp8 on the CPU runs for accuracy, not speed: torch._scaled_mm's CPU kernel "
                    "emulates e4m3, the rest fp32")
    cc = capability or compute_capability(device)
    assert cc is not None
    ccs = f"{cc[0]}.{cc[1]}"
    if mode == "int8" and cc < INT8_TENSOR_CC:
        return Gate(mode, False, True, f"int8 tensor-core GEMMs need compute capability 7.5; on {ccs} "
                    "torch._int_mm has no tensor cores (slow, or refused by cuBLAS: the kernel check says so)")
    if mode == "fp8" and cc < FP8_CC:
        return Gate(mode, False, False, f"fp8 GEMMs (torch._scaled_mm, e4m3) need compute capability 8.9 or 9.0; "
                    f"this GPU is {ccs}, where torch refuses them: try int8")
    return Gate(mode, True, True)


_CPU_SCALED_MM: list[bool] = []


def cpu_scaled_mm_available() -> bool:
    """Whether this torch runs torch._scaled_mm (fp8 e4m3) on the CPU (probed once)."""
    if not _CPU_SCALED_MM:
        try:
            a = torch.ones(16, 16).to(torch.float8_e4m3fn)
            one = torch.tensor(1.0)
            ok = bool(torch._scaled_mm(a, a.t(), scale_a=one, scale_b=one, out_dtype=torch.float32)[0, 0] == 16)
        except (RuntimeError, AttributeError, NotImplementedError, TypeError):
            ok = False
        _CPU_SCALED_MM.append(ok)
    return _CPU_SCALED_MM[0]


def autocast_dtype(mode: str, device: torch.device, capability: tuple[int, int] | None = None) -> torch.dtype | None:
    """The autocast dtype ``mode`` runs its float ops in on ``device`` (None: no autocast)."""
    if mode in QUANT_MODES:
        if device.type != "cuda":
            return None
        cc = capability or compute_capability(device)
        return torch.bfloat16 if cc is None or cc >= (8, 0) else torch.float16
    return AUTOCAST_DTYPES.get(mode)


def runnable_modes(device: torch.device | str, modes: tuple[str, ...] = PRECISIONS) -> list[str]:
    """The modes of ``modes`` that run on ``device`` (those the app's toggles leave enabled), in order."""
    return [m for m in modes if gate(m, device).runnable]


def either(modes: list[str]) -> str:
    """Modes as a choice in a sentence: 'fp32, tf32 or bf16'."""
    return modes[0] if len(modes) == 1 else f"{', '.join(modes[:-1])} or {modes[-1]}"


def check_runnable(mode: str, device: torch.device) -> Gate:
    g = gate(mode, device)
    if not g.runnable:
        others = runnable_modes(device, ("int8", "bf16") if mode == "fp8" else ("fp32", "bf16"))
        raise UserError(f"precision {mode} cannot run on {device}: {g.reason}",
                        f"choose {either(others)}" if others else "choose another device")
    return g


@contextmanager
def precision_context(mode: str, device: torch.device) -> Iterator[None]:
    """Set TF32 flags and autocast for ``mode``; restores the previous flags on exit."""
    device = torch.device(device)
    check_runnable(mode, device)
    old_matmul = torch.backends.cuda.matmul.allow_tf32
    old_cudnn = torch.backends.cudnn.allow_tf32
    allow_tf32 = mode == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = allow_tf32
    torch.backends.cudnn.allow_tf32 = allow_tf32
    try:
        dtype = autocast_dtype(mode, device)
        if dtype is None:
            yield
        else:
            with torch.autocast(device_type=device.type, dtype=dtype):
                yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old_matmul
        torch.backends.cudnn.allow_tf32 = old_cudnn
