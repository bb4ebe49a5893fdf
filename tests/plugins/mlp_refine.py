"""A linear-heavy plugin tracker: patch embeddings and an MLP refinement, for the int8/fp8 trade-off.

``tests.plugins.mlp_refine:factory`` -> MLPRefine (seeded random weights: its tracks are crude, but how far
int8/fp8 move them from fp32, and how fast they run, is what it measures). Frames are resized to 128x128
and cut into 8x8 patches (a 16x16 grid); ``embed`` (nn.Linear 192 -> D) embeds them; each of ITERS
refinement steps gathers the embedding under every (point, frame) estimate, concatenates the query's,
and ``mlp`` (DEPTH nn.Linear layers, D wide) and ``head`` (D -> 2, too small to quantise) move the
estimate by at most STEP_PX. Its top-level submodules are its stages (embed, mlp, head).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

SIZE = 128
PATCH = 8
DIM = 512
DEPTH = 4
ITERS = 4
STEP_PX = 4.0
SEED = 1234
HEAD_GAIN = 20.0


class MLPRefine(nn.Module):
    def __init__(self, dim: int = DIM, depth: int = DEPTH, iters: int = ITERS):
        super().__init__()
        self.iters = iters
        self.embed = nn.Linear(3 * PATCH * PATCH, dim)
        layers: list[nn.Module] = []
        for i in range(depth):
            layers += [nn.Linear(2 * dim if i == 0 else dim, dim), nn.GELU()]
        self.mlp = nn.Sequential(*layers)
        self.head = nn.Linear(dim, 2)
        with torch.no_grad():
            self.head.weight.mul_(HEAD_GAIN)  # steps of a few px, not a few hundredths

    def forward(self, frames: torch.Tensor, queries: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        t, h, w, _ = frames.shape
        x = F.interpolate(frames.permute(0, 3, 1, 2).float() / 255.0, size=(SIZE, SIZE), mode="bilinear",
                          align_corners=False)
        grid = SIZE // PATCH
        patches = F.unfold(x, PATCH, stride=PATCH).transpose(1, 2)  # [T, grid^2, 3*P*P]
        emb = self.embed(patches)  # [T, grid^2, D]
        n = queries.shape[0]
        scale = torch.tensor([grid / w, grid / h], device=frames.device)

        def cells(frame: torch.Tensor, xy: torch.Tensor) -> torch.Tensor:
            c = (xy * scale).long().clamp(0, grid - 1)
            return emb[frame, c[..., 1] * grid + c[..., 0]]

        qf = cells(queries[:, 0].round().long().clamp(0, t - 1), queries[:, 1:])  # [N, D]
        pos = queries[:, None, 1:].expand(n, t, 2).clone()
        frame_idx = torch.arange(t, device=frames.device).expand(n, t)
        for _ in range(self.iters):
            f = cells(frame_idx, pos)  # [N, T, D]
            z = self.mlp(torch.cat([f, qf[:, None].expand_as(f).to(f.dtype)], dim=-1))
            pos = pos + torch.tanh(self.head(z).float()) * STEP_PX
        pos[..., 0].clamp_(0, w - 1)
        pos[..., 1].clamp_(0, h - 1)
        return pos, torch.ones(n, t, dtype=torch.bool, device=frames.device)


def factory() -> MLPRefine:
    torch.manual_seed(SEED)
    return MLPRefine()


def callable_factory():
    """The same idea as a plain function (not an nn.Module): int8/fp8 must refuse it."""
    model = factory()

    def track(frames: torch.Tensor, queries: torch.Tensor):
        return model(frames, queries)

    return track
