"""sync_item: a per-point visibility threshold read to the host with ``.item()`` and ``float()``."""

from __future__ import annotations

import torch
from torch import nn

from tests.plugins.field.common import BackboneTracker, best_match, correlate, frames_to_float, query_features, seeded

PEAK_FRACTION = 0.8  # a frame is visible when its score reaches this share of the point's best score


def visibility_per_point(score: torch.Tensor) -> torch.Tensor:
    """score [N, T] -> visible [N, T]: each point against its own best and mean score."""
    visible = []
    for i in range(score.shape[0]):
        # planted: two host syncs per point (.item() and float() on a GPU tensor inside a Python loop)
        peak = float(score[i].max())
        mean = score[i].mean().item()
        threshold = min(PEAK_FRACTION * peak, mean)
        visible.append(score[i] >= threshold)
    return torch.stack(visible)


class SyncItemTracker(BackboneTracker):
    def forward(self, frames: torch.Tensor, queries: torch.Tensor):
        feats = self.backbone(frames_to_float(frames))
        tracks, score = best_match(correlate(query_features(feats, queries), feats), feats.shape[-1])
        return tracks, visibility_per_point(score)


def make() -> nn.Module:
    return seeded(SyncItemTracker(), seed=101)
