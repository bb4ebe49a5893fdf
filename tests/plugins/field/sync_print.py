"""sync_print: a debug log line per frame whose f-string formats a GPU tensor (a sync even when not shown).

The message is built before ``log.debug`` decides to drop it: ``f"{score.mean():.3f}"`` reads the value
to the host on every frame, at every log level.
"""

from __future__ import annotations

import logging

import torch
from torch import nn

from tests.plugins.field.common import (
    VISIBLE_SCORE,
    BackboneTracker,
    best_match,
    cell_features,
    frames_to_float,
    query_features,
    seeded,
)

log = logging.getLogger(__name__)


def match_and_log(qfeat: torch.Tensor, feats: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """qfeat [N, C], feats [T, C, h, w] -> tracks [N, T, 2], score [N, T], one frame at a time."""
    cells = cell_features(feats)  # [T, h*w, C]
    tracks, scores = [], []
    for t in range(cells.shape[0]):
        frame_tracks, frame_score = best_match((qfeat.to(cells.dtype) @ cells[t].T)[:, None], feats.shape[-1])
        # planted: a tensor formatted into a log message per frame (the f-string syncs, logged or not)
        log.debug(f"frame {t}: mean score {frame_score.mean():.3f}, best {frame_score.max():.3f}")
        tracks.append(frame_tracks[:, 0])
        scores.append(frame_score[:, 0])
    return torch.stack(tracks, dim=1), torch.stack(scores, dim=1)


class SyncPrintTracker(BackboneTracker):
    def forward(self, frames: torch.Tensor, queries: torch.Tensor):
        feats = self.backbone(frames_to_float(frames))
        tracks, score = match_and_log(query_features(feats, queries), feats)
        return tracks, score > VISIBLE_SCORE


def make() -> nn.Module:
    return seeded(SyncPrintTracker(), seed=124)
