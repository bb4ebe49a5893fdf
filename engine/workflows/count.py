"""The cost model of any report, counted on demand: its tracker rebuilt and run once under the counter.

``trackscope bench`` counts each configuration's work (FLOPs, bytes, ops per stage) in an extra eager
pass; a live run or a ``track --report`` file has none, so the roofline and the what-if had nothing to
stand on. ``count_work`` rebuilds the report's tracker for the report's configuration (on the CPU unless
told otherwise), feeds it inputs of the report's shape and counts one pass with
``engine.analysis.cost.count_session_cost`` (cached per configuration and shape, like bench's).

Inputs: the report's own video frames when its file is still there and decodes to the recorded size,
else a constructed video of the same shape (frames x height x width, seeded noise). The counted FLOPs
and bytes depend on the shapes (frames, frame size, points, batch sizes), not on the pixel values, for
trackers whose work does not branch on the data (CorrTrack, LK's pyramids); queries are the report's own
when it kept its tracks, else the same number spread over the first frame.

Counting on another device than the run's changes what some ops run in: fp16 is refused on the CPU,
so an fp16 run is counted under bf16 (same element size) and its stages labelled fp16; CPU autocast
casts other ops than CUDA autocast (CorrTrack bf16: refine's bytes 26 % fewer counted on the CPU than
on the H200; its FLOPs, and the fp32 compute stages' FLOPs and bytes, within 0.3 %); a quantised mode's
unquantised ops run in fp32 there (bf16/fp16 autocast on a GPU), so their bytes are an upper bound;
host-device copies move nothing. ``with_counted_work`` records these facts in the report's
``extra["work_counted"]`` and the what-if lists them among its assumptions.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Callable

import numpy as np

from engine.analysis.whatif import COUNTED_KEY, is_cold_only
from engine.core.errors import UserError
from engine.report.parts import StageWork
from engine.report.schema import Report
from engine.workflows.report_inputs import (
    INPUTS_CONSTRUCTED,
    INPUTS_VIDEO,
    constructed_frames,
    report_queries,
    report_shape,
    report_video_frames,
)

#: precision modes a CPU refuses, and the one counted in their place (same element size)
CPU_STAND_IN = {"fp16": "bf16"}
@dataclasses.dataclass(frozen=True)
class CountedWork:
    """A report's per-stage work and how it was counted (device, inputs, precision stand-in)."""

    work: dict[str, StageWork]
    device: str
    inputs: str
    shape: tuple[int, int, int]  # frames, height, width as tracked
    num_points: int
    counted_precision: str
    notes: tuple[str, ...] = ()

    def provenance(self) -> dict[str, Any]:
        """Plain JSON for the report's extra: what the what-if says about the counted pass."""
        return {"device": self.device, "inputs": self.inputs, "shape": list(self.shape),
                "num_points": self.num_points, "counted_precision": self.counted_precision,
                "notes": list(self.notes)}


def count_work(report: Report, device: str = "cpu", frames: np.ndarray | None = None) -> CountedWork:
    """Count ``report``'s per-stage work: its tracker rebuilt on ``device`` and run once under the counter.

    frames: the run's frames as tracked, uint8 [T, H, W, 3] (else read from the report's video, else
    constructed). UserError with a plain reason when the tracker cannot be rebuilt or the pass fails.
    """
    from engine.analysis.cost import count_session_cost
    from engine.core.devices import resolve_device
    from engine.core.errors import TrackerError
    from engine.run.memory import check_host_memory, estimate_host_bytes
    from engine.trackers import load_tracker

    num_frames, geometry = report_shape(report)
    shape = (num_frames, geometry.frame_height, geometry.frame_width)
    queries = report_queries(report, geometry)
    config = report.config
    name = config.tracker
    check_host_memory(estimate_host_bytes(num_frames, geometry.frame_width, geometry.frame_height, len(queries),
                                          name), f"counting the cost of {report.short_label()!r}")
    inputs = INPUTS_VIDEO
    if frames is None or tuple(np.shape(frames)[:3]) != shape:
        frames = report_video_frames(report, num_frames, geometry)
    if frames is None:
        frames, inputs = constructed_frames(*shape), INPUTS_CONSTRUCTED
    resolved = str(resolve_device(device))
    notes: list[str] = []
    counted = config.precision
    if resolved == "cpu" and counted in CPU_STAND_IN:
        counted = CPU_STAND_IN[counted]
        notes.append(f"{config.precision} is refused on the CPU: counted under {counted} (same element size), "
                     f"its stages labelled {config.precision}")
    if resolved == "cpu" and report.is_gpu:
        notes.append(f"counted on the CPU for a run on {report.device_name}: host-device copies (upload, "
                     "download) move no bytes there")
    if resolved == "cpu" and counted in ("bf16", "fp16") and report.is_gpu:
        notes.append(f"CPU autocast casts other ops than CUDA autocast does: a {config.precision} stage's bytes "
                     "may differ from the GPU's (CorrTrack bf16: refine counted 26 % fewer on the CPU than on "
                     "the H200), which can move a stage across the latency line")
    if resolved == "cpu" and counted in ("int8", "fp8") and report.is_gpu:
        notes.append(f"{counted} counted on the CPU: its unquantised ops ran in fp32 there (bf16/fp16 on a GPU), "
                     "so their bytes are an upper bound, and int8 GEMMs there are fp32 GEMMs of int8 values")
    try:
        tracker = load_tracker(name)
    except TrackerError as exc:
        raise UserError(f"cannot rebuild tracker {name!r} to count the cost of {report.short_label()!r}: {exc.message}",
                        exc.suggestion or "make the tracker importable here, or record the run with "
                        "trackscope bench, which counts the cost as it runs") from exc
    run_config = config.with_changes(device=resolved, precision=counted)
    info = {"width": geometry.source_width, "height": geometry.source_height, "num_frames": num_frames,
            "name": report.video.name}
    try:
        work = count_session_cost(frames, queries, run_config, tracker=tracker, video_info=info)
    except UserError:
        raise
    except Exception as exc:  # a tracker's own failure: a plain message, never a traceback
        raise UserError(f"counting the cost of {report.short_label()!r} failed: {type(exc).__name__}: {exc}") \
            from exc
    if counted != config.precision:
        work = {k: dataclasses.replace(w, precision=config.precision if w.precision == counted else w.precision)
                for k, w in work.items()}
    return CountedWork(work=dict(work), device=resolved, inputs=inputs, shape=shape, num_points=len(queries),
                       counted_precision=counted, notes=tuple(notes))


