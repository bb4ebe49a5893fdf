"""recompile_each_call: a compiled blending helper given a Python int that changes on every call.

forward passes its call counter to ``temporal_blend`` (compiled with ``dynamic=False``); dynamo guards
on the int's value, so every warm call compiles the helper again.

Global state: ``make()`` raises dynamo's ``recompile_limit`` (else dynamo stops recompiling after 8
values and runs the helper eagerly); ``release()`` puts it back.
"""

from __future__ import annotations

import torch
from torch import nn

from tests.plugins.field.common import Backbone, frames_to_float, seeded, track
from tests.plugins.field.compiled import RAISED_RECOMPILE_LIMIT, LazyCompiled

WARMUP_CALLS = 5  # calls over which the blend ramps in
_saved_limit: list[int] = []


def temporal_blend(tracks: torch.Tensor, step: int) -> torch.Tensor:
    """tracks [N, T, 2] -> tracks blended with their previous frame, less so as ``step`` grows."""
    weight = WARMUP_CALLS / (WARMUP_CALLS + step)
    previous = torch.cat([tracks[:, :1], tracks[:, :-1]], dim=1)
    return (1.0 - 0.1 * weight) * tracks + 0.1 * weight * previous


class RecompileTracker(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = Backbone()
        self.calls = 0
        self.blend = LazyCompiled(temporal_blend, dynamic=False)

    def forward(self, frames: torch.Tensor, queries: torch.Tensor):
        tracks, visible = track(self.backbone(frames_to_float(frames)), queries)
        self.calls += 1
        # planted: a Python int that changes every call, guarded on by dynamo: a recompile per call
        return self.blend(tracks, self.calls), visible


def make() -> nn.Module:
    import torch._dynamo

    _saved_limit.append(torch._dynamo.config.recompile_limit)
    torch._dynamo.config.recompile_limit = max(RAISED_RECOMPILE_LIMIT, torch._dynamo.config.recompile_limit)
    return seeded(RecompileTracker(), seed=118)


def release() -> None:
    """Put dynamo's recompile limit back (make() raised it)."""
    import torch._dynamo

    while _saved_limit:
        torch._dynamo.config.recompile_limit = _saved_limit.pop()
