"""float64_path: the soft-argmax over the correlation volume done in float64 ("for accuracy")."""

from __future__ import annotations

import torch
from torch import nn

from tests.plugins.field.common import (
    FEATURE_STRIDE,
    VISIBLE_SCORE,
    BackboneTracker,
    correlate,
    frames_to_float,
    query_features,
    seeded,
)

SOFTMAX_TEMPERATURE = 20.0


def soft_argmax_float64(corr: torch.Tensor, h: int, w: int) -> tuple[torch.Tensor, torch.Tensor]:
    """corr [N, T, h*w] -> tracks [N, T, 2] px (float32), score [N, T] via an expected position."""
    # planted: the volume and its coordinates in float64 (softmax, products and sums all in double)
    prob = torch.softmax(corr.double() * SOFTMAX_TEMPERATURE, dim=-1)  # [N, T, P] float64
    ys, xs = torch.meshgrid(torch.arange(h, device=corr.device, dtype=torch.float64),
                            torch.arange(w, device=corr.device, dtype=torch.float64), indexing="ij")
    coords = torch.stack([xs.reshape(-1), ys.reshape(-1)], dim=-1)  # [P, 2] float64
    cells = prob @ coords  # [N, T, 2]
    score = (prob * corr.double()).sum(-1)
    tracks = cells * FEATURE_STRIDE + (FEATURE_STRIDE - 1) / 2.0
    return tracks.float(), score.float()


class Float64PathTracker(BackboneTracker):
    def forward(self, frames: torch.Tensor, queries: torch.Tensor):
        feats = self.backbone(frames_to_float(frames))
        _, _, h, w = feats.shape
        tracks, score = soft_argmax_float64(correlate(query_features(feats, queries), feats), h, w)
        return tracks, score > VISIBLE_SCORE


def make() -> nn.Module:
    return seeded(Float64PathTracker(), seed=110)
