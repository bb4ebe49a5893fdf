"""CUDA graphs for CorrTrack's stages: one graph per stage, replayed in order, so the stage timer still
sees every stage (its events are recorded between replays, never inside a capture).

Eager CorrTrack launches about a thousand small kernels per batch of points; on a fast GPU the host
cannot issue them as fast as the GPU runs them. A replayed graph issues a stage with one call.
Graphs are captured on first use for a (shape, dtype, precision) key and kept in a small LRU cache.
All stages of one key share a memory pool: each stage reads the previous stage's static outputs.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from contextlib import nullcontext

import torch

MAX_CACHED = 2  # keys with captured graphs kept alive (each holds its stages' memory)
#: cudaStreamCaptureMode of every capture: only the capturing thread's unsafe CUDA calls break it
CAPTURE_ERROR_MODE = "thread_local"

Tensors = tuple[torch.Tensor, ...]


class GraphCaptureError(RuntimeError):
    """Capturing a stage failed (its warm-up or the capture itself): the tracker falls back to eager.
    Errors while replaying, and out-of-memory errors, are not this: they reach the caller as they are."""


class GraphedStage:
    """A function of static input tensors, captured once and replayed."""

    def __init__(self, fn: Callable[..., Tensors], inputs: Sequence[torch.Tensor], pool: tuple) -> None:
        self.inputs = list(inputs)
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream), _uncached_autocast():
            fn(*self.inputs)  # warm-up: cuDNN/cuBLAS choices and handles outside the capture
        torch.cuda.current_stream().wait_stream(stream)
        self.graph = torch.cuda.CUDAGraph()
        # thread-local capture mode: a background compile (engine.trackers.compiled_switch) may allocate, sync or
        # load kernels in its own thread and stream meanwhile; in the default global mode any such call from any
        # thread invalidates this capture. This thread's own calls are still checked.
        with _uncached_autocast(), torch.cuda.graph(self.graph, pool=pool,  # type: ignore[arg-type]
                                                    capture_error_mode=CAPTURE_ERROR_MODE):
            self.outputs = tuple(fn(*self.inputs))
        self.graph.replay()  # fill the outputs, so the next stage captures on real data

    def __call__(self, *inputs: torch.Tensor) -> Tensors:
        for static, new in zip(self.inputs, inputs):
            if static.data_ptr() != new.data_ptr():
                static.copy_(new)
        self.graph.replay()
        return self.outputs


def _uncached_autocast():
    """Autocast as the caller set it, but without the weight-cast cache (not allowed across captures)."""
    if not torch.is_autocast_enabled("cuda"):
        return nullcontext()
    return torch.autocast("cuda", dtype=torch.get_autocast_dtype("cuda"), cache_enabled=False)


class GraphCache:
    """Captured stages per key, least recently used dropped beyond MAX_CACHED keys."""

    def __init__(self, max_keys: int = MAX_CACHED) -> None:
        self.max_keys = max_keys
        self._entries: OrderedDict[tuple, dict[str, GraphedStage]] = OrderedDict()
        self._pools: dict[tuple, tuple] = {}

    def stage(self, key: tuple, name: str, fn: Callable[..., Tensors], inputs: Sequence[torch.Tensor]
              ) -> Tensors:
        """Run stage ``name`` of ``key`` on ``inputs``: capture on first use, replay after.

        Inputs that are static outputs of an earlier stage of the same key are used in place; others are
        copied into the graph's own buffers. A stage may return its inputs to hand them on.
        """
        entry = self._entries.get(key)
        if entry is None:
            entry = {}
            self._entries[key] = entry
            self._pools[key] = torch.cuda.graph_pool_handle()
            while len(self._entries) > self.max_keys:
                old, _ = self._entries.popitem(last=False)
                self._pools.pop(old, None)
        self._entries.move_to_end(key)
        graphed = entry.get(name)
        if graphed is None:
            static = {o.data_ptr() for g in entry.values() for o in g.outputs}
            owned = [x if x.data_ptr() in static else x.clone() for x in inputs]
            try:
                graphed = GraphedStage(fn, owned, self._pools[key])
            except RuntimeError as exc:
                if "out of memory" in str(exc).lower():
                    raise
                raise GraphCaptureError(f"capturing stage {name!r} failed: {exc}") from exc
            entry[name] = graphed
            return graphed.outputs
        return graphed(*inputs)

    def clear(self) -> None:
        self._entries.clear()
        self._pools.clear()

    def __len__(self) -> int:
        return len(self._entries)
