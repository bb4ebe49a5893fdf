"""The run report and the bench file as typed, frozen values: read once (any version, migrated), written as v2.

``Report.from_dict`` runs decoded JSON through ``report_migrate.migrate`` to REPORT_VERSION, then reads
every part with its type checked (engine.report.parts); a problem raises ReportError naming the field's
path. ``to_dict`` writes version 2: measurements only (no roofline, no findings as current; the
findings of older files are ``recorded_findings``). The accessors here are the one owner of questions
readers keep asking a report: its typical run, the device it ran on, its telemetry, its tracks.
"""

from __future__ import annotations

import functools
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from engine.core.config import RunConfig
from engine.core.errors import ReportError
from engine.report.capture_part import CapturePart
from engine.report.fields import Fields, fail, to_json
from engine.report.migrate import BENCH_FORMAT, REPORT_FORMAT, REPORT_VERSION, file_version, migrate
from engine.report.parts import (
    MAX_RUNS,
    MAX_STAGES,
    Accuracy,
    Batch,
    CpuInfo,
    DirectReference,
    Environment,
    GpuInfo,
    RecordedFinding,
    Run,
    RunError,
    StageWork,
    TelemetryWindow,
    Totals,
    TrackerInfo,
    Tracks,
    VideoInfo,
    read_config,
    read_findings,
)

if TYPE_CHECKING:
    from engine.capture.summary import CaptureSummary

#: reports one bench file may hold, and rows of its table
MAX_REPORTS = 10_000
MAX_ROWS = 100_000
#: the device name of a report made without a GPU
CPU_NAME = "CPU"


def _check_format(data: Any, expected: str, path: str) -> tuple[dict[str, Any], int]:
    """(data migrated to REPORT_VERSION, the version it had) for data of the expected format."""
    what = "trackscope bench file" if expected == BENCH_FORMAT else "trackscope report"
    where = path or "the report"
    if not isinstance(data, dict):
        raise ReportError(f"{where} is not a {what} (found {type(data).__name__}, not an object)")
    fmt = data.get("format")
    if fmt != expected:
        hint = ""
        if fmt == BENCH_FORMAT:
            hint = " (a bench file: open it with load_reports or load_bench)"
        elif fmt == REPORT_FORMAT:
            hint = " (a single report: open it with load_report)"
        raise ReportError(f"{where} has format {fmt!r}, expected {expected!r}{hint}")
    version = file_version(data, where)
    return migrate(data, where), version


