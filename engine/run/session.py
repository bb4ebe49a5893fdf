"""One run: video + queries + tracker + config -> a stream of events.

The session yields one event per batch of points and checks its cancel flag between batches;
config changes made while it runs (``update_config``) apply from the next batch. That is what makes
a precision toggle in the GUI a live change. The same events, recorded, make the run report.

    Started -> BatchDone ... BatchDone -> Finished      (or -> Failed, with what was done so far)
"""

from __future__ import annotations

import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import torch

from engine.core.config import RunConfig
from engine.core.devices import device_name, resolve_device
from engine.core.errors import OutOfMemory, TrackerError, UserError
from engine.core.precision import gate, precision_context
from engine.core.stages import StageTimer
from engine.io.video import query_scale
from engine.trackers.base import PreparedVideo, RunContext, Tracker

#: (tracker, device, precision, batch sizes) already run in this process: later runs are warm.
_WARM_KEYS: set[tuple] = set()


@dataclass
class Started:
    t: float
    config: RunConfig
    video: dict[str, Any]
    num_queries: int
    num_batches: int
    stages: tuple[str, ...]
    device: str
    device_name: str
    tracker: dict[str, Any]
    precision_gate: str = ""


@dataclass
class BatchDone:
    t: float
    index: int
    start: int  # first query index of this batch
    stop: int  # one past the last
    tracks: np.ndarray  # float32 [n, T, 2]
    visible: np.ndarray  # bool [n, T]
    stage_ms: dict[str, float]
    wall_ms: float
    config: RunConfig
    cold: bool
    prepared: bool  # this batch included the per-video work (backbone etc.)
    peak_memory_bytes: int | None = None


@dataclass
class Finished:
    t: float
    tracks: np.ndarray  # float32 [N, T, 2]
    visible: np.ndarray  # bool [N, T]
    queries: np.ndarray  # float32 [N, 3]
    wall_ms: float
    cancelled: bool = False


@dataclass
class Failed:
    t: float
    message: str
    suggestion: str | None
    kind: str  # "oom" | "input" | "tracker" | "internal"
    tracks: np.ndarray | None = None  # what was computed before the failure (NaN where not)
    visible: np.ndarray | None = None
    details: str = ""


Event = Started | BatchDone | Finished | Failed


@dataclass
class _Shared:
    lock: threading.Lock = field(default_factory=threading.Lock)
    cancel: threading.Event = field(default_factory=threading.Event)
    pending: dict[str, Any] = field(default_factory=dict)


def _is_oom(exc: BaseException) -> bool:
    if isinstance(exc, torch.cuda.OutOfMemoryError):
        return True
    return isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower()


