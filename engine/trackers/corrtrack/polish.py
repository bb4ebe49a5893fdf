"""Test-time sub-pixel polish of CorrTrack's estimates by normalised cross-correlation (NCC).

For every track and frame the network marks visible, a (2h+1)^2 grey patch cut from the query frame at
the query point (the template) is compared by NCC with the frame's patches at integer offsets within
+-radius px of the estimate (both sampled bilinearly); a parabola through the peak and its neighbours
(per axis) gives the sub-pixel offset. The estimate is kept where the peak is weak (NCC < min_ncc), lies
on the border of the search window (the true match may be further away) or the template is flat.

Pure batched tensor ops with static shapes (no host syncs), so it runs inside a captured CUDA graph;
always float32 (autocast off inside). Works at the model's resolution (grey frames MODEL_SIZE^2), where
the network and the TAP-Vid metrics (256x256 raster) measure distances.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import torch
import torch.nn.functional as F

MIN_STD = 0.01  # std (normalised grey units, ~0.6 grey levels) below which a patch counts as flat


@dataclass(frozen=True)
class PolishConfig:
    half: int = 6  # template (2*half+1)^2 px
    radius: int = 5  # search +-radius px around the estimate
    min_ncc: float = 0.4  # weaker peaks keep the network's estimate

    def to_dict(self) -> dict:
        return {"template_px": 2 * self.half + 1, "radius_px": self.radius, "min_ncc": self.min_ncc}


def grey_frames(normalised: torch.Tensor) -> torch.Tensor:
    """Normalised frames [F, 3, S, S] (any layout) -> float32 grey [F, S, S] (channel mean)."""
    return normalised.float().mean(dim=1).contiguous()


def _gather(grey: torch.Tensor, frame: torch.Tensor, left: torch.Tensor, top: torch.Tensor, size: int
            ) -> torch.Tensor:
    """Integer size x size patches of grey [T, S, S] with top-left pixels (left, top) [M] (long) in frames [M];
    pixels beyond the border repeat the edge -> [M, size, size]."""
    t, s, _ = grey.shape
    m = frame.shape[0]
    offs = torch.arange(size, device=grey.device)
    xs = (left.unsqueeze(1) + offs).clamp(0, s - 1)  # [M, size]
    ys = (top.unsqueeze(1) + offs).clamp(0, s - 1)
    idx = (frame.long().clamp(0, t - 1).view(m, 1, 1) * s + ys.unsqueeze(2)) * s + xs.unsqueeze(1)
    return grey.reshape(-1)[idx.reshape(m, -1)].view(m, size, size)


def sample_patches(grey: torch.Tensor, frame: torch.Tensor, centre: torch.Tensor, size: int) -> torch.Tensor:
    """Bilinear size x size patches of grey [T, S, S] centred on centre [M, 2] (x, y) px in frames [M].

    Pixels beyond the border repeat the edge. All samples of a patch share the centre's fractional offset,
    so one (size+1)^2 integer gather and a separable blend do it. -> [M, size, size] float32.
    """
    m = centre.shape[0]
    s = grey.shape[-1]
    corner = centre.float().clamp(-2.0 * s, 3.0 * s) - (size - 1) / 2.0  # top-left sample; far ones index safely
    base = torch.floor(corner)
    frac = corner - base
    patch = _gather(grey, frame, base[:, 0].long(), base[:, 1].long(), size + 1)
    fx = frac[:, 0].view(m, 1, 1)
    fy = frac[:, 1].view(m, 1, 1)
    rows = patch[:, :, :-1] + (patch[:, :, 1:] - patch[:, :, :-1]) * fx  # [M, size+1, size]
    return rows[:, :-1] + (rows[:, 1:] - rows[:, :-1]) * fy


_TF32_SWITCH = threading.Lock()  # the cuDNN TF32 flag is process-wide: one polish flips it at a time


def _conv_fp32(x: torch.Tensor, weight: torch.Tensor, groups: int) -> torch.Tensor:
    """Grouped conv2d in IEEE float32 also when the run allows TF32 convolutions (precision "tf32")."""
    if x.device.type != "cuda":
        return F.conv2d(x, weight, groups=groups)
    with _TF32_SWITCH:
        saved = torch.backends.cudnn.allow_tf32
        torch.backends.cudnn.allow_tf32 = False
        try:
            return F.conv2d(x, weight, groups=groups)
        finally:
            torch.backends.cudnn.allow_tf32 = saved


def _parabola(left: torch.Tensor, mid: torch.Tensor, right: torch.Tensor) -> torch.Tensor:
    """Sub-sample offset of the vertex of the parabola through (-1, left), (0, mid), (1, right)."""
    curv = left - 2 * mid + right
    safe = torch.where(curv < -1e-6, curv, torch.full_like(curv, -1.0))
    off = 0.5 * (left - right) / safe
    return torch.where(curv < -1e-6, off, torch.zeros_like(off)).clamp(-0.5, 0.5)


def _window_sums(region: torch.Tensor, k: int) -> torch.Tensor:
    """Sums of region and region^2 [T, N, S, S] over every k x k window -> [T, N, 2, S-k+1, S-k+1], as one
    matrix product each with the fixed 0/1 matrix kron(A, A), A[i, a] = 1 where a <= i < a + k (S^2 x w^2:
    529 x 121 for the default sizes). On the H200 two separable average pools over the stacked region and
    its square took 0.6 ms at 1024 queries, and before them an integral image's cumsum along rows of 23 took
    13 of the polish's 15 ms. Under precision "tf32" the product may run in TF32 (relative error ~1e-4 on a
    window variance; the NCC's own correlation stays IEEE float32)."""
    t, n, size, _ = region.shape
    w = size - k + 1
    i = torch.arange(size, device=region.device).view(size, 1)
    a = torch.arange(w, device=region.device).view(1, w)
    band = ((i >= a) & (i < a + k)).to(region.dtype)  # [S, w]
    box = torch.kron(band, band)  # [S*S, w*w]: row i*S + j, column a*w + b
    flat = region.reshape(t * n, size * size)
    sums = torch.stack([flat @ box, flat.square() @ box], dim=1)  # [T*N, 2, w*w]
    return sums.view(t, n, 2, w, w)


