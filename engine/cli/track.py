"""`trackscope track VIDEO (--queries Q.csv | --grid K) --out OUT.npz`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from engine.capture.profile import CaptureLimits
from engine.cli.common import (
    add_run_arguments,
    check_distinct_outputs,
    check_output_path,
    config_from_args,
)
from engine.cli.compile_flag import add_compile_argument, apply_compile_flag
from engine.cli.progress import LiveBar
from engine.core.errors import UserError
from engine.core.precision import gate
from engine.io.trackio import grid_queries, read_queries_csv, save_tracks
from engine.run.session import BatchDone, Failed, Finished, Session, Started
from engine.workflows.deep import DEEP_FAILED_EXIT


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("video", type=Path, help="video file (mp4/avi/mov/mkv) or folder of images")
    q = p.add_mutually_exclusive_group(required=True)
    q.add_argument("--queries", type=Path, metavar="Q.csv", help="queries CSV with header t,x,y")
    q.add_argument("--grid", type=int, metavar="K", help="a K x K grid of queries on frame 0")
    p.add_argument("--out", type=Path, required=True, metavar="OUT.npz", help="tracks NPZ (or .csv)")
    p.add_argument("--report", type=Path, metavar="REPORT.json", help="also write a run report")
    p.add_argument("--max-frames", type=int, metavar="N",
                   help="track only the first N frames (long videos: decoded frames and the tracker's memory grow "
                        "with the frame count)")
    p.add_argument("--deep", action="store_true",
                   help="after the run, capture one more warm run under torch.profiler: per stage and module, "
                        "kernels, syncs, copies, findings; into the report, trace beside it (REPORT.trace.json.gz). "
                        f"The report is written before the capture; the capture stops recording at "
                        f"{CaptureLimits().describe()} (and says so); exit {DEEP_FAILED_EXIT} when it failed")
    add_run_arguments(p)
    add_compile_argument(p)


def run(args: argparse.Namespace) -> int:
    from engine.core.devices import resolve_device
    from engine.io.frames import open_frames
    from engine.run.device_memory import check_run_device_memory
    from engine.run.memory import MemoryEstimate, check_host_memory, estimate_host_bytes
    from engine.trackers import load_tracker

    config = config_from_args(args)
    apply_compile_flag(args)
    check_output_path(args.out, "--out", (".npz", ".csv"))  # before any work: exit 2 with the reason
    if args.report is not None:
        check_output_path(args.report, "--report")
    trace = None
    if args.deep:  # the capture's trace goes beside the report (or the tracks): checked now, not after the runs
        from engine.workflows.deep import trace_path_for

        trace = check_output_path(trace_path_for(args.report or args.out), "--deep trace")
    check_distinct_outputs(("--out", args.out), ("--report", args.report), ("--deep trace", trace))
    if args.max_frames is not None and args.max_frames < 1:
        raise UserError(f"--max-frames must be at least 1, got {args.max_frames}")
    queries = read_queries_csv(args.queries) if args.queries is not None else None

    def host_estimate(num_frames: int, width: int, height: int, num_queries: int) -> MemoryEstimate:
        return estimate_host_bytes(num_frames, width, height, num_queries, config.tracker,
                                   on_cpu=resolve_device(config.device).type == "cpu",
                                   points_per_batch=config.points_per_batch,
                                   frames_per_batch=config.frames_per_batch, precision=config.precision)

    store = open_frames(args.video, budget_bytes=None, max_side=None, stop=args.max_frames)
    try:  # decoded at the reader's output size, exactly as reader.read() would: the tracks do not change
        reader_info = store.info
        assert reader_info is not None
        if queries is None:
            queries = grid_queries(args.grid, reader_info.width, reader_info.height)
        width, height = store.size
        expected = store.progress.total  # the container's count (or --max-frames)
        check_host_memory(host_estimate(expected, width, height, len(queries)), str(args.video))
        with LiveBar(expected, "decoding", "frame") as bar:
            for step in store.decode():
                bar.update_to(step.decoded)
            bar.update_to(store.decoded)
    finally:
        store.close()
    frames, geometry = store.frames, store.geometry
    info = {**reader_info.to_dict(), "warnings": list(store.warnings)}
    info["num_frames"] = len(frames)
    check_host_memory(host_estimate(len(frames), width, height, len(queries)), str(args.video), frames_held=True)
    check_run_device_memory(config.tracker, resolve_device(config.device), str(args.video),
                            num_frames=len(frames), width=width, height=height, num_queries=len(queries),
                            points_per_batch=config.points_per_batch, frames_per_batch=config.frames_per_batch,
                            precision=config.precision)
    for w in info["warnings"]:
        print(f"trackscope track: warning: {w}", file=sys.stderr)
    # --deep captures more runs of the same tracker instance: its modules are the capture's roots
    tracker = load_tracker(config.tracker) if args.deep or getattr(args, "compile", None) == "background" else None
    session = Session(frames, queries, config, tracker=tracker, video_info=info, geometry=geometry)
    recorder = None
    if args.report is not None:
        from engine.report.recorder import RunRecorder

        recorder = RunRecorder()
    progress = LiveBar(len(queries), "tracking", "pt")
    last = None
    for event in session.events():
        if recorder is not None:
            recorder.add(event)
        if isinstance(event, Started):
            print(f"trackscope track: {event.tracker.get('name', config.tracker)} on {event.device_name}, "
                  f"{config.precision}, {event.num_queries} points x {info['num_frames']} frames "
                  f"({info['width']}x{info['height']})", file=sys.stderr)
            if event.device_note:
                print(f"trackscope track: note: {event.device_note}", file=sys.stderr)
            if event.tracker.get("compile_mode", "off") != "off":
                print(f"trackscope track: {event.tracker.get('compile')}", file=sys.stderr)
            # a mode the device refuses fails next, its error giving the same reason: say it once
            if event.precision_gate and gate(config.precision, event.device).runnable:
                print(f"trackscope track: warning: {event.precision_gate}", file=sys.stderr)
        elif isinstance(event, BatchDone):
            progress.update_to(event.stop, f"last batch {event.wall_ms:.0f} ms")
        last = event
    progress.close()
    if isinstance(last, Failed):
        if last.kind == "internal":
            print(last.details, file=sys.stderr)
            raise RuntimeError(last.message)
        raise UserError(last.message, last.suggestion)
    assert isinstance(last, Finished)
    save_tracks(args.out, last.tracks, last.visible, queries)
    switch = getattr(tracker, "switch", None)
    if switch is not None and switch.busy:  # its cache serves the next start: let it finish, not die at exit
        print("trackscope track: waiting for the background compile to finish (cached for the next start)",
              file=sys.stderr)
        switch.wait()
    print(f"trackscope track: wrote {args.out} ({len(queries)} points, {last.wall_ms:.0f} ms)", file=sys.stderr)
    if recorder is not None:  # the timed run's report first: a Ctrl-C, hang or crash in the capture keeps it
        from engine.report.files import save

        save(recorder.build(), args.report)
        print(f"trackscope track: wrote {args.report}", file=sys.stderr)
    if not args.deep:
        return 0
    from engine.workflows.deep import deep_capture, format_capture, trace_path_for

    deep = deep_capture(lambda: Session(frames, queries, config, tracker=tracker, video_info=info,
                                        geometry=geometry),
                        precision=config.precision, typical_wall_ms=None,
                        trace_path=trace_path_for(args.report or args.out))
    print(format_capture(deep), file=sys.stderr)
    if recorder is not None:
        save(recorder.build(capture=deep.to_dict()), args.report)
        print(f"trackscope track: wrote {args.report} with its deep capture", file=sys.stderr)
    if deep.error:
        print(f"trackscope track: the deep capture failed (exit {DEEP_FAILED_EXIT}); the tracks and the timed "
              "run's report were written", file=sys.stderr)
        return DEEP_FAILED_EXIT
    return 0
