"""The run report: session events of one or more runs of a configuration, as versioned JSON.

``RunRecorder`` consumes the events of repeated runs of the same configuration (bench: a warm-up
run, then repeats; each Started..Finished is one run) and ``build()`` turns them into the report
dict described in scratch/CONTRACTS.md: environment, config, per-batch stage times, the telemetry
window of the runs, the cost model, totals, accuracy, tracks for replay, and findings.
``save_report`` / ``load_report`` write and validate it; a malformed report raises ReportError.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import statistics
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from engine.core.config import RunConfig
from engine.core.errors import ReportError, UserError
from engine.run.session import BatchDone, Event, Failed, Finished, Started
from engine.telemetry.environment import capture_environment, environment_device_name

REPORT_FORMAT = "trackscope-report"
BENCH_FORMAT = "trackscope-bench"
REPORT_VERSION = 1
#: keys every report must have, and the JSON type of each
REQUIRED_KEYS: dict[str, type] = {"environment": dict, "config": dict, "stages": list, "runs": list,
                                  "totals": dict}
#: keys a report may lack (older writers); filled with these defaults on load
OPTIONAL_DEFAULTS: dict[str, Any] = {"created": None, "label": "", "video": {}, "tracker": {}, "telemetry": None,
                                     "cost": None, "accuracy": None, "tracks": None, "findings": []}
#: telemetry samples kept around the runs (seconds before the first start and after the last event)
TELEMETRY_MARGIN_S = 0.25
#: more telemetry samples than this are thinned by a stride
MAX_TELEMETRY_SAMPLES = 3000
#: decimals kept for track coordinates (pixels) and queries
TRACK_DECIMALS = 2


def _jsonable(obj: Any) -> Any:
    """Plain JSON types: numpy -> Python, tuples -> lists, NaN/inf -> None."""
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return _jsonable(obj.tolist())
    if isinstance(obj, (bool, np.bool_)):
        return bool(obj)
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        value = float(obj)
        return value if math.isfinite(value) else None
    if obj is None or isinstance(obj, str):
        return obj
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "to_dict"):
        return _jsonable(obj.to_dict())
    return str(obj)


def _median(values: list[float]) -> float | None:
    return float(statistics.median(values)) if values else None


class RunRecorder:
    """Records session events over repeated runs of one configuration; ``build()`` makes the report."""

    def __init__(self, label: str | None = None, environment: dict[str, Any] | None = None):
        self.label = label
        self.environment = environment
        self.runs: list[dict[str, Any]] = []
        self._started: Started | None = None  # the first Started seen
        self._t0: float | None = None  # perf_counter of the first run start
        self._t_last: float | None = None
        self._run: dict[str, Any] | None = None
        self._run_t0 = 0.0
        self.final: Finished | None = None  # the last finished run (its tracks go in the report)
        self._peak_rss: float | None = None

    # -- events ------------------------------------------------------------------------------
    def add(self, event: Event) -> None:
        """Record one session event."""
        self._t_last = event.t
        if isinstance(event, Started):
            self._on_started(event)
        elif isinstance(event, BatchDone):
            run = self._current_run(event.t)
            run["batches"].append({
                "index": event.index, "start": event.start, "stop": event.stop,
                "t": event.t - self._run_t0, "wall_ms": event.wall_ms, "stage_ms": dict(event.stage_ms),
                "cold": event.cold, "prepared": event.prepared, "config": event.config.to_dict(),
                "peak_memory_bytes": event.peak_memory_bytes,
            })
            if event.cold:
                run["cold"] = True
        elif isinstance(event, Finished):
            run = self._current_run(event.t)
            run["status"] = "cancelled" if event.cancelled else "finished"
            run["end_to_end_ms"] = event.wall_ms
            self._close_run(run)
            if not event.cancelled:
                self.final = event
        elif isinstance(event, Failed):
            run = self._current_run(event.t)
            run["status"] = "failed"
            run["error"] = {"message": event.message, "suggestion": event.suggestion, "kind": event.kind}
            self._close_run(run)
        else:
            raise TypeError(f"not a session event: {type(event).__name__}")

    def _on_started(self, event: Started) -> None:
        if self._started is None:
            self._started = event
        run = self._open_run(event.t)
        run.update({"config": event.config.to_dict(), "device": event.device, "device_name": event.device_name,
                    "precision_gate": event.precision_gate, "num_batches": event.num_batches})
        if event.device_note:
            run["device_note"] = event.device_note

    def _current_run(self, t: float) -> dict[str, Any]:
        """The open run, or a new one when events arrive without a Started."""
        return self._run if self._run is not None else self._open_run(t)

    def _open_run(self, t: float) -> dict[str, Any]:
        if self._t0 is None:
            self._t0 = t
        self._run_t0 = t
        self._run = {"index": len(self.runs), "cold": False, "status": "running", "start_s": t - self._t0,
                     "wall_ms": 0.0, "end_to_end_ms": None, "stage_ms": {}, "batches": [], "error": None}
        self.runs.append(self._run)
        return self._run

    def _close_run(self, run: dict[str, Any]) -> None:
        stage_ms: dict[str, float] = {}
        for batch in run["batches"]:
            for name, ms in batch["stage_ms"].items():
                stage_ms[name] = stage_ms.get(name, 0.0) + ms
        run["stage_ms"] = stage_ms
        run["wall_ms"] = float(sum(b["wall_ms"] for b in run["batches"]))
        self._run = None

    # -- the report --------------------------------------------------------------------------
    def build(self, telemetry: Any = None, ground_truth: dict[str, np.ndarray] | None = None,
              reference_tracks: Any = None, stage_costs: dict[str, dict] | None = None,
              reference_label: str | None = None, keep_tracks: bool = True) -> dict[str, Any]:
        """The report dict. telemetry: a TelemetrySampler (or None); stage_costs: ``cost.CostCounter.result()``."""
        started = self._started
        config = started.config.to_dict() if started else {}
        device = started.device if started else "cpu"
        static = _safe_call(telemetry, "static_info") or {}
        environment = self.environment if self.environment is not None else capture_environment(device, static)
        video = dict(started.video) if started else {}
        if "path" in video and video["path"] is not None:
            video["path"] = str(video["path"])
            video.setdefault("name", Path(video["path"]).name)
        report: dict[str, Any] = {
            "format": REPORT_FORMAT,
            "version": REPORT_VERSION,
            "created": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "environment": environment,
            "config": config,
            "label": self.label or (started.config.label() if started else ""),
            "device_name": started.device_name if started else "",
            "precision_gate": started.precision_gate if started else "",
            "video": video,
            "tracker": dict(started.tracker) if started else {},
            "stages": list(started.stages) if started else [],
            "runs": [dict(r) for r in self.runs],
            "telemetry": self._telemetry_window(telemetry, static) if telemetry is not None else None,
            "cost": None,
            "totals": None,
            "accuracy": self._accuracy(ground_truth, reference_tracks, reference_label),
            "tracks": self._tracks() if keep_tracks else None,
            "findings": [],
        }
        report["totals"] = self._totals()  # after the telemetry window (peak RSS)
        if stage_costs:
            from engine.analysis.cost import cost_section

            stage_ms = report["totals"]["stage_ms"]
            report["cost"] = cost_section(stage_costs, stage_ms, environment, config.get("precision", "fp32"))
        report = _jsonable(report)
        report["findings"] = _run_diagnosis(report)
        return report

    def _totals(self) -> dict[str, Any]:
        finished = [r for r in self.runs if r["status"] == "finished"]
        warm = [r for r in finished if not r["cold"]]
        cold = [r for r in finished if r["cold"]]
        basis = warm or cold
        stage_names = sorted({name for r in basis for name in r["stage_ms"]})
        stage_ms = {name: _median([r["stage_ms"].get(name, 0.0) for r in basis]) for name in stage_names}
        warm_ms = _median([r["wall_ms"] for r in warm])
        cold_ms = cold[0]["wall_ms"] if cold else None
        run_ms = warm_ms if warm_ms is not None else cold_ms
        num_frames = int(self._started.video.get("num_frames", 0)) if self._started else 0
        num_points = int(self._started.num_queries) if self._started else 0
        peaks = [b["peak_memory_bytes"] for r in self.runs for b in r["batches"] if b["peak_memory_bytes"]]
        per_s = 1e3 / run_ms if run_ms else None
        return {
            "warm_ms_median": warm_ms,
            "warm_ms_min": min((r["wall_ms"] for r in warm), default=None),
            "cold_ms": cold_ms,
            "stage_ms": stage_ms,
            "stage_ms_basis": "warm median" if warm else ("cold" if cold else "none"),
            "frames_per_s": num_frames * per_s if per_s else None,
            "point_frames_per_s": num_points * num_frames * per_s if per_s else None,
            "peak_memory_bytes": max(peaks) if peaks else None,
            "peak_rss_bytes": self._peak_rss,
            "num_points": num_points,
            "num_frames": num_frames,
            "num_runs": len(self.runs),
            "num_warm_runs": len(warm),
            "num_failed_runs": sum(r["status"] == "failed" for r in self.runs),
        }

    def _telemetry_window(self, telemetry: Any, static: dict[str, Any]) -> dict[str, Any] | None:
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
            if key == "t" or values.ndim == 0 or values.shape[0] != t.shape[0]:
                continue
            metrics[key] = values[index]
        rss = metrics.get("process_rss_bytes")
        self._peak_rss = float(np.nanmax(rss)) if rss is not None and np.isfinite(rss).any() else None
        return {"t": t[index] - self._t0, "metrics": metrics,
                "availability": _safe_call(telemetry, "availability") or {},
                "static": static}

    def _accuracy(self, ground_truth: dict[str, np.ndarray] | None, reference: Any,
                  reference_label: str | None) -> dict[str, Any] | None:
        if self.final is None or (ground_truth is None and reference is None):
            return None
        from engine.analysis.metrics import divergence, tapvid_metrics

        video = self._started.video if self._started else {}
        if ground_truth is not None:
            size = (int(video.get("width", 0)), int(video.get("height", 0)))
            try:
                scores = tapvid_metrics(self.final.tracks, self.final.visible, ground_truth["tracks"],
                                        ground_truth["visible"], ground_truth["query_t"], size=size)
            except (ValueError, KeyError) as exc:
                raise UserError(f"ground truth does not fit this run: {exc}",
                                "use the ground truth made for this video and these queries") from exc
            out = scores.to_dict()
            out["vs"] = "ground truth"
            return out
        ref_tracks, ref_visible, label = _reference_arrays(reference)
        try:
            div = divergence(self.final.tracks, self.final.visible, ref_tracks, ref_visible)
        except ValueError as exc:
            raise UserError(f"reference tracks do not fit this run: {exc}") from exc
        return {"vs": reference_label or label, **div.to_dict()}

    def _tracks(self) -> dict[str, Any] | None:
        if self.final is None:
            return None
        return {"queries": np.round(self.final.queries.astype(np.float64), TRACK_DECIMALS),
                "tracks": np.round(self.final.tracks.astype(np.float64), TRACK_DECIMALS),
                "visible": self.final.visible.astype(np.int8)}


def _safe_call(obj: Any, name: str) -> Any:
    """``obj.name()`` or None when obj lacks it (telemetry is optional and never fatal)."""
    fn = getattr(obj, name, None)
    return fn() if callable(fn) else None


def _reference_arrays(reference: Any) -> tuple[np.ndarray, np.ndarray, str]:
    """(tracks, visible, label) from a report dict, a {"tracks","visible"} dict or a (tracks, visible) pair."""
    if isinstance(reference, dict) and reference.get("format") == REPORT_FORMAT:
        arrays = report_tracks(reference)
        if arrays is None:
            raise UserError("the reference report holds no tracks", "record it without --no-tracks")
        return arrays[1], arrays[2], str(reference.get("config", {}).get("precision", "reference"))
    if isinstance(reference, dict):
        return reference["tracks"], reference["visible"], str(reference.get("label", "reference"))
    tracks, visible = reference
    return tracks, visible, "reference"


def _run_diagnosis(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Findings from engine.diagnose when it is installed; a failing rule becomes an info finding."""
    try:
        from engine.analysis.rules import diagnose
    except ImportError:
        return []
    try:
        return _jsonable([f.to_dict() if hasattr(f, "to_dict") else f for f in diagnose(report)])
    except Exception as exc:  # a rule bug must not lose the measurements
        return [{"rule": "diagnosis_failed", "severity": "info", "title": f"diagnosis failed: {exc!r}",
                 "evidence": {}, "suggestion": "report this bug; the measurements are intact"}]


