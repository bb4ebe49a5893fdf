"""One run: video + queries + tracker + config -> a stream of events.

The session yields one event per batch of points and checks its cancel flag between batches;
config changes made while it runs (``update_config``) apply from the next batch. That is what makes
a precision toggle in the GUI a live change. The same events, recorded, make the run report.

A plugin's calls (its loading, each batch) run through ``engine.trackers.guard.call_plugin``: an exit or
interrupt from it fails the run naming it, and a call still running ``ABANDON_AFTER_S`` after ``cancel``
is abandoned (the run fails at once saying so), so a Stop returns whatever the plugin does.

    Started -> BatchDone ... BatchDone -> Finished      (or -> Failed, with what was done so far)

Queries and tracks are source pixels (the video file's own); frames over the reader's max side come back
shrunk, so the tracker works in frame pixels. The session converts once each way, through the run's
``VideoGeometry``: queries to frame pixels before the tracker, tracks back to source pixels after it.
"""

from __future__ import annotations

import logging
import threading
import time
import traceback
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import torch

from engine.core.config import DEFAULT_TUNABLE, ConfigChange, RunConfig
from engine.core.devices import device_name, resolve_device
from engine.core.errors import OutOfMemory, QueryError, TrackerError, UserError, VideoError, capped
from engine.core.precision import FLOAT_MODES, QUANT_MODES, either, gate, precision_context, runnable_modes
from engine.core.stages import StageTimer
from engine.io.geometry import VideoGeometry
from engine.run.device_memory import check_run_device_memory
from engine.run.events import BatchDone, Event, Failed, Finished, Started
from engine.run.memory import check_host_memory, estimate_host_bytes
from engine.run.warm import PROCESS_WARM, WarmCache
from engine.trackers.base import PreparedVideo, RunContext, Tracker, TrackResult
from engine.trackers.guard import PluginAbandoned, call_plugin, cancel_scope
from engine.trackers.plugin import PluginTracker, is_plugin

__all__ = ["BatchDone", "Event", "Failed", "Finished", "Session", "Started", "oom_error"]

log = logging.getLogger(__name__)

#: the device "auto" resolves to for a tracker that cannot run on the GPU
FALLBACK_DEVICE = "cpu"
#: the precision context of a tracker that has no precision to set (LK): none of the config's applies
UNUSED_PRECISION_RUNS_AS = "fp32"
#: config.device values that let the session pick a device the tracker supports
AUTO_DEVICES = ("", "auto")
#: how far outside the frame a track may lie, in frame sizes on each side (an occluded point may leave it)
TRACK_BOUND_FRAME_SIZES = 10
#: longest traceback a failed run keeps (its details), characters
MAX_DETAILS_CHARS = 20_000


@dataclass
class _Shared:
    lock: threading.Lock = field(default_factory=threading.Lock)
    cancel: threading.Event = field(default_factory=threading.Event)
    pending: ConfigChange = field(default_factory=ConfigChange)


#: words of torch's (and the C++ allocators') host out-of-memory errors, lower case
HOST_OOM_WORDS = ("defaultcpuallocator: can't allocate memory", "can't allocate memory", "cannot allocate memory",
                  "std::bad_alloc")


def _is_host_oom(exc: BaseException) -> bool:
    """A host (CPU RAM) allocation failure: MemoryError, or torch's CPU allocator refusing."""
    if isinstance(exc, MemoryError):
        return True
    return isinstance(exc, RuntimeError) and any(w in str(exc).lower() for w in HOST_OOM_WORDS)


def _is_oom(exc: BaseException) -> bool:
    """Device or host out of memory."""
    if isinstance(exc, torch.cuda.OutOfMemoryError) or _is_host_oom(exc):
        return True
    return isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower()


