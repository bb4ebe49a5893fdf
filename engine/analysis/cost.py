"""Per-stage counted work (FLOPs, bytes moved, ops): one extra pass of a run, recorded as the report's ``work``.

``CostCounter`` wraps one extra pass of a run: torch's ``FlopCounterMode`` counts the FLOPs of
matmul/conv/attention ops, and a ``TorchDispatchMode`` on top of it sees every aten op, takes the
FLOPs each op added, sums the bytes of its input and output tensors (an upper bound on memory
traffic: no cache reuse, no fusion) and books both to the stage that is open at that moment (told
by engine.stages' observer hook). A stage with no torch ops costs nothing and is "host" bound.
Where a stage sits on its device's roofline is analysis, derived on load: engine.analysis.roofline.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from typing import Any, Callable

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import FlopCounterMode

from engine.core.stages import add_stage_observer, remove_stage_observer
from engine.report.parts import StageWork

#: work done while no stage is open is booked here
UNSTAGED = "(unstaged)"
#: ops that only read metadata and move no data
_METADATA_OPS = {"size", "stride", "numel", "dim", "storage_offset", "is_contiguous", "sym_size", "sym_stride",
                 "sym_numel", "sym_storage_offset", "_local_scalar_dense", "is_same_size", "detach"}
#: gathers read at most this many times their output's bytes from their source (bilinear: 4 corners)
_GATHER_READ_FACTOR = {"index": 1, "gather": 1, "index_select": 1, "embedding": 1, "take": 1,
                       "grid_sampler": 4, "grid_sampler_2d": 4, "grid_sampler_3d": 8}
#: tensor dtypes -> the precision name their matmul/conv FLOPs run at (fp32 becomes tf32 in tf32 mode)
_DTYPE_PRECISION = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.int8: "int8", torch.float32: "fp32",
                    torch.float64: "fp32"}

#: quantised GEMMs torch's FLOP counter does not know, and the precision their FLOPs run at
_QUANTISED_GEMMS = {"_int_mm": "int8", "_scaled_mm": "fp8"}
#: counted costs per configuration key (one counted pass per configuration and process)
_CACHE: dict[tuple, dict[str, StageWork]] = {}


def _storage_ptr(t: torch.Tensor) -> int:
    """The address of a tensor's storage (0 when it has none)."""
    try:
        return t.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):
        return 0


