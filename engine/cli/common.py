"""Arguments and helpers shared by the run-type subcommands (track, eval, bench)."""

from __future__ import annotations

import argparse

from engine.core.config import DEFAULT_FRAMES_PER_BATCH, DEFAULT_POINTS_PER_BATCH, PRECISIONS, RunConfig
from engine.core.errors import UserError
from engine.core.outputs import (  # noqa: F401  (re-exported for the verbs)
    check_distinct_outputs,
    check_output_folder,
    check_output_path,
)
from engine.core.paths import RESOURCES, SAMPLE_VIDEO, sidecar  # noqa: F401  (re-exported for the verbs)


def add_tracker_arguments(p: argparse.ArgumentParser, default_tracker: str = "corrtrack") -> None:
    """--tracker and --device: every verb that runs a tracker takes them the same way."""
    p.add_argument("--tracker", default=default_tracker,
                   help="corrtrack (default), corrtrack-nopolish, lk, module:factory, or an installed plugin name")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N (default auto)")


def add_run_arguments(p: argparse.ArgumentParser, default_tracker: str = "corrtrack") -> None:
    """--tracker, --device, --precision and the batch sizes of a single run."""
    add_tracker_arguments(p, default_tracker)
    p.add_argument("--precision", default="fp32", choices=PRECISIONS)
    p.add_argument("--points-per-batch", type=int, default=DEFAULT_POINTS_PER_BATCH, metavar="N")
    p.add_argument("--frames-per-batch", type=int, default=DEFAULT_FRAMES_PER_BATCH, metavar="M")


def config_from_args(args: argparse.Namespace) -> RunConfig:
    """The run's config from the parsed arguments; UserError for a bad value."""
    try:
        return RunConfig(tracker=args.tracker, device=args.device, precision=args.precision,
                         points_per_batch=args.points_per_batch, frames_per_batch=args.frames_per_batch)
    except ValueError as exc:
        raise UserError(str(exc)) from exc


