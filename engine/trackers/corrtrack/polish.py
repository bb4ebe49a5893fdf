"""Test-time sub-pixel polish of CorrTrack's estimates by normalised cross-correlation (NCC).

For every track and frame the network marks visible, a (2h+1)^2 grey patch cut from the query frame at
the query point (the template) is compared by NCC with the frame's patches at integer offsets within
+-radius px of the estimate (both sampled bilinearly); a parabola through the peak and its neighbours
(per axis) gives the sub-pixel offset. The estimate is kept where the peak is weak (NCC < min_ncc), lies
on the border of the search window (the true match may be further away) or the template is flat.

Pure batched tensor ops with static shapes (no host syncs), so it runs inside a captured CUDA graph;
always float32 (autocast off inside). Works at the model's resolution (grey frames MODEL_SIZE^2), where
the network and the TAP-Vid metrics (256x256 raster) measure distances.

The fine stage (``FineConfig``, ``fine_polish``) runs the same NCC once more on a larger video's own pixels (uint8
grey frames, capped at 1280 px): at 256x256 a model pixel of real footage spans several of the video's.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from engine.trackers.corrtrack.model import MODEL_SIZE, PIXEL_STD

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
    """Integer size x size patches of grey [T, H, W] (any dtype) with top-left pixels (left, top) [M] (long) in
    frames [M]; pixels beyond the border repeat the edge -> [M, size, size] float32."""
    t, h, w = grey.shape
    m = frame.shape[0]
    offs = torch.arange(size, device=grey.device)
    xs = (left.unsqueeze(1) + offs).clamp(0, w - 1)  # [M, size]
    ys = (top.unsqueeze(1) + offs).clamp(0, h - 1)
    idx = (frame.long().clamp(0, t - 1).view(m, 1, 1) * h + ys.unsqueeze(2)) * w + xs.unsqueeze(1)
    return grey.reshape(-1)[idx.reshape(m, -1)].view(m, size, size).float()


def _corner(centre: torch.Tensor, grey: torch.Tensor, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(integer top-left pixel, fraction) of size x size patches centred on centre [..., 2] (x, y) px; centres
    far outside the frame are clamped so that they index safely."""
    h, w = grey.shape[-2:]
    c = centre.float().clamp(-2.0 * max(h, w), 3.0 * max(h, w)) - (size - 1) / 2.0
    base = torch.floor(c)
    return base.long(), c - base


def _blend(patch: torch.Tensor, frac: torch.Tensor) -> torch.Tensor:
    """Integer (size+1)^2 patches [..., size+1, size+1] -> bilinear size^2 at fraction frac [..., 2] (x, y): all
    samples of a patch share its centre's fraction, so the blend is separable."""
    fx = frac[..., 0, None, None]
    fy = frac[..., 1, None, None]
    rows = patch[..., :, :-1] + (patch[..., :, 1:] - patch[..., :, :-1]) * fx  # [..., size+1, size]
    return rows[..., :-1, :] + (rows[..., 1:, :] - rows[..., :-1, :]) * fy


def sample_patches(grey: torch.Tensor, frame: torch.Tensor, centre: torch.Tensor, size: int) -> torch.Tensor:
    """Bilinear size x size patches of grey [T, H, W] centred on centre [M, 2] (x, y) px in frames [M].

    Pixels beyond the border repeat the edge. All samples of a patch share the centre's fractional offset,
    so one (size+1)^2 integer gather and a separable blend do it. -> [M, size, size] float32.
    """
    base, frac = _corner(centre, grey, size)
    return _blend(_gather(grey, frame, base[:, 0], base[:, 1], size + 1), frac)


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
    """Bilinear size x size patches of float grey [T, H, W] centred on centre [T, N, 2] (x, y) px, one per frame
    and point -> [T, N, size, size] float32; pixels beyond the border repeat the edge (one grid_sample)."""
    t, h, w = grey.shape
    n = centre.shape[1]
    sx, sy = 2.0 / (w - 1), 2.0 / (h - 1)  # px -> grid_sample's [-1, 1] (align_corners=True: pixel centres)
    offs = torch.arange(size, device=grey.device, dtype=torch.float32) - (size - 1) / 2.0
    c = centre.float().clamp(-2.0 * max(h, w), 3.0 * max(h, w))
    gx = (c[..., 0, None, None] * sx - 1.0 + offs.view(1, 1, 1, size) * sx).expand(t, n, size, size)
    gy = (c[..., 1, None, None] * sy - 1.0 + offs.view(1, 1, size, 1) * sy).expand(t, n, size, size)
    grid = torch.stack([gx, gy], dim=-1).view(t, n * size, size, 2)
    out = F.grid_sample(grey.unsqueeze(1), grid, mode="bilinear", padding_mode="border", align_corners=True)
    return out.view(t, n, size, size)