def _unique_bytes(tensors: list[torch.Tensor]) -> int:
    """Bytes of distinct tensors (the same storage and size counted once)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for t in tensors:
        key = (_storage_ptr(t), t.numel())
        if key not in seen:
            seen.add(key)
            total += _tensor_bytes(t)
    return total


def _aliases_an_input(out: Any, args: Any, kwargs: Any) -> bool:
    """True when every output tensor shares storage with an input (a real view, no data moved).

    Ops like ``to``, ``reshape`` or ``contiguous`` are declared as possible views but copy when they
    must (a dtype change, a non-viewable layout); those copies move data and are counted.
    """
    inputs = {_storage_ptr(t) for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)}
    outputs = [_storage_ptr(t) for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
    return all(p in inputs for p in outputs)


def _tensor_bytes(t: torch.Tensor) -> int:
    """Bytes a tensor spans: numel x element size, at most its storage (expanded views count once)."""
    nbytes = t.numel() * t.element_size()
    try:
        return min(nbytes, t.untyped_storage().nbytes())
    except (RuntimeError, NotImplementedError):  # tensors without storage (meta, sparse, ...)
        return nbytes


class _StageCost:
    __slots__ = ("flops", "bytes", "ops", "flops_by_precision")

    def __init__(self) -> None:
        self.flops = 0
        self.bytes = 0
        self.ops = 0
        self.flops_by_precision: dict[str, int] = defaultdict(int)


class _CostMode(TorchDispatchMode):
    """Sees each aten op above FlopCounterMode; books FLOPs and bytes to the open stage."""

    def __init__(self, counter: CostCounter):
        super().__init__()
        self.counter = counter

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        flops_before = self.counter._total_flops()
        out = func(*args, **kwargs)
        name = func._overloadpacket.__name__ if hasattr(func, "_overloadpacket") else str(func)
        if name in _METADATA_OPS or (getattr(func, "is_view", False) and _aliases_an_input(out, args, kwargs)):
            return out
        flops = self.counter._total_flops() - flops_before
        inputs = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        quantised = _QUANTISED_GEMMS.get(name)
        if quantised is not None and not flops and len(inputs) >= 2:  # FlopCounterMode has no formula for them
            (m, k), n = inputs[0].shape[-2:], inputs[1].shape[-1]
            flops = 2 * m * k * n
            self.counter._book(flops, _unique_bytes(inputs) + _unique_bytes(
                [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]), None, precision=quantised)
            return out
        outputs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        out_bytes = _unique_bytes(outputs)
        gather_factor = _GATHER_READ_FACTOR.get(name)
        if gather_factor is not None and inputs:
            # a gather reads only what it picks from its source, not the whole source tensor
            source = inputs[0]
            in_bytes = min(_tensor_bytes(source), gather_factor * out_bytes) + _unique_bytes(inputs[1:])
        else:
            in_bytes = _unique_bytes(inputs)  # a tensor passed twice is read once
        nbytes = in_bytes + out_bytes  # in-place ops read and write the same tensor: both count
        out_dtype = outputs[0].dtype if outputs else None
        self.counter._book(flops, nbytes, out_dtype)
        return out


class CostCounter:
    """Context manager: count FLOPs, bytes and ops per stage of the work run inside it (this thread)."""

    def __init__(self, precision: str = "fp32"):
        self.precision = precision
        self.stages: dict[str, _StageCost] = {}
        self._stack: list[str] = []
        self._thread = threading.get_ident()
        self._flop_counter: FlopCounterMode | None = None
        self._mode: _CostMode | None = None

    def _total_flops(self) -> int:
        assert self._flop_counter is not None
        return int(sum(self._flop_counter.flop_counts["Global"].values()))

    def _observe(self, timer: Any, name: str, opening: bool) -> None:
        """Stage observer: track the open stage of this thread; a stage that opens is listed even if empty."""
        if threading.get_ident() != self._thread:
            return
        if opening:
            self.open_stage(name)
            self._stack.append(name)
        elif self._stack and self._stack[-1] == name:
            self._stack.pop()

    def _book(self, flops: int, nbytes: int, dtype: torch.dtype | None, precision: str | None = None) -> None:
        stage = self._stack[-1] if self._stack else UNSTAGED
        cost = self.stages.get(stage)
        if cost is None:
            cost = self.stages[stage] = _StageCost()
        cost.flops += flops
        cost.bytes += nbytes
        cost.ops += 1
        if flops:
            if precision is None:
                precision = _DTYPE_PRECISION.get(dtype, "fp32") if dtype is not None else "fp32"
            cost.flops_by_precision[precision] += flops

    def open_stage(self, name: str) -> None:
        """Make sure ``name`` appears in the result even if it runs no torch op (host stage)."""
        self.stages.setdefault(name, _StageCost())

    def __enter__(self) -> CostCounter:
        self._thread = threading.get_ident()
        self._flop_counter = FlopCounterMode(display=False)
        self._flop_counter.__enter__()
        self._mode = _CostMode(self)
        self._mode.__enter__()
        add_stage_observer(self._observe)
        return self

    def __exit__(self, *exc: Any) -> None:
        remove_stage_observer(self._observe)
        assert self._mode is not None and self._flop_counter is not None
        self._mode.__exit__(*exc)
        self._flop_counter.__exit__(*exc)
        self._mode = None

    def result(self) -> dict[str, StageWork]:
        """{stage: its counted work}; its precision = the dtype most of its FLOPs ran in."""
        return {name: StageWork(flops=int(cost.flops), bytes=int(cost.bytes), ops=int(cost.ops),
                                precision=stage_precision(dict(cost.flops_by_precision), self.precision))
                for name, cost in self.stages.items()}


def stage_precision(flops_by_precision: dict[str, int], mode: str) -> str:
    """The precision a stage's FLOPs mostly ran at; fp32 FLOPs count as tf32 when the mode is tf32."""
    if not flops_by_precision:  # no matmul/conv work: the precision mode does not apply
        return "fp32"
    dominant = max(flops_by_precision, key=lambda k: flops_by_precision[k])
    return "tf32" if dominant == "fp32" and mode == "tf32" else dominant


def count_cost(key: tuple, run: Callable[[], Any], precision: str = "fp32") -> dict[str, StageWork]:
    """Run ``run()`` once under a CostCounter and cache the per-stage result under ``key``."""
    if key in _CACHE:
        return _CACHE[key]
    with CostCounter(precision) as counter:
        run()
    _CACHE[key] = counter.result()
    return _CACHE[key]


def count_session_cost(frames: np.ndarray, queries: np.ndarray, config: Any, tracker: Any = None,
                       tracker_loader: Callable[[str], Any] | None = None,
                       video_info: dict[str, Any] | None = None) -> dict[str, StageWork]:
    """One extra counted pass of a session (cached by configuration). Run it after the timed runs.
    video_info: the reader's info, as the timed sessions got it (queries are in the video's pixels)."""
    from engine.core.errors import UserError
    from engine.run.session import Failed, Session

    frames = np.asarray(frames)
    tracker_name = getattr(tracker, "name", config.tracker)
    key = (tracker_name, config.device, config.precision, config.points_per_batch, config.frames_per_batch,
           tuple(frames.shape), len(queries))

    if tracker is None:
        from engine.trackers import load_tracker

        tracker = (tracker_loader or load_tracker)(config.tracker)

    def run() -> None:
        with tracker.counting_mode():
            last = Session(frames, queries, config, tracker=tracker, tracker_loader=tracker_loader,
                           video_info=video_info).run()
        if isinstance(last, Failed):
            raise UserError(f"the counted pass failed: {last.message}", last.suggestion)

    return count_cost(key, run, config.precision)


def clear_cache() -> None:
    """Forget counted costs (tests; a tracker whose code changed)."""
    _CACHE.clear()
