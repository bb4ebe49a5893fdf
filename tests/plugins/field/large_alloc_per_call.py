"""large_alloc_per_call: an occupancy vote volume sized for the longest supported video, made every call.

The volume is ``MAX_FRAMES x H x W`` float32 (256 MiB for 256x256 frames on a GPU; the CPU build sizes it
for ``MAX_FRAMES_CPU``: 1 MiB for the tests' 64x64),
allocated, zero-filled and normalised (a second volume of the same size) on every call, although a run
uses ``T`` of its frames.
"""

from __future__ import annotations

import torch
from torch import nn

from tests.plugins.field.common import BackboneTracker, frames_to_float, seeded, track

MAX_FRAMES = 1024  # the longest video the vote volume is sized for (on a GPU)
MAX_FRAMES_CPU = 64  # the same on the CPU
CROWDED_SHARE = 0.25  # a point whose pixel holds more than this share of its frame's points is not visible


def crowding(tracks: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """tracks [N, T, 2] px -> the share of its frame's points on each point's pixel [N, T]."""
    n, t, _ = tracks.shape
    # planted: MAX_FRAMES x H x W scratch volumes allocated (and filled) on every call
    longest = MAX_FRAMES if tracks.is_cuda else MAX_FRAMES_CPU
    votes = torch.zeros(max(longest, t), height, width, device=tracks.device)
    x = tracks[..., 0].round().long().clamp(0, width - 1)
    y = tracks[..., 1].round().long().clamp(0, height - 1)
    frame = torch.arange(t, device=tracks.device).expand(n, t)
    flat = (frame * height + y) * width + x  # [N, T]
    votes.view(-1).index_add_(0, flat.reshape(-1), torch.ones(n * t, device=tracks.device))
    share = votes / votes.sum(dim=(1, 2), keepdim=True).clamp(min=1.0)  # every frame of the volume, used or not
    return share.view(-1)[flat]


class LargeAllocTracker(BackboneTracker):
    def forward(self, frames: torch.Tensor, queries: torch.Tensor):
        tracks, visible = track(self.backbone(frames_to_float(frames)), queries)
        crowded = crowding(tracks, frames.shape[1], frames.shape[2]) > CROWDED_SHARE
        return tracks, visible & ~crowded


def make() -> nn.Module:
    return seeded(LargeAllocTracker(), seed=117)