def gathered_regions(grey: torch.Tensor, centre: torch.Tensor, size: int) -> torch.Tensor:
    """region_patches for grey of any dtype (the uint8 frames of the fine stage): each frame's (size+1)^2
    integer patches by one broadcast index (no index tensor of the output's size), then the separable blend
    -> [T, N, size, size] float32."""
    t, h, w = grey.shape
    base, frac = _corner(centre, grey, size)  # [T, N, 2]
    offs = torch.arange(size + 1, device=grey.device)
    xs = (base[..., 0, None] + offs).clamp(0, w - 1)  # [T, N, size+1]
    ys = (base[..., 1, None] + offs).clamp(0, h - 1)
    frames = torch.arange(t, device=grey.device).view(t, 1, 1, 1)
    patch = grey[frames, ys.unsqueeze(3), xs.unsqueeze(2)].float()  # [T, N, size+1, size+1]
    return _blend(patch, frac)


def ncc_polish(grey: torch.Tensor, queries: torch.Tensor, pos: torch.Tensor, visible: torch.Tensor,
               cfg: PolishConfig = PolishConfig()) -> tuple[torch.Tensor, torch.Tensor]:
    """Polished positions and the NCC peak.

    grey [T, S, S]; queries [B, N, 3] (t, x, y) and pos [B, N, T, 2] in model px (B = 1 video);
    visible bool [B, N, T]. Returns (pos float32 [B, N, T, 2], peak NCC float32 [B, N, T]; 0 where not
    polished). Autocast is off inside: the NCC needs float32.
    """
    with torch.autocast(grey.device.type, enabled=False):
        return _ncc_polish(grey.float(), queries.float(), pos.float(), visible, cfg, region_patches, MIN_STD)


def _ncc_polish(grey: torch.Tensor, queries: torch.Tensor, pos: torch.Tensor, visible: torch.Tensor,
                cfg: PolishConfig, regions: Callable[[torch.Tensor, torch.Tensor, int], torch.Tensor],
                flat_std: float) -> tuple[torch.Tensor, torch.Tensor]:
    templ, textured = _templates(grey, queries, cfg, flat_std)
    return _search(grey, templ, textured, pos, visible, cfg, regions, flat_std)