def oom_error(config: RunConfig, device: str, host: bool = False) -> OutOfMemory:
    """OutOfMemory naming what ran out (``device``, or host memory) and the batch sizes to lower."""
    half_p = max(1, config.points_per_batch // 2)
    half_f = max(1, config.frames_per_batch // 2)
    what = "host memory (RAM)" if host else device
    more = ", or track fewer frames (a shorter clip, --max-frames N)" if host else ""
    return OutOfMemory(
        f"{what} ran out of memory with {config.points_per_batch} points per batch and "
        f"{config.frames_per_batch} frames per batch",
        f"lower points per batch to {half_p} (--points-per-batch {half_p}) "
        f"or frames per batch to {half_f} (--frames-per-batch {half_f}){more}",
    )


@dataclass
class _Run:
    """The state of one run between batches."""

    frames: np.ndarray  # uint8 [T, H, W, 3], as decoded
    geometry: VideoGeometry
    frame_queries: np.ndarray  # float32 [N, 3], frame pixels
    tracks: np.ndarray  # float32 [N, T, 2], source pixels, NaN where not tracked yet
    visible: np.ndarray  # bool [N, T]
    config: RunConfig
    device: torch.device
    tracker: Tracker
    timer: StageTimer
    t_start: float
    prepared: PreparedVideo | None = None
    prepared_key: tuple | None = None
    start: int = 0  # the next query to track
    index: int = 0  # the next batch's index
    uses_precision: bool = True  # False: the tracker has no precision to set (LK), it runs as it always does

    @property
    def num_queries(self) -> int:
        return len(self.frame_queries)

    @property
    def num_frames(self) -> int:
        return int(self.frames.shape[0])


class Session:
    """A run of one tracker over one video; iterate ``events()`` to drive it."""

    def __init__(
        self,
        frames: np.ndarray,
        queries: np.ndarray,
        config: RunConfig,
        tracker: Tracker | None = None,
        timing: bool = True,
        tracker_loader: Callable[[str], Tracker] | None = None,
        video_info: Mapping[str, Any] | None = None,
        geometry: VideoGeometry | None = None,
        warm: WarmCache | None = None,
    ):
        """frames: uint8 [T, H, W, 3] as decoded; queries: [N, 3] (t, x, y) in source pixels.

        video_info: the reader's info (width/height: the source's size); geometry, when given, overrides
        the one derived from video_info and the frames. warm: which configurations ran before (the process's).
        """
        self.frames = np.asarray(frames)
        self.queries = np.asarray(queries, dtype=np.float32).reshape(-1, 3)
        self.config = config
        self._tracker = tracker
        self._tracker_loader = tracker_loader
        self.timing = timing
        self.video_info = dict(video_info or {})
        self.geometry = geometry
        self.warm = PROCESS_WARM if warm is None else warm
        self._shared = _Shared()

    # -- control, from any thread -------------------------------------------------------------
    def cancel(self) -> None:
        self._shared.cancel.set()

    @property
    def cancelled(self) -> bool:
        return self._shared.cancel.is_set()

    def update_config(self, change: ConfigChange | None = None, **changes: Any) -> None:
        """Change precision, batch sizes, device or tracker; applied from the next batch.

        ``change`` is a typed ConfigChange; keyword arguments build one. A wrong key or value raises
        ConfigError here, in the caller's thread, and leaves the running session as it was.
        """
        change = (change or ConfigChange()).then(ConfigChange.of(changes))
        with self._shared.lock:
            change.applied_to(self._shared.pending.applied_to(self.config))  # validate the whole now, in the caller
            self._shared.pending = self._shared.pending.then(change)

    def _take_config(self) -> RunConfig:
        with self._shared.lock:
            if self._shared.pending:
                self.config = self._shared.pending.applied_to(self.config)
                self._shared.pending = ConfigChange()
        return self.config

    # -- the run -----------------------------------------------------------------------------
    def events(self) -> Iterator[Event]:
        """Run the session, yielding events. Never raises for user or tracker errors: yields Failed."""
        t_start = time.perf_counter()
        run: _Run | None = None
        try:
            with cancel_scope(self._shared.cancel):  # a plugin call still running after cancel is abandoned
                run, started = self._setup(t_start)
            yield started
            if run.device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(run.device)
            while run.start < run.num_queries and not self.cancelled:
                with cancel_scope(self._shared.cancel):
                    done = self._step(run)
                yield done
            yield self._finish(run)
        except Exception as exc:  # user, tracker or our own errors: never kill the caller's loop
            yield self._failed(exc, run)

    def run(self) -> Finished | Failed:
        """Drive the session to its end and return the last event."""
        last: Event | None = None
        for event in self.events():
            last = event
        assert isinstance(last, (Finished, Failed))
        return last

    def _setup(self, t_start: float) -> tuple[_Run, Started]:
        """Check the input, resolve the device, load the tracker; -> the run's state and its Started."""
        config = self._take_config()
        device = resolve_device(config.device)
        geometry = self._resolve_geometry()
        num_frames = int(self.frames.shape[0])
        _check_queries(self.queries, num_frames, geometry)
        tracker = self._load_tracker(config.tracker)
        device, note = _device_for(tracker, device, config.device)
        described = _guarded(tracker, "in describe()", tracker.describe)
        uses_precision = _uses_precision(described)
        recipe = _quant_recipe(tracker, config.precision, device) if uses_precision else {}
        n = len(self.queries)
        # before any work (the app's runs; the CLI checked once already, before decoding)
        check_host_memory(estimate_host_bytes(num_frames, geometry.frame_width, geometry.frame_height, n, tracker,
                                              on_cpu=device.type == "cpu", points_per_batch=config.points_per_batch,
                                              frames_per_batch=config.frames_per_batch, precision=config.precision),
                          "this run", frames_held=True)
        check_run_device_memory(tracker, device, "this run", num_frames=num_frames, width=geometry.source_width,
                                height=geometry.source_height, num_queries=n,
                                points_per_batch=config.points_per_batch,
                                frames_per_batch=config.frames_per_batch, precision=config.precision)
        self.video_info.update({**geometry.to_dict(), "num_frames": num_frames,
                                "width": geometry.source_width, "height": geometry.source_height})
        run = _Run(
            frames=self.frames,
            geometry=geometry,
            frame_queries=geometry.queries_to_frame(self.queries),
            tracks=np.full((n, num_frames, 2), np.nan, dtype=np.float32),
            visible=np.zeros((n, num_frames), dtype=bool),
            config=config,
            device=device,
            tracker=tracker,
            timer=StageTimer(device, enabled=self.timing),
            t_start=t_start,
            uses_precision=uses_precision,
        )
        started = Started(
            t=time.perf_counter(),
            config=config,
            video=dict(self.video_info),
            geometry=geometry,
            num_queries=n,
            num_batches=-(-n // config.points_per_batch),
            stages=tuple(tracker.stages),
            device=str(device),
            device_name=device_name(device),
            tracker={**described, **recipe},
            precision_gate=gate(config.precision, device).reason if uses_precision else "",
            device_note=note,
        )
        return run, started

    def _resolve_geometry(self) -> VideoGeometry:
        """The given geometry (checked against the frames), else the info's source size over the frames."""
        if self.frames.ndim != 4 or self.frames.shape[3] != 3:
            raise VideoError(f"frames must be [T, H, W, 3], got shape {self.frames.shape}")
        geometry = self.geometry or VideoGeometry.from_info(self.video_info, self.frames)
        frame_size = (int(self.frames.shape[2]), int(self.frames.shape[1]))
        if geometry.frame_size != frame_size:
            raise VideoError(f"the video geometry's frame size {geometry.frame_size} is not the frames' {frame_size}")
        if geometry.is_scaled:
            log.info("frames %dx%d tracked for a %dx%d video; the session converts pixels both ways",
                     *geometry.frame_size, *geometry.source_size)
        return geometry

    def _step(self, run: _Run) -> BatchDone:
        """Track the next batch of points with the config as it is now."""
        previous = (run.config.precision, run.config.tracker)
        config = run.config = self._take_config()
        tracker = run.tracker = self._load_tracker(config.tracker)
        device, _ = _device_for(tracker, resolve_device(config.device), config.device)
        if config.tracker != previous[1]:
            run.uses_precision = _uses_precision(_guarded(tracker, "in describe()", tracker.describe))
        if (config.precision, config.tracker) != previous and run.uses_precision:
            _quant_recipe(tracker, config.precision, device)  # a live toggle to int8/fp8 is checked the same way
        precision = config.precision if run.uses_precision else UNUSED_PRECISION_RUNS_AS
        if device != run.device or run.timer.device != device:
            run.device, run.timer = device, StageTimer(device, enabled=self.timing)
        key = (tracker.name, str(device), config.precision, config.frames_per_batch)
        warm_key = (*key, config.points_per_batch)
        cold = not self.warm.is_warm(warm_key)
        start = run.start
        stop = min(run.num_queries, start + config.points_per_batch)
        ctx = RunContext(device, config.precision, config.frames_per_batch, run.timer)
        t0 = time.perf_counter()
        plugin = is_plugin(tracker)
        reuse = None if key != run.prepared_key else run.prepared
        queries = run.frame_queries[start:stop]

        def call() -> tuple[PreparedVideo, TrackResult]:
            """prepare (when needed) and track; in the helper thread for a plugin, so the contexts are entered here."""
            with torch.inference_mode(), precision_context(precision, device):
                prepared = reuse
                if prepared is None:
                    frames = run.frames
                    if plugin and not isinstance(tracker, PluginTracker):  # the adapter copies them itself
                        frames = frames.copy()  # a plugin writing into its frames cannot change the caller's
                    prepared = tracker.prepare(frames, ctx)
                return prepared, tracker.track(prepared, queries.copy() if plugin else queries, ctx)

        try:
            if plugin:
                prepared, result = call_plugin(tracker.name, f"while tracking points {start}-{stop - 1}", call)
            else:
                prepared, result = call()
        except PluginAbandoned:
            self._forget_tracker(tracker.name)  # its abandoned call may still use it
            raise
        except UserError:
            raise
        except Exception as exc:  # a tracker bug or resource failure: name it, keep what we have
            if _is_oom(exc):
                run.prepared = None
                if device.type == "cuda":
                    torch.cuda.empty_cache()
                raise oom_error(config, device_name(device), host=_is_host_oom(exc)) from exc
            raise TrackerError(
                f"tracker {tracker.name!r} failed on points {start}-{stop - 1}: {type(exc).__name__}: {exc}",
                "check the tracker's code, or choose another tracker",
            ) from exc
        if not isinstance(result, TrackResult):  # a plugin Tracker's track() returning anything else
            raise TrackerError(
                f"tracker {tracker.name!r}: track() returned a {type(result).__name__}, not a TrackResult "
                f"(points {start}-{stop - 1})",
                "return TrackResult(tracks [N, T, 2], visible [N, T]) from the tracker's track()",
            )
        did_prepare = prepared is not reuse
        run.prepared, run.prepared_key = prepared, key
        stage_ms = run.timer.collect()
        wall_ms = (time.perf_counter() - t0) * 1e3
        expected = (stop - start, run.num_frames, 2)
        if result.tracks.shape != expected:
            raise TrackerError(
                f"tracker {tracker.name!r} returned tracks of shape {result.tracks.shape}, expected {expected}"
            )
        _check_finite(tracker.name, start, stop, result.tracks)
        _check_within_bound(tracker.name, start, stop, result.tracks, run.geometry)
        batch_tracks = run.geometry.to_source(result.tracks)
        run.tracks[start:stop] = batch_tracks
        run.visible[start:stop] = result.visible
        self.warm.add(warm_key)
        peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
        done = BatchDone(
            t=time.perf_counter(),
            index=run.index,
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
        run.start = stop
        run.index += 1
        return done

    def _finish(self, run: _Run) -> Finished:
        """All points tracked, or cancelled between batches."""
        return Finished(
            t=time.perf_counter(),
            tracks=run.tracks,
            visible=run.visible,
            queries=self.queries,
            wall_ms=(time.perf_counter() - run.t_start) * 1e3,
            cancelled=run.start < run.num_queries,
        )

    def _failed(self, exc: Exception, run: _Run | None) -> Failed:
        """The error as an event, with what was tracked before it."""
        tracks = run.tracks if run is not None else None
        visible = run.visible if run is not None else None
        details = capped(traceback.format_exc(), MAX_DETAILS_CHARS)  # a plugin's message may be megabytes
        if isinstance(exc, UserError):
            kind = "oom" if isinstance(exc, OutOfMemory) else "tracker" if isinstance(exc, TrackerError) else "input"
            return Failed(time.perf_counter(), exc.message, exc.suggestion, kind, tracks, visible, details=details)
        log.error("internal error in a session: %s: %s", type(exc).__name__, exc)
        return Failed(time.perf_counter(), capped(f"internal error: {type(exc).__name__}: {exc}"), None, "internal",
                      tracks, visible, details=details)

    def _forget_tracker(self, name: str) -> None:
        """Drop a tracker whose call was abandoned, here and in the loader's cache."""
        if self._tracker is not None and self._tracker.name == name:
            self._tracker = None
        forget = getattr(self._tracker_loader, "forget", None)
        if forget is not None:
            forget(name)

    def _load_tracker(self, name: str) -> Tracker:
        if self._tracker is not None and self._tracker.name == name:
            return self._tracker
        if self._tracker_loader is None:
            from engine.trackers import load_tracker

            self._tracker = load_tracker(name)
        else:
            self._tracker = self._tracker_loader(name)
        return self._tracker


def _guarded(tracker: Tracker, what: str, fn: Callable[[], Any]) -> Any:
    """``fn()``, through ``call_plugin`` when ``tracker`` is plugin code (an exit or a hang there is caught)."""
    return call_plugin(tracker.name, what, fn) if is_plugin(tracker) else fn()


def _device_for(tracker: Tracker, device: torch.device, asked: str) -> tuple[torch.device, str]:
    """The device to run ``tracker`` on and a note when it is not ``device``; UserError for an explicit misfit."""
    supported = tuple(_guarded(tracker, "in device_types", lambda: tuple(tracker.device_types)))
    if device.type in supported:
        return device, ""
    names = ", ".join(supported) or "none"
    if (asked or "").strip().lower() in AUTO_DEVICES and FALLBACK_DEVICE in supported:
        note = f"tracker {tracker.name!r} runs only on {names}: device auto ran it on the CPU, not {device}"
        log.info(note)
        return torch.device(FALLBACK_DEVICE), note
    raise UserError(
        f"tracker {tracker.name!r} cannot run on {device}: it supports {names}",
        f"use --device {supported[0] if supported else 'cpu'} (or --device auto), or choose another tracker",
    )



def _uses_precision(described: Any) -> bool:
    """Whether a tracker's description lists precision among the settings it uses (all of them when unsaid)."""
    tunable = described.get("tunable", DEFAULT_TUNABLE) if isinstance(described, dict) else DEFAULT_TUNABLE
    return "precision" in (tunable if isinstance(tunable, (list, tuple)) else DEFAULT_TUNABLE)


def _quant_recipe(tracker: Tracker, precision: str, device: torch.device) -> dict[str, Any]:
    """The tracker's int8/fp8 recipe for the report; a tracker without one is refused, never run in float
    under a quantised label."""
    if precision not in QUANT_MODES:
        return {}
    recipe = _guarded(tracker, f"in describe_precision({precision!r})",
                      lambda: tracker.describe_precision(precision, device))
    if not recipe:
        raise TrackerError(f"tracker {tracker.name!r} has no {precision} recipe: it would run in float while "
                           f"labelled {precision}",
                           f"choose {either(runnable_modes(device, FLOAT_MODES))} for it, or a tracker "
                           "that quantises (corrtrack, or a plugin nn.Module with Linear layers)")
    return recipe

def _check_queries(queries: np.ndarray, num_frames: int, geometry: VideoGeometry) -> None:
    """QueryError unless queries [N, 3] are whole frame indices and source-pixel points inside the video."""
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
    bad = np.flatnonzero(~geometry.contains_source(queries[:, 1:]))
    if bad.size:
        i = bad[0]
        x, y = queries[i, 1], queries[i, 2]
        width, height = geometry.source_size
        raise QueryError(f"query {i} at ({x:g}, {y:g}) lies outside the {width}x{height} frame")


def _check_within_bound(name: str, start: int, stop: int, tracks: np.ndarray, geometry: VideoGeometry) -> None:
    """TrackerError when a batch's track lies further than TRACK_BOUND_FRAME_SIZES frame sizes outside the frame.

    A tracker may place an occluded point somewhat outside the frame; 1e38 is a bug, and it would overflow
    every later sum (errors, scaling to source pixels, a chart's range).
    """
    if tracks.size == 0:
        return
    size = np.array([geometry.frame_width, geometry.frame_height], dtype=np.float64)
    low, high = -TRACK_BOUND_FRAME_SIZES * size, (1 + TRACK_BOUND_FRAME_SIZES) * size
    xy = np.asarray(tracks, dtype=np.float64).reshape(-1, 2)
    outside = int(np.count_nonzero(((xy < low) | (xy > high)).any(axis=1)))
    if outside:
        worst = float(np.abs(xy).max())
        raise TrackerError(
            f"tracker {name!r} returned {outside} track position(s) more than {TRACK_BOUND_FRAME_SIZES} frame "
            f"sizes outside the {geometry.frame_width}x{geometry.frame_height} frame (largest |coordinate| "
            f"{worst:.3g}) for points {start}-{stop - 1}",
            "check the tracker's code (tracks are x, y in frame pixels), or choose another tracker",
        )


def _check_finite(name: str, start: int, stop: int, tracks: np.ndarray) -> None:
    """TrackerError naming the tracker and the count when a batch's tracks hold NaN or infinite values."""
    bad = int(np.count_nonzero(~np.isfinite(np.asarray(tracks, dtype=np.float64))))
    if bad:
        raise TrackerError(
            f"tracker {name!r} returned {bad} NaN or infinite track value(s) of {np.size(tracks)} "
            f"for points {start}-{stop - 1}",
            "check the tracker's code, or choose another tracker",
        )
