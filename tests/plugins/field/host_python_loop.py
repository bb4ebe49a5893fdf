"""host_python_loop: per-point temporal anchor weights computed in pure Python (lists, ``math.exp``).

Between the GPU work, forward loops over every point and frame in Python to build a weight table
(normalised exponential falloff from the query frame, with a per-point cubic easing); the GPU waits
meanwhile. The table is then uploaded once and used to pull each track towards its query position.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from tests.plugins.field.common import BackboneTracker, frames_to_float, seeded, track

FALLOFF_FRAMES = 6.0  # anchor weight falls by e over this many frames from the query frame
EASING_TERMS = 8  # terms of the easing series per weight
ANCHOR_STRENGTH = 0.2


def anchor_weights(query_frames: list[int], num_frames: int) -> list[list[float]]:
    """Per point and frame, how strongly the track is pulled to its query position (0..ANCHOR_STRENGTH)."""
    table = []
    # planted: heavy pure-Python math per point and frame while the GPU has nothing queued
    for qt in query_frames:
        row = []
        for t in range(num_frames):
            d = abs(t - qt) / FALLOFF_FRAMES
            eased = sum((-d) ** k / math.factorial(k) for k in range(EASING_TERMS))  # a series for exp(-d)
            row.append(max(0.0, min(1.0, eased)) * math.exp(-0.5 * d * d))
        peak = max(row) or 1.0
        table.append([ANCHOR_STRENGTH * w / peak for w in row])
    return table


class HostPythonLoopTracker(BackboneTracker):
    def forward(self, frames: torch.Tensor, queries: torch.Tensor):
        tracks, visible = track(self.backbone(frames_to_float(frames)), queries)
        query_frames = [int(t) for t in queries[:, 0].round().tolist()]  # one read of the N query frames
        weights = torch.tensor(anchor_weights(query_frames, frames.shape[0]), device=tracks.device)  # [N, T]
        anchored = tracks + weights[..., None] * (queries[:, None, 1:] - tracks)
        return anchored, visible


def make() -> nn.Module:
    return seeded(HostPythonLoopTracker(), seed=120)
