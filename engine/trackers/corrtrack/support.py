"""CorrTrack v3: attention across the tracks of a video (TrackAttention) and the support points that give a
lone query neighbours to attend to.

Through v2 each track mixes information only along its own time axis, so a point on a plain surface, with
no correlation peak of its own, has nothing to follow. TrackAttention lets the N tracks of one video attend
to each other in every frame (as CoTracker's tracks do); ``support_queries`` is a fixed grid of extra
queries on frame 0 that the tracker (and training, so the two match) appends to every batch of a v3 net and
drops from its outputs, so that even a single user query has tracks around it to borrow motion from.

This module sits below model.py (which builds the layers; no import cycle): the network hands each layer
its frame extent (MODEL_SIZE) and its ``layer_norm``.
"""

from __future__ import annotations

import math
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from engine.trackers.corrtrack.casts import linear

#: support points per side: a v3 tracker (and v3 training) adds SUPPORT_GRID x SUPPORT_GRID queries (0 = none)
SUPPORT_GRID = 8
SUPPORT_FRAME = 0  # the support queries' frame
#: octaves of the Fourier features of a track's position: sin and cos of 2^k * pi * (pos / extent), k < this,
#: per axis; the finest wavelength is extent / 2^(k-1) (32 px at 256 px for 5), about the 8x8 grid's spacing
TRACK_POSITION_OCTAVES = 5

LayerNormFn = Callable[[nn.LayerNorm, torch.Tensor], torch.Tensor]


def position_features(pos: torch.Tensor, extent: float, octaves: int = TRACK_POSITION_OCTAVES) -> torch.Tensor:
    """Positions [..., 2] in pixels of an ``extent``-pixel frame -> Fourier features float32 [..., 4 * octaves]
    (sin then cos of 2^k * pi * pos / extent, x octaves then y octaves)."""
    freqs = torch.exp2(torch.arange(octaves, device=pos.device, dtype=torch.float32)) * math.pi  # [F]
    angles = (pos.float() / extent).unsqueeze(-1) * freqs  # [..., 2, F]
    return torch.cat([angles.sin(), angles.cos()], dim=-1).flatten(-2)