def with_counted_work(report: Report, device: str = "cpu", frames: np.ndarray | None = None,
                      log: Callable[[str], None] | None = None) -> Report:
    """``report`` with its work counted on demand (as it is when it has some), how in ``extra``.

    log: told one line before the counted pass starts (the CLI prints it)."""
    if report.work:
        return report
    if log is not None:
        log(f"counting the cost model of {report.short_label()!r} on {device} (one pass of its tracker)")
    counted = count_work(report, device=device, frames=frames)
    return dataclasses.replace(report, work=counted.work, extra={**report.extra, COUNTED_KEY: counted.provenance()})



def ready_for_whatif(report: Report, device: str = "cpu") -> Report:
    """``report`` with what a what-if needs: warm runs (timed on its own device when it has only a cold run,
    engine.workflows.warm_runs) and its work (counted on ``device`` when it has none)."""
    from engine.workflows.warm_runs import with_warm_runs

    return with_counted_work(with_warm_runs(report), device=device)


# -- in a child process ------------------------------------------------------------------------------------
#: how the child process names itself on stderr; the parent takes the line after it as the reason
CHILD_PREFIX = "trackscope count: error: "
#: how long a child may count before it is stopped, s (a counted pass is one run of the tracker)
CHILD_TIMEOUT_S = 600.0


class CountProcess:
    """Counts a report's work in a child Python process (``python -m engine.workflows.count``).

    Why a process: under the counter's dispatch mode every torch op is called from Python and holds the
    GIL for its whole duration, so a count in a thread of the app froze its event loop for as long as
    the longest op (measured: 0.45 s on CorrTrack's backbone on 2 CPU cores, seconds on a large video).
    A child process leaves the app's interpreter alone, can be stopped at once, and a plugin that crashes
    the interpreter takes only the child down. The report travels as JSON files, never pickled.
    """

    def __init__(self, device: str = "cpu", timeout_s: float = CHILD_TIMEOUT_S):
        self.device = device
        self.timeout_s = timeout_s
        self._proc: Any = None
        self._stopped = False

    def stop(self) -> None:
        """Stop the child if it is running (thread-safe: the app calls it on shutdown)."""
        self._stopped = True
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.kill()

    def run(self, report: Report) -> Report:
        """``report`` with its work counted in the child (as it is when it has some and warm runs), and warm runs
        timed there when it has only a cold run; UserError on failure."""
        import os
        import subprocess
        import sys
        import tempfile

        from engine.report.files import load_report, save

        if report.work and not is_cold_only(report):
            return report
        with tempfile.TemporaryDirectory(prefix="trackscope-count-") as folder:
            source, target = Path(folder) / "report.json", Path(folder) / "counted.json"
            save(report, source)
            if self._stopped:
                raise UserError("counting the cost model was stopped")
            # the child imports what this process can: the same module search path (a plugin's folder too)
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "engine.workflows.count", str(source), str(target), "--device", self.device],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
            try:
                _, err = self._proc.communicate(timeout=self.timeout_s)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.communicate()
                raise UserError(f"counting the cost model took over {self.timeout_s:.0f} s and was stopped",
                                "count it with trackscope compare REPORT --what-if GPU") from None
            code = self._proc.returncode
            if code != 0:
                raise UserError(_child_reason(err, code, self._stopped))
            counted = load_report(target)
        return dataclasses.replace(counted, tracks=report.tracks)  # the same run, its arrays as they were


def _child_reason(stderr: str, code: int, stopped: bool) -> str:
    """The one-line reason a child gave, else what is known."""
    if stopped:
        return "counting the cost model was stopped"
    for line in reversed(stderr.splitlines()):
        if line.startswith(CHILD_PREFIX):
            return line.removeprefix(CHILD_PREFIX)
    last = next((x for x in reversed(stderr.splitlines()) if x.strip()), "")
    return f"the counting process ended with code {code}" + (f": {last.strip()}" if last else "")


def main(argv: list[str] | None = None) -> int:
    """``python -m engine.workflows.count REPORT.json OUT.json [--device D]``: the child's side.

    A report with only a cold run has warm runs timed first, on its own device (engine.workflows.warm_runs):
    the what-if needs them, and the child is on the same machine as the app."""
    import argparse
    import sys

    from engine.report.files import load_report, save

    parser = argparse.ArgumentParser(prog="python -m engine.workflows.count")
    parser.add_argument("report")
    parser.add_argument("out")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)
    try:
        save(ready_for_whatif(load_report(args.report), device=args.device), args.out)
    except UserError as exc:
        print(f"{CHILD_PREFIX}{exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 - a tracker's own failure: one line for the app
        print(f"{CHILD_PREFIX}{type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