# -- files -----------------------------------------------------------------------------------
def save_report(path: str | Path, report: dict[str, Any]) -> Path:
    """Write a report (or bench file) as JSON, atomically; NaN becomes null."""
    path = Path(path)
    text = json.dumps(_jsonable(report), allow_nan=False, separators=(",", ":"))
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name, suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _read_json(path: str | Path) -> Any:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ReportError(f"report {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ReportError(f"report {path} cannot be read: {exc}") from None
    if not text.strip():
        raise ReportError(f"report {path} is empty")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ReportError(f"report {path} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}); "
                          "the file may be truncated or not a trackscope report") from None


def _check_version(data: dict[str, Any], where: str) -> None:
    version = data.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ReportError(f"{where} has no valid version number (found {version!r})")
    if version > REPORT_VERSION:
        raise ReportError(f"{where} is version {version}, written by a newer trackscope; this one reads "
                          f"up to version {REPORT_VERSION}", "upgrade trackscope to open it")


def validate_report(data: Any, where: str = "report") -> dict[str, Any]:
    """Check a decoded report; fill optional keys with defaults. Raises ReportError naming the problem."""
    if not isinstance(data, dict):
        raise ReportError(f"{where} is not a trackscope report (top level is {type(data).__name__}, not an object)")
    fmt = data.get("format")
    if fmt != REPORT_FORMAT:
        hint = " (a bench file: open it with load_reports)" if fmt == BENCH_FORMAT else ""
        raise ReportError(f"{where} has format {fmt!r}, expected {REPORT_FORMAT!r}{hint}")
    _check_version(data, where)
    for key, kind in REQUIRED_KEYS.items():
        if key not in data:
            raise ReportError(f"{where} is missing the key {key!r}")
        if not isinstance(data[key], kind):
            raise ReportError(f"{where}: {key!r} should be a JSON {'object' if kind is dict else 'array'}, "
                              f"found {type(data[key]).__name__}")
    for i, run in enumerate(data["runs"]):
        if not isinstance(run, dict) or not isinstance(run.get("stage_ms"), dict) \
                or not isinstance(run.get("batches"), list):
            raise ReportError(f"{where}: run {i} is malformed (needs 'stage_ms' and 'batches')")
    for key, default in OPTIONAL_DEFAULTS.items():
        data.setdefault(key, default if not isinstance(default, (dict, list)) else type(default)())
    return data


def load_report(path: str | Path) -> dict[str, Any]:
    """Read and validate one run report; ReportError with the file and the problem when it is bad."""
    return validate_report(_read_json(path), f"report {path}")


def load_reports(path: str | Path) -> list[dict[str, Any]]:
    """The reports of a report file (one) or a bench file (all of them)."""
    data = _read_json(path)
    if isinstance(data, dict) and data.get("format") == BENCH_FORMAT:
        _check_version(data, f"bench file {path}")
        reports = data.get("reports")
        if not isinstance(reports, list):
            raise ReportError(f"bench file {path} is missing its list of 'reports'")
        return [validate_report(r, f"bench file {path}, report {i}") for i, r in enumerate(reports)]
    return [validate_report(data, f"report {path}")]


def report_tracks(report: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(queries [N, 3], tracks [N, T, 2] with NaN where null, visible bool [N, T]) or None."""
    data = report.get("tracks")
    if not data:
        return None
    try:
        queries = np.array(data["queries"], dtype=np.float32).reshape(-1, 3)
        raw = np.array(data["tracks"], dtype=object)  # null where the tracker gave no position
        tracks = np.where(np.equal(raw, None), np.nan, raw).astype(np.float32).reshape(len(queries), -1, 2)
        visible = np.array(data["visible"], dtype=bool).reshape(tracks.shape[:2])
    except (KeyError, TypeError, ValueError) as exc:
        raise ReportError(f"the report's tracks are malformed: {exc}") from None
    return queries, tracks, visible


def stage_ms(report: dict[str, Any]) -> dict[str, float]:
    """Per-stage ms of a report's typical run (warm median, else the cold run)."""
    return {k: float(v) for k, v in (report.get("totals", {}).get("stage_ms") or {}).items() if v is not None}


def run_ms(report: dict[str, Any]) -> float | None:
    """Wall ms of a report's typical run: the warm median, else the cold run; None when neither."""
    totals = report.get("totals") or {}
    warm = totals.get("warm_ms_median")
    return warm if warm is not None else totals.get("cold_ms")


def report_label(report: dict[str, Any]) -> str:
    """A short name for a report: its label, else tracker + precision, plus the device."""
    label = report.get("label") or RunConfig.from_dict(report.get("config") or {}).label()
    device = report.get("device_name") or environment_device_name(report.get("environment", {}))
    return f"{label} on {device}"
