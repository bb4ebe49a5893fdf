"""sync_mask: low-confidence points moved with the confident points' mean motion, found by a boolean mask."""

from __future__ import annotations

import torch
from torch import nn

from tests.plugins.field.common import (
    VISIBLE_SCORE,
    BackboneTracker,
    best_match,
    correlate,
    frames_to_float,
    query_features,
    seeded,
)

CONFIDENT_SCORE = 0.9  # matches above this score lead the others


def follow_confident(tracks: torch.Tensor, score: torch.Tensor, limit: torch.Tensor) -> torch.Tensor:
    """tracks [N, T, 2], score [N, T] -> tracks where unconfident points move with the confident ones
    (kept inside ``limit`` [2], the last pixel's (x, y))."""
    out = tracks.clone()
    for t in range(1, tracks.shape[1]):
        confident = score[:, t] > CONFIDENT_SCORE
        motion = tracks[:, t] - tracks[:, t - 1]  # [N, 2]
        # planted: boolean-mask indexing and nonzero() per frame (their sizes need a host read: a sync each)
        leaders = motion[confident]
        followers = (~confident).nonzero()[:, 0]
        if leaders.shape[0] and followers.shape[0]:
            out[followers, t] = torch.minimum((out[followers, t - 1] + leaders.mean(dim=0)).clamp(min=0.0), limit)
    return out


class SyncMaskTracker(BackboneTracker):
    def forward(self, frames: torch.Tensor, queries: torch.Tensor):
        feats = self.backbone(frames_to_float(frames))
        tracks, score = best_match(correlate(query_features(feats, queries), feats), feats.shape[-1])
        limit = torch.tensor([frames.shape[2] - 1.0, frames.shape[1] - 1.0], device=tracks.device)
        return follow_confident(tracks, score, limit), score > VISIBLE_SCORE


def make() -> nn.Module:
    return seeded(SyncMaskTracker(), seed=104)
