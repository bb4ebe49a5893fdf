"""TAPIR (tapnet's PyTorch port) as a trackscope plugin, random weights: ``--tracker scripts.peers.tapir_plugin:make``.

The plugin protocol (engine/trackers/plugin.py): ``forward(frames uint8 [T, H, W, 3] on the device, queries
float32 [N, 3] (t, x, y) pixels) -> (tracks [N, T, 2] pixels (x, y), visible bool [N, T])``. TAPIR's own
conventions, kept as tapnet's demo uses them: video float [1, T, H, W, 3] in [-1, 1]; query points
[1, N, 3] as (t, y, x) in the video's raster pixels; tracks come back as (x, y) raster pixels; a point is
visible where (1 - sigmoid(occlusion)) * (1 - sigmoid(expected_dist)) > 0.5.

The sources come from ``TRACKSCOPE_PEERS`` (default ``.carry/peers`` under the repo root), put on sys.path
inside ``make``; they need ``einshape`` and ``dm-tree``.
"""

from __future__ import annotations

import torch
from torch import nn

from scripts.peers._sources import add_peer_sources

#: the seed the random weights are drawn with (inside make, never at import)
WEIGHTS_SEED = 0
#: tapnet's visibility rule: (1 - p(occluded)) * (1 - p(far)) above this
VISIBLE_ABOVE = 0.5
#: queries per cost-volume chunk inside TAPIR (its default)
QUERY_CHUNK = 64


class TapirPlugin(nn.Module):
    """TAPIR behind the plugin protocol: coordinate and value conventions converted here, once each way."""

    def __init__(self, tapir: nn.Module):
        super().__init__()
        self.tapir = tapir

    def forward(self, frames: torch.Tensor, queries: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        video = frames.float()[None] / 255.0 * 2.0 - 1.0  # [1, T, H, W, 3] in [-1, 1]
        query_points = queries[:, [0, 2, 1]][None]  # [1, N, 3] (t, y, x)
        out = self.tapir(video, query_points, query_chunk_size=QUERY_CHUNK)
        tracks = out["tracks"][0]  # [N, T, 2] (x, y) pixels
        visible = (1 - torch.sigmoid(out["occlusion"][0])) * (1 - torch.sigmoid(out["expected_dist"][0]))
        return tracks, visible > VISIBLE_ABOVE  # visible [N, T]


def make() -> nn.Module:
    """TAPIR (pyramid_level 1, extra convs: the BootsTAPIR checkpoint's shape) with seeded random weights."""
    add_peer_sources("tapnet")
    from tapnet.torch import tapir_model

    torch.manual_seed(WEIGHTS_SEED)
    return TapirPlugin(tapir_model.TAPIR(pyramid_level=1, extra_convs=True)).eval()
