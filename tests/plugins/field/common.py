"""The small tracker every field plugin is built on, as a user would write one.

A two-conv feature net at stride 4, the feature vector under each query, a correlation volume of every
query against every feature cell of every frame, and the best cell per frame as the track. Shapes:
frames uint8 [T, H, W, 3], queries float32 [N, 3] (t, x, y) pixels, features [T, C, h, w] with
h = ceil(H / 4), correlation [N, T, h * w], tracks [N, T, 2] pixels, visible bool [N, T].

Nothing here is planted: each field module replaces one piece with its own problem.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

FEATURE_STRIDE = 4
FEATURE_CHANNELS = 16
HIDDEN_CHANNELS = 16
VISIBLE_SCORE = 0.5  # cosine similarity of unit features above which a match counts as visible
INIT_GAIN = 1.0  # weights ~ N(0, gain^2 / fan_in)


def seeded(module: nn.Module, seed: int) -> nn.Module:
    """Initialise every parameter of ``module`` from its own generator (the global RNG untouched)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if name.endswith("bias"):
                p.zero_()
                continue
            fan_in = max(1, p[0].numel()) if p.dim() > 1 else 1
            p.copy_(torch.randn(p.shape, generator=gen) * (INIT_GAIN / fan_in**0.5))
    return module


def frames_to_float(frames: torch.Tensor) -> torch.Tensor:
    """uint8 [T, H, W, 3] -> float [T, 3, H, W] in [0, 1] (a channels-last view: no transpose copy)."""
    return frames.permute(0, 3, 1, 2).float() / 255.0


class Backbone(nn.Module):
    """Frames -> unit-length features [T, C, h, w] at stride 4 (two stride-2 convs)."""

    def __init__(self, in_channels: int = 3, channels: int = FEATURE_CHANNELS, hidden: int = HIDDEN_CHANNELS):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, hidden, 3, stride=2, padding=1)
        self.conv2 = nn.Conv2d(hidden, channels, 3, stride=2, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x float [T, C_in, H, W] -> [T, C, h, w]."""
        x = torch.relu(self.conv1(x))
        return nn.functional.normalize(self.conv2(x), dim=1)


class BackboneTracker(nn.Module):
    """A field tracker over the shared conv backbone; each plugin writes its own ``forward``."""

    def __init__(self):
        super().__init__()
        self.backbone = Backbone()


def query_cells(queries: torch.Tensor, num_frames: int, h: int, w: int
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Queries [N, 3] pixels -> (frame, cell row, cell column) long indices [N] each, clamped inside."""
    qt = queries[:, 0].round().long().clamp(0, num_frames - 1)
    qx = (queries[:, 1] / FEATURE_STRIDE).floor().long().clamp(0, w - 1)
    qy = (queries[:, 2] / FEATURE_STRIDE).floor().long().clamp(0, h - 1)
    return qt, qy, qx


def query_features(feats: torch.Tensor, queries: torch.Tensor) -> torch.Tensor:
    """The feature vector at each query's cell. feats [T, C, h, w], queries [N, 3] -> [N, C]."""
    t, _, h, w = feats.shape
    qt, qy, qx = query_cells(queries, t, h, w)
    return feats[qt, :, qy, qx]


def cell_features(feats: torch.Tensor) -> torch.Tensor:
    """feats [T, C, h, w] -> [T, h * w, C] (a view when feats is channels-last)."""
    t, c, h, w = feats.shape
    return feats.permute(0, 2, 3, 1).reshape(t, h * w, c)


def correlate(qfeat: torch.Tensor, feats: torch.Tensor) -> torch.Tensor:
    """Every query against every cell of every frame. qfeat [N, C], feats [T, C, h, w] -> [N, T, h * w]."""
    cells = cell_features(feats)
    return torch.einsum("nc,tpc->ntp", qfeat.to(cells.dtype), cells)


def cells_to_pixels(index: torch.Tensor, width_cells: int) -> torch.Tensor:
    """Flat cell indices [...] -> the cells' pixel centres [..., 2] (x, y), float32."""
    y = torch.div(index, width_cells, rounding_mode="floor")
    x = index - y * width_cells
    return torch.stack([x, y], dim=-1).float() * FEATURE_STRIDE + (FEATURE_STRIDE - 1) / 2.0


def best_match(corr: torch.Tensor, width_cells: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The best cell per point and frame. corr [N, T, h * w] -> tracks [N, T, 2] px, score [N, T] float32."""
    score, index = corr.max(dim=-1)
    return cells_to_pixels(index, width_cells), score.float()


class CellMlp(nn.Module):
    """A residual MLP over feature vectors [..., C] -> [..., C] (the matmul-heavy part of some plugins)."""

    def __init__(self, channels: int = FEATURE_CHANNELS, width: int = 256, layers: int = 3):
        super().__init__()
        self.inp = nn.Linear(channels, width)
        self.hidden = nn.ModuleList(nn.Linear(width, width) for _ in range(layers - 1))
        self.out = nn.Linear(width, channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.inp(x))
        for lin in self.hidden:
            h = h + torch.relu(lin(h))
        return nn.functional.normalize(x + self.out(h) / h.shape[-1] ** 0.5, dim=-1)


def refine_cells(mlp: nn.Module, feats: torch.Tensor) -> torch.Tensor:
    """Run ``mlp`` over every cell of feats [T, C, h, w] -> [T, C, h, w] (channels-last)."""
    t, c, h, w = feats.shape
    out = mlp(cell_features(feats))  # [T, h*w, C]
    return out.reshape(t, h, w, c).permute(0, 3, 1, 2)


def track(feats: torch.Tensor, queries: torch.Tensor,
          transform: Callable[[torch.Tensor], torch.Tensor] | None = None,
          visible_above: float = VISIBLE_SCORE) -> tuple[torch.Tensor, torch.Tensor]:
    """The whole vectorised tracking step on features: -> tracks [N, T, 2] px, visible [N, T]; ``transform``
    (a plugin's own step) runs on the correlation volume [N, T, h*w] before the best match."""
    corr = correlate(query_features(feats, queries), feats)
    if transform is not None:
        corr = transform(corr)
    tracks, score = best_match(corr, feats.shape[-1])
    return tracks, score > visible_above
