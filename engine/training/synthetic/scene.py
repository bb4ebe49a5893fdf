"""Random scene parameters for a batch: camera homographies, sprite motions and shapes, photometry.

Every surface (layer 0 = background, layers 1.. = sprites, back to front) has, per frame, a matrix
``local_from_image`` [3, 3] taking image pixels (x, y, 1) to the surface's own coordinates: texture
texels for the background, unit-shape coordinates for a sprite. Rendering samples through it;
ground truth carries points through its inverse ``image_from_local``. Both come from one float64
matrix, so the two directions agree.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from engine.training.synthetic.config import SynthConfig
from engine.training.synthetic.textures import TEXTURE_POOR_COUNT

CAMERA_DRIFT_SHARE = 0.18  # largest background pan over a video, as a share of the texture side
CAMERA_ZOOM_DRIFT = 0.35  # largest log-zoom change over a video
CAMERA_ROLL = 0.3  # largest roll over a video, radians
CAMERA_PERSPECTIVE = 0.15  # largest perspective term x image size (keystone of about +-7 %)
CAMERA_WOBBLE_TEXELS = 6.0
SPRITE_TRAVEL = 0.8  # largest sprite travel over a video, as a share of min(H, W)
SPRITE_SPIN = 1.5  # largest sprite rotation over a video, radians
SPRITE_GROWTH = 0.4  # largest log-scale change of a sprite over a video
SPRITE_ASPECT = 0.5  # log-aspect range of sprite ellipses/polygons
SPRITE_START_MARGIN = 0.1  # sprites start up to this share outside the frame
SURFACE_GAIN_SHARE = 0.7  # per-surface brightness drift, as a share of the global brightness change
BLOB_HARMONICS = (2, 3, 5)
BLOB_AMPLITUDE = 0.15
POLYGON_SIDES = (3, 8)
SHAPE_ELLIPSE, SHAPE_BLOB, SHAPE_POLYGON = 0, 1, 2


@dataclass
class Scene:
    """Everything random about a batch of videos; tensors on the generating device."""

    local_from_image: torch.Tensor  # float32 [B, L, T, 3, 3]
    image_from_local: torch.Tensor  # float32 [B, L, T, 3, 3]
    texel_from_image: torch.Tensor  # float32 [B, L, T, 3, 3]: texture-from-local (identity for the background)
    #                                 @ local_from_image
    tex_index: torch.Tensor  # long [B, L]
    active: torch.Tensor  # bool [B, L]; the background is always active
    size_px: torch.Tensor  # float32 [B, L, T] smaller sprite radius in pixels (edge softness)
    shape_kind: torch.Tensor  # long [B, L]
    blob_amp: torch.Tensor  # float32 [B, L, 3]
    blob_phase: torch.Tensor  # float32 [B, L, 3]
    poly_sides: torch.Tensor  # float32 [B, L]
    poly_rot: torch.Tensor  # float32 [B, L]
    layer_gain: torch.Tensor  # float32 [B, L, T] brightness of each surface over time (shading)
    contrast: torch.Tensor  # float32 [B]
    gain: torch.Tensor  # float32 [B, T]
    bias: torch.Tensor  # float32 [B, T]
    noise_std: torch.Tensor  # float32 [B]
    blur_sigma: torch.Tensor  # float32 [B, T] (0 = sharp)
    poor_index: torch.Tensor | None = None  # long [B, L]: texture-poor texture of a surface, -1 = its bank texture
    anchored: torch.Tensor | None = None  # bool [B, L]: sprites fixed to the background plane (False for layer 0)


def _u(gen: torch.Generator, shape: tuple[int, ...], lo: float = 0.0, hi: float = 1.0) -> torch.Tensor:
    return lo + (hi - lo) * torch.rand(shape, generator=gen, device=gen.device, dtype=torch.float64)


def _smooth(gen: torch.Generator, tau: torch.Tensor, batch: tuple[int, ...], drift: float,
            wobble: float) -> torch.Tensor:
    """A smooth random path over tau [T]: linear drift plus one sinusoid. [*batch, T]."""
    slope = _u(gen, (*batch, 1), -drift, drift)
    amp = _u(gen, (*batch, 1), 0.0, wobble)
    freq = _u(gen, (*batch, 1), 0.5, 2.0)
    phase = _u(gen, (*batch, 1), 0.0, 2 * math.pi)
    return slope * tau + amp * (torch.sin(2 * math.pi * freq * tau + phase) - torch.sin(phase))


def _eye(shape: tuple[int, ...], device: torch.device) -> torch.Tensor:
    return torch.eye(3, dtype=torch.float64, device=device).expand(*shape, 3, 3).clone()


def _camera(gen: torch.Generator, cfg: SynthConfig, b: int, tex_size: int, tau: torch.Tensor) -> torch.Tensor:
    """Background texture-from-image homographies, float64 [B, T, 3, 3]."""
    dev, T = gen.device, tau.shape[0]
    cm, wob = cfg.camera_motion, cfg.wobble
    cx, cy = (cfg.width - 1) / 2, (cfg.height - 1) / 2
    zoom = _u(gen, (b, 1), *cfg.camera_zoom) * torch.exp(_smooth(gen, tau, (b,), cm * CAMERA_ZOOM_DRIFT,
                                                                   cm * wob * 0.05))
    roll = _u(gen, (b, 1), -math.pi, math.pi) + _smooth(gen, tau, (b,), cm * CAMERA_ROLL, cm * wob * 0.05)
    pan = [_smooth(gen, tau, (b,), cm * CAMERA_DRIFT_SHARE * tex_size, cm * wob * CAMERA_WOBBLE_TEXELS)
           for _ in range(2)]
    start = [_u(gen, (b, 1), -0.1, 0.1) * tex_size for _ in range(2)]
    size = max(cfg.height, cfg.width)
    persp = [_u(gen, (b, 1), -1, 1) * CAMERA_PERSPECTIVE / size
             + _smooth(gen, tau, (b,), cm * CAMERA_PERSPECTIVE / size, 0.0) for _ in range(2)]
    centre = _eye((b, T), dev)
    centre[..., 0, 2], centre[..., 1, 2] = -cx, -cy
    keystone = _eye((b, T), dev)
    keystone[..., 2, 0], keystone[..., 2, 1] = persp[0], persp[1]
    rot = _eye((b, T), dev)
    c, s = torch.cos(roll) * zoom, torch.sin(roll) * zoom
    rot[..., 0, 0], rot[..., 0, 1], rot[..., 1, 0], rot[..., 1, 1] = c, -s, s, c
    shift = _eye((b, T), dev)
    mid = (tex_size - 1) / 2
    shift[..., 0, 2] = mid + start[0] + pan[0]
    shift[..., 1, 2] = mid + start[1] + pan[1]
    cam = shift @ rot @ keystone @ centre
    return _keep_inside(cam, cfg, tex_size)


def _keep_inside(cam: torch.Tensor, cfg: SynthConfig, tex_size: int) -> torch.Tensor:
    """Shift each video's whole camera path so the view stays on the texture where it fits. [B, T, 3, 3]."""
    w, h = cfg.width - 1, cfg.height - 1
    corners = torch.tensor([[0, 0, 1], [w, 0, 1], [0, h, 1], [w, h, 1]], dtype=cam.dtype, device=cam.device)
    pts = torch.einsum("cj,btij->btci", corners, cam)
    pts = pts[..., :2] / pts[..., 2:3]  # [B, T, 4, 2] texel positions of the frame corners
    lo, hi = pts.amin((1, 2)), pts.amax((1, 2))  # [B, 2]
    limit = tex_size - 1
    fits = hi - lo <= limit
    correction = torch.where(fits, (-lo).clamp(min=0) - (hi - limit).clamp(min=0), limit / 2 - (lo + hi) / 2)
    fix = _eye(cam.shape[:1], cam.device)
    fix[:, 0, 2], fix[:, 1, 2] = correction[:, 0], correction[:, 1]
    return fix[:, None] @ cam


