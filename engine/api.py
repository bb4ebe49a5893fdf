"""The engine as the app sees it: the only engine module that gui/ imports.

A flat list of re-exports, grouped by topic, plus a few small functions the app needs and the engine
did not have in one place (device choices, gates per device, run titles). When an engine module moves,
only this file changes.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

import torch

# isort: off
# (grouped by topic, not alphabetically)
# -- errors -------------------------------------------------------------------------------------------------
from engine.core.errors import QueryError, ReportError, TrackerError, UserError, VideoError
from engine.core.outputs import check_output_path
from engine.core.atomic import atomic_path

# -- run configuration, precision modes and their hardware gates, devices ---------------------------------------
from engine.core.config import (
    CONFIG_KEYS,
    DEFAULT_TUNABLE,
    MAX_FRAMES_PER_BATCH,
    MAX_POINTS_PER_BATCH,
    PRECISIONS,
    ConfigChange,
    ConfigError,
    RunConfig,
)
from engine.core.precision import Gate, gate
from engine.core.devices import device_name, resolve_device

# -- paths ----------------------------------------------------------------------------------------------------
from engine.core.paths import SAMPLE_VIDEO, ground_truth_sidecar, queries_sidecar, resources_dir
from engine.core.units import GIB, MIB, format_bytes, format_ms, format_time_ratio, ms_value, ratio_value

# -- video, queries and tracks files -----------------------------------------------------------------------------
from engine.io.frames import APP_BUDGET_BYTES, DecodeProgress, FrameStore, open_frames
from engine.io.geometry import VideoGeometry
from engine.io.video import VIDEO_EXTENSIONS, WRITER_FOURCC, open_video, write_video
from engine.io.trackio import grid_queries, load_ground_truth, load_tracks, read_queries_csv, save_tracks

# -- trackers and their stages ----------------------------------------------------------------------------------
from engine.core.stages import BUILTIN_STAGES
from engine.trackers import TrackerCache, available_trackers, load_tracker
from engine.trackers.lk import STAGES as LK_STAGES
from engine.trackers.base import PreparedVideo, RunContext, Tracker, TrackResult, track_arrays
from engine.trackers.compiled_switch import COMPILE_MODES, compile_in_flight, compile_status_text
from engine.trackers.corrtrack.fused import status_text as fused_status_text
from engine.core.flags import CORRTRACK_COMPILE

# -- the session and its events -----------------------------------------------------------------------------------
from engine.run.session import BatchDone, Failed, Finished, Session, Started

# -- telemetry: the sampler thread, its ring buffers, GPU specs ----------------------------------------------------
from engine.telemetry import specs
from engine.telemetry.sampler import THREAD_NAME as SAMPLER_THREAD_NAME
from engine.telemetry.sampler import RingBuffers, TelemetrySampler, clock_reason_mask, decode_clock_reasons

# -- run reports: the typed report (measurements only), recording, loading, saving ----------------------------------
from engine.report.schema import BenchFile, Report, as_report
from engine.report.parts import Accuracy, RecordedFinding
from engine.report.parts import VideoInfo as ReportVideo  # the report's video (engine.io.video has the reader's)
from engine.report.recorder import RunRecorder
from engine.report.files import load_any, load_bench, load_report, load_reports, save

# -- analysis on load: roofline and findings, what-if, compare, metrics, the precision trade-off ---------------------
from engine.analysis.analyse import Analysis, analyse, analyse_many
from engine.analysis.accuracy import run_accuracy
from engine.analysis.facts import Finding
from engine.analysis.roofline import Cost, StageRoofline
from engine.analysis.whatif import project
from engine.analysis.whatif import mode_label as whatif_mode_label
from engine.analysis.whatif_by_batch import project_by_batch
from engine.analysis.compare import compare_reports
from engine.analysis.diff import Diff, DiffRow, SpecSplit, WaterfallStep, diff_runs, format_diff
from engine.report.projection import Projection
from engine.report.capture_part import CapturePart
from engine.report.finding import as_finding
from engine.analysis.metrics import Divergence, divergence, tapvid_metrics
from engine.analysis.tradeoff import (
    BASELINE_PRECISION,
    MEMORY_DEVICE_PEAK,
    MEMORY_PROCESS_RSS,
    PRECISION_UNUSED,
    TradeoffRow,
    TradeoffTable,
    compare_rows,
    find_baseline,
    row_from_report,
    speedup_over,
    tunable_settings,
    values_taken,
)

# -- deep capture: the profiler pass, its summary, findings and timeline ------------------------------------------
from engine.capture import CaptureSummary, diagnose_capture
from engine.capture.attribution import forward_body
from engine.capture.timeline import Lane, Markers, TimelineData, load_timeline
from engine.workflows.deep import DeepCapture, deep_capture, trace_path_for

# -- the cost model counted on demand (a report without one: a live run's, a track --report file) -------------
from engine.workflows.count import CountedWork, CountProcess, count_work, with_counted_work
from engine.analysis.tradeoff import accuracy_axis as tradeoff_accuracy_axis

# -- accuracy files (eval/cycle --json) beside the trade-off's runs: held-out AJ and real-clip cycle error ----------
from engine.report.accuracy_file import CYCLE_KIND, EVAL_KIND, AccuracyFile, load_accuracy_file
from engine.analysis.tradeoff_accuracy import (
    AccuracyOnlyRow,
    AccuracySource,
    CycleAccuracy,
    HeldOutAccuracy,
    TradeoffAccuracy,
    load_tradeoff_file,
)

# -- the diff of two runs: its model, which the app's diff view draws (``diff_runs`` fills it) ------------------
from engine.analysis.diff import LEVELS as DIFF_LEVELS
# -- fleet folders (trackscope fleet): the index, its entries as plain report paths; no Ray needed to read them ----
from engine.fleet.index import FleetEntry, FleetIndex, load_index
from engine.fleet.index import report_path as fleet_report_path

# isort: on

#: the file names write_video can write (the overlaid-video export checks its path against them first)
VIDEO_WRITE_SUFFIXES = tuple(WRITER_FOURCC)


def device_choices() -> list[str]:
    """What the device menu offers: auto, cpu, and each CUDA device torch sees."""
    out = ["auto", "cpu"]
    if torch.cuda.is_available():
        out += [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    return out


class DeviceGates(NamedTuple):
    """The device a menu choice resolves to ('cpu', 'cuda:0') and the gate of every precision mode on it."""

    device: str
    gates: dict[str, Gate]


def precision_gates(device: str) -> DeviceGates | None:
    """The gates of every precision mode on ``device`` (a menu choice), or None when it cannot be resolved."""
    try:
        resolved = resolve_device(device)
    except (UserError, RuntimeError):
        return None
    return DeviceGates(str(resolved), {mode: gate(mode, resolved) for mode in PRECISIONS})


def build_report(recorder: RunRecorder, telemetry: Any = None,
                 ground_truth: Mapping[str, Any] | None = None, keep_tracks: bool = True) -> Report:
    """A recorder's Report, its run graded against ground truth when given (measurements only: analyse it)."""
    geometry = recorder.video.geometry
    accuracy = run_accuracy(recorder.final, geometry.source_size if geometry else None, ground_truth=ground_truth)
    return recorder.build(telemetry=telemetry, accuracy=accuracy, keep_tracks=keep_tracks)


