"""Precision modes, their hardware gates, and the context each mode runs in.

| mode | does                                   | needs (CUDA)    | on CPU                      |
| fp32 | IEEE fp32; TF32 off for matmul, cuDNN  | any             | fp32                        |
| tf32 | TF32 tensor cores for matmul and conv  | CC >= 8.0       | runs as fp32 (no TF32)      |
| fp16 | autocast float16                       | CC >= 7.0       | refused: slow, poorly covered |
| bf16 | autocast bfloat16                      | CC >= 8.0       | autocast bfloat16           |

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
LATER_MODES = ("int8", "fp8")


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
    if mode in LATER_MODES:
        return Gate(mode, False, False, f"{mode} is planned (quantised linear layers), not implemented yet")
    if mode not in PRECISIONS:
        return Gate(mode, False, False, f"unknown precision {mode!r}")
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


def check_runnable(mode: str, device: torch.device) -> Gate:
    g = gate(mode, device)
    if not g.runnable:
        raise UserError(f"precision {mode} cannot run on {device}: {g.reason}", "choose fp32 or bf16")
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
        dtype = AUTOCAST_DTYPES.get(mode)
        if dtype is None:
            yield
        else:
            with torch.autocast(device_type=device.type, dtype=dtype):
                yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old_matmul
        torch.backends.cudnn.allow_tf32 = old_cudnn
