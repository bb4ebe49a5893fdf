"""Plugin trackers that make a deep capture long or dangerous (issue 20 item 10).

| factory        | what it does while tracking                                                        |
| many_ops       | ``MANY_OPS`` tiny tensor ops per call (a long capture: each recorded op costs time) |
| uses_profiler  | runs its work under its own ``torch.profiler.profile`` (a second profiler session)  |
| fails_when_profiled | tracks, but raises RuntimeError when run under a profiler (the capture's own run fails) |
| hangs_when_profiled | under a profiler waits on ``misbehaving.RELEASE`` (a hang that can't be abandoned) |
| interrupts_itself | ``MANY_OPS`` tiny ops; under a profiler it sends itself SIGINT at op ``INTERRUPT_AT_OP`` |

Both are ``nn.Module`` plugins ``(frames uint8 [T, H, W, 3], queries [N, 3]) -> (tracks [N, T, 2], visible [N, T])``
whose points stay where they were queried.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import torch
from torch import nn

#: tiny ops per call of many_ops (a test may set it, or TRACKSCOPE_TEST_MANY_OPS for a subprocess)
MANY_OPS = int(os.environ.get("TRACKSCOPE_TEST_MANY_OPS", "20000"))
#: interrupts_itself sends itself SIGINT at this op of a profiled call
INTERRUPT_AT_OP = 100
#: when it did (time.monotonic), for a measurement
INTERRUPTED_AT: list[float] = []


def _still(frames: torch.Tensor, queries: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    t = frames.shape[0]
    return queries[:, None, 1:].expand(-1, t, -1).clone(), torch.ones(queries.shape[0], t, dtype=torch.bool)


class _ManyOps(nn.Module):
    def forward(self, frames: torch.Tensor, queries: torch.Tensor):
        x = torch.zeros(4)
        for _ in range(MANY_OPS):
            x = x + 1.0
        return _still(frames, queries)


class _UsesProfiler(nn.Module):
    def forward(self, frames: torch.Tensor, queries: torch.Tensor):
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU]):
            x = frames.float().mean()
        return _still(frames, queries + 0 * x)


class _InterruptsItself(nn.Module):
    def forward(self, frames: torch.Tensor, queries: torch.Tensor):
        profiled = torch.autograd.profiler._is_profiler_enabled
        x = torch.zeros(4)
        for i in range(MANY_OPS):
            if profiled and i == INTERRUPT_AT_OP:
                INTERRUPTED_AT.append(time.monotonic())
                signal.raise_signal(signal.SIGINT)
            x = x + 1.0
        return _still(frames, queries)


class _FailsWhenProfiled(nn.Module):
    def forward(self, frames: torch.Tensor, queries: torch.Tensor):
        if torch.autograd.profiler._is_profiler_enabled:
            raise RuntimeError("this plugin refuses to be profiled")
        return _still(frames, queries)


#: set when hangs_when_profiled has started waiting under the profiler
HUNG_UNDER_PROFILER = threading.Event()


class _HangsWhenProfiled(nn.Module):
    def forward(self, frames: torch.Tensor, queries: torch.Tensor):
        if torch.autograd.profiler._is_profiler_enabled:
            from tests.plugins.misbehaving import RELEASE

            HUNG_UNDER_PROFILER.set()
            RELEASE.wait()
        return _still(frames, queries)


def hangs_when_profiled() -> nn.Module:
    return _HangsWhenProfiled()


def fails_when_profiled() -> nn.Module:
    return _FailsWhenProfiled()


def interrupts_itself() -> nn.Module:
    return _InterruptsItself()


def many_ops() -> nn.Module:
    return _ManyOps()


def uses_profiler() -> nn.Module:
    return _UsesProfiler()
