"""channels_last_mismatch: a backbone converted to channels_last, fed NCHW and made contiguous between layers.

``make()`` converts the conv weights to channels_last (as a guide suggests) while forward gives them
NCHW-contiguous input and calls ``.contiguous()`` after every conv: each conv converts its input to
NHWC and its output back, so the capture is full of layout transposes (``nchwToNhwc`` / ``nhwcToNchw``
or permuting copies).
"""

from __future__ import annotations

import torch
from torch import nn

from tests.plugins.field.common import frames_to_float, seeded, track

WIDTH = 32  # channels of the inner convs
FEATURE_CHANNELS = 16


class MixedLayoutBackbone(nn.Module):
    """Five convs at strides 1, 2, 1, 2, 1: frames [T, 3, H, W] -> unit features [T, C, H/4, W/4]."""

    def __init__(self):
        super().__init__()
        self.convs = nn.ModuleList([
            nn.Conv2d(3, WIDTH, 3, padding=1),
            nn.Conv2d(WIDTH, WIDTH, 3, stride=2, padding=1),
            nn.Conv2d(WIDTH, WIDTH, 3, padding=1),
            nn.Conv2d(WIDTH, WIDTH, 3, stride=2, padding=1),
            nn.Conv2d(WIDTH, FEATURE_CHANNELS, 3, padding=1),
        ])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # planted: NCHW-contiguous activations into channels_last weights, back to NCHW after every conv
        x = x.contiguous()
        for i, conv in enumerate(self.convs):
            x = conv(x).contiguous()
            if i < len(self.convs) - 1:
                x = torch.relu(x)
        return nn.functional.normalize(x, dim=1)


class ChannelsLastMismatchTracker(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = MixedLayoutBackbone()

    def forward(self, frames: torch.Tensor, queries: torch.Tensor):
        return track(self.backbone(frames_to_float(frames)), queries)


def make() -> nn.Module:
    tracker = seeded(ChannelsLastMismatchTracker(), seed=108)
    # planted: the weights converted to channels_last; the activations never are
    return tracker.to(memory_format=torch.channels_last)
