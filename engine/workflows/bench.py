"""`trackscope bench`: a tracker over precisions x points-per-batch x frames-per-batch, like an inference
benchmark table (ms per run, frames/s, speedup over fp32, peak memory, accuracy or divergence from fp32).

Each configuration: warm-up runs, then repeated runs, each a full Session; the telemetry sampler runs
across all of them; a RunRecorder turns the events into the configuration's report (the cold first
warm-up run is kept as the report's cold run, the other warm-up runs are dropped). ``--overhead``
measures what stage timing plus telemetry cost: the same configuration with both on and both off,
alternating in blocks, in ``OVERHEAD_SETS`` sets; each set's ratio of the medians, and the median of those.

Beside each configuration's session runs the tracker is also called alone, in this process and thread
(``engine.workflows.direct``): the row's and the report's direct reference, and the session/direct ratio
("vs direct") that says what trackscope's own path costs. ``direct=False`` (``--no-direct``) skips it.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import re
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from engine.analysis.tradeoff import speedup_over
from engine.core.config import PRECISIONS, RunConfig, parse_precisions
from engine.core.errors import UserError
from engine.core.units import ms_value
from engine.report.parts import Accuracy
from engine.report.schema import BenchFile, Report
from engine.run.events import Started
from engine.run.session import Failed, Finished, Session
from engine.trackers.corrtrack.fused import status_text as fused_status_text

DEFAULT_PRECISIONS = ",".join(PRECISIONS)
DEFAULT_POINTS_PER_BATCH = "256,1024"
DEFAULT_FRAMES_PER_BATCH = "16"
DEFAULT_WARMUP = 2
DEFAULT_REPEAT = 10
DEFAULT_GRID = 8  # queries when the video has no queries sidecar
RANDOM_POINTS_SEED = 0
PERCENTILES = (10, 90)
NOISY_SPREAD = 1.5  # p90/p10 of the timed runs above this is flagged in the table
OVERHEAD_TARGET = 1.03  # issue target: instrumentation within 3 %
OVERHEAD_BLOCK = 5  # runs per on/off block
OVERHEAD_SETS = 3  # independent on/off sets; the overhead is the median of their ratios
SAMPLER_SETTLE_S = 0.15  # let the sampler take its first sample before timing
BENCH_FILE = "bench.json"


@dataclass
class Row:
    """One line of the bench table."""

    label: str
    precision: str
    points_per_batch: int
    frames_per_batch: int
    ms_median: float | None = None
    ms_p10: float | None = None
    ms_p90: float | None = None
    cold_ms: float | None = None
    frames_per_s: float | None = None
    speedup: float | None = None
    direct_ms_median: float | None = None  # the tracker called alone (engine.workflows.direct)
    vs_direct: float | None = None  # ms_median / direct_ms_median
    peak_memory_bytes: float | None = None
    memory_kind: str = ""
    accuracy: str = ""
    note: str = ""
    report_file: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "extra"} | self.extra


def _int_list(text: str, what: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise UserError(f"{what} must be comma-separated whole numbers, got {text!r}") from None
    if not values or min(values) < 1:
        raise UserError(f"{what} must list numbers of at least 1, got {text!r}")
    return values


def _precision_list(text: str) -> list[str]:
    return parse_precisions(text)  # fp32 first: the reference


@dataclass
class BenchInput:
    """The frames, queries and (optional) ground truth a bench runs on."""

    frames: np.ndarray  # uint8 [T, H, W, 3]
    queries: np.ndarray  # float32 [N, 3], frame pixels
    info: dict[str, Any]
    ground_truth: dict[str, np.ndarray] | None
    source: str


def load_input(args: argparse.Namespace) -> BenchInput:
    """Decode the video and find its queries and ground truth (sidecars of the sample by default)."""
    from engine.core.paths import SAMPLE_VIDEO, ground_truth_sidecar, queries_sidecar
    from engine.io.trackio import grid_queries, load_ground_truth, read_queries_csv
    from engine.io.video import open_video

    video = args.video or SAMPLE_VIDEO
    if args.video is None and not SAMPLE_VIDEO.exists():
        raise UserError(f"the bundled sample {SAMPLE_VIDEO} is missing", "give a VIDEO argument")
    with open_video(video) as reader:
        frames = reader.read()
        info = {**reader.info.to_dict(), "warnings": list(reader.warnings), "path": str(video)}
    width, height = int(info["width"]), int(info["height"])
    ground_truth = None
    if args.queries is not None:
        queries, source = read_queries_csv(args.queries), str(args.queries)
    elif args.grid is not None:
        queries, source = grid_queries(args.grid, width, height), f"grid {args.grid}x{args.grid}"
    elif args.points is not None:
        if args.points < 1:
            raise UserError(f"--points must be at least 1, got {args.points}")
        rng = np.random.default_rng(RANDOM_POINTS_SEED)
        xy = rng.uniform([0, 0], [width - 1, height - 1], size=(args.points, 2))
        queries = np.concatenate([np.zeros((args.points, 1)), xy], axis=1).astype(np.float32)
        source = f"{args.points} random points"
    elif queries_sidecar(video).exists():
        csv_path = queries_sidecar(video)
        queries, source = read_queries_csv(csv_path), str(csv_path)
        gt_path = ground_truth_sidecar(video)
        if gt_path.exists():
            ground_truth = load_ground_truth(gt_path)
            if len(ground_truth["tracks"]) != len(queries):
                ground_truth = None
    else:
        queries, source = grid_queries(DEFAULT_GRID, width, height), f"grid {DEFAULT_GRID}x{DEFAULT_GRID}"
    return BenchInput(frames, queries, info, ground_truth, source)  # the session converts pixels


def _percentile(values: list[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", text).strip("_")[:80] or "run"


def _accuracy_text(acc: Accuracy | None) -> str:
    if acc is None:
        return ""
    if acc.aj is not None:
        return f"AJ {acc.aj:.3f} / d {acc.delta_avg or float('nan'):.3f} / OA {acc.oa or 0:.3f}"
    if acc.mean_px is not None:
        return f"{acc.mean_px:.2f} px vs {acc.vs or 'fp32'}"
    return ""


class Bench:
    """Runs the sweep; ``rows`` and ``reports`` fill as it goes."""

    def __init__(self, data: BenchInput, tracker_name: str, device: str, timing: bool = True,
                 telemetry: bool = True, cost: bool = True, log=None, deep: bool = False,
                 trace_dir: Path | None = None, direct: bool = True):
        from engine.core.devices import cuda_uuid, resolve_device
        from engine.trackers import load_tracker

        self.data = data
        self.device = resolve_device(device)
        self.device_arg = device
        self.tracker = load_tracker(tracker_name)
        self.tracker_name = tracker_name
        self.timing = timing
        self.cost = cost
        self.direct = direct  # time the tracker called alone beside each configuration's session runs
        # called with (row, report) after a configuration's timed runs and before its deep capture (BenchWriter
        # writes the report then: a Ctrl-C, a hang or a crash in the capture keeps the timed numbers)
        self.before_capture: Callable[[Row, Report], Any] | None = None
        self.deep = deep  # one captured run per configuration after the timed ones
        self.trace_dir = trace_dir  # where the captures' traces go (the --out folder); None: no traces
        self.log = log or (lambda text: print(text, file=sys.stderr))
        self.sampler = None
        if telemetry:
            from engine.telemetry.sampler import TelemetrySampler

            # the GPU by UUID: NVML's index is not CUDA's under CUDA_VISIBLE_DEVICES (a Ray worker's one GPU)
            self.sampler = TelemetrySampler(device_index=self.device.index or 0, device_uuid=cuda_uuid(self.device))
        self.rows: list[Row] = []
        self.reports: list[Report] = []
        # per (points, frames) batch sizes: the fp32 row and its final (tracks, visible), unrounded
        self._fp32: dict[tuple[int, int], tuple[Row, tuple[np.ndarray, np.ndarray] | None]] = {}

    def _loader(self, name: str):
        return self.tracker

    def _session(self, config: RunConfig, timing: bool | None = None) -> Session:
        return Session(self.data.frames, self.data.queries, config, tracker=self.tracker,
                       tracker_loader=self._loader, timing=self.timing if timing is None else timing,
                       video_info=dict(self.data.info))

    def run_config(self, config: RunConfig, warmup: int, repeat: int) -> Row:
        """Warm-up and repeated runs of one configuration -> a table row (and a report)."""
        from engine.analysis.accuracy import run_accuracy
        from engine.core.precision import gate
        from engine.report.recorder import RunRecorder

        row = Row(config.label(), config.precision, config.points_per_batch, config.frames_per_batch)
        g = gate(config.precision, self.device)
        if not g.runnable:
            row.note = f"skipped: {g.reason}"
            return row
        recorder = RunRecorder(label=config.label())
        started: Started | None = None
        caller: Any = None  # the direct reference's caller, made after the warm-up (engine.workflows.direct)
        direct_failed = False

        def session_run(keep: bool) -> Finished | Failed:
            nonlocal started
            events = list(self._session(config).events())
            started = next((e for e in events if isinstance(e, Started)), started)
            if keep or any(getattr(e, "cold", False) for e in events):  # keep the cold run and the timed runs
                for event in events:
                    recorder.add(event)
            return events[-1]  # type: ignore[return-value]

        for _ in range(warmup):
            last = session_run(keep=False)
            if isinstance(last, Failed):
                row.note = f"failed ({last.kind}): {last.message}"
                return row
        from engine.workflows.direct import block_sizes, direct_blocks, direct_runs

        pairs = direct_blocks(repeat) if self.direct else 1
        direct_sizes = block_sizes(direct_runs(repeat), pairs) if self.direct else []
        for i, runs in enumerate(block_sizes(repeat, pairs)):
            entry = int(i > 0 and caller is not None)  # after a direct block: entered as it was (_direct_block)
            if entry:
                time.sleep(SAMPLER_SETTLE_S)
            for j in range(entry + runs):  # the entry's run untimed
                last = session_run(keep=j >= entry)
                if isinstance(last, Failed):
                    row.note = f"failed ({last.kind}): {last.message}"
                    return row
            if i < len(direct_sizes) and started is not None and not direct_failed:
                if caller is None:
                    caller = self._direct_caller(config, started, warmup, row)
                    direct_failed = caller is None
                if caller is not None and not self._direct_block(caller, direct_sizes[i], row):
                    caller, direct_failed = None, True
        direct = caller.reference() if caller is not None and caller.samples else None
        work = None
        if self.cost:
            from engine.analysis.cost import count_session_cost

            try:
                work = count_session_cost(self.data.frames, self.data.queries, config,
                                                 tracker=self.tracker, tracker_loader=self._loader,
                                                 video_info=dict(self.data.info))
            except Exception as exc:  # the counted pass is extra information, never fatal
                row.extra["cost_error"] = f"{type(exc).__name__}: {exc}"
        reference = None
        key = (config.points_per_batch, config.frames_per_batch)
        if self.data.ground_truth is None and config.precision != "fp32" and key in self._fp32:
            reference = self._fp32[key][1]  # None when the fp32 run finished nothing
        geometry = recorder.video.geometry
        accuracy = run_accuracy(recorder.final, geometry.source_size if geometry else None,
                                ground_truth=self.data.ground_truth, reference=reference,
                                reference_label="fp32" if reference is not None else None)
        report = recorder.build(telemetry=self.sampler, work=work, accuracy=accuracy,
                                queries_source=self.data.source)
        if direct is not None:
            report = dataclasses.replace(report, direct=direct)
        if self.deep:
            if self.before_capture is not None:  # the timed runs' report is on disk before the capture can fail
                self.before_capture(row, report)
            report = dataclasses.replace(report, capture=self._capture(config, report))
        self._fill_row(row, report, g.reason)
        if config.precision == "fp32":
            final = recorder.final
            self._fp32[key] = (row, (final.tracks, final.visible) if final is not None else None)
            row.speedup = 1.0
        elif key in self._fp32:  # the trade-off model's baseline: fp32 at the same batch sizes
            row.speedup = speedup_over(self._fp32[key][0].ms_median, row.ms_median)
        self.reports.append(report)
        return row

    def _direct_caller(self, config: RunConfig, started: Started, warmup: int, row: Row) -> Any:
        """The tracker alone on this configuration, inputs uploaded and ``warmup`` untimed calls made; None (and
        a note in the row's extra) when that fails. Called between session runs: the direct calls alternate
        with them in blocks (engine.workflows.direct.direct_blocks)."""
        import torch

        from engine.workflows.direct import DirectCaller

        try:
            caller = DirectCaller(self.tracker, self.data.frames,
                                  started.geometry.queries_to_frame(self.data.queries), precision=config.precision,
                                  points_per_batch=config.points_per_batch,
                                  frames_per_batch=config.frames_per_batch, device=torch.device(started.device))
        except (Exception, SystemExit) as exc:  # the reference is extra information, never fatal
            row.extra["direct_error"] = f"{type(exc).__name__}: {exc}"
            return None
        return caller if self._direct_block(caller, warmup, row, timed=False) else None

    def _direct_block(self, caller: Any, times: int, row: Row, timed: bool = True) -> bool:
        """``times`` direct calls with the sampler stopped (and restarted after); False on a failure.

        Direct and session blocks are entered alike: a ``SAMPLER_SETTLE_S`` pause, then one untimed call (the
        session block after this one: the pause, in which the restarted sampler takes its first sample, and one
        untimed session run; ``run_config``). A pause before one side only is a bias of its own (the blocks
        after a sleep start cold): scripts/overhead_protocol.py, measured in docs/records/session18/call_a.log.
        """
        sampler = self.sampler if self.sampler is not None and self.sampler.running else None
        if sampler is not None:
            sampler.stop()
        try:
            if timed:
                time.sleep(SAMPLER_SETTLE_S)
                caller.call(1, timed=False)
            caller.call(times, timed=timed)
            return True
        except (Exception, SystemExit) as exc:
            row.extra["direct_error"] = f"{type(exc).__name__}: {exc}"
            return False
        finally:
            if sampler is not None:
                sampler.start()

    def _capture(self, config: RunConfig, report: Report) -> dict[str, Any]:
        """The deep-capture pass of one configuration (after its timed runs); its summary for the report."""
        from engine.workflows.deep import deep_capture, format_capture, trace_path_for

        trace = trace_path_for(self.trace_dir / (_slug(config.label()) + ".json")) if self.trace_dir else None
        deep = deep_capture(lambda: self._session(config), precision=config.precision,
                            typical_wall_ms=report.totals.warm_ms_median, trace_path=trace,
                            rank=len(self.reports))  # a rank per trace: HTA reads a folder as ranks
        self.log(format_capture(deep))
        return deep.to_dict()

    def _fill_row(self, row: Row, report: Report, gate_reason: str) -> None:
        warm = [r.wall_ms for r in (report.warm_runs or report.finished_runs)]
        totals = report.totals
        row.ms_median = statistics.median(warm) if warm else None
        row.ms_p10, row.ms_p90 = (_percentile(warm, q) for q in PERCENTILES)
        row.cold_ms = totals.cold_ms
        row.frames_per_s = totals.frames_per_s
        row.peak_memory_bytes = totals.peak_memory_bytes
        row.memory_kind = "GPU peak" if row.peak_memory_bytes else ""
        if not row.peak_memory_bytes and totals.peak_rss_bytes:
            row.peak_memory_bytes, row.memory_kind = totals.peak_rss_bytes, "RSS"
        row.accuracy = _accuracy_text(report.accuracy)
        if report.direct is not None:
            row.direct_ms_median = report.direct.ms_median
            row.vs_direct = report.session_vs_direct
        notes = [gate_reason] if gate_reason else []
        if row.cold_ms and row.ms_median:
            notes.append(f"cold {row.cold_ms:.0f} ms")
        compiled = compile_note(report)
        if compiled:
            notes.append(compiled)
        kernels = fused_note(report)
        if kernels:
            notes.append(kernels)
        if row.ms_p10 and row.ms_p90 and row.ms_p90 / row.ms_p10 >= NOISY_SPREAD:
            notes.append(f"noisy: p90/p10 {row.ms_p90 / row.ms_p10:.1f}x (machine busy?)")
        row.note = "; ".join(notes)

    def sweep(self, precisions: list[str], points: list[int], frames: list[int], warmup: int,
              repeat: int, on_row: Callable[[Row], Any] | None = None) -> list[Row]:
        """All configurations, fp32 first within each batch-size pair; ``on_row(row)`` after each one."""
        if self.sampler is not None:
            self.sampler.start()
        try:
            for ppb in points:
                for fpb in frames:
                    for prec in precisions:
                        config = RunConfig(tracker=self.tracker_name, device=self.device_arg, precision=prec,
                                           points_per_batch=ppb, frames_per_batch=fpb)
                        self.log(f"trackscope bench: {config.label()} ...")
                        self.rows.append(self.run_config(config, warmup, repeat))
                        if on_row is not None:
                            on_row(self.rows[-1])
        finally:
            if self.sampler is not None:
                self.sampler.stop()
        return self.rows

    def overhead(self, config: RunConfig, warmup: int, repeat: int) -> dict[str, Any]:
        """Timing+telemetry on vs off: ``OVERHEAD_SETS`` sets of ``repeat`` runs each way, alternating in
        blocks of ``OVERHEAD_BLOCK``; each set's median(on) / median(off), and the median of those ratios
        (one slow stretch of a busy machine moves one set, not the answer).

        Instrumented blocks run with the sampler running throughout, as it does in the app, and timing on;
        plain blocks with both off. (Starting the sampler around every run would put its first, heaviest
        sample inside each short run: that is sampling at the run rate, not at the sampler's rate.) Both kinds
        of block are entered the same way (``_settled``): the pause that lets a started sampler take its first
        sample precedes every block, and every block's first run is untimed, so the pause's cost (clocks and
        caches gone cold while the host sleeps) lands on neither side. Sets alternate which kind goes first.
        """
        for _ in range(warmup):
            self._checked(self._session(config, timing=True).run())
        sets = [self._overhead_set(config, repeat, on_first=i % 2 == 0) for i in range(OVERHEAD_SETS)]
        set_ratios = [statistics.median(on) / statistics.median(off) for on, off in sets]
        on_all = [ms for on, _ in sets for ms in on]
        off_all = [ms for _, off in sets for ms in off]
        return {"on_ms_median": statistics.median(on_all), "off_ms_median": statistics.median(off_all),
                "ratio": statistics.median(set_ratios), "set_ratios": set_ratios, "sets": OVERHEAD_SETS,
                "runs_each": float(repeat), "target_ratio": OVERHEAD_TARGET}

    def _overhead_set(self, config: RunConfig, repeat: int, on_first: bool = True) -> tuple[list[float], list[float]]:
        """(instrumented wall ms, plain wall ms): ``repeat`` timed runs each, in alternating blocks."""
        on_ms: list[float] = []
        off_ms: list[float] = []
        block = 0
        while len(on_ms) < repeat or len(off_ms) < repeat:
            instrumented = (block % 2 == 0) == on_first
            runs = on_ms if instrumented else off_ms
            block += 1
            if len(runs) >= repeat:
                continue
            if instrumented and self.sampler is not None:
                self.sampler.start()
            try:
                self._settled(functools.partial(self._run_once, config, instrumented))
                for _ in range(min(OVERHEAD_BLOCK, repeat - len(runs))):
                    runs.append(self._checked(self._session(config, timing=instrumented).run()).wall_ms)
            finally:
                if self.sampler is not None:
                    self.sampler.stop()
        return on_ms, off_ms

    def _run_once(self, config: RunConfig, timing: bool) -> Finished | Failed:
        return self._session(config, timing=timing).run()

    def _settled(self, untimed_run: Callable[[], Any]) -> None:
        """The entry of every timed block: a ``SAMPLER_SETTLE_S`` pause (a sampler started just before takes its
        first, heaviest sample in it), then one untimed run (what the pause left cold warms up in it)."""
        time.sleep(SAMPLER_SETTLE_S)
        last = untimed_run()
        if isinstance(last, Failed):
            self._checked(last)

    @staticmethod
    def _checked(last: Finished | Failed) -> Finished:
        if isinstance(last, Failed):
            raise UserError(f"overhead run failed: {last.message}", last.suggestion)
        return last

    def close(self) -> None:
        if self.sampler is not None:
            self.sampler.close()


def compile_note(report: Report) -> str:
    """Which code the timed runs ran, when the tracker compiles: 'compiled (from cache), compile 1.2 s', or
    each label with its count of runs ('eager, compiling in the background x3; compiled x7'); '' when it
    does not compile (a report from before the labels: its True/False read as compiled/eager)."""
    details = report.tracker.details
    if details.get("compile_mode", "off") == "off" and details.get("compile") in (None, False, "eager"):
        return ""
    runs = report.warm_runs or report.finished_runs
    labels = [_compile_label(r.extra.get("compile", details.get("compile"))) for r in runs] or [
        _compile_label(details.get("compile"))]
    counts = {label: labels.count(label) for label in dict.fromkeys(labels)}
    text = "; ".join(label if len(counts) == 1 else f"{label} x{n}" for label, n in counts.items())
    seconds = next((r.extra["compile_s"] for r in reversed(runs) if "compile_s" in r.extra), details.get("compile_s"))
    return f"{text}, compile {seconds:.1f} s" if isinstance(seconds, (int, float)) else text


def fused_note(report: Report) -> str:
    """Whether a tracker's own fused kernels ran ('fused kernels', 'fused kernels off'), for a tracker that says
    (CorrTrack's ``fused_kernels``) and a run on a GPU; '' otherwise."""
    runs = report.warm_runs or report.finished_runs
    device = next((r.device for r in runs if r.device.startswith("cuda")), "")
    return fused_status_text(report.tracker.details, device, short=True)


def _compile_label(value: Any) -> str:
    if isinstance(value, bool):
        return "compiled" if value else "eager"
    return str(value) if value else "eager"


def _fmt(value: float | None, spec: str, empty: str = "-") -> str:
    return format(value, spec) if value is not None else empty


def _mem(value: float | None, kind: str) -> str:
    if not value:
        return "-"
    return f"{value / 2**20:.0f} MiB" + (" RSS" if kind == "RSS" else "")


TABLE_COLUMNS = ("config", "ms/run (p10-p90)", "frames/s", "speedup", "vs direct", "peak mem", "accuracy", "note")


def vs_direct_text(ratio: float | None, empty: str = "-", gap_ms: float | None = None) -> str:
    """A session/direct ratio as a cell: '1.02x', with the session's ms over the direct call's when given
    ('3.36x +2.0 ms': a short tracker's ratio is mostly the session's fixed cost per run, its upload, download and
    loop); ``empty`` when there is none."""
    if ratio is None:
        return empty
    return f"{ratio:.2f}x" + ("" if gap_ms is None else f" {gap_ms:+.1f} ms")


def format_table(rows: list[Row]) -> str:
    """The bench table as aligned text, one row per configuration."""
    cells = [list(TABLE_COLUMNS)]
    for r in rows:
        ms = "-" if r.ms_median is None else f"{ms_value(r.ms_median)} ({ms_value(r.ms_p10)}-{ms_value(r.ms_p90)})"
        speedup = "-" if r.speedup is None else f"{r.speedup:.2f}x"
        gap = (r.ms_median - r.direct_ms_median
               if r.ms_median is not None and r.direct_ms_median is not None else None)
        cells.append([r.label, ms, _fmt(r.frames_per_s, ".1f"), speedup, vs_direct_text(r.vs_direct, gap_ms=gap),
                      _mem(r.peak_memory_bytes, r.memory_kind),
                      r.accuracy or "-", r.note])
    widths = [max(len(row[i]) for row in cells) for i in range(len(TABLE_COLUMNS) - 1)]
    lines = []
    for j, row in enumerate(cells):
        lines.append(" | ".join(c.ljust(w) for c, w in zip(row[:-1], widths)) + " | " + row[-1])
        if j == 0:
            lines.append("-+-".join("-" * w for w in widths) + "-+-" + "-" * 4)
    return "\n".join(lines)


def planned_configurations(precisions: list[str], points: list[int], frames: list[int]) -> int:
    """How many configurations a sweep runs."""
    return len(precisions) * len(points) * len(frames)


class BenchWriter:
    """Writes a sweep into a folder as it goes: each finished configuration's report, then the bench file so far.

    After every configuration ``bench.json`` holds all the finished ones (``"complete": false`` until the
    sweep ends), so Ctrl-C, SIGTERM or a crash keeps them; every file is written atomically (the previous
    one survives an interrupted write). Reports hold measurements only: findings are derived on load.
    """

    def __init__(self, out: Path, bench: Bench, planned: int | None = None):
        self.out = Path(out)
        self.bench = bench
        self.planned = planned
        self.path = self.out / BENCH_FILE
        self._written: set[str] = set()

    def start(self) -> None:
        """Make the folder (before the first configuration runs: the deep traces go there too)."""
        try:
            self.out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UserError(f"--out {self.out}: cannot make the folder: {exc.strerror or exc}") from None

    def timed_report(self, row: Row, report: Report) -> Path:
        """A configuration's report before its deep capture (rewritten with the capture by ``row_done``)."""
        from engine.report.files import save

        self.out.mkdir(parents=True, exist_ok=True)
        return save(report, self.out / (_slug(row.label) + ".json"))

    def row_done(self, row: Row) -> Path:
        """The report of ``row`` (when it finished) and the bench file so far."""
        self._write_reports()
        return self._write_bench(None, complete=False)

    def finish(self, overhead: dict[str, Any] | None, complete: bool = True) -> Path:
        """The last reports and the bench file; -> its path."""
        self._write_reports()
        return self._write_bench(overhead, complete)

    def _write_reports(self) -> None:
        from engine.report.files import save

        self.out.mkdir(parents=True, exist_ok=True)
        by_label = {r.label: r for r in self.bench.reports}
        for row in self.bench.rows:
            report = by_label.get(row.label)
            if report is None or row.label in self._written:
                continue
            name = _slug(row.label) + ".json"
            save(report, self.out / name)
            row.report_file = name
            self._written.add(row.label)

    def _write_bench(self, overhead: dict[str, Any] | None, complete: bool) -> Path:
        from engine.report.files import save
        from engine.report.parts import Environment
        from engine.telemetry.environment import capture_environment

        bench = self.bench
        env = (bench.reports[0].environment if bench.reports
               else Environment.from_dict(capture_environment(bench.device)))
        extra: dict[str, Any] = {"complete": complete}
        if self.planned is not None:
            extra["configurations_planned"] = self.planned
        data = BenchFile(reports=tuple(bench.reports), environment=env, table=tuple(r.to_dict() for r in bench.rows),
                         overhead=overhead, extra=extra)
        return save(data, self.path)


def write_outputs(out: Path, bench: Bench, overhead: dict[str, Any] | None) -> Path:
    """Per-configuration reports and the bench file into ``out`` at once; returns the bench file's path."""
    writer = BenchWriter(out, bench)
    writer.start()
    return writer.finish(overhead)
