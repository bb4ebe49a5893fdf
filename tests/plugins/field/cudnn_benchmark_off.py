"""cudnn_benchmark_off: a token-mixing feature net on fixed shapes, with ``cudnn.benchmark`` left False.

A stem of two stride-2 convs to ``TOKEN_CHANNELS`` = 128 channels at H/4, then ``BODY``: residual 1-D convs along
the flattened feature tokens ([T, 128, h * w], a token mixer as conv-mixer and hybrid ViT trackers write them),
then a 1x1 head. Every call has the same shapes (16 frames per batch; 15 in the last), the case cuDNN's
autotuner is for, and the channel counts are multiples of 8 (no tensor-core misalignment beside the planted
problem). Without benchmarking cuDNN takes its heuristic algorithm for wide dense 1-D kernels, which on the H200
was measured nearly twice as slow as the benchmark's (``scripts/cudnn_sweep.py``, session 19, 16x128x4096 conv1d,
TF32, off against on: kernel 13 0.271 -> 0.148 ms, kernel 15 0.297 -> 0.162 ms; kernel 11 and below: no gain).

Earlier plants, for the record: session 18's dilated and 5x5 convs of 32 channels cost nothing measurable (the
heuristics picked what benchmarking picked); session 19's 33-channel 3x3 convs cost 9.5-17 % but were also
misaligned for tensor cores, and gemm_misaligned's estimate ranked above the measured cuDNN gain.
"""

from __future__ import annotations

import torch
from torch import nn

from tests.plugins.field.common import frames_to_float, seeded, track

STEM_CHANNELS = 32
TOKEN_CHANNELS = 128
FEATURE_CHANNELS = 16
#: kernel sizes of the residual token-mixing 1-D convs (padding keeps the length: kernel // 2)
BODY: tuple[int, ...] = (15, 13, 15, 13)


class TokenMixerBackbone(nn.Module):
    """frames [T, 3, H, W] -> unit features [T, C, H/4, W/4]: a stem, the ``BODY`` token mixers, a 1x1 head."""

    def __init__(self):
        super().__init__()
        self.stem1 = nn.Conv2d(3, STEM_CHANNELS, 3, stride=2, padding=1)
        self.stem2 = nn.Conv2d(STEM_CHANNELS, TOKEN_CHANNELS, 3, stride=2, padding=1)
        self.mixers = nn.ModuleList([nn.Conv1d(TOKEN_CHANNELS, TOKEN_CHANNELS, k, padding=k // 2) for k in BODY])
        self.head = nn.Conv1d(TOKEN_CHANNELS, FEATURE_CHANNELS, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.stem2(torch.relu(self.stem1(x))))
        t, _, h, w = x.shape
        tokens = x.flatten(2)  # [T, C, h * w]
        # planted: wide dense 1-D convs on fixed shapes, run with cudnn.benchmark False (its default)
        for mix in self.mixers:
            tokens = tokens + torch.relu(mix(tokens))
        return nn.functional.normalize(self.head(tokens).view(t, FEATURE_CHANNELS, h, w), dim=1)


class CudnnBenchmarkOffTracker(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = TokenMixerBackbone()

    def forward(self, frames: torch.Tensor, queries: torch.Tensor):
        return track(self.backbone(frames_to_float(frames)), queries)


def make() -> nn.Module:
    return seeded(CudnnBenchmarkOffTracker(), seed=123)
