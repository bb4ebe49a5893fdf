"""`trackscope eval SETDIR [--tracker NAME] [--precisions fp32,bf16] [--json OUT]`: TAP-Vid metrics per video and
mean, per precision, with LK beside it; the JSON is an accuracy file the app's trade-off tab reads."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from engine.cli.common import add_run_arguments, check_output_path, config_from_args, precisions_from_args


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("setdir", type=Path, help="folder of NAME.mp4 + NAME.queries.csv + NAME.gt.npz")
    p.add_argument("--query-mode", default="first", choices=("first", "strided"))
    p.add_argument("--no-baseline", action="store_true", help="do not run LK beside the tracker")
    p.add_argument("--json", type=Path, metavar="OUT.json",
                   help="also write the scores here: per tracker and precision, mean and per video (an accuracy "
                        "file: the app's Compare > Trade-offs: add a file reads it)")
    add_run_arguments(p, several_precisions=True)


def run(args: argparse.Namespace) -> int:
    from engine.report.accuracy_file import save_accuracy_file
    from engine.workflows.evaluate import eval_accuracy_file, evaluate_precisions, format_table

    config = config_from_args(args)
    precisions = precisions_from_args(args)
    if args.json is not None:
        check_output_path(args.json, "--json", (".json",))
    baseline = "lk" if config.tracker != "lk" and not args.no_baseline else None
    runs = evaluate_precisions(args.setdir, config, precisions, baseline, query_mode=args.query_mode,
                               log=lambda line: print(f"trackscope eval: {line}", file=sys.stderr))
    print(format_table(runs.by_label()))
    if args.json is not None:
        save_accuracy_file(eval_accuracy_file(runs, config, precisions, baseline, args.setdir, args.query_mode),
                           args.json)
        print(f"trackscope eval: wrote {args.json}", file=sys.stderr)
    return 0
