"""Batched rendering of synthetic scenes and their ground truth, on the scene's device.

Rendering samples each surface's texture through ``local_from_image`` (grid_sample, one call per
surface for all videos and frames) and composites sprites back to front. Ground truth samples
query points on the visible surface at the query frame and carries them through
``image_from_local`` of that same surface to every frame.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from engine.training.synthetic.config import SynthBatch, SynthConfig
from engine.training.synthetic.scene import Scene, sample_scene, shape_alpha
from engine.training.synthetic.textures import TextureBank

CANDIDATES_PER_POINT = 6  # query candidates drawn per wanted point (most are usable)
QUERY_MIN_ALPHA = 0.95  # a query's own surface covers it at least this much
QUERY_MAX_COVER = 0.05  # and surfaces above it cover it at most this much
OCCLUDED_COVER = 0.5  # a point is occluded where surfaces above cover it more than this
BLUR_RADIUS = 4  # Gaussian blur kernel half-width, pixels
MOTION_BLUR_SAMPLES = 5  # sub-frames averaged over a motion-blurred frame's exposure (odd: the middle one is the frame)


def _apply(mat: torch.Tensor, pts: torch.Tensor) -> torch.Tensor:
    """Projective map: mat [..., 3, 3] on points [..., 2] -> [..., 2]."""
    x, y = pts[..., 0:1], pts[..., 1:2]
    out = mat[..., :, 0] * x + mat[..., :, 1] * y + mat[..., :, 2]
    return out[..., :2] / out[..., 2:3]


def _apply_grid(mat: torch.Tensor, pix: torch.Tensor) -> torch.Tensor:
    """Projective map of many points: mat [B, T, 3, 3] on pix [P, 2] -> [B, T, P, 2].

    Elementwise on purpose: a matmul here would run in TF32 when a caller enables it globally
    (torch.set_float32_matmul_precision), moving texels by up to half a pixel against the ground truth.
    """
    x, y = pix[:, 0], pix[:, 1]
    m = mat[..., None]  # [B, T, 3, 3, 1]
    rows = [torch.addcmul(torch.addcmul(m[:, :, i, 2], m[:, :, i, 0], x), m[:, :, i, 1], y) for i in range(3)]
    return torch.stack([rows[0] / rows[2], rows[1] / rows[2]], -1)


def _sprite_alpha(scene: Scene, layer: int, local: torch.Tensor, size_px: torch.Tensor,
                  edge_px: float) -> torch.Tensor:
    """Coverage of sprite ``layer`` at local coords [B, ..., 2] -> [B, ...] (0 where inactive)."""
    b, extra = local.shape[0], local.dim() - 2
    view = lambda p: p[:, layer].reshape(b, *([1] * extra), *p.shape[2:])  # noqa: E731
    alpha = shape_alpha(local, view(scene.shape_kind), view(scene.blob_amp), view(scene.blob_phase),
                        view(scene.poly_sides), view(scene.poly_rot), size_px, edge_px)
    return alpha * view(scene.active)


def render(scene: Scene, textures: TextureBank, cfg: SynthConfig, gen: torch.Generator) -> torch.Tensor:
    """The videos of ``scene``: uint8 [B, T, H, W, 3]. With ``cfg.motion_blur_prob`` a share of the videos is
    motion-blurred (``_motion_blur``); its random draws come after everything the ground truth depends on."""
    frame = _composite(scene, textures, cfg)
    if cfg.motion_blur_prob > 0:
        frame = _motion_blur(frame, scene, textures, cfg, gen)
    return _photometric(frame, scene, gen)


def _composite(scene: Scene, textures: TextureBank, cfg: SynthConfig) -> torch.Tensor:
    """Every surface sampled through its per-frame matrices and composited back to front: float [B, 3, T, H, W]."""
    dev = scene.local_from_image.device
    B, L, T = scene.local_from_image.shape[:3]
    H, W, S = cfg.height, cfg.width, textures.size
    ys, xs = torch.meshgrid(torch.arange(H, device=dev, dtype=torch.float32),
                            torch.arange(W, device=dev, dtype=torch.float32), indexing="ij")
    pix = torch.stack([xs, ys], -1).reshape(H * W, 2)  # [HW, 2]
    frame = None
    for layer in range(L):
        if layer > 0 and not bool(scene.active[:, layer].any()):
            continue
        texel = _apply_grid(scene.texel_from_image[:, layer], pix)  # [B, T, HW, 2]
        grid = (texel * (2.0 / (S - 1)) - 1.0).reshape(B, T * H, W, 2)
        tex = textures.images[scene.tex_index[:, layer]]  # [B, 3, S, S]
        if scene.poor_index is not None:
            poor = scene.poor_index[:, layer]
            tex = torch.where((poor >= 0).view(B, 1, 1, 1), textures.poor_images()[poor.clamp(min=0)], tex)
        colour = F.grid_sample(tex, grid, mode="bilinear", padding_mode="reflection", align_corners=True)
        colour = colour.reshape(B, 3, T, H, W) * scene.layer_gain[:, layer].view(B, 1, T, 1, 1)
        if frame is None:
            frame = colour
            continue
        size = scene.size_px[:, layer, :, None]  # [B, T, 1]
        local = _apply_grid(scene.local_from_image[:, layer], pix)  # [B, T, HW, 2]
        alpha = _sprite_alpha(scene, layer, local, size, cfg.edge_px)  # [B, T, HW]
        frame = frame + alpha.reshape(B, 1, T, H, W) * (colour - frame)
    assert frame is not None
    return frame


def _motion_blur(frame: torch.Tensor, scene: Scene, textures: TextureBank, cfg: SynthConfig,
                 gen: torch.Generator) -> torch.Tensor:
    """Average each chosen video's frames over an exposure centred on the frame's instant.

    The exposure (a share of the frame interval, per video) is sampled at MOTION_BLUR_SAMPLES instants; at
    instant t + s every per-frame matrix, sprite size and surface gain is interpolated linearly towards the
    neighbouring frame (extrapolated at the clip's ends), so each pixel is smeared along its own surface's
    motion and occlusion edges are right. The middle sample is the frame itself, and the average is taken as
    frame + mean(sub-frame - frame): where nothing moves the frame stays bit for bit as it was. The ground
    truth (the frame's instant) is untouched. float [B, 3, T, H, W] in and out.
    """
    B = frame.shape[0]
    chosen = torch.rand(B, generator=gen, device=gen.device) < cfg.motion_blur_prob
    lo, hi = cfg.motion_blur_exposure
    exposure = lo + (hi - lo) * torch.rand(B, generator=gen, device=gen.device)
    idx = torch.nonzero(chosen.to(frame.device)).flatten()
    if idx.numel() == 0:
        return frame
    sub = _subset(scene, idx)
    e = exposure.to(frame.device)[idx]
    sharp = frame[idx]
    total = torch.zeros_like(sharp)
    k_mid = MOTION_BLUR_SAMPLES // 2
    for k in range(MOTION_BLUR_SAMPLES):
        if k == k_mid:
            continue
        offset = e * (k / (MOTION_BLUR_SAMPLES - 1) - 0.5)  # [B'] frames, negative: before the instant
        total += _composite(_at_offset(sub, offset, forward=k > k_mid), textures, cfg) - sharp
    out = frame.clone()
    out[idx] = sharp + total / MOTION_BLUR_SAMPLES
    return out


#: Scene fields that change from frame to frame (their time axis) and are interpolated between frames
_PER_FRAME = {"local_from_image": 2, "texel_from_image": 2, "size_px": 2, "layer_gain": 2}


def _subset(scene: Scene, idx: torch.Tensor) -> Scene:
    """The videos ``idx`` of a scene (every field indexed on its batch axis)."""
    import dataclasses

    changes: dict[str, Any] = {}
    for f in dataclasses.fields(scene):
        value = getattr(scene, f.name)
        changes[f.name] = value[idx] if value is not None else None
    return dataclasses.replace(scene, **changes)


def _at_offset(scene: Scene, offset: torch.Tensor, forward: bool) -> Scene:
    """The scene at instants t + offset (offset [B] in frames, all of one sign: ``forward`` when > 0)."""
    import dataclasses

    changes: dict[str, Any] = {}
    for name, axis in _PER_FRAME.items():
        x = getattr(scene, name)
        T = x.shape[axis]
        if T < 2:
            changes[name] = x
            continue
        step = x.narrow(axis, 1, T - 1) - x.narrow(axis, 0, T - 1)  # [.., T-1, ..]: x[t+1] - x[t]
        first, last = step.narrow(axis, 0, 1), step.narrow(axis, T - 2, 1)
        diff = torch.cat([step, last], axis) if forward else torch.cat([first, step], axis)
        s = offset.view(-1, *([1] * (x.dim() - 1))).to(x.dtype)
        changes[name] = x + s * diff
    changes["image_from_local"] = torch.linalg.inv(changes["local_from_image"])
    return dataclasses.replace(scene, **changes)


def _photometric(frame: torch.Tensor, scene: Scene, gen: torch.Generator) -> torch.Tensor:
    """Contrast, gain/bias over time, blur, noise; float [B, 3, T, H, W] -> uint8 [B, T, H, W, 3]."""
    B, _, T, H, W = frame.shape
    c = scene.contrast.view(B, 1, 1, 1, 1)
    frame = (frame - 0.5) * c + 0.5
    frame = frame * scene.gain.view(B, 1, T, 1, 1) + scene.bias.view(B, 1, T, 1, 1)
    if bool((scene.blur_sigma > 0).any()):
        frame = _blur(frame, scene.blur_sigma)
    if bool((scene.noise_std > 0).any()):
        noise = torch.randn(frame.shape, generator=gen, device=frame.device, dtype=frame.dtype)
        frame = frame + noise * scene.noise_std.view(B, 1, 1, 1, 1)
    frame = (frame.clamp(0, 1) * 255.0).round_().to(torch.uint8)
    return frame.permute(0, 2, 3, 4, 1).contiguous()


def _blur(frame: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
    """Separable Gaussian blur with a sigma per video and frame (0 = untouched). [B, 3, T, H, W]."""
    B, C, T, H, W = frame.shape
    r = torch.arange(-BLUR_RADIUS, BLUR_RADIUS + 1, device=frame.device, dtype=frame.dtype)
    s = sigma.reshape(B, 1, T, 1).clamp(min=1e-3)
    k = torch.exp(-0.5 * (r / s) ** 2)
    k = (k / k.sum(-1, keepdim=True)).expand(B, C, T, r.numel()).reshape(B * C * T, 1, -1)
    x = frame.reshape(1, B * C * T, H, W)
    x = F.conv2d(F.pad(x, (BLUR_RADIUS, BLUR_RADIUS, 0, 0), mode="replicate"), k[:, :, None, :], groups=B * C * T)
    x = F.conv2d(F.pad(x, (0, 0, BLUR_RADIUS, BLUR_RADIUS), mode="replicate"), k[:, :, :, None], groups=B * C * T)
    return x.reshape(B, C, T, H, W)


def _all_alphas(scene: Scene, pts: torch.Tensor, frame_idx: torch.Tensor, edge_px: float) -> torch.Tensor:
    """Coverage of every surface at points pts [B, P, 2] on frames frame_idx [B, P] -> [B, P, L]."""
    B, L = scene.active.shape
    P = pts.shape[1]
    bi = torch.arange(B, device=pts.device)[:, None, None]
    li = torch.arange(L, device=pts.device)[None, None, :]
    ti = frame_idx[:, :, None]
    mats = scene.local_from_image[bi, li, ti]  # [B, P, L, 3, 3]
    local = _apply(mats, pts[:, :, None, :].expand(B, P, L, 2))  # [B, P, L, 2]
    size = scene.size_px[bi, li, ti]  # [B, P, L]
    alpha = shape_alpha(local, scene.shape_kind[:, None], scene.blob_amp[:, None], scene.blob_phase[:, None],
                        scene.poly_sides[:, None], scene.poly_rot[:, None], size, edge_px)
    alpha = alpha * scene.active[:, None]
    alpha[..., 0] = 1.0  # the background covers every pixel
    return alpha


def _cover_above(alpha: torch.Tensor) -> torch.Tensor:
    """Largest coverage of the surfaces strictly above each surface: [..., L] -> [..., L]."""
    rev = alpha.flip(-1).cummax(-1).values.flip(-1)  # max over layers >= l
    return torch.cat([rev[..., 1:], torch.zeros_like(rev[..., :1])], -1)


def sample_queries(scene: Scene, cfg: SynthConfig, gen: torch.Generator) -> tuple[torch.Tensor, ...]:
    """Query points on visible surfaces: (query_t long [B, N], xy [B, N, 2], surface long [B, N])."""
    dev = scene.local_from_image.device
    B, _, T = scene.local_from_image.shape[:3]
    N = cfg.num_points
    C = N * CANDIDATES_PER_POINT
    if cfg.query_first_frame_only or T == 1:
        qt = torch.zeros(B, C, dtype=torch.long, device=dev)
    else:
        qt = torch.randint(0, T, (B, C), generator=gen, device=dev)
        first = torch.rand(B, C, generator=gen, device=dev) < cfg.query_first_frame_share
        qt = torch.where(first, torch.zeros_like(qt), qt)
    xy = torch.rand(B, C, 2, generator=gen, device=dev)
    xy = xy * torch.tensor([cfg.width - 1, cfg.height - 1], device=dev, dtype=torch.float32)
    alpha = _all_alphas(scene, xy, qt, cfg.edge_px)  # [B, C, L]
    L = alpha.shape[-1]
    on_top = (alpha > 0.5) * torch.arange(L, device=dev)
    surface = on_top.argmax(-1)  # topmost surface covering more than half
    own = alpha.gather(-1, surface[..., None])[..., 0]
    above = _cover_above(alpha).gather(-1, surface[..., None])[..., 0]
    good = (own > QUERY_MIN_ALPHA) & (above < QUERY_MAX_COVER)
    order = torch.argsort((~good).to(torch.int8), dim=1, stable=True)[:, :N]  # usable candidates first
    pick = lambda a: a.gather(1, order.view(B, N, *([1] * (a.dim() - 2))).expand(B, N, *a.shape[2:]))  # noqa: E731
    return pick(qt), pick(xy), pick(surface)


def carry_points(scene: Scene, cfg: SynthConfig, qt: torch.Tensor, xy: torch.Tensor,
                 surface: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Tracks float32 [B, N, T, 2] and visible bool [B, N, T] of points xy [B, N, 2] at frames qt."""
    B, N = qt.shape
    T = scene.local_from_image.shape[2]
    bi = torch.arange(B, device=xy.device)[:, None]
    local = _apply(scene.local_from_image[bi, surface, qt], xy)  # [B, N, 2] in surface coords
    fwd = scene.image_from_local[bi, surface]  # [B, N, T, 3, 3]
    tracks = _apply(fwd, local[:, :, None, :].expand(B, N, T, 2))  # [B, N, T, 2]
    tt = torch.arange(T, device=xy.device).view(1, 1, T).expand(B, N, T)
    alpha = _all_alphas(scene, tracks.reshape(B, N * T, 2), tt.reshape(B, N * T), cfg.edge_px)
    above = _cover_above(alpha).reshape(B, N, T, -1).gather(-1, surface[:, :, None, None].expand(B, N, T, 1))[..., 0]
    x, y = tracks[..., 0], tracks[..., 1]
    inside = (x >= 0) & (x <= cfg.width - 1) & (y >= 0) & (y <= cfg.height - 1)
    visible = inside & (above < OCCLUDED_COVER)
    return tracks, visible


def generate_batch(batch_size: int, cfg: SynthConfig, textures: TextureBank, generator: torch.Generator,
                   device: torch.device | str | None = None) -> SynthBatch:
    """Render ``batch_size`` videos with exact tracks, all on the generator's device."""
    dev = torch.device(device) if device is not None else generator.device
    if generator.device.type != dev.type:
        raise ValueError(f"generator is on {generator.device}, batch asked on {dev}")
    if textures.images.device.type != dev.type:
        raise ValueError(f"textures are on {textures.images.device}, batch asked on {dev}")
    scene = sample_scene(batch_size, cfg, len(textures), textures.size, generator)
    qt, xy, surface = sample_queries(scene, cfg, generator)
    tracks, visible = carry_points(scene, cfg, qt, xy, surface)
    tracks[torch.arange(batch_size, device=dev)[:, None], torch.arange(cfg.num_points, device=dev), qt] = xy
    visible[torch.arange(batch_size, device=dev)[:, None], torch.arange(cfg.num_points, device=dev), qt] = True
    video = render(scene, textures, cfg, generator)
    queries = torch.cat([qt[..., None].to(torch.float32), xy], -1)
    return SynthBatch(video=video, tracks=tracks.float(), visible=visible, queries=queries)

