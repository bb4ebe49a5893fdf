"""large_alloc_per_call: an occupancy vote volume sized for the longest supported video, zeroed every call.

The volume is ``MAX_FRAMES x H x W`` float32 (256 MiB for 256x256 frames; 16 MiB for the tests' 64x64),
allocated and filled on every call although a run uses ``T`` of its frames.
"""

from __future__ import annotations

import torch
from torch import nn

from tests.plugins.field.common import Backbone, frames_to_float, seeded, track

MAX_FRAMES = 1024  # the longest video the vote volume is sized for
CROWD_LIMIT = 8  # more points than this on one pixel in a frame: they are marked not visible


def crowding(tracks: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """tracks [N, T, 2] px -> how many points share each point's pixel in its frame [N, T]."""
    n, t, _ = tracks.shape
    # planted: a MAX_FRAMES x H x W scratch volume allocated and zero-filled on every call
    votes = torch.zeros(max(MAX_FRAMES, t), height, width, device=tracks.device)
    x = tracks[..., 0].round().long().clamp(0, width - 1)
    y = tracks[..., 1].round().long().clamp(0, height - 1)
    frame = torch.arange(t, device=tracks.device).expand(n, t)
    flat = (frame * height + y) * width + x  # [N, T]
    votes.view(-1).index_add_(0, flat.reshape(-1), torch.ones(n * t, device=tracks.device))
    return votes.view(-1)[flat]


class LargeAllocTracker(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = Backbone()

    def forward(self, frames: torch.Tensor, queries: torch.Tensor):
        tracks, visible = track(self.backbone(frames_to_float(frames)), queries)
        crowded = crowding(tracks, frames.shape[1], frames.shape[2]) > CROWD_LIMIT
        return tracks, visible & ~crowded


def make() -> nn.Module:
    return seeded(LargeAllocTracker(), seed=117)
