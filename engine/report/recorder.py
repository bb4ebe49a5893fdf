"""Recording: session events of one or more runs of a configuration -> a typed Report (measurements only).

``RunRecorder`` consumes the events of repeated runs of the same configuration (bench: a warm-up
run, then repeats; each Started..Finished is one run) and ``build()`` makes the
engine.report.schema.Report: environment, config, video (with its geometry), tracker, per-batch stage
times, totals, the telemetry window of the runs, the counted work per stage, accuracy (computed by
the caller) and tracks for replay. No analysis happens here: the roofline and the findings are
derived on load (engine.analysis.analyse). Files: engine.report.files.
"""

from __future__ import annotations

import datetime as _dt
import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from engine.core.config import RunConfig
from engine.io.geometry import VideoGeometry
from engine.report.parts import (
    TRACK_DECIMALS,
    Accuracy,
    Batch,
    Environment,
    Run,
    RunError,
    StageWork,
    TelemetryWindow,
    Totals,
    TrackerInfo,
    Tracks,
    VideoInfo,
)
from engine.report.schema import Report
from engine.run.events import BatchDone, Event, Failed, Finished, Started
from engine.telemetry.environment import capture_environment

#: telemetry samples kept around the runs (seconds before the first start and after the last event)
TELEMETRY_MARGIN_S = 0.25
#: more telemetry samples than this are thinned by a stride
MAX_TELEMETRY_SAMPLES = 3000
#: the tracker's description keys each run keeps (what ran: "eager", "compiled", ...; the compile's seconds)
RUN_TRACKER_KEYS = ("compile", "compile_s")
#: the video keys of the session's Started.video that make its geometry (source size, decoded size)
_GEOMETRY_KEYS = ("width", "height", "frame_width", "frame_height")


def _median(values: list[float]) -> float | None:
    return float(statistics.median(values)) if values else None


