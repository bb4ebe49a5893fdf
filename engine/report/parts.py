"""The parts of a run report as typed, frozen values (environment, video, runs, totals, telemetry, ...).

Each part's ``from_dict(data, path)`` checks the type of every field it reads and raises ReportError
naming the field's path (``runs[3].batches[0].stage_ms.backbone should be a number, found 'abc'``); keys
it does not know are kept in its ``extra`` (or ``details``) and written back by ``to_dict``, so nothing
in a file is lost. Arrays (tracks, telemetry) stay numpy inside; coordinates are in SOURCE pixels.
The whole report is engine.report.schema.Report.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from engine.core.config import RunConfig
from engine.core.errors import ReportError
from engine.core.units import ratio_of
from engine.io.geometry import VideoGeometry
from engine.report.fields import Fields, bool_array, fail, integer_value, number_array, number_value, to_json
from engine.report.finding import Finding

#: most runs, batches per run, stages, findings, warnings a report may hold
MAX_RUNS = 100_000
MAX_BATCHES = 100_000
MAX_STAGES = 10_000
MAX_FINDINGS = 10_000
MAX_WARNINGS = 10_000
#: decimals kept for track coordinates and queries (pixels) when writing
TRACK_DECIMALS = 2
RUN_STATUSES = ("running", "finished", "cancelled", "failed")


def _without_none(data: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in data.items() if v is not None}


class _ArrayEq:
    """Equality through to_dict, for values holding numpy arrays (whose == is elementwise)."""

    __hash__ = None  # type: ignore[assignment]

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and self.to_dict() == other.to_dict()  # type: ignore[attr-defined]


# -- environment --------------------------------------------------------------------------------
@dataclass(frozen=True)
class GpuInfo:
    """The GPU a report was made on; NVML's static facts beyond these stay in ``extra``."""

    name: str
    compute_capability: tuple[int, int] | None = None
    memory_total_bytes: int | None = None
    multiprocessor_count: int | None = None
    index: int = 0
    peak_bandwidth_gbps: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: Any, path: str = "gpu") -> GpuInfo:
        f = Fields(data, path)
        return cls(name=f.string("name", ""), compute_capability=_capability(f, "compute_capability"),
                   memory_total_bytes=f.opt_integer("memory_total_bytes", 0),
                   multiprocessor_count=f.opt_integer("multiprocessor_count", 0), index=f.integer("index", 0, 0),
                   peak_bandwidth_gbps=f.opt_number("peak_bandwidth_gbps", 0.0), extra=f.rest())

    def to_dict(self) -> dict[str, Any]:
        cc = list(self.compute_capability) if self.compute_capability else None
        return {"name": self.name, "compute_capability": cc, "memory_total_bytes": self.memory_total_bytes,
                "multiprocessor_count": self.multiprocessor_count, "index": self.index,
                "peak_bandwidth_gbps": self.peak_bandwidth_gbps, **self.extra}


def _capability(f: Fields, key: str) -> tuple[int, int] | None:
    """A compute capability [major, minor] as a tuple, None when missing or null."""
    items = list(f.items(key, 2 + 1))
    if not items:
        return None
    if len(items) != 2:
        raise fail(f.at(key), "[major, minor]", f.data[key])
    major, minor = (integer_value(v, p, minimum=0) for p, v in items)
    return major, minor


@dataclass(frozen=True)
class CpuInfo:
    """The CPU a report was made on."""

    model: str = ""
    cores: int | None = None
    physical_cores: int | None = None
    torch_threads: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: Any, path: str = "cpu") -> CpuInfo:
        f = Fields(data, path)
        return cls(model=f.string("model", ""), cores=f.opt_integer("cores", 0),
                   physical_cores=f.opt_integer("physical_cores", 0), torch_threads=f.opt_integer("torch_threads", 0),
                   extra=f.rest())

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "cores": self.cores, "physical_cores": self.physical_cores,
                "torch_threads": self.torch_threads, **self.extra}


_ENV_STRINGS = ("hostname", "os", "python", "torch", "cuda", "driver", "cuda_driver_version", "device")


