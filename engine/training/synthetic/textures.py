"""Texture bank for the synthetic scenes: photos (scikit-image samples) and procedural patterns.

Train and val banks never share a texture: the photo list is split in two and the procedural
textures use different seeds. scikit-image is a build-time dependency only; without it the bank
is procedural.
"""

from __future__ import annotations

import logging
import math
import sys
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

log = logging.getLogger(__name__)

#: scikit-image sample photos per split (names of functions in skimage.data)
TRAIN_PHOTOS = ("astronaut", "hubble_deep_field", "immunohistochemistry", "retina", "camera", "brick",
                "grass", "moon", "coins", "page", "text")
VAL_PHOTOS = ("coffee", "chelsea", "rocket", "gravel")
CROPS_PER_PHOTO = 4  # random crops (with flips and colour variants) made from each photo
MIN_CROP_SHARE = 0.55  # smallest crop side as a share of the photo's shorter side
CROP_TRIES = 4  # crops tried per wanted crop, keeping the most detailed
CROP_PREVIEW = 64  # side of the coarse preview used to rank crops by detail
STRETCH_QUANTILES = (0.01, 0.99)  # photo crops are contrast-stretched between these quantiles
NOISE_OCTAVES = (4, 8, 16, 32, 64)
SHAPES_PER_TEXTURE = 36
GRAIN_STD = (0.03, 0.12)  # fine-grain noise added to procedural textures
SPLIT_SEED_OFFSET = {"train": 0, "val": 7919}
#: texture-poor surfaces (sky-like gradients, flat colour with faint noise, faint clouds): how many per bank,
#: drawn from their own generator so the bank's other textures stay as they were
TEXTURE_POOR_COUNT = 16
TEXTURE_POOR_SEED_OFFSET = 4099
POOR_BASE_COLOUR = (0.15, 0.9)  # flat colour per channel
POOR_GRADIENT = 0.2  # largest colour change across a gradient texture
POOR_CLOUD_AMPLITUDE = (0.0, 0.05)  # faint low-frequency variation
POOR_GRAIN_STD = (0.002, 0.01)  # faint fine noise
POOR_CLOUD_OCTAVES = (2, 4, 8)


@dataclass
class TextureBank:
    """Textures float32 [K, 3, S, S] in [0, 1] on one device, with a name per texture."""

    images: torch.Tensor  # float32 [K, 3, S, S]
    names: list[str]
    seed: int = 0
    split: str = "train"
    _poor: torch.Tensor | None = field(default=None, repr=False, compare=False)

    def poor_images(self) -> torch.Tensor:
        """TEXTURE_POOR_COUNT texture-poor textures float32 [P, 3, S, S], made on first use (same seed and split:
        same textures)."""
        if self._poor is None:
            gen = torch.Generator(device=self.images.device)
            gen.manual_seed(self.seed * 104729 + SPLIT_SEED_OFFSET[self.split] + TEXTURE_POOR_SEED_OFFSET)
            self._poor = texture_poor_textures(TEXTURE_POOR_COUNT, self.size, gen)
        return self._poor

    @property
    def size(self) -> int:
        return int(self.images.shape[-1])

    def __len__(self) -> int:
        return int(self.images.shape[0])

    @classmethod
    def build(cls, device: torch.device | str = "cpu", size: int = 512, photos: bool = True,
              procedural: int = 64, seed: int = 0, split: str = "train") -> TextureBank:
        """Photo crops (when scikit-image is present) plus ``procedural`` generated textures."""
        if split not in SPLIT_SEED_OFFSET:
            raise ValueError(f"split must be 'train' or 'val', got {split!r}")
        device = torch.device(device)
        gen = torch.Generator(device=device)
        gen.manual_seed(seed * 104729 + SPLIT_SEED_OFFSET[split])
        parts: list[torch.Tensor] = []
        names: list[str] = []
        if photos:
            photo_list = TRAIN_PHOTOS if split == "train" else VAL_PHOTOS
            loaded = _load_photos(photo_list)
            if loaded is None:
                print("trackscope: scikit-image not installed, using procedural textures only", file=sys.stderr)
            else:
                for name, img in loaded:
                    crops = _photo_crops(img, size, CROPS_PER_PHOTO, gen, device)
                    parts.append(crops)
                    names += [f"{name}:{i}" for i in range(crops.shape[0])]
        if procedural > 0 or not parts:
            count = max(procedural, 1 if not parts else 0)
            parts.append(procedural_textures(count, size, gen, device))
            names += [f"procedural:{split}:{seed}:{i}" for i in range(count)]
        return cls(images=torch.cat(parts).contiguous(), names=names, seed=seed, split=split)


def _load_photos(names: tuple[str, ...]) -> list[tuple[str, np.ndarray]] | None:
    """The named skimage.data photos present in this install, float32 [h, w, 3]; None without skimage."""
    try:
        import skimage.data as skdata
    except ImportError:
        return None
    out = []
    for name in names:
        loader = getattr(skdata, name, None)
        if loader is None:
            continue
        try:
            img = np.asarray(loader())
        except Exception as exc:  # a sample that needs a download (pooch) is skipped
            log.debug("texture sample skipped: %s: %s", type(exc).__name__, exc)
            continue
        img = img.astype(np.float32) / (255.0 if img.dtype == np.uint8 else max(float(img.max()), 1e-6))
        if img.ndim == 2:
            img = np.repeat(img[..., None], 3, axis=2)
        out.append((name, img[..., :3]))
    return out


