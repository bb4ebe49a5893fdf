"""to_host_per_frame: each frame's matches brought to numpy (``.cpu().numpy()``) and smoothed on the host."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from tests.plugins.field.common import (
    FEATURE_STRIDE,
    VISIBLE_SCORE,
    BackboneTracker,
    best_match,
    cell_features,
    frames_to_float,
    query_features,
    seeded,
)

SMOOTHING = 0.7  # weight of the new measurement in the host-side exponential smoothing


def smooth_on_host(qfeat: torch.Tensor, feats: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """qfeat [N, C], feats [T, C, h, w] -> tracks [N, T, 2], score [N, T] as numpy, smoothed over time."""
    cells = cell_features(feats)  # [T, h*w, C]
    num_frames = cells.shape[0]
    height_px = feats.shape[-2] * FEATURE_STRIDE
    width_px = feats.shape[-1] * FEATURE_STRIDE
    tracks = np.zeros((qfeat.shape[0], num_frames, 2), np.float32)
    scores = np.zeros((qfeat.shape[0], num_frames), np.float32)
    for t in range(num_frames):
        corr = qfeat.to(cells.dtype) @ cells[t].T  # [N, h*w]
        frame_tracks, frame_score = best_match(corr[:, None], feats.shape[-1])
        # planted: a per-frame result copied to the host inside the loop and used there (a sync per frame)
        xy = frame_tracks[:, 0].cpu().numpy()
        scores[:, t] = frame_score[:, 0].cpu().numpy()
        if t:
            xy = SMOOTHING * xy + (1.0 - SMOOTHING) * tracks[:, t - 1]
        tracks[:, t] = np.clip(xy, 0.0, [width_px - 1.0, height_px - 1.0])
    return tracks, scores


class ToHostPerFrameTracker(BackboneTracker):
    def forward(self, frames: torch.Tensor, queries: torch.Tensor):
        feats = self.backbone(frames_to_float(frames))
        tracks, score = smooth_on_host(query_features(feats, queries), feats)
        device = frames.device
        return torch.from_numpy(tracks).to(device), torch.from_numpy(score > VISIBLE_SCORE).to(device)


def make() -> nn.Module:
    return seeded(ToHostPerFrameTracker(), seed=106)
