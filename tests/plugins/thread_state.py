"""A plugin that keeps per-thread state the way PyTorch does (cuDNN's execution-plan cache is thread_local).

``plan_cache`` (``--tracker tests.plugins.thread_state:plan_cache``) builds a "plan" per frame shape in a
``threading.local`` and appends the building thread's name to ``BUILDS`` each time: a plugin run on a fresh
thread per call builds again on every call, one run on a long-lived thread builds once.
"""

from __future__ import annotations

import threading

import torch
from torch import nn

#: the name of the thread each time a plan was built (a test clears it)
BUILDS: list[str] = []
_PLANS = threading.local()


class _PlanCache(nn.Module):
    def forward(self, frames: torch.Tensor, queries: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        plans: set[tuple[int, ...]] | None = getattr(_PLANS, "plans", None)
        if plans is None:
            plans = _PLANS.plans = set()
        shape = tuple(frames.shape)
        if shape not in plans:
            plans.add(shape)
            BUILDS.append(threading.current_thread().name)
        t = frames.shape[0]
        tracks = queries[:, None, 1:].expand(-1, t, -1).clone()  # [N, T, 2]: every point stays put
        return tracks, torch.ones(queries.shape[0], t, dtype=torch.bool)


plan_cache = _PlanCache