@dataclass(frozen=True)
class Environment:
    """The machine a run happened on: software versions, device, GPU (None on the CPU), CPU."""

    hostname: str | None = None
    os: str | None = None
    python: str | None = None
    torch: str | None = None
    cuda: str | None = None
    driver: str | None = None
    cuda_driver_version: str | None = None
    device: str | None = None
    cudnn: int | None = None
    gpu: GpuInfo | None = None
    cpu: CpuInfo | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: Any, path: str = "environment") -> Environment:
        f = Fields(data, path)
        strings = {key: f.opt_string(key) for key in _ENV_STRINGS}
        gpu, cpu = f.obj("gpu", required=False), f.obj("cpu", required=False)
        return cls(**strings, cudnn=f.opt_integer("cudnn"),
                   gpu=GpuInfo.from_dict(gpu.data, gpu.path) if gpu else None,
                   cpu=CpuInfo.from_dict(cpu.data, cpu.path) if cpu else None, extra=f.rest())

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {key: getattr(self, key) for key in _ENV_STRINGS}
        out.update({"cudnn": self.cudnn, "gpu": self.gpu.to_dict() if self.gpu else None,
                    "cpu": self.cpu.to_dict() if self.cpu else None, **self.extra})
        return out


# -- configuration ------------------------------------------------------------------------------
def read_config(data: Any, path: str) -> RunConfig:
    """A RunConfig from JSON: each known field type-checked against its default's type; unknown keys dropped."""
    f = Fields(data, path)
    values: dict[str, Any] = {}
    for spec in dataclasses.fields(RunConfig):
        if spec.name not in f.data or f.data[spec.name] is None:
            continue
        if isinstance(spec.default, bool):
            values[spec.name] = f.boolean(spec.name, spec.default)
        elif isinstance(spec.default, int):
            values[spec.name] = f.integer(spec.name, minimum=1)
        elif isinstance(spec.default, float):
            values[spec.name] = f.number(spec.name)
        else:
            values[spec.name] = f.string(spec.name)
    try:
        return RunConfig(**values)
    except (TypeError, ValueError) as exc:
        raise ReportError(f"{path} is not a valid run configuration: {exc}") from None


def _opt_config(f: Fields, key: str) -> RunConfig | None:
    value = f.raw(key)
    return None if value is None else read_config(value, f.at(key))


# -- video and tracker --------------------------------------------------------------------------
@dataclass(frozen=True)
class VideoInfo:
    """The video a report was made on; geometry is None when the report does not say its size."""

    path: str | None = None
    name: str = ""
    num_frames: int = 0
    fps: float | None = None
    kind: str = ""
    warnings: tuple[str, ...] = ()
    geometry: VideoGeometry | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: Any, path: str = "video") -> VideoInfo:
        f = Fields(data, path)
        return cls(path=f.opt_string("path"), name=f.string("name", ""), num_frames=f.integer("num_frames", 0, 0),
                   fps=f.opt_number("fps", 0.0), kind=f.string("kind", ""),
                   warnings=f.strings("warnings", MAX_WARNINGS),
                   geometry=_geometry(f.obj("geometry", required=False)), extra=f.rest())

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "name": self.name, "num_frames": self.num_frames, "fps": self.fps,
                "kind": self.kind, "warnings": list(self.warnings),
                "geometry": self.geometry.to_dict() if self.geometry else None, **self.extra}


def _geometry(f: Fields | None) -> VideoGeometry | None:
    """v2 video.geometry; a missing frame size means the source size."""
    if f is None:
        return None
    width, height = f.integer("source_width", minimum=1), f.integer("source_height", minimum=1)
    frame_w, frame_h = f.opt_integer("frame_width", 1), f.opt_integer("frame_height", 1)
    return VideoGeometry(width, height, frame_w or width, frame_h or height)


@dataclass(frozen=True)
class TrackerInfo:
    """The tracker's name and stages; everything else it describes (weights, config, ...) in ``details``."""

    name: str = ""
    stages: tuple[str, ...] = ()
    details: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: Any, path: str = "tracker") -> TrackerInfo:
        f = Fields(data, path)
        return cls(name=f.string("name", ""), stages=f.strings("stages", MAX_STAGES), details=f.rest())

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "stages": list(self.stages), **self.details}


# -- runs ---------------------------------------------------------------------------------------
def _stage_ms(f: Fields, key: str = "stage_ms") -> dict[str, float]:
    return {k: v for k, v in f.number_map(key).items() if v is not None}


