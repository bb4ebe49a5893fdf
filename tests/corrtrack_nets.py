"""Tiny CorrTrack nets, inputs and checks shared by the v2 and v3 tests (CPU, constructed data)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from engine.trackers.corrtrack import CorrTrackNet
from engine.trackers.corrtrack.model import CorrTrackConfig
from engine.trackers.corrtrack.weights import save_model

TINY = CorrTrackConfig(feature_dim=8, widths=(8, 8, 8), hidden_dim=16, mixer_dilations=(1, 2), num_iters=2)
TINY_V2 = dataclasses.replace(TINY, attention_layers=1)
TINY_V3 = dataclasses.replace(TINY_V2, track_attention_layers=1)


def tiny_inputs(seed: int = 0, videos: int = 1, frames: int = 5, points: int = 6) -> tuple[torch.Tensor, torch.Tensor]:
    """Random uint8 videos [videos, frames, 64, 64, 3] and queries [videos, points, 3] (t, x, y) in model pixels."""
    gen = torch.Generator().manual_seed(seed)
    video = torch.randint(0, 256, (videos, frames, 64, 64, 3), dtype=torch.uint8, generator=gen)
    queries = torch.cat([torch.randint(0, frames, (videos, points, 1), generator=gen).float(),
                         torch.rand(videos, points, 2, generator=gen) * 200 + 20], dim=-1)
    return video, queries


def saved_net(path: Path, cfg: CorrTrackConfig, extra: dict, seed: int = 3) -> CorrTrackNet:
    """A net of ``cfg`` with every weight moved off its initial value (zero projections too, so a wrong load
    shows), saved to ``path`` with manifest fields ``extra``."""
    torch.manual_seed(seed)
    model = CorrTrackNet(cfg)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    save_model(model, path, extra)
    return model


def assert_same_outputs(a: CorrTrackNet, b: CorrTrackNet, video: torch.Tensor, queries: torch.Tensor,
                        atol: float = 0.0) -> None:
    """Both nets (eval mode) give the same estimates and match logits, in fp32 and under bf16 autocast."""
    a.eval()
    b.eval()
    for cast in (torch.autocast("cpu", enabled=False), torch.autocast("cpu", dtype=torch.bfloat16)):
        with torch.no_grad(), cast:
            out_a, match_a = a(video, queries)
            out_b, match_b = b(video, queries)
        torch.testing.assert_close(match_a, match_b, rtol=0, atol=atol)
        for est_a, est_b in zip(out_a, out_b, strict=True):
            for x, y in zip(est_a, est_b, strict=True):
                torch.testing.assert_close(x, y, rtol=0, atol=atol)
