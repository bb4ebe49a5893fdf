"""cudnn_benchmark_off: a conv-heavy feature net on fixed shapes, with ``cudnn.benchmark`` left False.

Every call has the same shapes, the case cuDNN's autotuner is for; without it cuDNN takes its heuristic
choice for the dilated and 5x5 convs at half resolution.

The body's convs are the module-level ``BODY`` table (kernel, dilation, groups: one row per residual conv at
half resolution, ``WIDTH`` channels), so a re-plant on a conv family that ``scripts/cudnn_sweep.py`` measures a
real gain for on the card changes the table, not the code.
"""

from __future__ import annotations

import torch
from torch import nn

from tests.plugins.field.common import frames_to_float, seeded, track

WIDTH = 32
FEATURE_CHANNELS = 16
#: the residual convs at H/2 as (kernel, dilation, groups); padding keeps the size: dilation * (kernel - 1) / 2
BODY: tuple[tuple[int, int, int], ...] = (
    (3, 2, 1),
    (5, 1, 1),
    (3, 4, 1),
    (5, 1, 1),
)


class ConvHeavyBackbone(nn.Module):
    """frames [T, 3, H, W] -> unit features [T, C, H/4, W/4]: a stem, the ``BODY`` convs at H/2, a head."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, WIDTH, 3, stride=2, padding=1)
        self.body = nn.ModuleList([
            nn.Conv2d(WIDTH, WIDTH, k, padding=d * (k - 1) // 2, dilation=d, groups=g) for k, d, g in BODY
        ])
        self.head = nn.Conv2d(WIDTH, FEATURE_CHANNELS, 3, stride=2, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.stem(x))
        # planted: dilated and 5x5 convs on fixed shapes, run with cudnn.benchmark False (its default)
        for conv in self.body:
            x = x + torch.relu(conv(x))
        return nn.functional.normalize(self.head(x), dim=1)


class CudnnBenchmarkOffTracker(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = ConvHeavyBackbone()

    def forward(self, frames: torch.Tensor, queries: torch.Tensor):
        return track(self.backbone(frames_to_float(frames)), queries)


def make() -> nn.Module:
    return seeded(CudnnBenchmarkOffTracker(), seed=123)