@dataclass(frozen=True)
class Batch:
    """One batch of points of a run: points start..stop, its wall and per-stage ms."""

    index: int
    start: int
    stop: int
    t: float | None  # seconds since the run started, when the batch ended
    wall_ms: float
    stage_ms: dict[str, float]
    cold: bool = False
    prepared: bool = False
    config: RunConfig | None = None
    peak_memory_bytes: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def num_points(self) -> int:
        return self.stop - self.start

    @classmethod
    def from_dict(cls, data: Any, path: str = "batch") -> Batch:
        f = Fields(data, path)
        start, stop = f.integer("start", 0, 0), f.integer("stop", 0, 0)
        if stop < start:
            raise fail(f.at("stop"), f"a whole number >= start ({start})", stop)
        return cls(index=f.integer("index", 0, 0), start=start, stop=stop, t=f.opt_number("t"),
                   wall_ms=f.number("wall_ms", minimum=0.0), stage_ms=_stage_ms(f), cold=f.boolean("cold", False),
                   prepared=f.boolean("prepared", False), config=_opt_config(f, "config"),
                   peak_memory_bytes=f.opt_integer("peak_memory_bytes", 0), extra=f.rest())

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "start": self.start, "stop": self.stop, "t": self.t, "wall_ms": self.wall_ms,
                "stage_ms": dict(self.stage_ms), "cold": self.cold, "prepared": self.prepared,
                "config": self.config.to_dict() if self.config else None,
                "peak_memory_bytes": self.peak_memory_bytes, **self.extra}


@dataclass(frozen=True)
class RunError:
    """Why a run failed: the message, a suggested fix, the error's kind."""

    message: str
    suggestion: str | None = None
    kind: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: Any, path: str = "error") -> RunError:
        f = Fields(data, path)
        return cls(message=f.string("message", ""), suggestion=f.opt_string("suggestion"), kind=f.opt_string("kind"),
                   extra=f.rest())

    def to_dict(self) -> dict[str, Any]:
        return {"message": self.message, "suggestion": self.suggestion, "kind": self.kind, **self.extra}


@dataclass(frozen=True)
class Run:
    """One run of the configuration over all points (Started .. Finished/Failed)."""

    index: int
    cold: bool
    status: str  # running | finished | cancelled | failed
    start_s: float  # seconds since the first run started
    wall_ms: float  # sum of the batches' wall ms
    end_to_end_ms: float | None
    stage_ms: dict[str, float]
    batches: tuple[Batch, ...]
    error: RunError | None = None
    config: RunConfig | None = None
    device: str = ""
    device_name: str = ""
    precision_gate: str = ""
    num_batches: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def finished(self) -> bool:
        return self.status == "finished"

    @classmethod
    def from_dict(cls, data: Any, path: str = "run") -> Run:
        f = Fields(data, path)
        error = f.obj("error", required=False)
        return cls(index=f.integer("index", 0, 0), cold=f.boolean("cold", False),
                   status=f.choice("status", RUN_STATUSES, "finished"), start_s=f.number("start_s", 0.0),
                   wall_ms=f.number("wall_ms", 0.0, minimum=0.0), end_to_end_ms=f.opt_number("end_to_end_ms", 0.0),
                   stage_ms=_stage_ms(f),
                   batches=tuple(Batch.from_dict(b, p) for p, b in f.items("batches", MAX_BATCHES, required=True)),
                   error=RunError.from_dict(error.data, error.path) if error else None,
                   config=_opt_config(f, "config"), device=f.string("device", ""),
                   device_name=f.string("device_name", ""), precision_gate=f.string("precision_gate", ""),
                   num_batches=f.opt_integer("num_batches", 0), extra=f.rest())

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "cold": self.cold, "status": self.status, "start_s": self.start_s,
                "wall_ms": self.wall_ms, "end_to_end_ms": self.end_to_end_ms, "stage_ms": dict(self.stage_ms),
                "batches": [b.to_dict() for b in self.batches],
                "error": self.error.to_dict() if self.error else None,
                "config": self.config.to_dict() if self.config else None, "device": self.device,
                "device_name": self.device_name, "precision_gate": self.precision_gate,
                "num_batches": self.num_batches, **self.extra}