def _rand(gen: torch.Generator, *shape: int, lo: float = 0.0, hi: float = 1.0) -> torch.Tensor:
    return lo + (hi - lo) * torch.rand(*shape, generator=gen, device=gen.device)


def _photo_crops(img: np.ndarray, size: int, count: int, gen: torch.Generator,
                 device: torch.device) -> torch.Tensor:
    """``count`` random square crops of one photo, resized to size x size, flipped and recoloured."""
    photo = torch.from_numpy(np.ascontiguousarray(img)).to(device).permute(2, 0, 1)  # [3, h, w]
    h, w = photo.shape[-2:]
    largest_needed = math.ceil(size / MIN_CROP_SHARE)  # shorter side beyond which crops only shrink
    if min(h, w) > largest_needed:
        factor = largest_needed / min(h, w)
        h, w = round(h * factor), round(w * factor)
        photo = F.interpolate(photo[None], size=(h, w), mode="bilinear", align_corners=False, antialias=True)[0]
    is_gray = bool((photo[0] - photo[1]).abs().max() < 1e-6 and (photo[0] - photo[2]).abs().max() < 1e-6)
    crops = []
    for _ in range(count):
        best, best_detail = (0, 0, 0), -1.0
        for _ in range(CROP_TRIES):  # keep the crop whose coarse preview shows the most detail
            side = int(min(h, w) * float(_rand(gen, 1, lo=MIN_CROP_SHARE, hi=1.0)))
            y0 = int(float(_rand(gen, 1)) * (h - side + 1))
            x0 = int(float(_rand(gen, 1)) * (w - side + 1))
            step = max(1, side // CROP_PREVIEW)
            preview = _stretch(photo[:, y0:y0 + side:step, x0:x0 + side:step])
            detail = float(texture_detail(preview[None])[0])
            if detail > best_detail:
                best, best_detail = (side, y0, x0), detail
        side, y0, x0 = best
        crop = F.interpolate(photo[None, :, y0:y0 + side, x0:x0 + side], size=(size, size), mode="bilinear",
                             align_corners=False, antialias=side > size)[0]
        crop = _stretch(crop)
        if float(_rand(gen, 1)) < 0.5:
            crop = crop.flip(-1)
        if is_gray:  # tint: map grey through a random two-colour gradient
            c0, c1 = _rand(gen, 3, 1, 1, hi=0.4), _rand(gen, 3, 1, 1, lo=0.6)
            crop = c0 + (c1 - c0) * crop[:1]
        elif float(_rand(gen, 1)) < 0.5:
            crop = crop[torch.randperm(3, generator=gen, device=device)]
        crops.append(crop.clamp(0, 1))
    return torch.stack(crops)


def _stretch(img: torch.Tensor) -> torch.Tensor:
    """Contrast-stretch an image [3, S, S] so its luminance spans about [0, 1]."""
    lum = img.mean(0).flatten()
    step = max(1, lum.numel() // 65536)  # quantiles of a subsample: exact enough, fast
    lo, hi = torch.quantile(lum[::step], torch.tensor(STRETCH_QUANTILES, device=img.device))
    return ((img - lo) / (hi - lo).clamp(min=0.05)).clamp(0, 1)


def texture_detail(images: torch.Tensor) -> torch.Tensor:
    """Mean absolute luminance gradient per texture: images [K, 3, S, S] -> [K] (0 = flat)."""
    lum = images.mean(1)
    dx = (lum[:, :, 1:] - lum[:, :, :-1]).abs().mean((1, 2))
    dy = (lum[:, 1:, :] - lum[:, :-1, :]).abs().mean((1, 2))
    return dx + dy


def _value_noise(count: int, channels: int, size: int, octaves: tuple[int, ...], gen: torch.Generator,
                 falloff: float = 0.8) -> torch.Tensor:
    """Multi-octave smooth noise [count, channels, size, size], roughly zero-mean, unit-ish range."""
    out = torch.zeros(count, channels, size, size, device=gen.device)
    total = 0.0
    for cells in octaves:
        grid = torch.rand(count, channels, cells + 1, cells + 1, generator=gen, device=gen.device) - 0.5
        weight = cells ** -falloff
        out += weight * F.interpolate(grid, size=(size, size), mode="bicubic", align_corners=True)
        total += weight
    return out / total


def _paint_shapes(img: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Paint random soft-edged discs and boxes over img [K, 3, S, S], each inside its own window."""
    count, _, size, _ = img.shape
    n = SHAPES_PER_TEXTURE
    cx, cy = _rand(gen, count, n) * size, _rand(gen, count, n) * size
    radius = torch.exp(_rand(gen, count, n, lo=math.log(1 / 64), hi=math.log(1 / 6))) * size  # texels
    angle = _rand(gen, count, n, hi=math.pi)
    aspect = _rand(gen, count, n, lo=0.4, hi=1.0)
    is_box = _rand(gen, count, n) < 0.5
    keep = _rand(gen, count, n) < 0.85  # some textures get fewer shapes
    colour = _rand(gen, count, n, 3)
    params = torch.stack([cx, cy, radius, angle, aspect, is_box.float(), keep.float()], -1).cpu().tolist()
    img = img.clone()
    for k in range(count):
        for s, (x, y, r, a, asp, box, kept) in enumerate(params[k]):
            if not kept:
                continue
            reach = r * math.sqrt(2) + 2  # covers the rotated box and its soft edge
            x0, x1 = max(int(x - reach), 0), min(int(x + reach) + 1, size)
            y0, y1 = max(int(y - reach), 0), min(int(y + reach) + 1, size)
            if x0 >= x1 or y0 >= y1:
                continue
            dx = torch.arange(x0, x1, device=img.device, dtype=torch.float32)[None, :] + 0.5 - x
            dy = torch.arange(y0, y1, device=img.device, dtype=torch.float32)[:, None] + 0.5 - y
            u = (dx * math.cos(a) + dy * math.sin(a)) / r
            v = (-dx * math.sin(a) + dy * math.cos(a)) / (r * asp)
            dist = torch.maximum(u.abs(), v.abs()) if box else torch.sqrt(u * u + v * v)
            alpha = torch.sigmoid((1.0 - dist) * r * 1.5)  # ~1 texel soft edge
            window = img[k, :, y0:y1, x0:x1]
            window += alpha * (colour[k, s, :, None, None] - window)
    return img


def procedural_textures(count: int, size: int, gen: torch.Generator, device: torch.device) -> torch.Tensor:
    """Colour noise, painted discs/boxes, stripes and grain: float32 [count, 3, size, size] in [0, 1]."""
    dev = gen.device
    base = 0.5 + 1.6 * _value_noise(count, 3, size, NOISE_OCTAVES[:3], gen)  # large colour fields
    coords = (torch.arange(size, device=dev, dtype=torch.float32) + 0.5) / size
    yy, xx = torch.meshgrid(coords, coords, indexing="ij")  # [S, S] in (0, 1)
    img = _paint_shapes(base, gen)
    # stripes on a warped grid over part of the textures
    freq = _rand(gen, count, 1, 1, lo=8.0, hi=40.0)
    theta = _rand(gen, count, 1, 1, hi=math.pi)
    warp = 3.0 * _value_noise(count, 1, size, (4,), gen)[:, 0]
    phase = 2 * math.pi * freq * (xx * torch.cos(theta) + yy * torch.sin(theta)) + 6.0 * warp
    stripes = torch.sigmoid(4.0 * torch.sin(phase))[:, None]
    stripe_region = (_value_noise(count, 1, size, (3,), gen) > 0.15).float()
    stripe_region = stripe_region * (_rand(gen, count, 1, 1, 1) < 0.5)
    stripe_colour = _rand(gen, count, 3, 1, 1)
    img = img + stripe_region * stripes * (stripe_colour - img)
    grain_std = _rand(gen, count, 1, 1, 1, lo=GRAIN_STD[0], hi=GRAIN_STD[1])
    img = img + grain_std * 3.0 * _value_noise(count, 3, size, (size // 4, size // 2), gen, falloff=0.0)
    return img.clamp(0, 1).to(device)


def texture_poor_textures(count: int, size: int, gen: torch.Generator) -> torch.Tensor:
    """Sky-like surfaces: a flat colour, a smooth gradient over part of them, faint clouds and faint grain.
    float32 [count, 3, size, size] in [0, 1], on the generator's device; their luminance gradient is a small
    share of the other textures' (texture_detail)."""
    dev = gen.device
    coords = (torch.arange(size, device=dev, dtype=torch.float32) + 0.5) / size
    yy, xx = torch.meshgrid(coords, coords, indexing="ij")
    base = _rand(gen, count, 3, 1, 1, lo=POOR_BASE_COLOUR[0], hi=POOR_BASE_COLOUR[1])
    theta = _rand(gen, count, 1, 1, hi=2 * math.pi)
    ramp = (xx * torch.cos(theta) + yy * torch.sin(theta))[:, None]  # [count, 1, S, S]
    change = _rand(gen, count, 3, 1, 1, lo=-POOR_GRADIENT, hi=POOR_GRADIENT) * (_rand(gen, count, 1, 1, 1) < 0.7)
    img = base + change * ramp
    cloud = _rand(gen, count, 1, 1, 1, lo=POOR_CLOUD_AMPLITUDE[0], hi=POOR_CLOUD_AMPLITUDE[1])
    img = img + cloud * 2.0 * _value_noise(count, 1, size, POOR_CLOUD_OCTAVES, gen)
    grain = _rand(gen, count, 1, 1, 1, lo=POOR_GRAIN_STD[0], hi=POOR_GRAIN_STD[1])
    img = img + grain * torch.randn(count, 3, size, size, generator=gen, device=dev)
    return img.clamp(0, 1)
