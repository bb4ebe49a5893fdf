"""The CorrTrack network: CNN feature pyramid, global correlation volume, iterative temporal refinement.

Shapes use B videos, N query points, T frames, C feature channels, D hidden channels, at the model's
resolution (MODEL_SIZE x MODEL_SIZE pixels; (0, 0) the centre of the top-left pixel).

1. ``backbone``: frames [F, 3, 256, 256] -> features [F, 64*64, C] at stride 4 (stride-8 and -16 paths
   fused in, FPN style), channels last so the correlation is one matrix product.
2. ``query_features``: bilinear samples of the query frame's features at (x, y) -> [B, N, C].
3. ``cost_volume``: every query against every position of every frame, [B, N, T, 64, 64], and at strides
   8 and 16 against average-pooled features (the same numbers as pooling the volume, by linearity, without
   reading the stride-4 volume back).
4. ``init_head``: on the stride-8 volume, the argmax per frame and a soft-argmax in a small window around
   it (no pass over the volume beyond max, logsumexp and a 25-element gather), plus occlusion and
   accuracy logits from the peak's statistics.
5. ``refine``: NUM_ITERS iterations; each gathers 7x7 correlation windows at the three levels around the
   current estimate (one integer-patch gather and a shared bilinear weight, no grid_sample, so it keeps
   the autocast dtype) and mixes them along time per track (dilated depthwise temporal convolutions and
   MLPs), updating position, visibility logit and accuracy logit ("error < ACCURACY_PX"). From v2
   (``attention_layers`` > 0) each iteration then runs temporal self-attention over all T frames of each
   track (TemporalAttention), so frames whose local correlation is ambiguous borrow from the track's
   confident frames far away in time; its output projection starts at zero, so v1 weights in a v2 net
   compute exactly v1's outputs. From v3 (``track_attention_layers`` > 0) it then runs attention across the
   tracks of each video in each frame (support.TrackAttention), so a point on a plain surface borrows motion
   from its neighbours; the tracker adds a grid of support queries for that (support.py). Its output
   projection starts at zero too: v2 weights in a v3 net compute exactly v2's outputs.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from engine.trackers.corrtrack import fused
from engine.trackers.corrtrack.casts import conv, half_autocast, linear, param_as, sequential
from engine.trackers.corrtrack.support import TrackAttention
from engine.trackers.quant import QuantRecipe, quantized_matmul

MODEL_SIZE = 256  # frames are resized to MODEL_SIZE x MODEL_SIZE
FEATURE_STRIDE = 4
POOL_FACTORS = (1, 2, 4)  # correlation pyramid: strides 4, 8, 16
INIT_LEVEL = 1  # the initial estimate comes from the stride-8 level
INIT_RADIUS = 2  # soft-argmax window (2r+1)^2 cells around the argmax
WINDOW_RADIUS = 3  # local correlation windows (2r+1)^2 per level
POSITION_SCALE = 64.0  # positions enter the mixer as (pos - query) / POSITION_SCALE
TIME_SCALE = 16.0  # frame offsets enter the mixer as (t - t_query) / TIME_SCALE
STEP_SCALE = 4.0  # a unit output of the update head moves the point this many pixels
ACCURACY_PX = 8.0  # the accuracy logit predicts "position error < ACCURACY_PX" (TAPIR's uncertainty)
PIXEL_MEAN = 0.5  # frames are scaled to [0, 1], then (x - mean) / std
PIXEL_STD = 0.25
#: initial per-head ALiBi slopes of the temporal attention (bias -slope * |frame distance|): from global to local
ATTENTION_INIT_SLOPES = (0.0, 1.0 / 16, 1.0 / 4, 1.0)


@dataclass(frozen=True)
class CorrTrackConfig:
    """Sizes of the network (stored in the weights manifest)."""

    feature_dim: int = 64
    widths: tuple[int, int, int] = (64, 96, 128)  # backbone channels at strides 4, 8, 16
    hidden_dim: int = 128
    mixer_dilations: tuple[int, ...] = (1, 2, 4, 8)
    num_iters: int = 4
    attention_layers: int = 0  # v2: temporal self-attention layers per refinement iteration (0 = v1)
    attention_heads: int = 4  # heads of the temporal and the track attention layers
    track_attention_layers: int = 0  # v3: attention across tracks per refinement iteration, after the temporal

    def __post_init__(self) -> None:
        if self.attention_layers < 0 or self.attention_heads < 1 or self.hidden_dim % self.attention_heads:
            raise ValueError(f"attention_layers must be >= 0 and attention_heads >= 1 dividing hidden_dim "
                             f"{self.hidden_dim}; got {self.attention_layers} layers, {self.attention_heads} heads")
        if self.track_attention_layers < 0:
            raise ValueError(f"track_attention_layers must be >= 0; got {self.track_attention_layers}")

    @property
    def version(self) -> str:
        """"v1" (temporal convolutions only), "v2" (with temporal attention) or "v3" (with attention across tracks)."""
        if self.track_attention_layers > 0:
            return "v3"
        return "v2" if self.attention_layers > 0 else "v1"

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> CorrTrackConfig:
        return cls(
            feature_dim=int(data["feature_dim"]),
            widths=tuple(int(w) for w in data["widths"]),  # type: ignore[arg-type]  # length checked by the net
            hidden_dim=int(data["hidden_dim"]),
            mixer_dilations=tuple(int(d) for d in data["mixer_dilations"]),
            num_iters=int(data["num_iters"]),
            attention_layers=int(data.get("attention_layers", 0)),  # v1 manifests lack the v2 fields
            attention_heads=int(data.get("attention_heads", 4)),
            track_attention_layers=int(data.get("track_attention_layers", 0)),  # v1/v2 manifests lack it
        )


def _conv(cin: int, cout: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, 3, stride=stride, padding=1)


class ResBlock(nn.Module):
    """Two 3x3 convolutions with a skip connection."""

    def __init__(self, channels: int):
        super().__init__()
        self.conv1 = _conv(channels, channels)
        self.conv2 = _conv(channels, channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(x + conv(self.conv2, F.relu(conv(self.conv1, x))))


class Backbone(nn.Module):
    """Frames [F, 3, 256, 256] (normalised) -> features [F, C, 64, 64], channels-last in memory."""

    def __init__(self, cfg: CorrTrackConfig):
        super().__init__()
        w4, w8, w16 = cfg.widths
        self.stem = nn.Sequential(_conv(3, 32, 2), nn.ReLU(), _conv(32, w4, 2), nn.ReLU())
        self.block4 = ResBlock(w4)
        self.down8 = nn.Sequential(_conv(w4, w8, 2), nn.ReLU())
        self.block8 = ResBlock(w8)
        self.down16 = nn.Sequential(_conv(w8, w16, 2), nn.ReLU())
        self.block16 = ResBlock(w16)
        self.proj4 = nn.Conv2d(w4, cfg.feature_dim, 1)
        self.proj8 = nn.Conv2d(w8, cfg.feature_dim, 1)
        self.proj16 = nn.Conv2d(w16, cfg.feature_dim, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c4 = self.block4(sequential(self.stem, x))
        c8 = self.block8(sequential(self.down8, c4))
        c16 = self.block16(sequential(self.down16, c8))
        up = upsample2x(conv(self.proj16, c16))
        up = upsample2x(conv(self.proj8, c8) + up)
        return conv(self.proj4, c4) + up


def upsample2x(x: torch.Tensor) -> torch.Tensor:
    """Bilinear 2x upsampling in x's dtype: CUDA's autocast would run it in fp32, and every sum after it and the
    features themselves would then be fp32 (twice the bytes; the correlation casts them to half again)."""
    dev = x.device.type
    if half_autocast(dev) == x.dtype:
        with torch.autocast(dev, enabled=False):
            return F.interpolate(x, scale_factor=2.0, mode="bilinear", align_corners=False)
    return F.interpolate(x, scale_factor=2.0, mode="bilinear", align_corners=False)


class TemporalBlock(nn.Module):
    """x + MLP(depthwise dilated temporal conv(LayerNorm(x))), on [M, T, D] (M tracks)."""

    def __init__(self, dim: int, dilation: int):
        super().__init__()
        self.dilation = dilation
        self.norm = nn.LayerNorm(dim)
        self.taps = nn.Parameter(torch.zeros(3, dim))  # weights of frames t-d, t, t+d
        self.tap_bias = nn.Parameter(torch.zeros(dim))
        with torch.no_grad():
            self.taps[1].fill_(1.0)
        self.fc1 = nn.Linear(dim, 2 * dim)
        self.fc2 = nn.Linear(2 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        d = self.dilation
        if fused.usable(x):  # inference on a GPU: the norm and the taps in one kernel (fused.py)
            mixed = fused.ln_taps(x, self.norm, self.taps, self.tap_bias, d, half_autocast(x.device.type) or x.dtype)
            return x + linear(self.fc2, F.gelu(linear(self.fc1, mixed)))
        y = layer_norm(self.norm, x)
        taps = param_as(self.taps, y.dtype)
        # frame t's own tap over the bias, then frames t-d and t+d added into the frames that have them (zero
        # frames beyond both ends): three passes over [M, T, D], no padded copy
        mixed = torch.addcmul(param_as(self.tap_bias, y.dtype), y, taps[1])
        mixed[:, d:].addcmul_(y[:, :-d], taps[0])
        mixed[:, :-d].addcmul_(y[:, d:], taps[2])
        return x + linear(self.fc2, F.gelu(linear(self.fc1, mixed)))


class TemporalAttention(nn.Module):
    """x + proj(MHSA(LayerNorm(x))) over the T frames of each track, on [M, T, D].

    The attention logits get two additive biases, so the layer knows time and trust without a positional
    table tied to a clip length: per head ``-slope * |t_query_frame - t_key_frame|`` (ALiBi, learned
    slopes, any T) and per head ``w_vis * log sigmoid(vis) + w_acc * log sigmoid(acc)`` of the key frame
    (a soft key mask: frames predicted occluded or inaccurate are attended to less; never -inf, so no row
    is empty). ``proj`` starts at zero: a new layer leaves the hidden state exactly as it was. Fixed shapes,
    no host syncs (CUDA-graph safe); F.scaled_dot_product_attention keeps the autocast dtype.
    """

    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.norm = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        nn.init.zeros_(self.proj.weight)
        nn.init.zeros_(self.proj.bias)
        slopes = [ATTENTION_INIT_SLOPES[h % len(ATTENTION_INIT_SLOPES)] for h in range(heads)]
        self.slopes = nn.Parameter(torch.tensor(slopes))  # [H]
        self.key_weights = nn.Parameter(torch.ones(2, heads))  # (visible, accurate) x [H]

    def forward(self, x: torch.Tensor, key_logits: torch.Tensor) -> torch.Tensor:
        """x [M, T, D]; key_logits [M, T, 2] (visibility and accuracy logits per frame) -> [M, T, D]."""
        m, t, d = x.shape
        h = self.heads
        qkv = linear(self.qkv, layer_norm(self.norm, x))
        qkv = qkv.view(m, t, 3, h, d // h).permute(2, 0, 3, 1, 4)  # [3, M, H, T, Dh]
        q, k, v = qkv[0], qkv[1], qkv[2]
        frames = torch.arange(t, device=x.device, dtype=torch.float32)
        distance = (frames.view(t, 1) - frames.view(1, t)).abs()  # [T, T]
        time_bias = -self.slopes.float().abs().view(h, 1, 1) * distance  # [H, T, T]
        logp = F.logsigmoid(key_logits.float())  # [M, T, 2] log P(visible), log P(accurate)
        weights = self.key_weights.float()
        trust = logp[..., 0:1] * weights[0] + logp[..., 1:2] * weights[1]  # [M, T, H] (elementwise: no autocast cast)
        mask = (time_bias.unsqueeze(0) + trust.transpose(1, 2).unsqueeze(2)).to(q.dtype)  # [M, H, T, T]
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # [M, H, T, Dh]
        return x + linear(self.proj, y.transpose(1, 2).reshape(m, t, d))


def layer_norm(norm: nn.LayerNorm, x: torch.Tensor) -> torch.Tensor:
    """``norm(x)``, but under half-precision autocast in that dtype (statistics still accumulate in fp32 inside
    the kernel): CUDA's autocast would run it in fp32, adding a cast before and after and doubling the bytes of
    every elementwise op on its output (CPU's autocast leaves a layer norm in its input's dtype). At inference
    on a GPU, fused.py's kernel (torch's ran at about a tenth of the memory bandwidth at these sizes)."""
    dev = x.device.type
    dtype = half_autocast(dev)
    if x.dim() == 3 and fused.usable(x):
        return fused.ln_taps(x, norm, None, None, 0, dtype or x.dtype)
    if dtype is not None:
        with torch.autocast(dev, enabled=False):
            return F.layer_norm(x.to(dtype), norm.normalized_shape, param_as(norm.weight, dtype),
                                param_as(norm.bias, dtype), norm.eps)
    return norm(x)


def sample_points(feats: torch.Tensor, size: int, frame: torch.Tensor, xy: torch.Tensor) -> torch.Tensor:
    """Bilinear samples of channels-last maps, zero outside.

    feats: [B, T, size*size, C]; frame: long [B, N]; xy: [B, N, 2] in map cells -> [B, N, C].
    """
    b, t, hw, c = feats.shape
    flat = feats.reshape(b * t * hw, c)
    x0 = torch.floor(xy[..., 0])
    y0 = torch.floor(xy[..., 1])
    fx = (xy[..., 0] - x0).unsqueeze(-1)
    fy = (xy[..., 1] - y0).unsqueeze(-1)
    base = (torch.arange(b, device=feats.device).view(b, 1) * t + frame) * hw  # [B, N]
    out: Any = 0  # becomes a tensor [B, N, C] on the first corner
    for dy, dx, w in ((0, 0, (1 - fx) * (1 - fy)), (0, 1, fx * (1 - fy)), (1, 0, (1 - fx) * fy), (1, 1, fx * fy)):
        xi = x0.long() + dx
        yi = y0.long() + dy
        inside = ((xi >= 0) & (xi < size) & (yi >= 0) & (yi < size)).unsqueeze(-1)
        idx = base + yi.clamp(0, size - 1) * size + xi.clamp(0, size - 1)
        out = out + flat[idx].float() * (w * inside)
    return out


def local_windows(vol: torch.Tensor, size: int, centre: torch.Tensor, radius: int) -> torch.Tensor:
    """Bilinear (2r+1)^2 windows of a correlation map around sub-cell centres, zero outside.

    vol: [M, size*size]; centre: [M, 2] (x, y) in cells -> [M, (2r+1)^2]. All samples of a window share
    the centre's fractional offset, so one (2r+2)^2 integer patch and four shifted slices do it.
    """
    m = vol.shape[0]
    k = 2 * radius + 2
    centre = centre.clamp(-size, 2 * size)  # far-away estimates still index safely
    base = torch.floor(centre)
    frac = (centre - base).to(vol.dtype)
    offs = torch.arange(-radius, radius + 2, device=vol.device)
    xs = base[:, 0].long().unsqueeze(1) + offs  # [M, k]
    ys = base[:, 1].long().unsqueeze(1) + offs
    inside = ((ys >= 0) & (ys < size)).unsqueeze(2) & ((xs >= 0) & (xs < size)).unsqueeze(1)  # [M, k, k]
    idx = ys.clamp(0, size - 1).unsqueeze(2) * size + xs.clamp(0, size - 1).unsqueeze(1)
    patch = torch.gather(vol, 1, idx.view(m, k * k)).view(m, k, k) * inside.to(vol.dtype)
    fx = frac[:, 0].view(m, 1, 1)
    fy = frac[:, 1].view(m, 1, 1)
    top = torch.lerp(patch[:, :-1, :-1], patch[:, :-1, 1:], fx)  # one pass each: a + w * (b - a)
    bottom = torch.lerp(patch[:, 1:, :-1], patch[:, 1:, 1:], fx)
    return torch.lerp(top, bottom, fy).reshape(m, (k - 1) * (k - 1))


class CorrTrackNet(nn.Module):
    """The whole network; the tracker calls its stages one by one to time them.

    ``corr_recipe``: set on a quantised copy (int8/fp8), the correlation matmul runs quantised too.
    """

    corr_recipe: QuantRecipe | None = None

    def __init__(self, cfg: CorrTrackConfig | None = None):
        super().__init__()
        self.cfg = cfg or CorrTrackConfig()
        c, d = self.cfg.feature_dim, self.cfg.hidden_dim
        self.backbone = Backbone(self.cfg)
        self.init_scale = nn.Parameter(torch.tensor(1.0))  # soft-argmax sharpness
        self.init_logits = nn.Linear(3, 2)  # (peak, peak - logsumexp, window mass) -> (visible, accurate)
        win = (2 * WINDOW_RADIUS + 1) ** 2
        self.corr_in = nn.Linear(win * len(POOL_FACTORS) + 6, d)
        self.query_in = nn.Linear(c, d)
        self.blocks = nn.ModuleList(TemporalBlock(d, dil) for dil in self.cfg.mixer_dilations)
        self.attention = nn.ModuleList(TemporalAttention(d, self.cfg.attention_heads)
                                       for _ in range(self.cfg.attention_layers))
        self.track_attention = nn.ModuleList(TrackAttention(d, self.cfg.attention_heads, MODEL_SIZE, layer_norm)
                                             for _ in range(self.cfg.track_attention_layers))
        self.out_norm = nn.LayerNorm(d)
        self.update = nn.Linear(d, 4)  # (dx, dy, d visible logit, d accurate logit)
        nn.init.zeros_(self.update.weight)
        nn.init.zeros_(self.update.bias)

    # -- stages ------------------------------------------------------------------------------------
    @staticmethod
    def normalise(frames: torch.Tensor) -> torch.Tensor:
        """uint8 [F, 3, H, W] -> float [F, 3, MODEL_SIZE, MODEL_SIZE], resized and normalised (channels last)."""
        x = frames
        if x.shape[-2:] != (MODEL_SIZE, MODEL_SIZE):  # resized first: the scaling after it is linear
            x = F.interpolate(x.float(), size=(MODEL_SIZE, MODEL_SIZE), mode="bilinear", align_corners=False,
                              antialias=bool(x.shape[-1] > MODEL_SIZE or x.shape[-2] > MODEL_SIZE))
        # (x / 255 - mean) / std as one pass in fp32, in the input's layout (channels last from [F, H, W, 3]): a
        # 0-dim fp32 shift (so the sum is fp32; a CUDA kernel takes one CPU scalar tensor at most) plus x times a
        # Python-number scale
        shift = torch.tensor(-PIXEL_MEAN / PIXEL_STD, dtype=torch.float32)
        return torch.add(shift, x, alpha=1.0 / (255.0 * PIXEL_STD)).contiguous(memory_format=torch.channels_last)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """Normalised frames [F, 3, 256, 256] -> features [F, 64*64, C] (channels last)."""
        f = self.backbone(x)
        return f.permute(0, 2, 3, 1).reshape(f.shape[0], -1, f.shape[1])

    def query_features(self, feats: torch.Tensor, queries: torch.Tensor) -> torch.Tensor:
        """feats [B, T, HW, C], queries [B, N, 3] (t, x, y) in model pixels -> [B, N, C] (float32)."""
        size = MODEL_SIZE // FEATURE_STRIDE
        frame = queries[..., 0].round().long().clamp(0, feats.shape[1] - 1)
        xy = (queries[..., 1:] + 0.5) / FEATURE_STRIDE - 0.5
        return sample_points(feats, size, frame, xy)

    def cost_volume(self, feats: torch.Tensor, qfeat: torch.Tensor) -> list[torch.Tensor]:
        """Correlation pyramid: [B, N, T, s, s] for s = 64, 32, 16 (one matmul, then pooling)."""
        b, t, hw, c = feats.shape
        size = MODEL_SIZE // FEATURE_STRIDE
        q = qfeat / math.sqrt(c)
        if not torch.is_autocast_enabled(feats.device.type):
            q = q.to(feats.dtype)
        n = q.shape[1]
        if self.corr_recipe is not None:  # int8/fp8: per query x per position scales, the pooling after it
            vol = quantized_matmul(q, feats.reshape(b, t * hw, c).transpose(1, 2), self.corr_recipe)
            levels = [vol.view(b, n, t, size, size)]
            flat = vol.view(b * n * t, 1, size, size)
            for factor in POOL_FACTORS[1:]:
                flat = F.avg_pool2d(flat, factor // (POOL_FACTORS[len(levels) - 1]))
                levels.append(flat.view(b, n, t, flat.shape[-2], flat.shape[-1]))
            return levels
        # the coarser levels correlate pooled features (the same numbers as pooling the volume, by linearity):
        # a few MB of features pooled instead of the whole stride-4 volume read back
        levels = []
        grid = feats.view(b, t, size, size, c)
        for factor in POOL_FACTORS:
            s = size // factor
            pooled = grid if factor == 1 else grid.view(b, t, s, factor, s, factor, c).mean(dim=(3, 5))
            vol = torch.matmul(q, pooled.reshape(b, t * s * s, c).transpose(1, 2))  # [B, N, T*s*s]
            levels.append(vol.view(b, n, t, s, s))
        return levels

    def init_head(self, levels: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Soft-argmax near the argmax of the stride-8 level -> pos [B, N, T, 2], vis, acc logits [B, N, T]."""
        vol = levels[INIT_LEVEL]
        b, n, t, s, _ = vol.shape
        stride = FEATURE_STRIDE * POOL_FACTORS[INIT_LEVEL]
        flat = vol.reshape(b * n * t, s * s)
        peak, arg = flat.max(dim=1)  # [M]
        # logsumexp through the known peak, summed in fp32 (no fp32 copy of the volume): terms lie in (0, 1]
        lse = peak.float() + torch.log(torch.exp(flat - peak.unsqueeze(1)).sum(dim=1, dtype=torch.float32))
        centre = torch.stack([arg % s, arg // s], dim=1).float()  # [M, 2] (x, y) cells
        r = INIT_RADIUS
        win = local_windows(flat, s, centre, r).float()  # integer centre: exact cells
        offs = torch.arange(-r, r + 1, device=vol.device, dtype=torch.float32)
        oy, ox = torch.meshgrid(offs, offs, indexing="ij")
        inside = _window_inside(centre, offs, s)  # [M, (2r+1)^2]
        logits = (win * self.init_scale).masked_fill(~inside, float("-inf"))
        w = torch.softmax(logits, dim=1)
        cell = centre + torch.stack([(w * ox.reshape(1, -1)).sum(1), (w * oy.reshape(1, -1)).sum(1)], dim=1)
        pos = (cell + 0.5) * stride - 0.5
        mass = torch.logsumexp(win.masked_fill(~inside, float("-inf")), dim=1) - lse
        stats = torch.stack([peak.float(), peak.float() - lse, mass], dim=1)
        vis_acc = linear(self.init_logits, stats).float()
        return pos.view(b, n, t, 2), vis_acc[:, 0].view(b, n, t), vis_acc[:, 1].view(b, n, t)

    def refine_step(self, levels: list[torch.Tensor], queries: torch.Tensor, hidden: torch.Tensor,
                    pos: torch.Tensor, vis: torch.Tensor, acc: torch.Tensor
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """One refinement iteration; hidden [B*N, T, D]. Returns (hidden, pos, vis, acc)."""
        b, n, t, _ = pos.shape
        m = b * n * t
        p = pos.detach().reshape(m, 2)
        corr = []
        for level, factor in zip(levels, POOL_FACTORS):
            s = level.shape[-1]
            stride = FEATURE_STRIDE * factor
            centre = (p + 0.5) / stride - 0.5
            corr.append(local_windows(level.reshape(m, s * s), s, centre, WINDOW_RADIUS))
        frames = torch.arange(t, device=pos.device, dtype=torch.float32).view(1, 1, t)
        dt = (frames - queries[..., 0:1]) / TIME_SCALE  # [B, N, T]
        at_query = (dt == 0).float()
        rel = (pos.detach() - queries[..., None, 1:]) / POSITION_SCALE  # [B, N, T, 2]
        motion = torch.cat([rel, dt.unsqueeze(-1), at_query.unsqueeze(-1), vis.detach().unsqueeze(-1),
                            acc.detach().unsqueeze(-1)], dim=-1).reshape(m, 6)
        x = torch.cat(corr + [motion.to(corr[0].dtype)], dim=1)  # corr_in runs in the windows' dtype anyway
        hidden = hidden + linear(self.corr_in, x).view(b * n, t, -1)
        for block in self.blocks:
            hidden = block(hidden)
        if len(self.attention):
            key_logits = torch.stack([vis.detach(), acc.detach()], dim=-1).view(b * n, t, 2)
            for layer in self.attention:
                hidden = layer(hidden, key_logits)
        if len(self.track_attention):  # across the B videos' tracks, frame by frame, at this iteration's estimates
            where, vis_now, acc_now = pos.detach(), vis.detach(), acc.detach()
            for track_layer in self.track_attention:
                hidden = track_layer(hidden, where, vis_now, acc_now)
        delta = linear(self.update, layer_norm(self.out_norm, hidden)).float().view(b, n, t, 4)
        pos = pos.detach() + delta[..., :2] * STEP_SCALE
        return hidden, pos, vis + delta[..., 2], acc + delta[..., 3]

    def initial_hidden(self, qfeat: torch.Tensor, num_frames: int) -> torch.Tensor:
        """[B, N, C] -> hidden [B*N, T, D]: the query's appearance, the same at every frame."""
        h = linear(self.query_in, qfeat)
        return h.reshape(-1, 1, h.shape[-1]).expand(-1, num_frames, -1)

    # -- training ---------------------------------------------------------------------------------
    def forward(self, video: torch.Tensor, queries: torch.Tensor, num_iters: int | None = None
                ) -> tuple[list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]], torch.Tensor]:
        """video uint8 [B, T, H, W, 3], queries [B, N, 3] (model pixels) -> (estimates, match logits).

        estimates: [(pos [B, N, T, 2], vis logit [B, N, T], acc logit [B, N, T])], the initial one first,
        then one per iteration. match logits: the scaled stride-8 volume [B, N, T, 32, 32] (for the
        matching loss).
        """
        b, t = video.shape[:2]
        frames = self.normalise(video.reshape(b * t, *video.shape[2:]).permute(0, 3, 1, 2))
        feats = self.features(frames)
        feats = feats.view(b, t, feats.shape[1], feats.shape[2])
        qfeat = self.query_features(feats, queries)
        levels = self.cost_volume(feats, qfeat)
        pos, vis, acc = self.init_head(levels)
        outputs = [(pos, vis, acc)]
        hidden = self.initial_hidden(qfeat, t)
        for _ in range(self.cfg.num_iters if num_iters is None else num_iters):
            hidden, pos, vis, acc = self.refine_step(levels, queries, hidden, pos, vis, acc)
            outputs.append((pos, vis, acc))
        return outputs, levels[INIT_LEVEL] * self.init_scale


def _window_inside(centre: torch.Tensor, offs: torch.Tensor, size: int) -> torch.Tensor:
    """Which cells of a (2r+1)^2 window around integer centres [M, 2] lie in the map -> bool [M, (2r+1)^2]."""
    xs = centre[:, 0:1] + offs  # [M, k]
    ys = centre[:, 1:2] + offs
    ok_x = (xs >= 0) & (xs < size)
    ok_y = (ys >= 0) & (ys < size)
    return (ok_y.unsqueeze(2) & ok_x.unsqueeze(1)).reshape(centre.shape[0], -1)


def visible_from_logits(vis: torch.Tensor, acc: torch.Tensor) -> torch.Tensor:
    """Predicted visible where P(visible) * P(accurate) > 0.5 (as TAPIR combines them)."""
    return torch.sigmoid(vis.float()) * torch.sigmoid(acc.float()) > 0.5


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
