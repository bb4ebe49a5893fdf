"""Stage timing: CUDA events and NVTX ranges on the GPU, perf_counter on the CPU.

On the GPU each stage records a pair of CUDA events on the current stream; nothing synchronises
inside a batch. ``collect()`` is called once per batch, after the tracker has copied its results
back to the host (which already waited for the GPU), and only then are the events read. NVTX
ranges carry the same names, so an Nsight Systems timeline shows the stages as trackscope does.
"""

from __future__ import annotations

import time
from collections import defaultdict
from contextlib import contextmanager
from typing import Callable, Iterator

import torch

#: Stage names of the built-in tracker, in the order they run (shown to users).
BUILTIN_STAGES = (
    "decode",
    "upload",
    "backbone",
    "query_features",
    "cost_volume",
    "init_head",
    "refine",
    "download",
)


#: Called as ``observer(timer, name, opening)`` whenever any StageTimer opens (True) or closes (False) a
#: stage, timing enabled or not; the cost counter uses it to attribute work to stages. Empty normally.
StageObserver = Callable[["StageTimer", str, bool], None]
_STAGE_OBSERVERS: list[StageObserver] = []


def add_stage_observer(observer: StageObserver) -> None:
    """Register ``observer`` for stage open/close notifications of every StageTimer."""
    _STAGE_OBSERVERS.append(observer)


def remove_stage_observer(observer: StageObserver) -> None:
    """Unregister an observer added with ``add_stage_observer`` (no error if absent)."""
    if observer in _STAGE_OBSERVERS:
        _STAGE_OBSERVERS.remove(observer)


class StageTimer:
    """Times named stages of one run; ``collect()`` returns ms per stage since the last call."""

    def __init__(self, device: torch.device | str = "cpu", enabled: bool = True, nvtx: bool = True):
        self.device = torch.device(device)
        self.enabled = enabled
        self.use_cuda = self.device.type == "cuda" and torch.cuda.is_available()
        self.nvtx = nvtx and self.use_cuda
        self._host_ms: dict[str, float] = defaultdict(float)
        self._pending: list[tuple[str, torch.cuda.Event, torch.cuda.Event]] = []
        self._open: list[tuple[str, float | torch.cuda.Event]] = []
        # host cost per stage (measured on the H200: ~27 us with a new event pair and a current-stream lookup per
        # stage): events are reused once read, and the stream is looked up once per batch
        self._free: list[torch.cuda.Event] = []
        self._stream: torch.cuda.Stream | None = None

    def _event(self) -> torch.cuda.Event:
        return self._free.pop() if self._free else torch.cuda.Event(enable_timing=True)

    def _current_stream(self) -> torch.cuda.Stream:
        if self._stream is None:
            self._stream = torch.cuda.current_stream(self.device)
        return self._stream

    def begin(self, name: str, host: bool = False) -> None:
        """Open a stage; pair with ``end(name)`` (used by forward hooks on plugin modules)."""
        for observer in tuple(_STAGE_OBSERVERS):
            observer(self, name, True)
        if not self.enabled:
            return
        if self.use_cuda and not host:
            if self.nvtx:
                torch.cuda.nvtx.range_push(name)
            start = self._event()
            start.record(self._current_stream())
            self._open.append((name, start))
        else:
            self._open.append((name, time.perf_counter()))

    def end(self, name: str) -> None:
        if self.enabled and (not self._open or self._open[-1][0] != name):
            raise RuntimeError(f"stage {name!r} ended but {self._open[-1][0] if self._open else 'none'} is open")
        for observer in tuple(_STAGE_OBSERVERS):
            observer(self, name, False)
        if not self.enabled:
            return
        _, start = self._open.pop()
        if isinstance(start, float):
            self._host_ms[name] += (time.perf_counter() - start) * 1e3
            return
        end = self._event()
        end.record(self._current_stream())
        if self.nvtx:
            torch.cuda.nvtx.range_pop()
        self._pending.append((name, start, end))

    @contextmanager
    def stage(self, name: str, host: bool = False) -> Iterator[None]:
        """Time the body as stage ``name``. ``host=True`` times host work with perf_counter."""
        self.begin(name, host=host)
        try:
            yield
        finally:
            self.end(name)

    def collect(self) -> dict[str, float]:
        """Milliseconds per stage since the last collect. Waits only for the last recorded event."""
        out: dict[str, float] = dict(self._host_ms)
        if self._pending:
            self._pending[-1][2].synchronize()
            for name, start, end in self._pending:
                out[name] = out.get(name, 0.0) + start.elapsed_time(end)
                self._free += (start, end)  # read: free for the next batch's stages
        self._host_ms.clear()
        self._pending.clear()
        self._stream = None  # looked up again by the next batch (a tracker may have changed it)
        return out

    def reset(self) -> None:
        self._host_ms.clear()
        self._pending.clear()
        self._open.clear()
        self._stream = None