@dataclass
class _OpenRun:
    """A run being recorded (Run is frozen: it is made when the report is built)."""

    index: int
    start_s: float
    status: str = "running"
    cold: bool = False
    end_to_end_ms: float | None = None
    batches: list[Batch] = field(default_factory=list)
    error: RunError | None = None
    started: Started | None = None

    def stage_ms(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for batch in self.batches:
            for name, ms in batch.stage_ms.items():
                out[name] = out.get(name, 0.0) + ms
        return out

    def wall_ms(self) -> float:
        return float(sum(b.wall_ms for b in self.batches))

    def to_run(self) -> Run:
        s = self.started
        extra = {"device_note": s.device_note} if s is not None and s.device_note else {}
        if s is not None:  # what ran, compiled or eager, as the tracker said at the run's start
            extra.update({k: s.tracker[k] for k in RUN_TRACKER_KEYS if k in s.tracker})
        return Run(index=self.index, cold=self.cold, status=self.status, start_s=self.start_s,
                   wall_ms=self.wall_ms(), end_to_end_ms=self.end_to_end_ms, stage_ms=self.stage_ms(),
                   batches=tuple(self.batches), error=self.error, config=s.config if s else None,
                   device=s.device if s else "", device_name=s.device_name if s else "",
                   precision_gate=s.precision_gate if s else "", num_batches=s.num_batches if s else None,
                   extra=extra)


def video_info(video: Mapping[str, Any], geometry: VideoGeometry | None = None) -> VideoInfo:
    """The report's VideoInfo from a session's Started.video and .geometry (without it: the video's
    width/height are the source's, frame_width/frame_height the decoded size)."""
    v = dict(video)
    width, height, frame_w, frame_h = (v.pop(k, None) for k in _GEOMETRY_KEYS)
    if geometry is None and width and height:
        geometry = VideoGeometry(int(width), int(height), int(frame_w or width), int(frame_h or height))
    path = v.pop("path", None)
    path = str(path) if path is not None else None
    name = str(v.pop("name", "") or (Path(path).name if path else ""))
    fps = v.pop("fps", None)
    return VideoInfo(path=path, name=name, num_frames=int(v.pop("num_frames", 0) or 0),
                     fps=float(fps) if fps else None, kind=str(v.pop("kind", "") or ""),
                     warnings=tuple(str(w) for w in v.pop("warnings", ()) or ()), geometry=geometry, extra=v)


class RunRecorder:
    """Records session events over repeated runs of one configuration; ``build()`` makes the Report."""

    def __init__(self, label: str | None = None, environment: Environment | Mapping[str, Any] | None = None):
        self.label = label
        self.environment = environment
        self.runs: list[_OpenRun] = []
        self.started: Started | None = None  # the first Started seen
        self._t0: float | None = None  # perf_counter of the first run start
        self._t_last: float | None = None
        self._run: _OpenRun | None = None
        self._run_t0 = 0.0
        self.final: Finished | None = None  # the last finished run (its tracks go in the report)

    @property
    def video(self) -> VideoInfo:
        """The recorded video (its geometry says the source size accuracy is graded in)."""
        return video_info(self.started.video, self.started.geometry) if self.started else VideoInfo()

    # -- events ------------------------------------------------------------------------------
    def add(self, event: Event) -> None:
        """Record one session event."""
        self._t_last = event.t
        if isinstance(event, Started):
            if self.started is None:
                self.started = event
            self._open_run(event.t).started = event
        elif isinstance(event, BatchDone):
            run = self._current_run(event.t)
            run.batches.append(Batch(index=event.index, start=event.start, stop=event.stop, t=event.t - self._run_t0,
                                     wall_ms=float(event.wall_ms), stage_ms=dict(event.stage_ms), cold=event.cold,
                                     prepared=event.prepared, config=event.config,
                                     peak_memory_bytes=event.peak_memory_bytes))
            run.cold = run.cold or event.cold
        elif isinstance(event, Finished):
            run = self._current_run(event.t)
            run.status = "cancelled" if event.cancelled else "finished"
            run.end_to_end_ms = float(event.wall_ms)
            self._run = None
            if not event.cancelled:
                self.final = event
        elif isinstance(event, Failed):
            run = self._current_run(event.t)
            run.status = "failed"
            run.error = RunError(message=event.message, suggestion=event.suggestion, kind=event.kind)
            self._run = None
        else:
            raise TypeError(f"not a session event: {type(event).__name__}")

    def _current_run(self, t: float) -> _OpenRun:
        """The open run, or a new one when events arrive without a Started."""
        return self._run if self._run is not None else self._open_run(t)

    def _open_run(self, t: float) -> _OpenRun:
        if self._t0 is None:
            self._t0 = t
        self._run_t0 = t
        self._run = _OpenRun(index=len(self.runs), start_s=t - self._t0)
        self.runs.append(self._run)
        return self._run

    # -- the report --------------------------------------------------------------------------
    def build(self, telemetry: Any = None, work: Mapping[str, StageWork | Mapping[str, Any]] | None = None,
              accuracy: Accuracy | None = None, keep_tracks: bool = True, queries_source: str | None = None,
              capture: Mapping[str, Any] | None = None) -> Report:
        """The Report. telemetry: a TelemetrySampler (or None); work: the counting pass's per-stage work
        (engine.analysis.cost.CostCounter.result()); accuracy: graded by the caller; capture: a deep
        capture's summary (engine.workflows.deep)."""
        started = self.started
        device = started.device if started else "cpu"
        static = _safe_call(telemetry, "static_info") or {}
        env = self.environment if self.environment is not None else capture_environment(device, static)
        environment = env if isinstance(env, Environment) else Environment.from_dict(dict(env))
        window = self._telemetry_window(telemetry, static) if telemetry is not None else None
        runs = tuple(r.to_run() for r in self.runs)
        return Report(
            environment=environment, config=started.config if started else RunConfig(),
            stages=tuple(started.stages) if started else (), runs=runs, totals=self._totals(runs, window),
            created=_dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            label=self.label or (started.config.label(started.tracker.get("tunable")) if started else ""),
            queries_source=queries_source,
            recorded_device_name=started.device_name if started else "",
            precision_gate=started.precision_gate if started else "", video=self.video,
            tracker=_tracker_info(started.tracker) if started else TrackerInfo(), telemetry=window,
            work={name: w if isinstance(w, StageWork) else StageWork.from_dict(dict(w), f"work.{name}")
                  for name, w in (work or {}).items()},
            accuracy=accuracy, tracks=self._tracks() if keep_tracks else None,
            capture=dict(capture) if capture is not None else None,
        )

    def _totals(self, runs: tuple[Run, ...], window: TelemetryWindow | None) -> Totals:
        finished = [r for r in runs if r.finished]
        warm = [r for r in finished if not r.cold]
        cold = [r for r in finished if r.cold]
        basis = warm or cold
        names = sorted({name for r in basis for name in r.stage_ms})
        stage_ms = {name: float(statistics.median(r.stage_ms.get(name, 0.0) for r in basis)) for name in names}
        warm_ms = _median([r.wall_ms for r in warm])
        cold_ms = cold[0].wall_ms if cold else None
        run_ms = warm_ms if warm_ms is not None else cold_ms
        num_frames = int(self.started.video.get("num_frames", 0)) if self.started else 0
        num_points = int(self.started.num_queries) if self.started else 0
        peaks = [b.peak_memory_bytes for r in runs for b in r.batches if b.peak_memory_bytes]
        per_s = 1e3 / run_ms if run_ms else None
        rss = window.series("process_rss_bytes") if window is not None else np.zeros(0)
        return Totals(
            warm_ms_median=warm_ms, warm_ms_min=min((r.wall_ms for r in warm), default=None), cold_ms=cold_ms,
            stage_ms=stage_ms, stage_ms_basis="warm median" if warm else ("cold" if cold else "none"),
            frames_per_s=num_frames * per_s if per_s else None,
            point_frames_per_s=num_points * num_frames * per_s if per_s else None,
            peak_memory_bytes=max(peaks) if peaks else None,
            peak_rss_bytes=float(np.nanmax(rss)) if rss.size and np.isfinite(rss).any() else None,
            num_points=num_points, num_frames=num_frames, num_runs=len(runs), num_warm_runs=len(warm),
            num_failed_runs=sum(r.status == "failed" for r in runs),
        )

    def _telemetry_window(self, telemetry: Any, static: dict[str, Any]) -> TelemetryWindow | None:
        snap = _safe_call(telemetry, "snapshot")
        if not snap or "t" not in snap or self._t0 is None:
            return None
        t = np.asarray(snap["t"], dtype=np.float64)  # [S] perf_counter seconds
        t_end = self._t_last if self._t_last is not None else self._t0
        keep = (t >= self._t0 - TELEMETRY_MARGIN_S) & (t <= t_end + TELEMETRY_MARGIN_S)
        index = np.flatnonzero(keep)
        if index.size > MAX_TELEMETRY_SAMPLES:
            index = index[:: math.ceil(index.size / MAX_TELEMETRY_SAMPLES)]
        metrics = {}
        for key, values in snap.items():
            values = np.asarray(values)
            if key == "t" or values.ndim == 0 or values.ndim > 2 or values.shape[0] != t.shape[0]:
                continue
            metrics[key] = values[index].astype(np.float64)
        availability = {str(k): str(v) for k, v in (_safe_call(telemetry, "availability") or {}).items()}
        return TelemetryWindow(t=t[index] - self._t0, metrics=metrics, availability=availability,
                               static=dict(static))

    def _tracks(self) -> Tracks | None:
        """The last finished run's tracks, at the precision the file keeps (so a saved report loads equal)."""
        if self.final is None:
            return None
        return Tracks(queries=_rounded(self.final.queries), tracks=_rounded(self.final.tracks),
                      visible=np.asarray(self.final.visible, bool))


def _rounded(values: np.ndarray) -> np.ndarray:
    """float32 values rounded to TRACK_DECIMALS px, exactly as the JSON writes and reads them."""
    return np.round(np.asarray(values, np.float64), TRACK_DECIMALS).astype(np.float32)


def _tracker_info(described: Mapping[str, Any]) -> TrackerInfo:
    details = {k: v for k, v in described.items() if k not in ("name", "stages")}
    return TrackerInfo(name=str(described.get("name", "")), stages=tuple(described.get("stages", ())),
                       details=details)


def _safe_call(obj: Any, name: str) -> Any:
    """``obj.name()`` or None when obj lacks it (telemetry is optional and never fatal)."""
    fn = getattr(obj, name, None)
    return fn() if callable(fn) else None