class TrackAttention(nn.Module):
    """x + proj(MHSA(LayerNorm(x))) over the N tracks of each video, in each frame: [B*N, T, D] in and out.

    Tokens are the tracks of one (video, frame) pair, [B*T, N, D]: videos never mix, and no order of the tracks
    is assumed (permuting the tracks permutes the outputs). Two things tell a head which tracks to listen to:
    where they are (a learned projection of position_features of each track's current estimate, added to q
    and k, so heads can learn that nearby tracks move alike) and how far to trust them in that frame (per
    head ``w_vis * log sigmoid(vis) + w_acc * log sigmoid(acc)`` of the key track, added to the logits as a
    key bias carried as extra head channels, key_bias_attention; never -inf). ``proj`` starts at zero: a new
    layer leaves the hidden state exactly as it was (v2 weights in a v3 net compute v2's outputs). Fixed shapes,
    no host syncs (CUDA-graph and torch.compile safe); F.scaled_dot_product_attention keeps the autocast dtype.
    """

    def __init__(self, dim: int, heads: int, extent: float, norm_fn: LayerNormFn,
                 octaves: int = TRACK_POSITION_OCTAVES):
        """extent: the frame's size in the positions' pixels; norm_fn(norm, x): the network's LayerNorm call."""
        super().__init__()
        if dim % heads:
            raise ValueError(f"{heads} heads do not divide {dim} channels")
        self.heads = heads
        self.extent = float(extent)
        self.octaves = octaves
        self.norm_fn = norm_fn
        self.norm = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.where = nn.Linear(4 * octaves, 2 * dim, bias=False)  # position features -> (q, k) offsets
        self.proj = nn.Linear(dim, dim)
        nn.init.zeros_(self.proj.weight)
        nn.init.zeros_(self.proj.bias)
        self.key_weights = nn.Parameter(torch.ones(2, heads))  # (visible, accurate) x [H]

    def forward(self, x: torch.Tensor, pos: torch.Tensor, vis: torch.Tensor, acc: torch.Tensor) -> torch.Tensor:
        """x [B*N, T, D]; pos [B, N, T, 2] (pixels of the extent; detached here); vis, acc logits [B, N, T]
        -> [B*N, T, D]."""
        b, n, t, _ = pos.shape
        d = x.shape[-1]
        h = self.heads
        # one transposed copy of x: the token-wise layers then run on [B*T, N, D] and q, k, v are views
        tokens = x.reshape(b, n, t, d).transpose(1, 2).reshape(b * t, n, d)
        y = self.norm_fn(self.norm, tokens)
        where = position_features(pos.detach().transpose(1, 2), self.extent, self.octaves)  # [B, T, N, 4F]
        qkv = linear(self.qkv, y)  # [B*T, N, 3D]
        qk = qkv[..., :2 * d] + linear(self.where, where.to(y.dtype)).view(b * t, n, 2 * d)
        qk = qk.view(b * t, n, 2, h, d // h).permute(2, 0, 3, 1, 4)  # [2, B*T, H, N, Dh]
        v = qkv[..., 2 * d:].view(b * t, n, h, d // h).transpose(1, 2)  # [B*T, H, N, Dh]
        logp = F.logsigmoid(torch.stack([vis.detach(), acc.detach()], dim=-1).float())  # [B, N, T, 2]
        weights = self.key_weights.float()
        trust = logp[..., 0:1] * weights[0] + logp[..., 1:2] * weights[1]  # [B, N, T, H] (elementwise: no cast)
        bias = trust.permute(0, 2, 1, 3).reshape(b * t, n, h).transpose(1, 2).unsqueeze(-1)  # [B*T, H, N, 1] fp32
        out = key_bias_attention(qk[0], qk[1], v, bias)  # [B*T, H, N, Dh]
        out = linear(self.proj, out.transpose(1, 2).reshape(b * t, n, d))  # [B*T, N, D]
        # the residual add reads the tokens back in the tracks' layout: no second transposed copy
        return (x.reshape(b, n, t, d) + out.view(b, t, n, d).transpose(1, 2)).reshape(b * n, t, d)


#: channels a head gains to carry a key bias (two: the bias's bf16/fp16 value and its remainder), padded so the
#: head dim stays a multiple of 8 (what the fused attention kernels take)
KEY_BIAS_CHANNELS = 2


def key_bias_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """softmax(q k^T / sqrt(Dh) + bias_key) v, with the per-key bias [..., N, 1] (float32) carried as extra channels
    of the heads instead of an attention mask: q gets ones where k gets the bias times sqrt(Dh) (split into its
    rounded value and the remainder, so half precision loses almost nothing), both padded with zeros to a multiple
    of 8 channels. With no mask SDPA takes a fused kernel; with a [B*T, H, 1, N] mask it ran its math path on the
    H200 (torch 2.11: an fp32 [B*T, H, N, N] softmax, ~5 ms per call at 1088 tracks, session 21's profile).
    q, k, v [..., N, Dh] -> [..., N, Dh]."""
    dh = q.shape[-1]
    width = -(-(dh + KEY_BIAS_CHANNELS) // 8) * 8
    scaled = bias * math.sqrt(dh)
    hi = scaled.to(k.dtype)
    lo = (scaled - hi.float()).to(k.dtype)
    ones = torch.ones_like(hi)
    q2 = F.pad(torch.cat([q, ones, ones], dim=-1), (0, width - dh - KEY_BIAS_CHANNELS))
    k2 = F.pad(torch.cat([k, hi, lo], dim=-1), (0, width - dh - KEY_BIAS_CHANNELS))
    v2 = F.pad(v, (0, width - dh))
    return F.scaled_dot_product_attention(q2, k2, v2, scale=1.0 / math.sqrt(dh))[..., :dh]


def support_count(grid: int) -> int:
    """Support points of a grid setting (grid x grid; 0 for 0)."""
    return grid * grid if grid > 0 else 0


def support_queries(grid: int, size: int, batch: int, device: torch.device | str) -> torch.Tensor:
    """The support queries: a grid x grid lattice on frame SUPPORT_FRAME, at the centres of grid x grid equal cells of
    a size x size frame (a margin of half a cell on every side) -> float32 [batch, grid^2, 3] (t, x, y), row-major
    (x fastest). Built on the device (no host -> device copy)."""
    cells = (torch.arange(grid, device=device, dtype=torch.float32) + 0.5) * (size / grid) - 0.5  # pixel centres
    ys, xs = torch.meshgrid(cells, cells, indexing="ij")
    frames = torch.full_like(xs, float(SUPPORT_FRAME))
    return torch.stack([frames, xs, ys], dim=-1).view(1, grid * grid, 3).expand(batch, -1, -1)


def with_support(queries: torch.Tensor, grid: int, size: int) -> torch.Tensor:
    """queries [B, N, 3] -> [B, N + grid^2, 3]: the support queries appended after the given ones (grid 0: as is)."""
    if grid <= 0:
        return queries
    support = support_queries(grid, size, queries.shape[0], queries.device).to(queries.dtype)
    return torch.cat([queries, support], dim=1)
