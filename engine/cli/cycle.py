"""`trackscope cycle VIDEO... [--tracker NAME]`: forward-backward cycle error on videos with no ground truth,
with LK beside it on the same points."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from engine.cli.common import add_run_arguments, check_output_path, config_from_args
from engine.core.errors import UserError


def add_arguments(p: argparse.ArgumentParser) -> None:
    from engine.workflows.cycle import DEFAULT_FRAMES, DEFAULT_GRID

    p.add_argument("videos", type=Path, nargs="+", help="videos (any OpenCV-readable file)")
    p.add_argument("--grid", type=int, default=DEFAULT_GRID,
                   help=f"K: a K x K grid on frame 0 (default {DEFAULT_GRID})")
    p.add_argument("--frames", type=int, default=DEFAULT_FRAMES,
                   help=f"the clip: the first N frames (default {DEFAULT_FRAMES})")
    p.add_argument("--no-baseline", action="store_true", help="do not run LK beside the tracker")
    p.add_argument("--json", type=Path, help="also write the results here (JSON)")
    add_run_arguments(p)


def run(args: argparse.Namespace) -> int:
    from engine.core.atomic import atomic_open
    from engine.workflows.cycle import cycle_videos, format_table

    if args.frames < 2:
        raise UserError(f"--frames {args.frames}: a cycle needs at least 2 frames")
    for video in args.videos:
        if not video.is_file():
            raise UserError(f"{video}: video not found")
    if args.json is not None:
        check_output_path(args.json, "--json", (".json",))
    config = config_from_args(args)
    names = [config.tracker]
    baseline = None
    if config.tracker != "lk" and not args.no_baseline:
        names.append("lk")
        baseline = "lk"
    results = cycle_videos(list(args.videos), names, config, args.grid, args.frames,
                           progress=lambda line: print(f"trackscope cycle: {line}", file=sys.stderr))
    print(format_table(results, baseline))
    if args.json is not None:
        with atomic_open(args.json, "w", encoding="utf-8") as f:
            json.dump({"grid": args.grid, "frames": args.frames, "config": config.to_dict(),
                       "results": [r.to_dict() for by in results.values() for r in by.values()]}, f, indent=1)
    return 0
