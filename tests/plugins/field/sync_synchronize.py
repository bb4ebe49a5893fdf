"""sync_synchronize: frame-by-frame matching with ``torch.cuda.synchronize()`` after every frame."""

from __future__ import annotations

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


def match_frame_by_frame(qfeat: torch.Tensor, feats: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """qfeat [N, C], feats [T, C, h, w] -> tracks [N, T, 2], score [N, T], one frame at a time."""
    cells = cell_features(feats)  # [T, h*w, C]
    tracks, scores = [], []
    for t in range(cells.shape[0]):
        corr = qfeat.to(cells.dtype) @ cells[t].T  # [N, h*w]
        frame_tracks, frame_score = best_match(corr[:, None], feats.shape[-1])
        tracks.append(frame_tracks[:, 0])
        scores.append(frame_score[:, 0])
        # planted: the whole device drained after every frame ("to be sure the frame is done")
        if corr.is_cuda:
            torch.cuda.synchronize()
    return torch.stack(tracks, dim=1), torch.stack(scores, dim=1)


class SyncSynchronizeTracker(BackboneTracker):
    def forward(self, frames: torch.Tensor, queries: torch.Tensor):
        feats = self.backbone(frames_to_float(frames))
        tracks, score = match_frame_by_frame(query_features(feats, queries), feats)
        return tracks, score > VISIBLE_SCORE


def make() -> nn.Module:
    return seeded(SyncSynchronizeTracker(), seed=105)