def _templates(grey: torch.Tensor, queries: torch.Tensor, cfg: PolishConfig, flat_std: float
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """The query frame's patch at each query point [B*N, k*k], zero mean and unit norm, and whether it is
    textured [B, N, 1] (a flat template matches anything)."""
    b, n = queries.shape[:2]
    k = 2 * cfg.half + 1
    q = queries.reshape(b * n, 3)
    templ = sample_patches(grey, q[:, 0].round(), q[:, 1:], k).reshape(b * n, k * k)
    templ = templ - templ.mean(dim=1, keepdim=True)
    tnorm = templ.norm(dim=1, keepdim=True)
    textured = (tnorm > flat_std * k).view(b, n, 1)
    return templ / tnorm.clamp_min(1e-6), textured


def _search(grey: torch.Tensor, templ: torch.Tensor, textured: torch.Tensor, pos: torch.Tensor,
            visible: torch.Tensor, cfg: PolishConfig,
            regions: Callable[[torch.Tensor, torch.Tensor, int], torch.Tensor], flat_std: float
            ) -> tuple[torch.Tensor, torch.Tensor]:
    """NCC of the templates over +-radius px around pos [B, N, T, 2] in grey [T, H, W] (the same T frames)."""
    b, n, t, _ = pos.shape
    k = 2 * cfg.half + 1
    r = cfg.radius
    w = 2 * r + 1
    size = k + 2 * r
    bn = b * n
    # search regions around every estimate, frames first: [T, BN, size, size]
    region = regions(grey, pos.reshape(bn, t, 2).transpose(0, 1), size)
    region = region - region.mean(dim=(2, 3), keepdim=True)  # better conditioned window variances
    # cross-correlation with each track's template: a depthwise convolution over the frames (the batch),
    # one group per track. (A batched FFT took the same time on the H200 and was slower on the CPU.)
    corr = _conv_fp32(region, templ.view(bn, 1, k, k), bn).reshape(t, bn, w * w)
    sums = _window_sums(region, k)  # [T, BN, 2, w, w]
    var = (sums[:, :, 1] - sums[:, :, 0].square() / (k * k)).clamp_min(0).reshape(t, bn, w * w)  # k^2 x variance
    ncc = corr / var.clamp_min((flat_std * k) ** 2).sqrt()  # near-flat windows score low, never > 1
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


# --- the fine stage: the same NCC at the video's own resolution ------------------------------------------------

#: MIN_STD in grey levels (the fine stage's frames are uint8 channel means; model.PIXEL_STD scales the others)
FINE_MIN_STD = MIN_STD * 255.0 * PIXEL_STD


@dataclass(frozen=True)
class FineConfig:
    """The fine stage: after the model-resolution polish, the same NCC on grey frames at the video's resolution
    (capped at ``max_side`` px on the longer side), for videos whose longer side is at least ``min_side`` px
    there. At 256x256 a model pixel of a 1280x720 video is 5 x 2.8 of the video's; this stage measures in the
    video's own pixels. Templates are the query frame's, at the query point given in video pixels; the search
    reaches ``radius_model_px`` model pixels (in the fine frames' pixels, within [min_radius, max_radius])."""

    half: int = 8  # template (2*half+1)^2 px of the fine frames
    radius_model_px: float = 2.0
    min_radius: int = 3
    max_radius: int = 10
    min_ncc: float = 0.5
    max_side: int = 1280
    min_side: int = 384

    def size_for(self, width: int, height: int) -> tuple[int, int] | None:
        """(width, height) of the fine stage's frames for a video, or None where the stage does not run."""
        longest = max(width, height)
        scale = min(1.0, self.max_side / longest)
        if longest * scale < self.min_side:
            return None
        return max(1, round(width * scale)), max(1, round(height * scale))

    def ncc_for(self, width: int, height: int) -> PolishConfig:
        """The NCC settings on fine frames of width x height: the radius follows their pixels per model pixel."""
        per_model_px = max(width, height) / MODEL_SIZE
        radius = min(self.max_radius, max(self.min_radius, round(self.radius_model_px * per_model_px)))
        return PolishConfig(half=self.half, radius=radius, min_ncc=self.min_ncc)

    def to_dict(self) -> dict:
        return {"template_px": 2 * self.half + 1, "radius_model_px": self.radius_model_px,
                "radius_px": [self.min_radius, self.max_radius], "min_ncc": self.min_ncc,
                "max_side_px": self.max_side, "min_side_px": self.min_side}


def fine_grey(frames: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """uint8 frames [F, H, W, 3] -> uint8 grey [F, h, w] (channel mean, rounded) at size (w, h): area-averaged
    where smaller. uint8 keeps a long video's frames at a third of the upload's bytes."""
    grey = frames.float().mean(dim=-1)  # [F, H, W]
    width, height = size
    if (height, width) != tuple(grey.shape[1:]):
        grey = F.interpolate(grey.unsqueeze(1), size=(height, width), mode="area").squeeze(1)
    return grey.round_().clamp_(0, 255).to(torch.uint8)


#: float32 elements of the fine stage's search regions per chunk of frames (2^23: 32 MiB). Its live tensors are
#: about 4.3 region-sized ones (CPU, tests/test_device_memory.py), so unchunked they grew with frames x queries x
#: radius^2: the stage added 417 MiB for 256 queries on an 854x480, 82-frame clip (H200, session 23; 306 MiB
#: less with the chunks and the chunked upload, session 24).
FINE_CHUNK_ELEMENTS = 1 << 23


def fine_chunk_frames(num_queries: int, cfg: PolishConfig, elements: int = FINE_CHUNK_ELEMENTS) -> int:
    """Frames per chunk of the fine stage's search, so that one chunk's regions hold about ``elements`` floats."""
    size = 2 * cfg.half + 1 + 2 * cfg.radius
    return max(1, elements // max(1, num_queries * size * size))


def fine_polish(grey: torch.Tensor, queries: torch.Tensor, pos: torch.Tensor, visible: torch.Tensor,
                cfg: PolishConfig, chunk_elements: int = FINE_CHUNK_ELEMENTS) -> tuple[torch.Tensor, torch.Tensor]:
    """ncc_polish on uint8 grey [T, H, W] (``fine_grey``), queries [B, N, 3] and pos [B, N, T, 2] in its pixels,
    searched in chunks of frames (``fine_chunk_frames``; the same numbers as one pass: every frame's search is
    its own)."""
    with torch.autocast(grey.device.type, enabled=False):
        queries, pos = queries.float(), pos.float()
        templ, textured = _templates(grey, queries, cfg, FINE_MIN_STD)
        t = pos.shape[2]
        step = fine_chunk_frames(pos.shape[0] * pos.shape[1], cfg, chunk_elements)
        parts = [_search(grey[a:a + step], templ, textured, pos[:, :, a:a + step], visible[:, :, a:a + step], cfg,
                         gathered_regions, FINE_MIN_STD) for a in range(0, t, step)]
        if len(parts) == 1:
            return parts[0]
        return torch.cat([p[0] for p in parts], dim=2), torch.cat([p[1] for p in parts], dim=2)