@dataclass(frozen=True)
class Totals:
    """Summary of the runs: warm median and cold wall ms, per-stage ms of the typical run, rates, peaks."""

    warm_ms_median: float | None = None
    warm_ms_min: float | None = None
    cold_ms: float | None = None
    stage_ms: dict[str, float] = field(default_factory=dict)
    stage_ms_basis: str = "none"  # "warm median" | "cold" | "none"
    frames_per_s: float | None = None
    point_frames_per_s: float | None = None
    peak_memory_bytes: int | None = None
    peak_rss_bytes: float | None = None
    num_points: int = 0
    num_frames: int = 0
    num_runs: int = 0
    num_warm_runs: int = 0
    num_failed_runs: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: Any, path: str = "totals") -> Totals:
        f = Fields(data, path)
        return cls(warm_ms_median=f.opt_number("warm_ms_median", 0.0), warm_ms_min=f.opt_number("warm_ms_min", 0.0),
                   cold_ms=f.opt_number("cold_ms", 0.0), num_points=f.integer("num_points", 0, 0),
                   num_frames=f.integer("num_frames", 0, 0), num_runs=f.integer("num_runs", 0, 0),
                   num_warm_runs=f.integer("num_warm_runs", 0, 0), num_failed_runs=f.integer("num_failed_runs", 0, 0),
                   stage_ms=_stage_ms(f), stage_ms_basis=f.string("stage_ms_basis", "none"),
                   frames_per_s=f.opt_number("frames_per_s", 0.0),
                   point_frames_per_s=f.opt_number("point_frames_per_s", 0.0),
                   peak_memory_bytes=f.opt_integer("peak_memory_bytes", 0),
                   peak_rss_bytes=f.opt_number("peak_rss_bytes", 0.0), extra=f.rest())

    def to_dict(self) -> dict[str, Any]:
        out = {k.name: getattr(self, k.name) for k in dataclasses.fields(self) if k.name != "extra"}
        out["stage_ms"] = dict(self.stage_ms)
        return {**out, **self.extra}


# -- measurements beside the runs ---------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class TelemetryWindow(_ArrayEq):
    """Telemetry samples over the runs: t float64 [S] (s since the first run started), metrics [S] or [S, cores]."""

    t: np.ndarray
    metrics: dict[str, np.ndarray]
    availability: dict[str, str] = field(default_factory=dict)  # metric -> why it is missing ("" = present)
    static: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    def series(self, key: str) -> np.ndarray:
        """The samples of one metric (NaN where missing); empty when the window lacks it."""
        return self.metrics.get(key, np.zeros(0))

    @classmethod
    def from_dict(cls, data: Any, path: str = "telemetry") -> TelemetryWindow:
        f = Fields(data, path)
        t = number_array(f.raw("t", required=True), f.at("t"), 1)
        sub = f.obj("metrics", required=False)
        metrics = {}
        if sub is not None:
            for key, values in sub.data.items():
                where = sub.at(key)
                ndim = 2 if isinstance(values, list) and values and isinstance(values[0], list) else 1
                series = number_array(values, where, ndim)
                if series.shape[0] != t.shape[0]:
                    raise fail(where, f"{t.shape[0]} samples (as many as t)", values)
                metrics[key] = series
        return cls(t=t, metrics=metrics, availability=f.string_map("availability"),
                   static=f.opaque_map("static") or {}, extra=f.rest())

    def to_dict(self) -> dict[str, Any]:
        return {"t": to_json(self.t), "metrics": {k: to_json(v) for k, v in self.metrics.items()},
                "availability": dict(self.availability), "static": self.static, **self.extra}


@dataclass(frozen=True)
class StageWork:
    """Counted work of one stage (a measurement of the counting pass): FLOPs, bytes in+out of every op, ops."""

    flops: int
    bytes: int
    ops: int = 0
    precision: str | None = None  # the dtype most of its FLOPs ran at
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: Any, path: str = "work") -> StageWork:
        f = Fields(data, path)
        return cls(flops=f.integer("flops", minimum=0), bytes=f.integer("bytes", minimum=0),
                   ops=f.integer("ops", 0, 0), precision=f.opt_string("precision"), extra=f.rest())

    def to_dict(self) -> dict[str, Any]:
        return {"flops": self.flops, "bytes": self.bytes, "ops": self.ops, "precision": self.precision,
                **self.extra}


#: most direct-call samples a report may hold
MAX_DIRECT_SAMPLES = 10_000


@dataclass(frozen=True)
class DirectReference:
    """The tracker called alone in the same process, beside the session runs: no session, guard, hooks,
    stage timer or telemetry, inputs already on the device. ``samples_ms`` are its warm runs' wall ms."""

    samples_ms: tuple[float, ...]
    warmup: int = 0  # untimed calls before the samples
    what: str = ""  # what was called: "the plugin's callable", "prepare + track"
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ms_median(self) -> float | None:
        """Median ms of the samples; None when there are none."""
        return float(np.median(self.samples_ms)) if self.samples_ms else None

    @property
    def num_runs(self) -> int:
        return len(self.samples_ms)

    def ratio(self, session_ms: float | None) -> float | None:
        """``session_ms`` over the direct median ("1.02x" slower through the session); None without both."""
        return ratio_of(session_ms, self.ms_median)

    @classmethod
    def from_dict(cls, data: Any, path: str = "direct") -> DirectReference:
        f = Fields(data, path)
        samples = tuple(number_value(v, p, minimum=0.0) for p, v in f.items("samples_ms", MAX_DIRECT_SAMPLES))
        f.raw("ms_median")  # written for readers of the JSON; derived from the samples here
        f.raw("num_runs")
        return cls(samples_ms=samples, warmup=f.integer("warmup", 0, 0), what=f.string("what", ""), extra=f.rest())

    def to_dict(self) -> dict[str, Any]:
        return {"ms_median": self.ms_median, "num_runs": self.num_runs, "samples_ms": list(self.samples_ms),
                "warmup": self.warmup, "what": self.what, **self.extra}