def sample_scene(batch_size: int, cfg: SynthConfig, num_textures: int, tex_size: int,
                 gen: torch.Generator) -> Scene:
    """Draw every random parameter of ``batch_size`` videos."""
    dev, B, T = gen.device, batch_size, cfg.num_frames
    lo, hi = cfg.num_sprites
    L = 1 + hi
    tau = torch.arange(T, device=dev, dtype=torch.float64) / max(T - 1, 1)  # [T] in [0, 1]
    local = _eye((B, L, T), dev)
    local[:, 0] = _camera(gen, cfg, B, tex_size, tau)

    # sprites: local = diag(1/rx, 1/ry) R(-theta) (p - c), all per frame
    S = hi
    sm, wob = cfg.sprite_motion, cfg.wobble
    short = min(cfg.height, cfg.width)
    radius = _u(gen, (B, S, 1), *cfg.sprite_size) * short
    aspect = torch.exp(_u(gen, (B, S, 1), -SPRITE_ASPECT, SPRITE_ASPECT))
    scale = torch.exp(_smooth(gen, tau, (B, S), sm * SPRITE_GROWTH, 0.0))
    rx, ry = radius * aspect.sqrt() * scale, radius / aspect.sqrt() * scale  # [B, S, T]
    theta = _u(gen, (B, S, 1), -math.pi, math.pi) + _smooth(gen, tau, (B, S), sm * SPRITE_SPIN, sm * wob * 0.1)
    m = SPRITE_START_MARGIN
    centre = []
    for extent in (cfg.width, cfg.height):
        start = _u(gen, (B, S, 1), -m, 1 + m) * extent
        centre.append(start + _smooth(gen, tau, (B, S), sm * SPRITE_TRAVEL * short, sm * wob * 0.04 * short))
    cos, sin = torch.cos(theta), torch.sin(theta)
    sprite = _eye((B, S, T), dev)
    sprite[..., 0, 0], sprite[..., 0, 1] = cos / rx, sin / rx
    sprite[..., 1, 0], sprite[..., 1, 1] = -sin / ry, cos / ry
    sprite[..., 0, 2] = -(cos * centre[0] + sin * centre[1]) / rx
    sprite[..., 1, 2] = -(-sin * centre[0] + cos * centre[1]) / ry
    local[:, 1:] = sprite
    inverse = torch.linalg.inv(local)

    # sprite textures: texel = c + R(phi) diag(kx, ky) local, about one texel per pixel
    tex = _eye((B, L), dev)
    texel_per_px = _u(gen, (B, S), 0.8, 1.6)
    tx, ty = rx[..., 0] * texel_per_px, ry[..., 0] * texel_per_px
    phi = _u(gen, (B, S), -math.pi, math.pi)
    reach = torch.maximum(tx, ty).clamp(max=(tex_size - 1) / 2)
    tcx = reach + _u(gen, (B, S)) * (tex_size - 1 - 2 * reach)
    tcy = reach + _u(gen, (B, S)) * (tex_size - 1 - 2 * reach)
    tex[:, 1:, 0, 0], tex[:, 1:, 0, 1] = torch.cos(phi) * tx, -torch.sin(phi) * ty
    tex[:, 1:, 1, 0], tex[:, 1:, 1, 1] = torch.sin(phi) * tx, torch.cos(phi) * ty
    tex[:, 1:, 0, 2], tex[:, 1:, 1, 2] = tcx, tcy

    count = torch.randint(lo, hi + 1, (B, 1), generator=gen, device=dev)
    active = torch.cat([torch.ones(B, 1, dtype=torch.bool, device=dev),
                        torch.arange(S, device=dev)[None] < count], dim=1)
    size_px = torch.cat([torch.full((B, 1, T), 1e4, device=dev, dtype=torch.float64),
                         torch.minimum(rx, ry)], dim=1)
    kind = torch.randint(0, 3, (B, L), generator=gen, device=dev)
    sides = torch.randint(POLYGON_SIDES[0], POLYGON_SIDES[1] + 1, (B, L), generator=gen, device=dev)

    photo = cfg.photometric
    bc = cfg.brightness_change if photo else 0.0
    contrast = _u(gen, (B,), *cfg.contrast_range) if photo else torch.ones(B, dtype=torch.float64, device=dev)
    gain = 1.0 + _smooth(gen, tau, (B,), bc, bc * 0.5).clamp(-bc, bc)
    bias = _smooth(gen, tau, (B,), bc * 0.3, 0.0)
    layer_gain = 1.0 + _smooth(gen, tau, (B, L), bc * SURFACE_GAIN_SHARE, bc * SURFACE_GAIN_SHARE * 0.5)
    noise = _u(gen, (B,), *cfg.noise_std) * photo
    blurred = (_u(gen, (B, 1)) < cfg.blur_prob) & (_u(gen, (B, T)) < 0.5) & photo
    sigma = _u(gen, (B, T), *cfg.blur_sigma) * blurred

    poor_index = None
    if cfg.texture_poor_share > 0 or cfg.texture_poor_sprite_share > 0:  # drawn last: without them, as before
        share = torch.full((B, L), cfg.texture_poor_sprite_share, dtype=torch.float64, device=dev)
        share[:, 0] = cfg.texture_poor_share
        poor = _u(gen, (B, L)) < share
        pick = torch.randint(0, TEXTURE_POOR_COUNT, (B, L), generator=gen, device=dev)
        poor_index = torch.where(poor, pick, torch.full_like(pick, -1))

    anchored = None
    if cfg.anchored_sprite_share > 0:  # drawn only when asked for: without it every seeded scene is as before
        on_plane = _u(gen, (B, S)) < cfg.anchored_sprite_share  # [B, S]
        local[:, 1:] = torch.where(on_plane[..., None, None, None], _on_background(local), local[:, 1:])
        inverse = torch.linalg.inv(local)
        size_px[:, 1:] = torch.where(on_plane[..., None], _radius_px(inverse[:, 1:]), size_px[:, 1:])
        anchored = torch.cat([torch.zeros(B, 1, dtype=torch.bool, device=dev), on_plane], dim=1)

    f32 = torch.float32
    return Scene(
        local_from_image=local.to(f32), image_from_local=inverse.to(f32),
        texel_from_image=(tex[:, :, None] @ local).to(f32),
        tex_index=torch.randint(0, num_textures, (B, L), generator=gen, device=dev),
        active=active, size_px=size_px.to(f32), shape_kind=kind,
        blob_amp=_u(gen, (B, L, len(BLOB_HARMONICS)), 0.0, BLOB_AMPLITUDE).to(f32),
        blob_phase=_u(gen, (B, L, len(BLOB_HARMONICS)), 0.0, 2 * math.pi).to(f32),
        poly_sides=sides.to(f32), poly_rot=_u(gen, (B, L), 0.0, 2 * math.pi).to(f32),
        layer_gain=layer_gain.to(f32), contrast=contrast.to(f32), gain=gain.to(f32), bias=bias.to(f32),
        noise_std=noise.to(f32),
        blur_sigma=sigma.to(f32), poor_index=poor_index, anchored=anchored,
    )


