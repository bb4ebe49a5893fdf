"""cudnn_benchmark_off: a conv-heavy feature net on fixed shapes, with ``cudnn.benchmark`` left False.

Every call has the same shapes, the case cuDNN's autotuner is for. The body works on ``WIDTH`` = 33 channels
(32 learned ones and an edge-strength channel appended to them, as users append coordinate or edge maps), at half
resolution; without benchmarking cuDNN takes its heuristic choice for 3x3 convs of 33 channels, which on the H200
was measured slower than the benchmark's (``scripts/cudnn_sweep.py``, session 19: 8x33x128x128 NCHW 3x3 convs,
off against on, TF32 0.183 -> 0.100 ms, fp32 0.195 -> 0.140, bf16 0.108 -> 0.081 ms). The session-18 body
(dilated and 5x5 convs of 32 channels) cost nothing measurable there: cuDNN's heuristics picked what
benchmarking picked.

The body's convs are the module-level ``BODY`` table (kernel, dilation, groups: one row per residual conv at
half resolution, ``WIDTH`` channels), so a re-plant on another conv family changes the table, not the code.
"""

from __future__ import annotations

import torch
from torch import nn

from tests.plugins.field.common import frames_to_float, seeded, track

LEARNED = 32  # the stem's channels
WIDTH = LEARNED + 1  # the body's: the learned ones and the edge-strength channel
FEATURE_CHANNELS = 16
#: the residual convs at H/2 as (kernel, dilation, groups); padding keeps the size: dilation * (kernel - 1) / 2
BODY: tuple[tuple[int, int, int], ...] = (
    (3, 1, 1),
    (3, 1, 1),
    (3, 1, 1),
    (3, 1, 1),
)


class ConvHeavyBackbone(nn.Module):
    """frames [T, 3, H, W] -> unit features [T, C, H/4, W/4]: a stem, the ``BODY`` convs at H/2, a head."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, LEARNED, 3, stride=2, padding=1)
        self.body = nn.ModuleList([
            nn.Conv2d(WIDTH, WIDTH, k, padding=d * (k - 1) // 2, dilation=d, groups=g) for k, d, g in BODY
        ])
        self.head = nn.Conv2d(WIDTH, FEATURE_CHANNELS, 3, stride=2, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        grey = x.mean(dim=1, keepdim=True)
        blurred = nn.functional.avg_pool2d(grey, 3, stride=1, padding=1)
        edges = nn.functional.avg_pool2d((grey - blurred).abs(), 2)  # edge strength [T, 1, H/2, W/2]
        x = torch.cat([torch.relu(self.stem(x)), edges], dim=1)
        # planted: 33-channel 3x3 convs on fixed shapes, run with cudnn.benchmark False (its default)
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
