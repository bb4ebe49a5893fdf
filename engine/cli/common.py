"""Arguments and helpers shared by the run-type subcommands (track, eval, bench)."""

from __future__ import annotations

import argparse

from engine.core.config import (
    DEFAULT_FRAMES_PER_BATCH,
    DEFAULT_POINTS_PER_BATCH,
    PRECISIONS,
    REFERENCE_PRECISION,
    RunConfig,
    parse_precisions,
)
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


def add_run_arguments(p: argparse.ArgumentParser, default_tracker: str = "corrtrack",
                      several_precisions: bool = False) -> None:
    """--tracker, --device, --precision and the batch sizes of a single run; with ``several_precisions``,
    --precisions too, instead of --precision (read both with ``precisions_from_args``)."""
    add_tracker_arguments(p, default_tracker)
    group = p.add_mutually_exclusive_group() if several_precisions else p
    # no default beside --precisions: argparse takes a value equal to the default as not given, and would let
    # "--precision fp32 --precisions bf16" through (config_from_args reads None as fp32)
    group.add_argument("--precision", default=None if several_precisions else REFERENCE_PRECISION, choices=PRECISIONS,
                       help="one precision (default fp32)" + ("; or --precisions" if several_precisions else ""))
    if several_precisions:
        group.add_argument("--precisions", metavar="P[,P...]",
                           help=f"several, comma-separated ({','.join(PRECISIONS)}; fp32 first): the tracker loads "
                                "once and runs at each, LK (no precision) once; instead of --precision")
    p.add_argument("--points-per-batch", type=int, default=DEFAULT_POINTS_PER_BATCH, metavar="N")
    p.add_argument("--frames-per-batch", type=int, default=DEFAULT_FRAMES_PER_BATCH, metavar="M")


def precisions_from_args(args: argparse.Namespace) -> list[str]:
    """The precisions a verb runs: --precisions parsed (UserError naming an unknown one), else [--precision]."""
    text = getattr(args, "precisions", None)
    return parse_precisions(text, "--precisions") if text is not None else [args.precision or REFERENCE_PRECISION]


def config_from_args(args: argparse.Namespace) -> RunConfig:
    """The run's config from the parsed arguments; UserError for a bad value."""
    try:
        return RunConfig(tracker=args.tracker, device=args.device, precision=args.precision or REFERENCE_PRECISION,
                         points_per_batch=args.points_per_batch, frames_per_batch=args.frames_per_batch)
    except ValueError as exc:
        raise UserError(str(exc)) from exc