_ACCURACY_NUMBERS = ("aj", "delta_avg", "oa", "mean_px", "max_px", "visibility_agreement")


@dataclass(frozen=True)
class Accuracy:
    """Tracking quality: TAP-Vid scores vs ground truth, or divergence (px, visibility) vs a reference run."""

    vs: str = ""
    aj: float | None = None
    delta_avg: float | None = None
    oa: float | None = None
    mean_px: float | None = None
    max_px: float | None = None
    visibility_agreement: float | None = None
    jaccard_by_thr: dict[str, float | None] = field(default_factory=dict)  # threshold px (as text) -> value
    pts_within_by_thr: dict[str, float | None] = field(default_factory=dict)
    num_points: int | None = None
    num_eval: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: Any, path: str = "accuracy") -> Accuracy:
        f = Fields(data, path)
        return cls(vs=f.string("vs", ""), **{k: f.opt_number(k) for k in _ACCURACY_NUMBERS},
                   jaccard_by_thr=f.number_map("jaccard_by_thr", nullable=True),
                   pts_within_by_thr=f.number_map("pts_within_by_thr", nullable=True),
                   num_points=f.opt_integer("num_points", 0), num_eval=f.opt_integer("num_eval", 0), extra=f.rest())

    def to_dict(self) -> dict[str, Any]:
        out = {k.name: getattr(self, k.name) for k in dataclasses.fields(self) if k.name != "extra"}
        out.update(jaccard_by_thr=dict(self.jaccard_by_thr), pts_within_by_thr=dict(self.pts_within_by_thr))
        return {**_without_none(out), **self.extra}


@dataclass(frozen=True, eq=False)
class Tracks(_ArrayEq):
    """Tracks for replay, SOURCE pixels: queries float32 [N, 3] (t, x, y), tracks float32 [N, T, 2] (NaN where
    the tracker gave none), visible bool [N, T]."""

    queries: np.ndarray
    tracks: np.ndarray
    visible: np.ndarray

    @classmethod
    def from_dict(cls, data: Any, path: str = "tracks") -> Tracks:
        f = Fields(data, path)
        queries = number_array(f.raw("queries", required=True), f.at("queries"), 2, nullable=False, dtype=np.float32)
        tracks = number_array(f.raw("tracks", required=True), f.at("tracks"), 3, dtype=np.float32)
        visible = bool_array(f.raw("visible", required=True), f.at("visible"), 2)
        n = len(queries)
        if queries.size == 0:
            queries = queries.reshape(0, 3)
        if tracks.size == 0:
            tracks = tracks.reshape(n, 0, 2) if n == 0 else tracks
        if visible.size == 0 and n == 0:
            visible = visible.reshape(0, tracks.shape[1])
        if queries.shape[1:] != (3,):
            raise fail(f.at("queries"), "[N, 3] (t, x, y)", f.data["queries"])
        if tracks.shape[0] != n or tracks.shape[2:] != (2,):
            raise fail(f.at("tracks"), f"[N, T, 2] with N = {n} (as many as the queries)", f.data["tracks"])
        if visible.shape != tracks.shape[:2]:
            raise fail(f.at("visible"), f"[N, T] = {list(tracks.shape[:2])} (as the tracks)", f.data["visible"])
        return cls(queries=queries, tracks=tracks, visible=visible)

    def to_dict(self) -> dict[str, Any]:
        return {"queries": to_json(self.queries, TRACK_DECIMALS), "tracks": to_json(self.tracks, TRACK_DECIMALS),
                "visible": to_json(self.visible)}


#: a finding a writer froze into the file: shown as "recorded", never re-used as today's diagnosis (the one
#: finding type, of source "recorded")
RecordedFinding = Finding


def read_findings(f: Fields, key: str = "recorded_findings") -> tuple[Finding, ...]:
    return tuple(Finding.from_dict(v, p, source="recorded") for p, v in f.items(key, MAX_FINDINGS))
