"""cpu_ops_in_gpu_run: a Fourier positional encoding built with torch on the CPU on every call, then moved.

The encoding only depends on the frame size, but forward computes it with CPU tensors (meshgrid, sin,
cos over ``ENCODING_BANDS`` bands at full resolution), pools it, and sends it to the device: CPU time in
the run that the GPU work behind it waits for.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from tests.plugins.field.common import FEATURE_STRIDE, Backbone, frames_to_float, seeded, track

ENCODING_BANDS = 8  # frequencies per axis: 4 * bands channels of sin/cos
ENCODING_WEIGHT = 0.1


def fourier_encoding_on_cpu(height: int, width: int) -> torch.Tensor:
    """[4 * ENCODING_BANDS, H, W] sin/cos encoding of the pixel grid."""
    # planted: torch ops on CPU tensors every call (the device gets the result afterwards)
    ys = torch.linspace(-1.0, 1.0, height)
    xs = torch.linspace(-1.0, 1.0, width)
    gy, gx = torch.meshgrid(ys, xs, indexing="ij")
    bands = 2.0 ** torch.arange(ENCODING_BANDS, dtype=torch.float32) * math.pi
    angles_x = gx[None] * bands[:, None, None]
    angles_y = gy[None] * bands[:, None, None]
    return torch.cat([angles_x.sin(), angles_x.cos(), angles_y.sin(), angles_y.cos()], dim=0)


class PositionProjection(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.proj = nn.Conv2d(4 * ENCODING_BANDS, channels, 1)

    def forward(self, encoding: torch.Tensor) -> torch.Tensor:
        """[4B, H, W] -> [1, C, H/4, W/4]."""
        pooled = nn.functional.avg_pool2d(encoding[None], FEATURE_STRIDE, ceil_mode=True)
        return self.proj(pooled)


class CpuOpsTracker(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = Backbone()
        self.position = PositionProjection(channels=16)

    def forward(self, frames: torch.Tensor, queries: torch.Tensor):
        feats = self.backbone(frames_to_float(frames))
        encoding = fourier_encoding_on_cpu(frames.shape[1], frames.shape[2]).to(frames.device)
        feats = nn.functional.normalize(feats + ENCODING_WEIGHT * self.position(encoding), dim=1)
        return track(feats, queries)


def make() -> nn.Module:
    return seeded(CpuOpsTracker(), seed=121)