def _on_background(local: torch.Tensor) -> torch.Tensor:
    """Every sprite's frame-0 placement carried by the camera, as if painted on the background plane:
    local_from_image [B, L, T, 3, 3] (float64) -> the sprites' [B, L-1, T, 3, 3]. At frame 0 it is the sprite's own
    matrix; a sprite point sits on one texel of the background at every frame."""
    cam = local[:, 0]  # [B, T, 3, 3] texel_from_image
    sprite_from_texel = local[:, 1:, :1] @ torch.linalg.inv(cam[:, None, :1])  # [B, S, 1, 3, 3]
    return sprite_from_texel @ cam[:, None]


def _radius_px(image_from_local: torch.Tensor) -> torch.Tensor:
    """A sprite's smaller radius in pixels from its image_from_local [..., 3, 3]: the smaller singular value of the
    map's Jacobian at the shape's centre (exact for the affine sprites, the local scale for a carried one). [...]."""
    m = image_from_local
    w = m[..., 2:3, 2:3]
    jac = (m[..., :2, :2] * w - m[..., :2, 2:3] * m[..., 2:3, :2]) / (w * w)
    return torch.linalg.svdvals(jac)[..., -1]


def shape_alpha(local: torch.Tensor, kind: torch.Tensor, blob_amp: torch.Tensor, blob_phase: torch.Tensor,
                sides: torch.Tensor, poly_rot: torch.Tensor, size_px: torch.Tensor, edge_px: float) -> torch.Tensor:
    """Soft coverage of a unit shape at local coords [..., 2]; per-layer params broadcast to [...]."""
    x, y = local[..., 0], local[..., 1]
    rho = torch.sqrt(x * x + y * y)
    phi = torch.atan2(y, x)
    harmonics = torch.tensor(BLOB_HARMONICS, dtype=local.dtype, device=local.device)
    blob = 1.0 + (blob_amp * torch.cos(harmonics * phi[..., None] + blob_phase)).sum(-1)
    wedge = 2 * math.pi / sides
    rel = torch.remainder(phi - poly_rot, wedge) - wedge / 2
    poly = torch.cos(wedge / 2) / torch.cos(rel)
    edge = torch.where(kind == SHAPE_POLYGON, poly, torch.where(kind == SHAPE_BLOB, blob, torch.ones_like(rho)))
    return torch.sigmoid((edge - rho) * size_px / edge_px)
