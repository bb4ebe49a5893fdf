"""Planted plugin trackers for the deep capture's rules, each with one problem a capture names.

| factory          | planted problem                                                     | rule           |
| item_per_point   | a ``.item()`` per point inside a nested module's forward            | host_sync      |
| cpu_round_trip   | an FFT on the host: ``.cpu()``, CPU ``torch.fft``, ``.to(device)``  | cpu_round_trip |
| fp32_grid_sample | windowed grid_sample of float32 features, 4 iterations             | fp32_under_autocast |
| deep_nested      | work in forward bodies and modules 3-4 deep (``updater.blocks.2``)  | attribution    |
| tiny_kernels     | (from ``pathological``) thousands of tiny launches                  | launch_bound_capture |

All are ``nn.Module`` plugins ``(frames uint8 [T, H, W, 3], queries [N, 3]) -> (tracks [N, T, 2],
visible [N, T])`` without declared stages (their top-level submodules become stages). Sizes scale
with the input, so tiny CPU videos stay fast.
"""

from __future__ import annotations

import torch
from torch import nn

from tests.plugins.pathological import FEATURE_STRIDE, Features, cells_to_pixels, match, query_features
from tests.plugins.pathological import tiny_kernels as tiny_kernels  # noqa: PLC0414 (re-exported factory)

HIDDEN = 32  # width of the deep-nested updater's tokens
BLOCKS = 4  # updater blocks
HEADS = 2
SAMPLE_LINEARS = 3
SAMPLE_RADIUS = 7  # fp32_grid_sample's window radius in feature cells (15x15 window)
SAMPLE_ITERATIONS = 4  # its refinement iterations, one grid_sample each


def _seeded(module: nn.Module, seed: int) -> nn.Module:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * (0.5 / max(1, p.shape[-1]) ** 0.5))
    return module


# -- item_per_point ------------------------------------------------------------------------------
class PerPointScorer(nn.Module):
    """Scores each point's best match and reads the score to the host: one sync per point."""

    def forward(self, corr: torch.Tensor) -> torch.Tensor:
        """corr [N, T, P] -> visible [N, T]."""
        visible = []
        for i in range(corr.shape[0]):
            score = corr[i].amax(dim=-1)  # [T]
            if score.mean().item() > 0.0:  # host sync per point
                visible.append(score > 0.0)
            else:
                visible.append(torch.zeros_like(score, dtype=torch.bool))
        return torch.stack(visible)


class Matching(nn.Module):
    def __init__(self):
        super().__init__()
        self.scorer = PerPointScorer()

    def forward(self, feats: torch.Tensor, queries: torch.Tensor):
        t, c, h, w = feats.shape
        qfeat = query_features(feats, queries)
        corr = torch.einsum("nc,tcp->ntp", qfeat, feats.reshape(t, c, h * w))  # [N, T, h*w]
        index = corr.argmax(dim=-1)
        return cells_to_pixels(index, w), self.scorer(corr)


class ItemPerPoint(nn.Module):
    """Planted problem: ``.item()`` per point inside ``match.scorer``'s forward."""

    def __init__(self):
        super().__init__()
        self.features = Features()
        self.match = Matching()

    def forward(self, frames: torch.Tensor, queries: torch.Tensor):
        return self.match(self.features(frames), queries)


