"""large_alloc_per_call: an occupancy vote volume sized for the longest supported video, made every call.

The volume is ``MAX_FRAMES x H x W`` float32 (1 GiB for 256x256 frames on a GPU; the CPU build sizes it
for ``MAX_FRAMES_CPU``: 1 MiB for the tests' 64x64),
allocated, zero-filled and normalised (a second volume of the same size) on every call, although a run
uses ``T`` of its frames.

``MAX_FRAMES`` is 4096 (about 2.3 minutes at 30 fps), the kind of "longest video we support" constant a user
writes. The first plant sized it for 1024 frames (256 MiB): on the H200 (session 18) the pool served it with no
cudaMalloc, its fill took 0.06 ms and the function's kernels 0.42 ms (5.8 % of a ~7 ms run), most of it the
normalising pass over the 977 frames no call uses; at that size the sweep's saving is too small a share to be
a run's top problem. The cost of the class (a worst-case buffer made and swept every call) grows with the
buffer, so the plant is sized like a long-video worst case.
"""

from __future__ import annotations

import torch
from torch import nn

from tests.plugins.field.common import BackboneTracker, frames_to_float, seeded, track

MAX_FRAMES = 4096  # the longest video the vote volume is sized for (on a GPU): 1 GiB at 256x256
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
