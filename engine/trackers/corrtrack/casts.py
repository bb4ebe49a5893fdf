"""Parameters cast to the autocast dtype once, not on every call.

Under half-precision autocast each ``nn.Linear`` and ``nn.Conv2d`` casts its fp32 weight and bias on every
call. Autocast's own cache keeps those casts only inside one autocast region, and CUDA graph captures run
without it (graphs.py), so every replay of a captured CorrTrack stage re-ran about 200 tiny cast kernels
(0.32 ms of the H200's 9.1 ms at 1024 queries, session 21's profile). Here the cast copy is kept per
parameter and dtype while the parameter is unchanged (its version counter and storage), and the layers get
it directly: autocast then has nothing left to cast. The numbers are the same as autocast's (one fp32 ->
half rounding of the same values).

Only for inference, and only inside ``keeping()``, which CorrTrackTracker enters around its stages (its weights
are fixed once loaded). Outside it, and with autograd on (training), the plain cast runs each call. The version
counter does not see every change: torch's fused AdamW (``fused=True``, what training uses on a GPU) updates the
parameters in place without moving it, so a cache open to any caller served a training run's validation the
casts of an earlier step (session 26: a flat validation curve while the weights moved).
A cast first needed inside a CUDA graph capture is not kept (its memory would belong to the graph's pool);
the warm-up before each capture fills the cache. A captured graph reads the kept cast, not the parameter: code
that changes weights in place after capturing must drop its graphs first (CorrTrackTracker's weights are fixed
once loaded; its int8/fp8 copies are quantised before they run).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

_lock = threading.RLock()  # reentrant: a weak reference's callback may run while it is held
#: id(parameter) -> (a weak reference to it, {dtype: (stamp, cast)}); a tensor's == is elementwise, so no
#: WeakKeyDictionary: the entry goes when the parameter does
_casts: dict[int, tuple[weakref.ref, dict[torch.dtype, tuple[tuple, torch.Tensor]]]] = {}


_scope = threading.local()  # depth of keeping() blocks in this thread


@contextmanager
def keeping() -> Iterator[None]:
    """Keep casts inside this block, in this thread: for a caller whose parameters do not change in it."""
    depth = getattr(_scope, "depth", 0)
    _scope.depth = depth + 1
    try:
        yield
    finally:
        _scope.depth = depth


def half_autocast(device_type: str) -> torch.dtype | None:
    """The autocast dtype when half-precision autocast is on for device_type, else None."""
    if not torch.is_autocast_enabled(device_type):
        return None
    dtype = torch.get_autocast_dtype(device_type)
    return dtype if dtype in (torch.float16, torch.bfloat16) else None


def param_as(p: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """p in dtype; inside ``keeping()`` at inference the same cast tensor every call while p is unchanged."""
    if p.dtype == dtype:
        return p
    # an inference tensor (a copy made inside inference_mode, as the int8/fp8 copies are) has no version counter
    # to tell a change by: cast it each call
    if (not getattr(_scope, "depth", 0) or torch.compiler.is_compiling() or torch.is_grad_enabled()
            or p.is_inference()):
        return p.to(dtype)
    stamp = (p._version, p.data_ptr(), p.device)
    key = id(p)
    with _lock:
        entry = _casts.get(key)
        kept = entry[1].get(dtype) if entry is not None and entry[0]() is p else None
    if kept is not None and kept[0] == stamp:
        return kept[1]
    cast = p.to(dtype)
    if not (p.is_cuda and torch.cuda.is_current_stream_capturing()):
        with _lock:
            entry = _casts.get(key)
            if entry is None or entry[0]() is not p:
                entry = _casts[key] = (weakref.ref(p, partial(_forget, key)), {})
            entry[1][dtype] = (stamp, cast)
    return cast


def _forget(key: int, _ref: object = None) -> None:
    with _lock:
        _casts.pop(key, None)


def linear(layer: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """layer(x), with an nn.Linear's parameters from the cache under half autocast."""
    dtype = half_autocast(x.device.type)
    if dtype is None or type(layer) is not nn.Linear:  # quantised layers keep their own call
        return layer(x)
    bias = None if layer.bias is None else param_as(layer.bias, dtype)
    return F.linear(x, param_as(layer.weight, dtype), bias)


def conv(layer: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """layer(x), with an nn.Conv2d's parameters from the cache under half autocast."""
    dtype = half_autocast(x.device.type)
    if dtype is None or type(layer) is not nn.Conv2d or layer.padding_mode != "zeros":
        return layer(x)
    bias = None if layer.bias is None else param_as(layer.bias, dtype)
    return F.conv2d(x, param_as(layer.weight, dtype), bias, layer.stride, layer.padding, layer.dilation,
                    layer.groups)


def sequential(layers: nn.Sequential, x: torch.Tensor) -> torch.Tensor:
    """layers(x), each convolution through ``conv``."""
    for layer in layers:
        x = conv(layer, x)
    return x


def clear() -> None:
    """Forget every kept cast (tests)."""
    with _lock:
        _casts.clear()
