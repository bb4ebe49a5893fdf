"""elementwise_chain: the correlation volume sharpened by a long chain of elementwise ops.

Twelve separate kernels each read and write the whole [N, T, h*w] volume: memory-bound work that
torch.compile would fuse into one pass. Every op is non-decreasing, so the best cell is unchanged.
"""

from __future__ import annotations

import torch
from torch import nn

from tests.plugins.field.common import BackboneTracker, frames_to_float, seeded, track

SCALE = 4.0
SHIFT = 0.5
FLOOR = 1e-4
VISIBLE_SHARPNESS = 0.5  # sharpened score above which a match counts as visible


def sharpen(corr: torch.Tensor) -> torch.Tensor:
    """corr [N, T, P] in [-1, 1] -> sharpened scores [N, T, P] in (0, 1]."""
    # planted: 12 unfused elementwise kernels over the whole volume
    x = corr * SCALE + SHIFT
    x = torch.tanh(x)
    x = x + 1.0
    x = torch.exp(x)
    x = torch.sigmoid(x)
    x = torch.clamp(x, min=FLOOR)
    x = torch.sqrt(x)
    x = x * x
    x = torch.log1p(x)
    x = x / torch.log1p(torch.ones((), device=x.device, dtype=x.dtype))
    x = torch.relu(x)
    return torch.clamp(x, max=1.0)


class ElementwiseChainTracker(BackboneTracker):
    def forward(self, frames: torch.Tensor, queries: torch.Tensor):
        return track(self.backbone(frames_to_float(frames)), queries, sharpen, visible_above=VISIBLE_SHARPNESS)


def make() -> nn.Module:
    return seeded(ElementwiseChainTracker(), seed=115)
