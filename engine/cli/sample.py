"""`trackscope sample OUTDIR`: write synthetic videos with exact ground truth (an evaluation set).

The renderer holds a video's float32 working arrays in host memory at once; a size that cannot fit is
refused before anything is allocated, with the bytes it would need and the limit.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from engine.cli.common import check_output_folder
from engine.core.errors import UserError
from engine.core.units import format_bytes
from engine.run.memory import HOST_MEMORY_FRACTION, available_host_bytes

MAX_SIZE = 4096
MAX_FRAMES = 10000
#: host bytes the renderer needs per pixel of each frame (float32 texel grids, colour, alpha, the frame):
#: 88 measured at 48 frames of 512x512 on the CPU, rounded up
RENDER_BYTES_PER_PIXEL_FRAME = 96
#: engine.training.synthetic.evalset.HELDOUT_PRESETS (checked in a test)
HELDOUT_PRESET_NAMES = ("heldout-v2", "heldout-v3")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("outdir", type=Path, help="folder to write NAME.mp4, NAME.queries.csv, NAME.gt.npz into")
    parser.add_argument("--count", type=int, default=8, help="number of videos (default 8)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--frames", type=int, default=24, help="frames per video (default 24)")
    parser.add_argument("--size", type=int, default=256, help="frame width and height in pixels (default 256)")
    parser.add_argument("--points", type=int, default=64, help="query points per video (default 64)")
    parser.add_argument("--first-frame-queries", action="store_true",
                        help="put every query on frame 0 (default: spread over the video)")
    parser.add_argument("--prefix", default="synth", help="file name prefix (default synth)")
    parser.add_argument("--texture-poor-share", type=float, default=0.0,
                        help="share of videos whose background is texture-poor (sky-like; default 0)")
    parser.add_argument("--texture-poor-sprite-share", type=float, default=0.0,
                        help="share of occluding sprites that are texture-poor (default 0)")
    parser.add_argument("--motion-blur-prob", type=float, default=0.0,
                        help="share of videos rendered with motion blur (default 0)")
    parser.add_argument("--anchored-sprite-share", type=float, default=0.0,
                        help="share of sprites fixed to the background plane, moving with the camera (default 0)")
    parser.add_argument("--preset", choices=sorted(HELDOUT_PRESET_NAMES), default=None,
                        help="write a fixed held-out set instead (heldout-v2: ho777 12x24 frames, ho778 8x47, "
                             "texture-poor 8x47, long clips 6x96; heldout-v3: the same with texture-poor videos "
                             "whose camera motion shows in sprites fixed to the background; ignores --count/--seed/"
                             "--frames/--prefix and the knobs above)")


def run(args: argparse.Namespace) -> int:
    from engine.training.synthetic import SynthConfig, write_eval_set
    from engine.training.synthetic.evalset import HELDOUT_PRESETS, write_preset

    if args.preset is not None:
        frames = max(part.frames for part in HELDOUT_PRESETS[args.preset])
        args.frames = frames
    checks = [("--count", args.count, 1, 100000), ("--frames", args.frames, 2, MAX_FRAMES),
              ("--size", args.size, 16, MAX_SIZE), ("--points", args.points, 1, 100000)]
    for name, value, lo, hi in checks:
        if not lo <= value <= hi:
            raise UserError(f"{name} must be between {lo} and {hi}, got {value}")
    if args.size % 2:
        raise UserError(f"--size must be even (mp4 codecs need even frame sizes), got {args.size}")
    if args.outdir.exists() and not args.outdir.is_dir():
        raise UserError(f"{args.outdir}: exists and is not a folder")
    for name in ("texture_poor_share", "texture_poor_sprite_share", "motion_blur_prob", "anchored_sprite_share"):
        if not 0.0 <= getattr(args, name) <= 1.0:
            raise UserError(f"--{name.replace('_', '-')} must be between 0 and 1, got {getattr(args, name)}")
    check_render_memory(args.frames, args.size)
    check_output_folder(args.outdir, "OUTDIR")  # before any work: a missing parent or a read-only place
    try:
        if args.preset is not None:
            paths = write_preset(args.outdir, args.preset, size=args.size, points=args.points)
        else:
            cfg = SynthConfig(num_frames=args.frames, height=args.size, width=args.size, num_points=args.points,
                              query_first_frame_only=args.first_frame_queries,
                              texture_poor_share=args.texture_poor_share,
                              texture_poor_sprite_share=args.texture_poor_sprite_share,
                              motion_blur_prob=args.motion_blur_prob,
                              anchored_sprite_share=args.anchored_sprite_share)
            paths = write_eval_set(args.outdir, args.count, args.seed, cfg, prefix=args.prefix)
    except OSError as exc:
        raise UserError(f"{args.outdir}: cannot write the evaluation set: {exc}") from exc
    print(f"wrote {len(paths)} video(s) with ground truth to {args.outdir}")
    return 0


def check_render_memory(frames: int, size: int, available: int | None = None) -> None:
    """UserError when rendering one video of ``frames`` frames of size x size would not fit in host memory."""
    need = frames * size * size * RENDER_BYTES_PER_PIXEL_FRAME
    if available is None:
        available = available_host_bytes()
    if available is None:  # the OS cannot say: the renderer will find out
        return
    limit = int(available * HOST_MEMORY_FRACTION)
    if need > limit:
        fit = max(0, limit // (size * size * RENDER_BYTES_PER_PIXEL_FRAME))
        raise UserError(f"{frames} frames of {size}x{size} need about {format_bytes(need)} of host memory to "
                        f"render, over the limit of {format_bytes(limit)} ({HOST_MEMORY_FRACTION:.0%} of the "
                        f"{format_bytes(available)} available)",
                        f"use fewer frames (at most {fit} at this size) or a smaller --size")
