"""`trackscope cycle VIDEO... [--tracker NAME] [--precisions fp32,bf16] [--json OUT]`: forward-backward cycle
error on videos with no ground truth, per precision, with LK beside it on the same points; the JSON is an accuracy
file the app's trade-off tab reads."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from engine.cli.common import add_run_arguments, check_output_path, config_from_args, precisions_from_args
from engine.core.errors import UserError


def add_arguments(p: argparse.ArgumentParser) -> None:
    from engine.workflows.cycle import DEFAULT_FRAMES, DEFAULT_GRID

    p.add_argument("videos", type=Path, nargs="+", help="videos (any OpenCV-readable file)")
    p.add_argument("--grid", type=int, default=DEFAULT_GRID,
                   help=f"K: a K x K grid on frame 0 (default {DEFAULT_GRID})")
    p.add_argument("--frames", type=int, default=DEFAULT_FRAMES,
                   help=f"the clip: the first N frames (default {DEFAULT_FRAMES})")
    p.add_argument("--no-baseline", action="store_true", help="do not run LK beside the tracker")
    p.add_argument("--json", type=Path, metavar="OUT.json",
                   help="also write the results here: per tracker and precision, per video and over all (an "
                        "accuracy file: the app's Compare > Trade-offs: add a file reads it)")
    add_run_arguments(p, several_precisions=True)


def run(args: argparse.Namespace) -> int:
    from engine.report.accuracy_file import save_accuracy_file
    from engine.workflows.cycle import cycle_accuracy_file, cycle_precisions, format_table

    if args.frames < 2:
        raise UserError(f"--frames {args.frames}: a cycle needs at least 2 frames")
    for video in args.videos:
        if not video.is_file():
            raise UserError(f"{video}: video not found")
    config = config_from_args(args)
    precisions = precisions_from_args(args)
    if args.json is not None:
        check_output_path(args.json, "--json", (".json",))
    baseline = "lk" if config.tracker != "lk" and not args.no_baseline else None
    runs = cycle_precisions(list(args.videos), config, precisions, baseline, args.grid, args.frames,
                            progress=lambda line: print(f"trackscope cycle: {line}", file=sys.stderr))
    print(format_table(runs.table, runs.baseline_label))
    if args.json is not None:
        save_accuracy_file(cycle_accuracy_file(runs, config, precisions, args.grid, args.frames), args.json)
        print(f"trackscope cycle: wrote {args.json}", file=sys.stderr)
    return 0