def sample_video_path() -> Path | None:
    """The bundled sample video, or None when it is not installed."""
    path = resources_dir() / SAMPLE_VIDEO.name
    return path if path.is_file() else None


def run_title(config: RunConfig | Mapping[str, Any], tracker: Mapping[str, Any] | None = None) -> str:
    """A run's short title: its tracker and only the settings that tracker uses ('lk', 'corrtrack fp16 p256 f16').

    tracker: the tracker's description (``Started.tracker`` or a report's ``tracker``), whose ``tunable``
    lists the settings it uses; all of them when it does not say.
    """
    if not isinstance(config, RunConfig):
        fields = dict(config)
        try:
            config = RunConfig.from_dict({k: v for k, v in fields.items() if k in CONFIG_KEYS})  # old extras
        except (TypeError, ValueError):  # a report's odd config: its tracker's name is title enough
            return str(fields.get("tracker", "?"))
    return config.label((tracker or {}).get("tunable", DEFAULT_TUNABLE))


__all__ = [
    "CountedWork", "CountProcess", "count_work", "with_counted_work", "whatif_mode_label",
    "CaptureSummary", "DeepCapture", "Lane", "Markers", "TimelineData", "deep_capture", "diagnose_capture",
    "forward_body", "load_timeline", "trace_path_for",
    "BASELINE_PRECISION", "BUILTIN_STAGES", "DEFAULT_TUNABLE", "GIB", "LK_STAGES", "MEMORY_DEVICE_PEAK", "MIB",
    "MAX_FRAMES_PER_BATCH", "MAX_POINTS_PER_BATCH", "MEMORY_PROCESS_RSS", "PRECISIONS", "PRECISION_UNUSED",
    "SAMPLER_THREAD_NAME", "SAMPLE_VIDEO", "VIDEO_EXTENSIONS", "VIDEO_WRITE_SUFFIXES", "atomic_path",
    "check_output_path",
    "Accuracy", "Analysis", "BatchDone", "BenchFile", "ConfigChange", "ConfigError", "Cost", "DeviceGates",
    "Divergence", "Failed", "Finding",
    "Finished", "Gate", "PreparedVideo", "QueryError", "RecordedFinding", "Report", "ReportError", "ReportVideo",
    "RingBuffers", "RunConfig", "RunContext", "RunRecorder", "Session", "StageRoofline", "Started",
    "TelemetrySampler", "TrackResult", "Tracker", "TrackerCache", "TrackerError", "TradeoffRow", "TradeoffTable",
    "UserError", "VideoError", "VideoGeometry",
    "analyse", "analyse_many", "as_report", "available_trackers", "build_report", "clock_reason_mask",
    "compare_reports", "compare_rows", "decode_clock_reasons", "device_choices", "format_bytes", "format_ms",
    "format_time_ratio", "ratio_value",
    "ms_value", "device_name", "divergence", "find_baseline", "gate", "grid_queries", "ground_truth_sidecar",
    "load_any", "load_bench", "load_ground_truth", "load_report", "load_reports", "load_tracker", "load_tracks",
    "APP_BUDGET_BYTES", "DecodeProgress", "FrameStore", "open_frames",
    "open_video", "precision_gates", "project", "project_by_batch", "queries_sidecar", "read_queries_csv",
    "resolve_device",
    "resources_dir", "row_from_report", "run_accuracy", "run_title", "sample_video_path", "save", "save_tracks",
    "tunable_settings", "values_taken",
    "Diff", "DiffRow", "Projection", "SpecSplit", "WaterfallStep", "diff_runs", "format_diff",
    "CapturePart", "as_finding",
    "specs", "speedup_over", "tapvid_metrics", "track_arrays", "tradeoff_accuracy_axis", "write_video",
    "DIFF_LEVELS",
    "FleetEntry", "FleetIndex", "fleet_report_path", "load_index",
    "COMPILE_MODES", "CORRTRACK_COMPILE", "compile_in_flight", "compile_status_text", "fused_status_text",
    "CYCLE_KIND", "EVAL_KIND", "AccuracyFile", "AccuracyOnlyRow", "AccuracySource", "CycleAccuracy", "HeldOutAccuracy",
    "TradeoffAccuracy", "load_accuracy_file", "load_tradeoff_file",
]
