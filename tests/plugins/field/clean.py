"""clean: the negative control, written the way the performance guides ask.

Batched and vectorised: one feature pass over all frames in channels-last (the layout the uint8 frames
already have), one correlation of all queries against all frames, the best cell per frame with a
sub-cell soft-argmax around it; no host syncs, no host work, no copies inside forward.
"""

from __future__ import annotations

import torch
from torch import nn

from tests.plugins.field.common import (
    FEATURE_STRIDE,
    VISIBLE_SCORE,
    Backbone,
    correlate,
    frames_to_float,
    query_features,
    seeded,
)

SOFTMAX_TEMPERATURE = 20.0  # sharpness of the sub-cell refinement
NEIGHBOURS = 1  # cells each side of the best one in the refinement


class CleanTracker(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = Backbone().to(memory_format=torch.channels_last)

    def forward(self, frames: torch.Tensor, queries: torch.Tensor):
        feats = self.backbone(frames_to_float(frames))  # [T, C, h, w], channels-last throughout
        t, c, h, w = feats.shape
        corr = correlate(query_features(feats, queries), feats)  # [N, T, h*w], the run's dtype: no cast copy
        score, index = corr.max(dim=-1)
        cy = torch.div(index, w, rounding_mode="floor")
        cx = index - cy * w
        # sub-cell refinement: soft-argmax over the best cell's row and column neighbours, all points at once
        offsets = torch.arange(-NEIGHBOURS, NEIGHBOURS + 1, device=corr.device)
        rows = (cy[..., None] + offsets).clamp(0, h - 1)  # [N, T, K]
        cols = (cx[..., None] + offsets).clamp(0, w - 1)
        along_x = torch.gather(corr, -1, cy[..., None] * w + cols).float()  # [N, T, K]: small, float32 is fine
        along_y = torch.gather(corr, -1, rows * w + cx[..., None]).float()
        wx = torch.softmax(along_x * SOFTMAX_TEMPERATURE, dim=-1)
        wy = torch.softmax(along_y * SOFTMAX_TEMPERATURE, dim=-1)
        x = (wx * cols.float()).sum(-1)
        y = (wy * rows.float()).sum(-1)
        tracks = torch.stack([x, y], dim=-1) * FEATURE_STRIDE + (FEATURE_STRIDE - 1) / 2.0
        return tracks, score.float() > VISIBLE_SCORE


def make() -> nn.Module:
    return seeded(CleanTracker(), seed=100)
