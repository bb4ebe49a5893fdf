"""contiguous_hot_loop: temporal smoothing of the correlation volume with a transpose copy per iteration."""

from __future__ import annotations

import torch
from torch import nn

from tests.plugins.field.common import BackboneTracker, frames_to_float, seeded, track

ITERATIONS = 4  # smoothing passes


def smooth_over_time(corr: torch.Tensor) -> torch.Tensor:
    """corr [N, T, P] -> corr smoothed along T with a [1, 2, 1] / 4 filter, ITERATIONS times."""
    for _ in range(ITERATIONS):
        # planted: the whole volume transposed and copied (.contiguous()) twice per iteration
        per_frame = corr.permute(1, 0, 2).contiguous()  # [T, N, P]
        padded = torch.cat([per_frame[:1], per_frame, per_frame[-1:]], dim=0)
        smoothed = 0.25 * padded[:-2] + 0.5 * padded[1:-1] + 0.25 * padded[2:]
        corr = smoothed.transpose(0, 1).contiguous()  # [N, T, P]
    return corr


class ContiguousHotLoopTracker(BackboneTracker):
    def forward(self, frames: torch.Tensor, queries: torch.Tensor):
        return track(self.backbone(frames_to_float(frames)), queries, smooth_over_time)


def make() -> nn.Module:
    return seeded(ContiguousHotLoopTracker(), seed=109)
