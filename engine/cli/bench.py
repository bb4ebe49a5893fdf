"""`trackscope bench`: a tracker over precisions x batch sizes, printed as a table, written as reports."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from engine.cli.common import add_tracker_arguments, check_output_folder, check_output_path
from engine.cli.compile_flag import add_compile_argument, apply_compile_flag
from engine.core.config import RunConfig
from engine.core.errors import UserError
from engine.core.outputs import exclusive_folder
from engine.run.device_memory import ELEMENT_BYTES, check_run_device_memory
from engine.workflows.bench import (
    BENCH_FILE,
    DEFAULT_FRAMES_PER_BATCH,
    DEFAULT_POINTS_PER_BATCH,
    DEFAULT_PRECISIONS,
    DEFAULT_REPEAT,
    DEFAULT_WARMUP,
    OVERHEAD_TARGET,
    Bench,
    BenchWriter,
    _int_list,
    _precision_list,
    format_table,
    load_input,
    planned_configurations,
)
from engine.workflows.deep import DEEP_FAILED_EXIT


def add_sweep_arguments(p: argparse.ArgumentParser) -> None:
    """What a sweep runs: the video, the tracker, precisions x batch sizes, the queries, warm-up and repeats
    (bench and fleet take them the same way)."""
    p.add_argument("video", nargs="?", type=Path, help="video file or image folder (default: the bundled sample)")
    add_tracker_arguments(p)
    p.add_argument("--precisions", default=DEFAULT_PRECISIONS, help=f"comma list (default {DEFAULT_PRECISIONS})")
    p.add_argument("--points-per-batch", default=DEFAULT_POINTS_PER_BATCH, metavar="N[,N...]")
    p.add_argument("--frames-per-batch", default=DEFAULT_FRAMES_PER_BATCH, metavar="M[,M...]")
    q = p.add_mutually_exclusive_group()
    q.add_argument("--queries", type=Path, metavar="Q.csv", help="queries CSV (default: the video's sidecar)")
    q.add_argument("--grid", type=int, metavar="K", help="a K x K grid of queries on frame 0")
    q.add_argument("--points", type=int, metavar="N", help="N pseudo-random queries on frame 0")
    p.add_argument("--warmup", type=int, default=DEFAULT_WARMUP, help="warm-up runs per configuration")
    p.add_argument("--repeat", type=int, default=DEFAULT_REPEAT, help="timed runs per configuration")


def add_measurement_arguments(p: argparse.ArgumentParser) -> None:
    """What each configuration measures besides its timed runs (bench and fleet take them the same way)."""
    p.add_argument("--no-telemetry", action="store_true", help="do not sample GPU/CPU telemetry")
    p.add_argument("--no-timing", action="store_true", help="no per-stage timing (wall time only)")
    p.add_argument("--no-cost", action="store_true", help="skip the counted pass (FLOPs/bytes per stage)")
    p.add_argument("--deep", action="store_true",
                   help="per configuration, one more warm run under torch.profiler after the timed runs "
                        "(never timed): per stage and module, kernels, syncs, copies; traces beside the reports; "
                        f"exit {DEEP_FAILED_EXIT} when a capture failed")
    p.add_argument("--no-direct", action="store_true",
                   help="skip the direct-call reference (the tracker called alone beside each configuration's "
                        "runs, no session or instrumentation; the table's 'vs direct' is session/direct)")


def sweep_values(args: argparse.Namespace) -> tuple[list[str], list[int], list[int]]:
    """(precisions, points per batch, frames per batch) of the parsed sweep arguments; UserError for bad ones."""
    precisions = _precision_list(args.precisions)
    points = _int_list(args.points_per_batch, "--points-per-batch")
    frames = _int_list(args.frames_per_batch, "--frames-per-batch")
    if args.warmup < 0 or args.repeat < 1:
        raise UserError(f"--warmup must be >= 0 and --repeat >= 1, got {args.warmup} and {args.repeat}")
    return precisions, points, frames


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_sweep_arguments(p)
    p.add_argument("--out", type=Path, metavar="DIR",
                   help="write per-configuration reports and bench.json here, each configuration as it finishes "
                        "(Ctrl-C keeps the finished ones)")
    p.add_argument("--diagnose", action="store_true",
                   help="append the diagnosis (findings) to the output (reports keep measurements only)")
    add_measurement_arguments(p)
    p.add_argument("--overhead", action="store_true",
                   help="measure instrumentation overhead: timing+telemetry on vs off, alternating, "
                        "the median ratio of 3 sets")
    add_compile_argument(p)


def run(args: argparse.Namespace) -> int:
    """The sweep; with --out, the folder is held for this bench alone until it ends (a second gets exit 2)."""
    if args.out is None:
        return _bench(args)
    check_output_folder(args.out, "--out")  # a file given as the folder, a read-only place: before holding it
    with exclusive_folder(args.out, "--out"):
        return _bench(args)


def _bench(args: argparse.Namespace) -> int:
    precisions, points, frames = sweep_values(args)
    writer_out = None
    if args.out is not None:  # before decoding or running anything: exit 2 with the reason
        writer_out = check_output_folder(args.out, "--out")
        if writer_out.is_dir():
            check_output_path(writer_out / BENCH_FILE, "--out")
    data = load_input(args)
    apply_compile_flag(args)
    bench = Bench(data, args.tracker, args.device, timing=not args.no_timing, telemetry=not args.no_telemetry,
                  cost=not args.no_cost, deep=args.deep, trace_dir=args.out, direct=not args.no_direct)
    try:  # the largest configuration, before any runs (a CUDA device only)
        num_frames, height, width = data.frames.shape[:3]
        check_run_device_memory(bench.tracker, bench.device, str(data.info.get("path")), num_frames=num_frames,
                                width=width, height=height, num_queries=len(data.queries),
                                points_per_batch=max(points), frames_per_batch=max(frames),
                                precision=max(precisions, key=lambda p: ELEMENT_BYTES.get(p, 4)))
    except BaseException:
        bench.close()
        raise
    writer = None
    if writer_out is not None:
        writer = BenchWriter(writer_out, bench, planned_configurations(precisions, points, frames))
        writer.start()
        bench.before_capture = writer.timed_report
    try:
        print(f"trackscope bench: {args.tracker} on {bench.device}, video {data.info.get('path')} "
              f"({data.frames.shape[0]} frames {data.frames.shape[2]}x{data.frames.shape[1]}), "
              f"{len(data.queries)} queries ({data.source}), {args.warmup} warm-up + {args.repeat} runs",
              file=sys.stderr)
        overhead = None
        if args.overhead:
            config = RunConfig(tracker=args.tracker, device=args.device, precision=precisions[0],
                               points_per_batch=points[0], frames_per_batch=frames[0])
            overhead = bench.overhead(config, args.warmup, args.repeat)
            sets = ", ".join(f"{r:.4f}" for r in overhead["set_ratios"])
            print(f"instrumentation overhead ({config.label()}): on {overhead['on_ms_median']:.2f} ms, "
                  f"off {overhead['off_ms_median']:.2f} ms, ratio {overhead['ratio']:.4f}, the median of "
                  f"{overhead['sets']} alternating sets ({sets}) (target <= {OVERHEAD_TARGET:.2f}, "
                  f"{int(overhead['runs_each'])} runs each way per set)")
        else:
            try:
                bench.sweep(precisions, points, frames, args.warmup, args.repeat,
                            on_row=writer.row_done if writer is not None else None)
            except KeyboardInterrupt:
                _interrupted(bench, writer)
                raise
            print(format_table(bench.rows))
        if args.diagnose and bench.reports:
            from engine.analysis.analyse import analyse_many
            from engine.analysis.rules import format_findings

            print("\nfindings:")
            print(format_findings(list(analyse_many(bench.reports).findings)))
        if writer is not None:
            path = writer.finish(overhead)
            print(f"trackscope bench: wrote {path}", file=sys.stderr)
    finally:
        bench.close()
    failed = [r.config.label() for r in bench.reports if isinstance(r.capture, dict) and r.capture.get("error")]
    if args.deep and failed:
        print(f"trackscope bench: the deep capture failed for {', '.join(failed)} (exit {DEEP_FAILED_EXIT})",
              file=sys.stderr)
        return DEEP_FAILED_EXIT
    return 0


def _interrupted(bench: Bench, writer: BenchWriter | None) -> None:
    """Ctrl-C during the sweep: the table so far, and where the finished configurations are kept."""
    finished = sum(1 for r in bench.rows if r.ms_median is not None)
    if bench.rows:
        print(format_table(bench.rows))
    if writer is not None and bench.rows:
        print(f"trackscope bench: interrupted; {finished} finished configuration(s) kept in {writer.path}",
              file=sys.stderr)
