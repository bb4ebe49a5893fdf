"""Photometric check of ground truth: the colour under a visible track matches its query's colour."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def bilinear_colour(video: torch.Tensor, xy: torch.Tensor) -> torch.Tensor:
    """Colours of video uint8 [T, H, W, 3] at points xy [N, T, 2] (frame t for column t) -> [N, T, 3]."""
    T, H, W, _ = video.shape
    frames = video.permute(0, 3, 1, 2).float() / 255.0  # [T, 3, H, W]
    grid = torch.stack([xy[..., 0] * (2.0 / (W - 1)) - 1.0, xy[..., 1] * (2.0 / (H - 1)) - 1.0], -1)
    grid = grid.permute(1, 0, 2)[:, :, None, :]  # [T, N, 1, 2]
    out = F.grid_sample(frames, grid, mode="bilinear", padding_mode="border", align_corners=True)
    return out[..., 0].permute(2, 0, 1)  # [N, T, 3]


def photometric_agreement(video: torch.Tensor, tracks: torch.Tensor, visible: torch.Tensor,
                          queries: torch.Tensor, tol: float = 0.1) -> float:
    """Share of visible (point, frame) pairs, off the query frame, whose colour is within ``tol``.

    One video: video uint8 [T, H, W, 3], tracks [N, T, 2], visible [N, T], queries [N, 3].
    Colour is compared as the largest channel difference in [0, 1] units.
    """
    colours = bilinear_colour(video, tracks)  # [N, T, 3]
    qt = queries[:, 0].round().long()
    ref = colours[torch.arange(len(qt)), qt]  # [N, 3] at the query frame
    close = (colours - ref[:, None]).abs().amax(-1) <= tol  # [N, T]
    frames = torch.arange(video.shape[0], device=video.device)[None]
    mask = visible & (frames != qt[:, None])
    if not bool(mask.any()):
        return float("nan")
    return float(close[mask].float().mean())
