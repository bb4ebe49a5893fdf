"""launch_bound_loop: a constant-velocity filter stepped frame by frame in tiny elementwise ops.

Each frame runs ``FILTER_STEPS`` small predict/update steps over all points ([N, 2] tensors): about ten
kernels each, thousands of launches per call, each far shorter than its launch.
"""

from __future__ import annotations

import torch
from torch import nn

from tests.plugins.field.common import BackboneTracker, frames_to_float, seeded, track

FILTER_STEPS = 10  # predict/update steps per frame
GAIN = 0.3  # measurement weight per step
DAMPING = 0.8  # velocity kept per step


def filter_tracks(tracks: torch.Tensor, width_px: float, height_px: float) -> torch.Tensor:
    """tracks [N, T, 2] -> filtered tracks [N, T, 2]."""
    pos = tracks[:, 0]
    velocity = torch.zeros_like(pos)
    limit = torch.tensor([width_px - 1.0, height_px - 1.0], device=tracks.device)
    out = [pos]
    for t in range(1, tracks.shape[1]):
        measured = tracks[:, t]
        # planted: a Python loop of tiny ops per frame (thousands of launches per call)
        for _ in range(FILTER_STEPS):
            predicted = pos + velocity / FILTER_STEPS
            residual = measured - predicted
            velocity = DAMPING * velocity + GAIN * residual
            pos = predicted + GAIN * residual
            pos = torch.minimum(torch.clamp(pos, min=0.0), limit)
        out.append(pos)
    return torch.stack(out, dim=1)


class LaunchBoundTracker(BackboneTracker):
    def forward(self, frames: torch.Tensor, queries: torch.Tensor):
        tracks, visible = track(self.backbone(frames_to_float(frames)), queries)
        return filter_tracks(tracks, float(frames.shape[2]), float(frames.shape[1])), visible


def make() -> nn.Module:
    return seeded(LaunchBoundTracker(), seed=114)