def oom_error(config: RunConfig, device: str) -> OutOfMemory:
    half_p = max(1, config.points_per_batch // 2)
    half_f = max(1, config.frames_per_batch // 2)
    return OutOfMemory(
        f"{device} ran out of memory with {config.points_per_batch} points per batch and "
        f"{config.frames_per_batch} frames per batch",
        f"lower points per batch to {half_p} (--points-per-batch {half_p}) "
        f"or frames per batch to {half_f} (--frames-per-batch {half_f})",
    )


class Session:
    """A run of one tracker over one video; iterate ``events()`` to drive it."""

    def __init__(
        self,
        frames: np.ndarray | str | Path,
        queries: np.ndarray,
        config: RunConfig,
        tracker: Tracker | None = None,
        timing: bool = True,
        tracker_loader: Callable[[str], Tracker] | None = None,
        video_info: dict[str, Any] | None = None,
    ):
        self._frames_source = frames
        self.queries = np.asarray(queries, dtype=np.float32).reshape(-1, 3)
        self.config = config
        self._tracker = tracker
        self._tracker_loader = tracker_loader
        self.timing = timing
        self.video_info = dict(video_info or {})
        self._shared = _Shared()

    # -- control, from any thread -------------------------------------------------------------
    def cancel(self) -> None:
        self._shared.cancel.set()

    @property
    def cancelled(self) -> bool:
        return self._shared.cancel.is_set()

    def update_config(self, **changes: Any) -> None:
        """Change precision, batch sizes, device or tracker; applied from the next batch."""
        RunConfig.from_dict({**self.config.to_dict(), **changes})  # validate now, in the caller
        with self._shared.lock:
            self._shared.pending.update(changes)

    def _take_config(self) -> RunConfig:
        with self._shared.lock:
            if self._shared.pending:
                self.config = self.config.with_changes(**self._shared.pending)
                self._shared.pending.clear()
        return self.config

    # -- the run -----------------------------------------------------------------------------
    def _load_tracker(self, name: str) -> Tracker:
        if self._tracker is not None and self._tracker.name == name:
            return self._tracker
        if self._tracker_loader is None:
            from engine.trackers import load_tracker

            self._tracker = load_tracker(name)
        else:
            self._tracker = self._tracker_loader(name)
        return self._tracker

    def _decode(self, timer: StageTimer) -> np.ndarray:
        src = self._frames_source
        if isinstance(src, np.ndarray):
            return src
        from engine.io.video import open_video

        with timer.stage("decode", host=True), open_video(src) as reader:
            frames = reader.read()
        self.video_info = {**reader.info.to_dict(), "warnings": list(reader.warnings), **self.video_info}
        return frames

    def events(self) -> Iterator[Event]:
        """Run the session, yielding events. Never raises for user or tracker errors: yields Failed."""
        t_start = time.perf_counter()
        n = len(self.queries)
        tracks: np.ndarray | None = None
        visible: np.ndarray | None = None
        config = self._take_config()
        try:
            device = resolve_device(config.device)
            timer = StageTimer(device, enabled=self.timing)
            frames = self._decode(timer)
            num_frames, height, width = frames.shape[:3]
            # queries and tracks are in the video's own pixels; frames over the reader's max side come
            # back shrunk, so the tracker works in frame pixels and the session converts both ways
            src_w = int(self.video_info.get("width") or width)
            src_h = int(self.video_info.get("height") or height)
            scale = query_scale(src_w, src_h, frames)  # [1, sx, sy]: video pixels per frame pixel
            self.video_info.update({"num_frames": int(num_frames), "width": src_w, "height": src_h,
                                    "frame_width": int(width), "frame_height": int(height)})
            _check_queries(self.queries, num_frames, src_w, src_h)
            frame_queries = self.queries / scale
            tracker = self._load_tracker(config.tracker)
            tracks = np.full((n, num_frames, 2), np.nan, dtype=np.float32)
            visible = np.zeros((n, num_frames), dtype=bool)
            yield Started(
                t=time.perf_counter(),
                config=config,
                video=dict(self.video_info),
                num_queries=n,
                num_batches=-(-n // config.points_per_batch) if n else 0,
                stages=tuple(tracker.stages),
                device=str(device),
                device_name=device_name(device),
                tracker=tracker.describe(),
                precision_gate=gate(config.precision, device).reason,
            )
            prepared: PreparedVideo | None = None
            prepared_key: tuple | None = None
            start = 0
            index = 0
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(device)
            while start < n:
                if self.cancelled:
                    break
                config = self._take_config()
                device = resolve_device(config.device)
                tracker = self._load_tracker(config.tracker)
                if timer.device != device:
                    timer = StageTimer(device, enabled=self.timing)
                key = (tracker.name, str(device), config.precision, config.frames_per_batch)
                warm_key = (*key, config.points_per_batch)
                cold = warm_key not in _WARM_KEYS
                stop = min(n, start + config.points_per_batch)
                ctx = RunContext(device, config.precision, config.frames_per_batch, timer)
                t0 = time.perf_counter()
                did_prepare = False
                try:
                    with torch.inference_mode(), precision_context(config.precision, device):
                        if prepared is None or key != prepared_key:
                            prepared = tracker.prepare(frames, ctx)
                            prepared_key = key
                            did_prepare = True
                        result = tracker.track(prepared, frame_queries[start:stop], ctx)
                except UserError:
                    raise
                except Exception as exc:  # a tracker bug or resource failure: name it, keep what we have
                    if _is_oom(exc):
                        prepared = None
                        if device.type == "cuda":
                            torch.cuda.empty_cache()
                        raise oom_error(config, device_name(device)) from exc
                    raise TrackerError(
                        f"tracker {tracker.name!r} failed on points {start}-{stop - 1}: "
                        f"{type(exc).__name__}: {exc}",
                        "check the tracker's code, or choose another tracker",
                    ) from exc
                stage_ms = timer.collect()
                wall_ms = (time.perf_counter() - t0) * 1e3
                if result.tracks.shape != (stop - start, num_frames, 2):
                    raise TrackerError(
                        f"tracker {tracker.name!r} returned tracks of shape {result.tracks.shape}, "
                        f"expected {(stop - start, num_frames, 2)}"
                    )
                batch_tracks = result.tracks * scale[1:]
                tracks[start:stop] = batch_tracks
                visible[start:stop] = result.visible
                _WARM_KEYS.add(warm_key)
                peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
                yield BatchDone(
                    t=time.perf_counter(),
                    index=index,
                    start=start,
                    stop=stop,
                    tracks=batch_tracks,
                    visible=result.visible,
                    stage_ms=stage_ms,
                    wall_ms=wall_ms,
                    config=config,
                    cold=cold,
                    prepared=did_prepare,
                    peak_memory_bytes=peak,
                )
                start = stop
                index += 1
            yield Finished(
                t=time.perf_counter(),
                tracks=tracks,
                visible=visible,
                queries=self.queries,
                wall_ms=(time.perf_counter() - t_start) * 1e3,
                cancelled=start < n,
            )
        except UserError as exc:
            kind = "oom" if isinstance(exc, OutOfMemory) else "tracker" if isinstance(exc, TrackerError) else "input"
            yield Failed(time.perf_counter(), exc.message, exc.suggestion, kind, tracks, visible,
                         details=traceback.format_exc())
        except Exception as exc:  # a bug of ours: still never kill the caller's loop
            yield Failed(time.perf_counter(), f"internal error: {type(exc).__name__}: {exc}", None, "internal",
                         tracks, visible, details=traceback.format_exc())

    def run(self) -> Finished | Failed:
        """Drive the session to its end and return the last event."""
        last: Event | None = None
        for event in self.events():
            last = event
        assert isinstance(last, (Finished, Failed))
        return last


def _check_queries(queries: np.ndarray, num_frames: int, width: int, height: int) -> None:
    from engine.core.errors import QueryError

    if len(queries) == 0:
        raise QueryError("no query points given", "add points, a grid, or a queries CSV")
    if not np.all(np.isfinite(queries)):
        raise QueryError("query points contain NaN or infinite values")
    t = queries[:, 0]
    bad = np.flatnonzero((t < 0) | (t > num_frames - 1) | (t != np.round(t)))
    if bad.size:
        raise QueryError(
            f"query {bad[0]} has frame index {t[bad[0]]:g}, outside 0..{num_frames - 1} or not a whole number"
        )
    x, y = queries[:, 1], queries[:, 2]
    bad = np.flatnonzero((x < -0.5) | (x > width - 0.5) | (y < -0.5) | (y > height - 0.5))
    if bad.size:
        i = bad[0]
        raise QueryError(f"query {i} at ({x[i]:g}, {y[i]:g}) lies outside the {width}x{height} frame")
