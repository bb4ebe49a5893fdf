"""CoTracker3 (offline) as a trackscope plugin, random weights: ``--tracker scripts.peers.cotracker_plugin:make``.

The plugin protocol (engine/trackers/plugin.py): ``forward(frames uint8 [T, H, W, 3] on the device, queries
float32 [N, 3] (t, x, y) pixels) -> (tracks [N, T, 2] pixels (x, y), visible bool [N, T])``. CoTracker3's
own conventions: video float [1, T, 3, H, W] in 0..255 (sides multiples of its stride, 4), queries [1, N, 3]
as (t, x, y) pixels; it returns tracks [1, T, N, 2] and visibility and confidence [1, T, N]; a point is
visible where visibility * confidence > 0.6 (CoTracker's predictor). A video whose sides are not multiples
of the stride is resized (centre-aligned) to the nearest ones and the coordinates scaled with it.

The sources come from ``TRACKSCOPE_PEERS`` (default ``.carry/peers`` under the repo root), put on sys.path
inside ``make``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from scripts.peers._sources import add_peer_sources

#: the seed the random weights are drawn with (inside make, never at import)
WEIGHTS_SEED = 0
#: CoTracker's predictor: visibility * confidence above this
VISIBLE_ABOVE = 0.6
#: CoTracker3's defaults (build_cotracker): feature stride, sliding-window length, update iterations
STRIDE = 4
WINDOW_LEN = 60
ITERATIONS = 4


class CoTrackerPlugin(nn.Module):
    """CoTracker3 offline behind the plugin protocol."""

    def __init__(self, cotracker: nn.Module):
        super().__init__()
        self.cotracker = cotracker

    def forward(self, frames: torch.Tensor, queries: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        num_frames, height, width = frames.shape[:3]
        video = frames.permute(0, 3, 1, 2).float()  # [T, 3, H, W] in 0..255
        fit_h, fit_w = (max(STRIDE, round(s / STRIDE) * STRIDE) for s in (height, width))
        q = queries.clone()
        if (fit_h, fit_w) != (height, width):
            video = F.interpolate(video, size=(fit_h, fit_w), mode="bilinear", align_corners=False)
            q[:, 1] = (q[:, 1] + 0.5) * fit_w / width - 0.5
            q[:, 2] = (q[:, 2] + 0.5) * fit_h / height - 0.5
        tracks, vis, confidence, _ = self.cotracker(video[None], q[None], iters=ITERATIONS)
        tracks = tracks[0].transpose(0, 1).float()  # [N, T, 2] (x, y)
        if (fit_h, fit_w) != (height, width):
            tracks[..., 0] = (tracks[..., 0] + 0.5) * width / fit_w - 0.5
            tracks[..., 1] = (tracks[..., 1] + 0.5) * height / fit_h - 0.5
        visible = (vis[0] * confidence[0]).transpose(0, 1) > VISIBLE_ABOVE  # [N, T]
        return tracks, visible


def make() -> nn.Module:
    """CoTracker3 offline (stride 4, correlation radius 3, window 60) with seeded random weights."""
    add_peer_sources("cotracker")
    from cotracker.models.core.cotracker.cotracker3_offline import CoTrackerThreeOffline

    torch.manual_seed(WEIGHTS_SEED)
    return CoTrackerPlugin(CoTrackerThreeOffline(stride=STRIDE, corr_radius=3, window_len=WINDOW_LEN)).eval()