@dataclass(frozen=True)
class Report:
    """One configuration's runs and what was measured around them, as recorded."""

    environment: Environment
    config: RunConfig
    stages: tuple[str, ...]
    runs: tuple[Run, ...]
    totals: Totals
    created: str | None = None  # ISO 8601 UTC
    label: str = ""
    queries_source: str | None = None
    recorded_device_name: str = ""  # JSON "device_name"; see the device_name property
    precision_gate: str = ""
    video: VideoInfo = field(default_factory=VideoInfo)
    tracker: TrackerInfo = field(default_factory=TrackerInfo)
    telemetry: TelemetryWindow | None = None
    work: dict[str, StageWork] = field(default_factory=dict)
    accuracy: Accuracy | None = None
    tracks: Tracks | None = None
    recorded_findings: tuple[RecordedFinding, ...] = ()
    capture: dict[str, Any] | None = None  # a deep capture's JSON as read or given; typed: capture_part
    direct: DirectReference | None = None  # the tracker called alone beside the runs (bench); None: not measured
    extra: dict[str, Any] = field(default_factory=dict)
    #: the version the data had before migration (not part of equality; to_dict always writes REPORT_VERSION)
    read_version: int = field(default=REPORT_VERSION, compare=False)

    # -- reading and writing -------------------------------------------------------------------
    @classmethod
    def from_dict(cls, data: Any, path: str = "") -> Report:
        """A report from decoded JSON of any version this code reads; ReportError naming the bad field."""
        data, read_version = _check_format(data, REPORT_FORMAT, path)
        f = Fields(data, path)
        f.raw("format")
        f.raw("version")
        telemetry, accuracy, tracks, direct = (f.obj(k, required=False)
                                               for k in ("telemetry", "accuracy", "tracks", "direct"))
        work = f.obj("work", required=False)
        video, tracker = f.obj("video", required=False), f.obj("tracker", required=False)
        env = f.obj("environment")
        assert env is not None  # required: Fields.obj raised otherwise
        return cls(
            environment=Environment.from_dict(env.data, env.path),
            config=read_config(f.raw("config", required=True), f.at("config")),
            stages=f.strings("stages", MAX_STAGES, required=True),
            runs=tuple(Run.from_dict(r, p) for p, r in f.items("runs", MAX_RUNS, required=True)),
            totals=Totals.from_dict(f.raw("totals", required=True), f.at("totals")),
            created=f.opt_string("created"), label=f.string("label", ""), queries_source=f.opt_string("queries_source"),
            recorded_device_name=f.string("device_name", ""), precision_gate=f.string("precision_gate", ""),
            video=VideoInfo.from_dict(video.data, video.path) if video else VideoInfo(),
            tracker=TrackerInfo.from_dict(tracker.data, tracker.path) if tracker else TrackerInfo(),
            telemetry=TelemetryWindow.from_dict(telemetry.data, telemetry.path) if telemetry else None,
            work={name: StageWork.from_dict(v, work.at(name)) for name, v in work.data.items()} if work else {},
            accuracy=Accuracy.from_dict(accuracy.data, accuracy.path) if accuracy else None,
            tracks=Tracks.from_dict(tracks.data, tracks.path) if tracks else None,
            recorded_findings=read_findings(f), capture=f.opaque_map("capture"),
            direct=DirectReference.from_dict(direct.data, direct.path) if direct else None, extra=f.rest(),
            read_version=read_version,
        )

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON of version REPORT_VERSION (arrays as lists, NaN as null, coordinates to 0.01 px)."""
        return {
            "format": REPORT_FORMAT, "version": REPORT_VERSION, "created": self.created, "label": self.label,
            "queries_source": self.queries_source, "environment": self.environment.to_dict(),
            "config": self.config.to_dict(), "device_name": self.recorded_device_name,
            "precision_gate": self.precision_gate,
            "video": self.video.to_dict(), "tracker": self.tracker.to_dict(), "stages": list(self.stages),
            "runs": [r.to_dict() for r in self.runs], "totals": self.totals.to_dict(),
            "telemetry": self.telemetry.to_dict() if self.telemetry else None,
            "work": {name: w.to_dict() for name, w in self.work.items()},
            "accuracy": self.accuracy.to_dict() if self.accuracy else None,
            "tracks": self.tracks.to_dict() if self.tracks else None,
            "recorded_findings": [x.to_dict() for x in self.recorded_findings],
            "capture": self.capture, "direct": self.direct.to_dict() if self.direct else None, **self.extra,
        }

    @functools.cached_property
    def capture_part(self) -> CapturePart | None:
        """The deep capture as a typed part (its summary, the capture pass's facts), read once; None without one.
        A capture this version cannot read is a part whose ``summary`` is None and ``read_error`` says why."""
        return CapturePart.from_dict(self.capture) if self.capture is not None else None

    @property
    def capture_summary(self) -> CaptureSummary | None:
        """The deep capture's typed summary; None without a capture or with one this version cannot read."""
        part = self.capture_part
        return part.summary if part is not None else None

    # -- runs ----------------------------------------------------------------------------------
    @property
    def finished_runs(self) -> tuple[Run, ...]:
        return tuple(r for r in self.runs if r.finished)

    @property
    def warm_runs(self) -> tuple[Run, ...]:
        """Finished runs that were not cold (no compile, no first-time setup)."""
        return tuple(r for r in self.finished_runs if not r.cold)

    @property
    def cold_run(self) -> Run | None:
        """The first finished cold run, or None."""
        return next((r for r in self.finished_runs if r.cold), None)

    @property
    def typical_run_ms(self) -> float | None:
        """Wall ms of the typical run: the warm median (totals, else the warm runs), else the cold run; None
        when neither."""
        if self.totals.warm_ms_median is not None:
            return self.totals.warm_ms_median
        warm = self.warm_runs
        if warm:
            return float(statistics.median(r.wall_ms for r in warm))
        if self.totals.cold_ms is not None:
            return self.totals.cold_ms
        cold = self.cold_run
        return cold.wall_ms if cold else None

    @property
    def stage_ms(self) -> dict[str, float]:
        """Per-stage ms of the typical run (totals, else the warm runs' median, else the cold run)."""
        if self.totals.stage_ms:
            return dict(self.totals.stage_ms)
        basis = self.warm_runs or ((self.cold_run,) if self.cold_run else ())
        names = sorted({name for r in basis for name in r.stage_ms})
        return {n: float(statistics.median(r.stage_ms.get(n, 0.0) for r in basis)) for n in names}

    @property
    def session_vs_direct(self) -> float | None:
        """The typical run over the direct call's median (1.0: the session adds nothing); None without a
        direct reference."""
        return self.direct.ratio(self.typical_run_ms) if self.direct else None

    # -- device --------------------------------------------------------------------------------
    @property
    def gpu(self) -> GpuInfo | None:
        return self.environment.gpu

    @property
    def device(self) -> str:
        """The torch device string it ran on ("cuda:0", "cpu"; the configured one when not recorded)."""
        return self.environment.device or self.config.device

    @property
    def device_name(self) -> str:
        """The device's name: the recorded one, else the GPU's, else "CPU"."""
        if self.recorded_device_name:
            return self.recorded_device_name
        return self.gpu.name if self.gpu and self.gpu.name else CPU_NAME

    @property
    def capability(self) -> tuple[int, int] | None:
        """The GPU's compute capability (major, minor), None on the CPU or when not recorded."""
        return self.gpu.compute_capability if self.gpu else None

    @property
    def is_gpu(self) -> bool:
        return self.gpu is not None and not self.device.startswith("cpu")

    @property
    def precision(self) -> str:
        return self.config.precision

    def short_label(self) -> str:
        """Its label (else tracker + precision + batch sizes) and the device: 'corrtrack fp32 p256 f16 on H200'."""
        return f"{self.label or self.config.label()} on {self.device_name}"

    # -- arrays --------------------------------------------------------------------------------
    def telemetry_series(self, key: str) -> np.ndarray:
        """The samples of one telemetry metric, [S] or [S, cores] (NaN where missing); empty when absent."""
        return self.telemetry.series(key) if self.telemetry else np.zeros(0)

    def tracks_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """(queries float32 [N, 3], tracks float32 [N, T, 2] NaN where none, visible bool [N, T]), source px."""
        if self.tracks is None:
            return None
        return self.tracks.queries, self.tracks.tracks, self.tracks.visible


def as_report(value: Report | Mapping[str, Any], path: str = "") -> Report:
    """A Report as is; a mapping (decoded JSON of any version, or one built in code with numpy values)
    parsed once, at an analysis entry point's boundary."""
    return value if isinstance(value, Report) else Report.from_dict(to_json(dict(value)), path)


@dataclass(frozen=True)
class BenchFile:
    """A bench sweep: the reports of its configurations, its table, the instrumentation overhead."""

    reports: tuple[Report, ...]
    environment: Environment | None = None
    table: tuple[dict[str, Any], ...] = ()  # one plain row per configuration (engine.bench.Row.to_dict)
    overhead: dict[str, Any] | None = None
    recorded_findings: tuple[RecordedFinding, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)
    read_version: int = field(default=REPORT_VERSION, compare=False)

    @classmethod
    def from_dict(cls, data: Any, path: str = "") -> BenchFile:
        data, read_version = _check_format(data, BENCH_FORMAT, path)
        f = Fields(data, path)
        f.raw("format")
        f.raw("version")
        env = f.obj("environment", required=False)
        table = []
        for p, row in f.items("table", MAX_ROWS):
            if not isinstance(row, dict):
                raise fail(p, "an object", row)
            table.append(Fields(row, p).rest())
        return cls(reports=tuple(Report.from_dict(r, p) for p, r in f.items("reports", MAX_REPORTS, required=True)),
                   environment=Environment.from_dict(env.data, env.path) if env else None, table=tuple(table),
                   overhead=f.opaque_map("overhead"), recorded_findings=read_findings(f), extra=f.rest(),
                   read_version=read_version)

    def to_dict(self) -> dict[str, Any]:
        return {"format": BENCH_FORMAT, "version": REPORT_VERSION,
                "environment": self.environment.to_dict() if self.environment else None,
                "reports": [r.to_dict() for r in self.reports], "table": [dict(row) for row in self.table],
                "overhead": self.overhead, "recorded_findings": [x.to_dict() for x in self.recorded_findings],
                **self.extra}


__all__ = [
    "BENCH_FORMAT", "CPU_NAME", "REPORT_FORMAT", "REPORT_VERSION", "Accuracy", "Batch", "BenchFile", "CpuInfo",
    "DirectReference", "Environment", "GpuInfo", "RecordedFinding", "Report", "Run", "RunError", "StageWork",
    "TelemetryWindow", "Totals", "TrackerInfo", "Tracks", "VideoInfo", "as_report", "migrate",
]
