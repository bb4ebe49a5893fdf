"""`trackscope eval SETDIR [--tracker NAME]`: TAP-Vid metrics per video and mean, with LK beside it."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from engine.cli.common import add_run_arguments, config_from_args


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("setdir", type=Path, help="folder of NAME.mp4 + NAME.queries.csv + NAME.gt.npz")
    p.add_argument("--query-mode", default="first", choices=("first", "strided"))
    p.add_argument("--no-baseline", action="store_true", help="do not run LK beside the tracker")
    add_run_arguments(p)


def run(args: argparse.Namespace) -> int:
    from engine.workflows.evaluate import evaluate_set, format_table

    config = config_from_args(args)
    names = [config.tracker]
    if config.tracker != "lk" and not args.no_baseline:
        names.append("lk")
    results = {}
    for name in names:
        t0 = time.perf_counter()
        results[name] = evaluate_set(args.setdir, name, config.with_changes(tracker=name),
                                     query_mode=args.query_mode)
        print(f"trackscope eval: {name} done in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    print(format_table(results))
    return 0
