"""allocator_churn: a temporal window of the correlation volume copied per frame, the cache emptied after each.

Each frame clones a window of a different length (a new block size every frame) and then calls
``torch.cuda.empty_cache()`` "to keep memory low": every frame's blocks go back to the driver and the next
frame's come from ``cudaMalloc`` again (and ``cudaFree`` waits for the device).
"""

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

WINDOW_FRAMES = 8  # frames of history each frame's window holds, at most


def windowed_max(corr: torch.Tensor) -> torch.Tensor:
    """corr [N, T, P] -> the running max over each frame's trailing window [N, T, P]."""
    out = []
    for t in range(corr.shape[1]):
        start = max(0, t - WINDOW_FRAMES + 1)
        # planted: a fresh buffer of a different size per frame, then the allocator's cache emptied
        window = corr[:, start:t + 1].clone()  # [N, t - start + 1, P]
        out.append(0.5 * (window.amax(dim=1) + corr[:, t]))
        del window
        if corr.is_cuda:
            torch.cuda.empty_cache()
    return torch.stack(out, dim=1)


class AllocatorChurnTracker(BackboneTracker):
    def forward(self, frames: torch.Tensor, queries: torch.Tensor):
        feats = self.backbone(frames_to_float(frames))
        corr = windowed_max(correlate(query_features(feats, queries), feats))
        tracks, score = best_match(corr, feats.shape[-1])
        return tracks, score > VISIBLE_SCORE


def make() -> nn.Module:
    return seeded(AllocatorChurnTracker(), seed=116)
