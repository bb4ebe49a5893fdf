"""misaligned_gemm: a per-point, per-frame refinement head with layer widths that are not multiples of 8.

Run in bf16: the head's GEMMs (widths 1001, 257, 1023, 1023) cannot use the aligned tensor-core tiles.
"""

from __future__ import annotations

import torch
from torch import nn

from tests.plugins.field.common import (
    FEATURE_CHANNELS,
    FEATURE_STRIDE,
    VISIBLE_SCORE,
    Backbone,
    best_match,
    correlate,
    frames_to_float,
    query_features,
    seeded,
)

# hidden widths not multiples of 8 (a "bigger is better" head sized by hand)
HEAD_WIDTHS = (1001, 257, 1023, 1023)
HEAD_INPUTS = FEATURE_CHANNELS + 3  # the query feature, the cell's position, its score
MAX_OFFSET_CELLS = 0.5  # the head moves a track by at most half a cell


class RefinementHead(nn.Module):
    """[N, T, HEAD_INPUTS] -> a sub-cell offset [N, T, 2] in cells."""

    def __init__(self):
        super().__init__()
        widths = (HEAD_INPUTS, *HEAD_WIDTHS)
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(widths[:-1], widths[1:]))
        self.out = nn.Linear(widths[-1], 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # planted: GEMMs whose widths (HEAD_WIDTHS) are not multiples of 8, on the hot path
        for lin in self.layers:
            x = torch.relu(lin(x))
        return MAX_OFFSET_CELLS * torch.tanh(self.out(x))


class MisalignedGemmTracker(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = Backbone()
        self.head = RefinementHead()

    def forward(self, frames: torch.Tensor, queries: torch.Tensor):
        feats = self.backbone(frames_to_float(frames))
        qfeat = query_features(feats, queries)  # [N, C]
        tracks, score = best_match(correlate(qfeat, feats), feats.shape[-1])
        n, t = score.shape
        size_px = float(max(feats.shape[-2:]) * FEATURE_STRIDE)
        inputs = torch.cat([qfeat.float()[:, None].expand(n, t, -1), tracks / size_px, score[..., None]], dim=-1)
        offset = self.head(inputs).float() * FEATURE_STRIDE
        return tracks + offset, score > VISIBLE_SCORE


def make() -> nn.Module:
    return seeded(MisalignedGemmTracker(), seed=113)