# -- cpu_round_trip --------------------------------------------------------------------------------
class HostSpectralFilter(nn.Module):
    """Low-pass filters the feature maps with an FFT done on the host."""

    def forward(self, feats: torch.Tensor) -> torch.Tensor:
        """feats [T, C, h, w] -> filtered [T, C, h, w]."""
        host = feats.float().cpu()  # device -> host copy
        spec = torch.fft.rfft2(host)  # CPU FFT
        keep = max(1, spec.shape[-2] // 4)
        spec[..., keep:-keep, :] = 0
        filtered = torch.fft.irfft2(spec, s=host.shape[-2:])
        return filtered.to(feats.device)  # host -> device copy


class CpuRoundTrip(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = Features()
        self.filter = HostSpectralFilter()

    def forward(self, frames: torch.Tensor, queries: torch.Tensor):
        feats = self.filter(self.features(frames))
        return match(feats, query_features(feats, queries))


# -- fp32_grid_sample ------------------------------------------------------------------------------
class Projector(nn.Module):
    def __init__(self, channels: int = 16, layers: int = SAMPLE_LINEARS):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(channels, channels) for _ in range(layers))
        _seeded(self, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for lin in self.layers:
            x = torch.relu(lin(x)) + x
        return x


class Sampler(nn.Module):
    """Local correlation refinement on float32 features, as point trackers do: per iteration, every point
    samples a (2r+1)^2 window of the feature map around its position in every frame (bilinear
    ``grid_sample``, which stays float32 under autocast because its input is float32), correlates the window
    with its query feature and moves to the window's soft-argmax.

    Its weight is planted: at 47x256x256 and 256 queries (64x64 feature cells) it samples
    47 * 256 * 15^2 * 16 values ``SAMPLE_ITERATIONS`` times (~170 M values; the H200 samples ~85 G/s single
    channel in CorrTrack's polish) so that the fp32 ``grid_sampler`` kernel is a sizeable share of the run,
    like the peers' 9-21 ms; the window shrinks with the feature map (3x3 at 8x8 cells), so tiny CPU
    videos stay fast. ``padding_mode="border"`` keeps it on ATen's ``grid_sampler_2d_kernel`` as in the
    peers and CorrTrack (zeros + align_corners would go to cuDNN's ``bilinear_sampler_fw_4d``)."""

    def forward(self, feats: torch.Tensor, tracks: torch.Tensor, qfeat: torch.Tensor) -> torch.Tensor:
        """feats [T, C, h, w] float32, tracks [N, T, 2] px, qfeat [N, C] -> refined tracks [N, T, 2] px."""
        t, c, h, w = feats.shape
        r = window_radius(h, w)
        size = 2 * r + 1
        offs = torch.arange(-r, r + 1, device=feats.device, dtype=torch.float32)
        oy, ox = torch.meshgrid(offs, offs, indexing="ij")
        window = torch.stack([ox, oy], -1).reshape(1, 1, size * size, 2)  # cells
        scale = torch.tensor([2.0 / max(1, w - 1), 2.0 / max(1, h - 1)], device=feats.device)
        q = qfeat.float().t()[None, :, :, None]  # [1, C, N, 1]
        pos = tracks.transpose(0, 1).float() / FEATURE_STRIDE  # [T, N, 2] cells
        for _ in range(SAMPLE_ITERATIONS):
            grid = (pos[:, :, None] + window) * scale - 1  # [T, N, K, 2]
            out = nn.functional.grid_sample(feats.float(), grid, padding_mode="border",  # [T, C, N, K] float32
                                            align_corners=True)
            weight = torch.softmax((out * q).sum(1), dim=-1)  # [T, N, K] local correlation
            pos = pos + (weight[..., None] * window[0]).sum(2)
        return pos.transpose(0, 1) * FEATURE_STRIDE


def window_radius(h: int, w: int) -> int:
    """The sampling window's radius in feature cells: SAMPLE_RADIUS, less on small feature maps."""
    return max(1, min(SAMPLE_RADIUS, min(h, w) // 8))


class Fp32GridSample(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = Features()
        self.sampler = Sampler()
        self.project = Projector()

    def forward(self, frames: torch.Tensor, queries: torch.Tensor):
        feats = self.features(frames)
        tracks, visible = match(feats, query_features(feats, queries))
        qfeat = query_features(feats, queries)
        refined = self.sampler(feats, tracks, qfeat)  # [N, T, 2]
        shift = self.project(qfeat.float())[:, None, :2].float()  # linears: autocast casts them, no finding
        return refined + 0.0 * shift, visible


# -- deep_nested -----------------------------------------------------------------------------------
class Attention(nn.Module):
    def __init__(self, dim: int = HIDDEN, heads: int = HEADS):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [B, L, D] -> [B, L, D]; the head split and softmax are this module's own work."""
        b, l, d = x.shape
        q, k, v = self.qkv(x).reshape(b, l, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        att = torch.softmax(q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5, dim=-1)
        return self.proj((att @ v).transpose(1, 2).reshape(b, l, d))


class Mlp(nn.Module):
    def __init__(self, dim: int = HIDDEN):
        super().__init__()
        self.fc1 = nn.Linear(dim, 2 * dim)
        self.fc2 = nn.Linear(2 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(nn.functional.gelu(self.fc1(x)))


class Block(nn.Module):
    def __init__(self, dim: int = HIDDEN):
        super().__init__()
        self.attn = Attention(dim)
        self.mlp = Mlp(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(nn.functional.layer_norm(x, x.shape[-1:]))  # norms: the block's forward body
        return x + self.mlp(nn.functional.layer_norm(x, x.shape[-1:]))


class Updater(nn.Module):
    def __init__(self, dim: int = HIDDEN, blocks: int = BLOCKS):
        super().__init__()
        self.embed = nn.Linear(2 + 16, dim)
        self.blocks = nn.ModuleList(Block(dim) for _ in range(blocks))
        self.out = nn.Linear(dim, 2)
        _seeded(self, 4)

    def forward(self, feats: torch.Tensor, tracks: torch.Tensor) -> torch.Tensor:
        """feats [T, C, h, w], tracks [N, T, 2] -> refined tracks [N, T, 2]."""
        t, c, h, w = feats.shape
        cells = (tracks / FEATURE_STRIDE).round().long()
        cx, cy = cells[..., 0].clamp(0, w - 1), cells[..., 1].clamp(0, h - 1)
        local = feats.permute(0, 2, 3, 1)[torch.arange(t, device=feats.device)[None], cy, cx]  # [N, T, C]
        x = self.embed(torch.cat([tracks / max(h, w), local], dim=-1))  # [N, T, D]
        for block in self.blocks:
            x = block(x)
        return tracks + 0.01 * torch.tanh(self.out(x))


class DeepNested(nn.Module):
    """Most work in nested modules (``updater.blocks.2.attn.qkv``) and their forward bodies."""

    def __init__(self):
        super().__init__()
        self.features = Features()
        self.updater = Updater()

    def forward(self, frames: torch.Tensor, queries: torch.Tensor):
        feats = self.features(frames)
        qfeat = query_features(feats, queries)
        t, c, h, w = feats.shape
        corr = torch.einsum("nc,tcp->ntp", qfeat, feats.reshape(t, c, h * w))  # the root's forward body
        score, index = corr.max(dim=-1)
        return self.updater(feats, cells_to_pixels(index, w)), score > 0.0


item_per_point = ItemPerPoint
cpu_round_trip = CpuRoundTrip
fp32_grid_sample = Fp32GridSample
deep_nested = DeepNested
PLANTED = {"item_per_point": item_per_point, "cpu_round_trip": cpu_round_trip,
           "fp32_grid_sample": fp32_grid_sample, "deep_nested": deep_nested, "tiny_kernels": tiny_kernels}
