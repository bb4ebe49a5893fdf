"""The direct-call reference of a bench: the tracker called alone in the bench's process and thread.

What a user timing their model by hand would measure, beside the session runs of the same configuration:
no Session, no plugin guard, no stage timing (a disabled StageTimer), no submodule hooks, no telemetry
sampler (the bench stops it around these calls); inputs already on the device; ``torch.inference_mode``
and the run's ``precision_context``; the device synchronised before each clock read.

- a module or callable plugin (``PluginTracker``): its own callable (for int8/fp8 its quantised copy) on the
  uploaded frames and each batch of queries, its outputs left on the device;
- a built-in tracker or a plugin that is a Tracker: ``prepare`` then ``track`` of every batch of points
  (the session's batches), without the session.

The session's ms over the direct median (``Report.session_vs_direct``) is what trackscope's own path costs.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import torch

from engine.core.precision import precision_context
from engine.core.stages import StageTimer
from engine.report.parts import DirectReference
from engine.trackers.base import RunContext, Tracker
from engine.trackers.plugin import PluginTracker

#: timed direct calls per configuration: the bench's --repeat, kept within these
DIRECT_MIN_RUNS = 3
DIRECT_MAX_RUNS = 10
#: the bench alternates blocks of session runs and direct calls, at least DIRECT_MIN_BLOCKS and about
#: DIRECT_BLOCK_RUNS session runs each, so a drift of the machine (clocks settling, a busy neighbour) moves both
#: alike: TAPIR's direct calls ranged 152-231 ms in one block of five on the H200, taken after all the session
#: runs; with three blocks, one slow stretch of three CoTracker3 session runs (106 ms against 82) still moved its
#: session/direct from 1.03 to 1.11 (docs/records/session18/call_a.log)
DIRECT_MIN_BLOCKS = 3
DIRECT_BLOCK_RUNS = 3
PLUGIN_CALLABLE = "the plugin's callable on device inputs"
PREPARE_AND_TRACK = "prepare + track, the session's batches"


def direct_runs(repeat: int) -> int:
    """How many direct calls are timed for a bench of ``repeat`` session runs."""
    return max(DIRECT_MIN_RUNS, min(repeat, DIRECT_MAX_RUNS))


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _batches(num_queries: int, points_per_batch: int) -> list[tuple[int, int]]:
    return [(start, min(num_queries, start + points_per_batch)) for start in range(0, num_queries, points_per_batch)]


class DirectCaller:
    """The tracker alone on one configuration: inputs uploaded once, then timed calls on request."""

    def __init__(self, tracker: Tracker, frames: np.ndarray, frame_queries: np.ndarray, *, precision: str,
                 points_per_batch: int, frames_per_batch: int, device: torch.device):
        self.device, self.precision = device, precision
        ctx = RunContext(device, precision, frames_per_batch, StageTimer(device, enabled=False))
        batches = _batches(len(frame_queries), points_per_batch)
        own_frames = np.array(frames, copy=True)  # a plugin writing into its frames cannot change the bench's
        with torch.inference_mode(), precision_context(precision, device):
            self._once, self.what = _one_call(tracker, own_frames, frame_queries, batches, ctx)
        self.samples: list[float] = []
        self.warmup = 0

    def call(self, times: int, *, timed: bool = True) -> None:
        """``times`` calls, each timed from a synchronised device to a synchronised device (kept when ``timed``)."""
        with torch.inference_mode(), precision_context(self.precision, self.device):
            for _ in range(times):
                _synchronize(self.device)
                t0 = time.perf_counter()
                self._once()
                _synchronize(self.device)
                if timed:
                    self.samples.append((time.perf_counter() - t0) * 1e3)
                else:
                    self.warmup += 1

    def reference(self) -> DirectReference:
        return DirectReference(samples_ms=tuple(self.samples), warmup=self.warmup, what=self.what)


def direct_blocks(repeat: int) -> int:
    """How many session/direct block pairs a bench of ``repeat`` session runs alternates (10 -> 4, 30 -> 10)."""
    return max(DIRECT_MIN_BLOCKS, -(-repeat // DIRECT_BLOCK_RUNS))


def block_sizes(total: int, blocks: int = DIRECT_MIN_BLOCKS) -> list[int]:
    """``total`` runs split into at most ``blocks`` blocks as even as they go (10, 3 -> [4, 3, 3])."""
    blocks = max(1, min(blocks, total))
    return [total // blocks + (1 if i < total % blocks else 0) for i in range(blocks)] if total > 0 else []


def _one_call(tracker: Tracker, frames: np.ndarray, frame_queries: np.ndarray, batches: list[tuple[int, int]],
              ctx: RunContext) -> tuple[Callable[[], None], str]:
    """(one run of the tracker over every batch, what it calls); uploads happen here, before any timing."""
    queries = [np.array(frame_queries[start:stop], dtype=np.float32, copy=True) for start, stop in batches]
    if isinstance(tracker, PluginTracker):
        video = tracker.prepare(frames, ctx).data["frames"]  # frames [T, H, W, 3] uint8 on the device
        on_device = [torch.from_numpy(q).to(ctx.device) for q in queries]
        _synchronize(ctx.device)

        def call_plugin_alone() -> None:
            for q in on_device:
                tracker.call_direct(video, q, ctx)

        return call_plugin_alone, PLUGIN_CALLABLE

    def prepare_and_track() -> None:
        prepared = tracker.prepare(frames, ctx)
        for q in queries:
            tracker.track(prepared, q, ctx)

    return prepare_and_track, PREPARE_AND_TRACK
