"""Single videos as numpy arrays, and evaluation sets written to disk."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import torch

from engine.core.atomic import atomic_write
from engine.io.trackio import write_queries_csv
from engine.io.video import write_video
from engine.training.synthetic.config import SynthConfig
from engine.training.synthetic.render import generate_batch
from engine.training.synthetic.textures import TextureBank

TEXTURE_SIZE_RANGE = (128, 512)  # default bank texture side: twice the video side, within this range
DEFAULT_PROCEDURAL = 16  # procedural textures in the default (val) bank used for single videos


def default_texture_size(cfg: SynthConfig) -> int:
    """Texture side for a video size: twice the longer side, clamped to TEXTURE_SIZE_RANGE."""
    lo, hi = TEXTURE_SIZE_RANGE
    return int(min(max(2 * max(cfg.height, cfg.width), lo), hi))


@lru_cache(maxsize=4)
def default_textures(size: int = TEXTURE_SIZE_RANGE[1], split: str = "val") -> TextureBank:
    """The CPU texture bank used when none is given (held-out 'val' textures by default)."""
    return TextureBank.build("cpu", size=size, procedural=DEFAULT_PROCEDURAL, split=split)


def generate_video(seed: int, cfg: SynthConfig, textures: TextureBank | None = None) -> dict[str, np.ndarray]:
    """One video with ground truth: video uint8 [T, H, W, 3], tracks [N, T, 2], visible [N, T],
    queries [N, 3], query_t [N]."""
    bank = textures if textures is not None else default_textures(default_texture_size(cfg))
    dev = bank.images.device
    gen = torch.Generator(device=dev)
    gen.manual_seed(int(seed))
    with torch.no_grad():
        batch = generate_batch(1, cfg, bank, gen, dev)
    return batch.numpy(0)


def write_video_and_truth(outdir: Path, name: str, data: dict[str, np.ndarray]) -> Path:
    """Write ``generate_video`` output as NAME.mp4, NAME.queries.csv, NAME.gt.npz in outdir; returns the mp4."""
    video_path = outdir / f"{name}.mp4"
    write_video(video_path, data["video"])
    write_queries_csv(outdir / f"{name}.queries.csv", data["queries"])
    atomic_write(outdir / f"{name}.gt.npz", lambda tmp: np.savez_compressed(
        tmp, tracks=data["tracks"].astype(np.float32), visible=data["visible"].astype(bool),
        query_t=data["query_t"].astype(np.int64)))
    return video_path


def write_eval_set(outdir: str | Path, count: int, seed: int, cfg: SynthConfig, prefix: str = "synth",
                   textures: TextureBank | None = None) -> list[Path]:
    """Write ``count`` videos as NAME.mp4, NAME.queries.csv, NAME.gt.npz; returns the mp4 paths."""
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    return [write_video_and_truth(outdir, f"{prefix}_{i:03d}", generate_video(seed * 100003 + i, cfg, textures))
            for i in range(count)]


@dataclass(frozen=True)
class EvalPart:
    """One part of a held-out preset: ``count`` videos named PREFIX_000... from ``seed``, with SynthConfig knobs."""

    prefix: str
    count: int
    seed: int
    frames: int
    knobs: tuple[tuple[str, float], ...] = ()


_HO777, _HO778, _LONG = EvalPart("ho777", 12, 777, 24), EvalPart("ho778", 8, 778, 47), EvalPart("long", 6, 780, 96)
_POOR_KNOBS = (("texture_poor_share", 1.0), ("texture_poor_sprite_share", 0.25))

#: held-out sets of the accuracy target. heldout-v2: the project's two held-out sets as they were (ho777, ho778:
#: same seeds, same videos), texture-poor videos (every background sky-like, a quarter of the sprites too) and
#: long clips (96 frames). Its texture-poor backgrounds hold no trace of the camera's motion (flat colours, faint
#: clouds under the codec's noise, sprites that move on their own: docs/corrtrack.md, session 25), so their points
#: measure guessing. heldout-v3 keeps ho777, ho778 and the long clips and replaces that group with texture-poor
#: videos in which half of the sprites are fixed to the background plane (a building or a sign against a plain
#: sky): the camera's motion is in the pixels, but only away from the plain points, which a tracker must borrow it
#: from.
HELDOUT_PRESETS: dict[str, tuple[EvalPart, ...]] = {
    "heldout-v2": (_HO777, _HO778, EvalPart("poor", 8, 779, 47, _POOR_KNOBS), _LONG),
    "heldout-v3": (_HO777, _HO778, EvalPart("poorctx", 8, 781, 47, (*_POOR_KNOBS, ("anchored_sprite_share", 0.5))),
                   _LONG),
}


def write_preset(outdir: str | Path, preset: str, size: int = 256, points: int = 64) -> list[Path]:
    """Write every part of a HELDOUT_PRESETS entry into one folder; returns the mp4 paths."""
    paths: list[Path] = []
    for part in HELDOUT_PRESETS[preset]:
        knobs: dict[str, Any] = dict(part.knobs)
        cfg = SynthConfig(num_frames=part.frames, height=size, width=size, num_points=points, **knobs)
        paths += write_eval_set(outdir, part.count, part.seed, cfg, prefix=part.prefix)
    return paths
