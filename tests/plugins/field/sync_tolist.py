"""sync_tolist: each frame's scores brought to a Python list (``.tolist()``) to pick a cutoff."""

from __future__ import annotations

import torch
from torch import nn

from tests.plugins.field.common import BackboneTracker, best_match, correlate, frames_to_float, query_features, seeded

CUTOFF_QUANTILE = 0.25  # points below this quantile of a frame's scores are marked occluded


def visibility_per_frame(score: torch.Tensor) -> torch.Tensor:
    """score [N, T] -> visible [N, T]: the lowest quarter of each frame's matches is occluded."""
    columns = []
    for t in range(score.shape[1]):
        # planted: .tolist() of a per-frame tensor inside the loop (a sync and a device-to-host copy per frame)
        values = sorted(score[:, t].tolist())
        cutoff = values[int(CUTOFF_QUANTILE * (len(values) - 1))]
        columns.append(score[:, t] >= cutoff)
    return torch.stack(columns, dim=1)


class SyncTolistTracker(BackboneTracker):
    def forward(self, frames: torch.Tensor, queries: torch.Tensor):
        feats = self.backbone(frames_to_float(frames))
        tracks, score = best_match(correlate(query_features(feats, queries), feats), feats.shape[-1])
        return tracks, visibility_per_frame(score)


def make() -> nn.Module:
    return seeded(SyncTolistTracker(), seed=102)
