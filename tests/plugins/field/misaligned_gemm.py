"""misaligned_gemm: a candidate rescoring head with layer widths that are not multiples of 8.

Run in bf16: for every point and frame the head scores the best few candidate cells (widths 1001, 257,
1023, 1023 after an input of 19 features): GEMMs that cannot use the aligned tensor-core tiles. The
candidates per point follow the feature map (8 at 64x64 cells, 1 on the tests' 16x16).
"""

from __future__ import annotations

import torch
from torch import nn

from tests.plugins.field.common import (
    FEATURE_CHANNELS,
    FEATURE_STRIDE,
    VISIBLE_SCORE,
    Backbone,
    cells_to_pixels,
    correlate,
    frames_to_float,
    query_features,
    seeded,
)

# hidden widths not multiples of 8 (a "bigger is better" head sized by hand)
HEAD_WIDTHS = (1001, 257, 1023, 1023)
HEAD_INPUTS = FEATURE_CHANNELS + 3  # the query feature, the candidate's position and its score
MAX_CANDIDATES = 8
CELLS_PER_CANDIDATE = 512  # one candidate per this many feature cells, up to MAX_CANDIDATES
MAX_OFFSET_CELLS = 0.5  # the head moves a track by at most half a cell


def candidates_for(h: int, w: int) -> int:
    return max(1, min(MAX_CANDIDATES, h * w // CELLS_PER_CANDIDATE))


class RescoringHead(nn.Module):
    """[..., HEAD_INPUTS] -> (score [...], sub-cell offset [..., 2] in cells)."""

    def __init__(self):
        super().__init__()
        widths = (HEAD_INPUTS, *HEAD_WIDTHS)
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(widths[:-1], widths[1:]))
        self.out = nn.Linear(widths[-1], 3)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # planted: GEMMs whose widths (HEAD_INPUTS, HEAD_WIDTHS) are not multiples of 8, on the hot path
        for lin in self.layers:
            x = torch.relu(lin(x))
        out = self.out(x).float()
        return out[..., 0], MAX_OFFSET_CELLS * torch.tanh(out[..., 1:])


class MisalignedGemmTracker(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = Backbone()
        self.head = RescoringHead()

    def forward(self, frames: torch.Tensor, queries: torch.Tensor):
        feats = self.backbone(frames_to_float(frames))
        _, _, h, w = feats.shape
        qfeat = query_features(feats, queries)  # [N, C]
        corr = correlate(qfeat, feats)  # [N, T, h*w]
        score, index = corr.topk(candidates_for(h, w), dim=-1)  # [N, T, K]
        pixels = cells_to_pixels(index, w)  # [N, T, K, 2]
        n, t, k = score.shape
        size_px = float(max(h, w) * FEATURE_STRIDE)
        inputs = torch.cat([qfeat.float()[:, None, None].expand(n, t, k, -1), pixels / size_px,
                            score.float()[..., None]], dim=-1)  # [N, T, K, HEAD_INPUTS]
        rescored, offset = self.head(inputs)
        best = rescored.argmax(dim=-1, keepdim=True)  # [N, T, 1]
        choose = best[..., None].expand(n, t, 1, 2)
        tracks = torch.gather(pixels, 2, choose)[:, :, 0] + torch.gather(offset, 2, choose)[:, :, 0] * FEATURE_STRIDE
        return tracks, torch.gather(score, 2, best)[..., 0].float() > VISIBLE_SCORE


def make() -> nn.Module:
    return seeded(MisalignedGemmTracker(), seed=113)
