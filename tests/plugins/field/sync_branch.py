"""sync_branch: weak frames bridged from their neighbours, decided by a Python ``if`` on a tensor."""

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

WEAK_SCORE = 0.9  # a match below this score is replaced by its neighbours' mean
PASSES = 2  # bridging passes over the frames


def bridge_weak_frames(tracks: torch.Tensor, score: torch.Tensor) -> torch.Tensor:
    """tracks [N, T, 2], score [N, T] -> tracks with each weak frame the mean of its neighbours."""
    out = tracks.clone()
    num_frames = tracks.shape[1]
    for _ in range(PASSES):
        for t in range(1, num_frames - 1):
            weak = score[:, t] < WEAK_SCORE
            # planted: a Python `if` on a GPU tensor per frame and pass: the host waits to know the branch
            if weak.any():
                neighbours = 0.5 * (out[:, t - 1] + out[:, t + 1])
                out[:, t] = torch.where(weak[:, None], neighbours, out[:, t])
    return out


class SyncBranchTracker(BackboneTracker):
    def forward(self, frames: torch.Tensor, queries: torch.Tensor):
        feats = self.backbone(frames_to_float(frames))
        tracks, score = best_match(correlate(query_features(feats, queries), feats), feats.shape[-1])
        return bridge_weak_frames(tracks, score), score > VISIBLE_SCORE


def make() -> nn.Module:
    return seeded(SyncBranchTracker(), seed=103)
