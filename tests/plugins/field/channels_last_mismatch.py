"""channels_last_mismatch: half a backbone converted to channels_last, fed NCHW, made contiguous between layers.

``make()`` converts every other conv's weights to channels_last (a guide's advice, half applied) while
forward gives the convs NCHW-contiguous input and calls ``.contiguous()`` after each: a channels_last
conv converts its input to NHWC and its output goes back to NCHW (permuting copies), and the NCHW
convs in bf16 run cuDNN's NHWC kernels behind ``nchwToNhwc`` / ``nhwcToNchw`` transposes.
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


def convert_every_other_conv(backbone: MixedLayoutBackbone) -> None:
    # planted: every other conv's weights converted to channels_last; the activations never are
    for conv in backbone.convs[::2]:
        conv.to(memory_format=torch.channels_last)


def make() -> nn.Module:
    tracker = seeded(ChannelsLastMismatchTracker(), seed=108)
    convert_every_other_conv(tracker.backbone)
    return tracker
