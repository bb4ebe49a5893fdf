"""The torch.compile backend the compile plugins use: inductor on a GPU, eager on the CPU.

eager traces through dynamo as inductor does (the same guards, recompiles and graph breaks) but
hands the graphs to eager PyTorch: no C compiler needed, so the CPU tests run anywhere, and fast.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

GPU_BACKEND = "inductor"
CPU_BACKEND = "eager"
#: recompiles a compiled function may do before dynamo gives up and runs it eagerly; the recompile plugin
#: raises dynamo's limit to this (as a user who saw the "hit recompile_limit" warning does)
RAISED_RECOMPILE_LIMIT = 256


def backend_for(device: torch.device) -> str:
    return GPU_BACKEND if device.type == "cuda" else CPU_BACKEND


class LazyCompiled:
    """``torch.compile(fn)`` with the backend of the device of its first call."""

    def __init__(self, fn: Callable[..., Any], **options: Any):
        self.fn = fn
        self.options = options
        self._compiled: dict[str, Callable[..., Any]] = {}

    def __call__(self, first: torch.Tensor, *args: Any) -> Any:
        backend = backend_for(first.device)
        compiled = self._compiled.get(backend)
        if compiled is None:
            compiled = self._compiled[backend] = torch.compile(self.fn, backend=backend, **self.options)
        return compiled(first, *args)