def region_patches(grey: torch.Tensor, centre: torch.Tensor, size: int) -> torch.Tensor:
    """Bilinear size x size patches of grey [T, S, S] centred on centre [T, N, 2] (x, y) px, one per frame
    and point -> [T, N, size, size] float32; pixels beyond the border repeat the edge (one grid_sample)."""
    t, s, _ = grey.shape
    n = centre.shape[1]
    scale = 2.0 / (s - 1)  # px -> grid_sample's [-1, 1] (align_corners=True: -1 and 1 are pixel centres)
    offs = (torch.arange(size, device=grey.device, dtype=torch.float32) - (size - 1) / 2.0) * scale
    c = centre.float().clamp(-2.0 * s, 3.0 * s) * scale - 1.0
    gx = (c[..., 0, None, None] + offs.view(1, 1, 1, size)).expand(t, n, size, size)
    gy = (c[..., 1, None, None] + offs.view(1, 1, size, 1)).expand(t, n, size, size)
    grid = torch.stack([gx, gy], dim=-1).view(t, n * size, size, 2)
    out = F.grid_sample(grey.unsqueeze(1), grid, mode="bilinear", padding_mode="border", align_corners=True)
    return out.view(t, n, size, size)


def ncc_polish(grey: torch.Tensor, queries: torch.Tensor, pos: torch.Tensor, visible: torch.Tensor,
               cfg: PolishConfig = PolishConfig()) -> tuple[torch.Tensor, torch.Tensor]:
    """Polished positions and the NCC peak.

    grey [T, S, S]; queries [B, N, 3] (t, x, y) and pos [B, N, T, 2] in model px (B = 1 video);
    visible bool [B, N, T]. Returns (pos float32 [B, N, T, 2], peak NCC float32 [B, N, T]; 0 where not
    polished). Autocast is off inside: the NCC needs float32.
    """
    with torch.autocast(grey.device.type, enabled=False):
        return _ncc_polish(grey.float(), queries.float(), pos.float(), visible, cfg)


def _ncc_polish(grey: torch.Tensor, queries: torch.Tensor, pos: torch.Tensor, visible: torch.Tensor,
                cfg: PolishConfig) -> tuple[torch.Tensor, torch.Tensor]:
    b, n, t, _ = pos.shape
    k = 2 * cfg.half + 1
    r = cfg.radius
    w = 2 * r + 1
    size = k + 2 * r
    bn = b * n
    # template: the query frame's patch at the query point, zero mean, unit norm
    q = queries.reshape(bn, 3)
    templ = sample_patches(grey, q[:, 0].round(), q[:, 1:], k).reshape(bn, k * k)
    templ = templ - templ.mean(dim=1, keepdim=True)
    tnorm = templ.norm(dim=1, keepdim=True)
    textured = (tnorm > MIN_STD * k).view(b, n, 1)  # a flat template matches anything
    templ = templ / tnorm.clamp_min(1e-6)
    # search regions around every estimate, frames first: [T, BN, size, size]
    region = region_patches(grey, pos.reshape(bn, t, 2).transpose(0, 1), size)
    region = region - region.mean(dim=(2, 3), keepdim=True)  # better conditioned window variances
    # cross-correlation with each track's template: a depthwise convolution over the frames (the batch),
    # one group per track. (A batched FFT took the same time on the H200 and was slower on the CPU.)
    corr = _conv_fp32(region, templ.view(bn, 1, k, k), bn).reshape(t, bn, w * w)
    sums = _window_sums(region, k)  # [T, BN, 2, w, w]
    var = (sums[:, :, 1] - sums[:, :, 0].square() / (k * k)).clamp_min(0).reshape(t, bn, w * w)  # k^2 x variance
    ncc = corr / var.clamp_min((MIN_STD * k) ** 2).sqrt()  # near-flat windows score low, never > 1
    peak, arg = ncc.max(dim=2)  # [T, BN]
    iy = arg // w
    ix = arg % w
    inner = (ix > 0) & (ix < w - 1) & (iy > 0) & (iy < w - 1)
    ixc = ix.clamp(1, w - 2)
    iyc = iy.clamp(1, w - 2)

    def at(y: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return ncc.gather(2, (y * w + x).unsqueeze(2)).squeeze(2)

    dx = _parabola(at(iy, ixc - 1), peak, at(iy, ixc + 1))
    dy = _parabola(at(iyc - 1, ix), peak, at(iyc + 1, ix))
    step = torch.stack([ix.float() - r + dx, iy.float() - r + dy], dim=2)  # [T, BN, 2]
    ok = inner & (peak >= cfg.min_ncc) & torch.isfinite(peak)
    ok = ok.transpose(0, 1).reshape(b, n, t) & visible & textured
    step = step.transpose(0, 1).reshape(b, n, t, 2)
    peak = peak.transpose(0, 1).reshape(b, n, t)
    new = torch.where(ok.unsqueeze(-1), pos + step, pos)
    return new, torch.where(ok, peak, torch.zeros_like(peak))
