"""graph_break: a compiled scoring function that reads a statistic with ``.item()`` halfway through.

dynamo cannot trace the ``.item()`` (scalar outputs are not captured by default): the function is split
into two graphs with eager Python between them, and on a GPU the read is a sync as well.
"""

from __future__ import annotations

import torch
from torch import nn

from tests.plugins.field.common import (
    Backbone,
    best_match,
    correlate,
    frames_to_float,
    query_features,
    seeded,
)
from tests.plugins.field.compiled import LazyCompiled

SHARPNESS = 8.0
HISTORY_KEPT = 100  # calls of mean score kept for the user's log
VISIBLE_RELATIVE = 0.5  # visible when the sharpened score reaches this share of the run's mean


def sharpened_scores(corr: torch.Tensor) -> tuple[torch.Tensor, float]:
    """corr [N, T, P] -> (sharpened corr [N, T, P], the run's mean best score for the log)."""
    x = torch.softmax(corr.float() * SHARPNESS, dim=-1) * corr.float()
    # planted: .item() inside the compiled function (a graph break, and a sync on a GPU)
    mean_best = x.amax(dim=-1).mean().item()
    return x / (x.amax(dim=-1, keepdim=True) + 1e-6), mean_best


class GraphBreakTracker(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = Backbone()
        self.score_history: list[float] = []
        self.sharpen = LazyCompiled(sharpened_scores, dynamic=False)

    def forward(self, frames: torch.Tensor, queries: torch.Tensor):
        feats = self.backbone(frames_to_float(frames))
        corr = correlate(query_features(feats, queries), feats)
        sharpened, mean_best = self.sharpen(corr)
        self.score_history = [*self.score_history[-HISTORY_KEPT + 1:], mean_best]
        tracks, score = best_match(sharpened, feats.shape[-1])
        return tracks, score >= VISIBLE_RELATIVE


def make() -> nn.Module:
    return seeded(GraphBreakTracker(), seed=119)
