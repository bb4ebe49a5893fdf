"""Running: start and stop, live config changes, and each event of the run written into the state.

The worker's events arrive as signals on the GUI thread (``RunController``); each batch's tracks go
into the current ``RunData`` in place, so a run that is stopped or fails keeps what it computed. A
finished, stopped or failed run becomes an entry of the state's history (its video, tracker, every
precision and batch size it used, machine, status); a finished one's report becomes the state's report
(the trade-offs take it from the history) and, with the previous run of the same video and queries, an
A/B comparison. The progress line counts batches at the batch size in use. The live charts are this
controller's to drive.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from PySide6.QtCore import QObject, Signal

from engine.api import (
    BatchDone,
    ConfigChange,
    Failed,
    Finished,
    Report,
    RunConfig,
    Started,
    UserError,
    compile_status_text,
    fused_status_text,
    run_title,
)
from gui.controllers.runner import ReportReady, RunController
from gui.history import FAILED, FINISHED, STOPPED, run_settings, sized_title, video_name
from gui.model import RunData
from gui.state import AppState
from gui.widgets.charts import ChartsPanel

CONFIG_NOTE_MS = 5000  # how long "applies from the next batch" stays in the status bar


class RunActions(QObject):
    """Starts runs of the state's video and queries and turns their events into state changes."""

    starting = Signal()  # a run is about to start (the checks passed)
    run_finished = Signal(object)  # RunData of a finished run (tests, bench)
    status = Signal(str)  # the run's progress line (the run panel shows it)
    note = Signal(str)  # a passing note for the status bar

    def __init__(self, state: AppState, charts: ChartsPanel, sampler: Callable[[], Any],
                 parent: QObject | None = None):
        super().__init__(parent)
        self.state = state
        self.charts = charts
        self._sampler = sampler
        self.controller = RunController(self)
        self.controller.started_run.connect(self._on_started)
        self.controller.batch_done.connect(self._on_batch)
        self.controller.finished_run.connect(self._on_finished)
        self.controller.failed.connect(self._on_failed)
        self.controller.report_ready.connect(self._on_report)
        self._pending: ReportReady | None = None  # built and analysed by the worker, arrives before Finished
        self.batches_seen = 0
        self.num_batches = 0
        self._run_config: RunConfig | None = None
        self._origin: float | None = None
        self._previous: RunData | None = None
        self._run_start: float | None = None  # chart time of the current run's start
        self._tracker: dict[str, Any] = {}  # the running tracker's description (what settings it uses)
        self._configs: list[RunConfig] = []  # the configs the current run used, in order (live toggles)
        self._num_queries = 0
        self.compile_status = ""  # the last run's compile line (eager or compiled); "" when it does not compile
        self.kernel_status = ""  # the last run's fused-kernels line (CorrTrack on a GPU); "" otherwise
        self._device_name = ""
        state.video_changed.connect(self._reset_clock)
        state.video_changed.connect(lambda: self.status.emit(""))  # no progress line of another video's run

    @property
    def running(self) -> bool:
        """Whether a run's thread exists."""
        return self.controller.running

    # -- commands ----------------------------------------------------------------------------------------
    def start_run(self) -> bool:
        """Start tracking the queries with the current config; False (and a message) when it cannot."""
        s = self.state
        if self.controller.running:
            return False
        if s.frames is None:
            s.post_message("no video is open", "open a video (File > Open) or drop one on the window")
            return False
        if s.decoding:  # the tracker is fed the whole video: it waits for the last frame
            s.post_message("the video is still decoding", "wait for it to finish (or Cancel it to track the frames "
                           "decoded so far)", level="info")
            return False
        if len(s.queries) == 0:
            s.post_message("no query points", "click on the video, make a grid, or load a queries CSV")
            return False
        config = s.config
        self.starting.emit()
        self._previous = s.current  # still shown until the new run's first batch; back if it fails
        run = RunData.empty(run_title(config), config.to_dict(), s.queries, len(s.frames))
        run.video_path = s.video_path
        s.current = run  # shown from its first batch on (no current_changed: the old tracks stay until then)
        self._run_config = None
        self._run_start = None
        self._configs = []  # filled from Started: a run that never starts leaves no entry
        self.controller.start(s.frames, s.queries, config, video_info=s.video_info, telemetry=self._sampler(),
                              ground_truth=s.matching_ground_truth())
        return True

    def stop_run(self) -> None:
        """Stop after the current batch."""
        self.controller.stop()

    def apply_config(self, change: ConfigChange) -> None:
        """A toggle changed: a running session applies it from its next batch (refused at once when it does not fit)."""
        if not self.controller.running:
            return
        try:
            self.controller.update_config(change)
        except UserError as exc:  # ConfigError: the running session is untouched
            self.state.post_message(f"cannot apply {change.describe()}: {exc.message}", exc.suggestion,
                                    level="warning")
            return
        self.note.emit(f"{self.state.config.label()}: applies from the next batch")

    # -- events (GUI thread) ----------------------------------------------------------------------------------
    def _reset_clock(self) -> None:
        self._origin = None
        self.charts.clear_runs()

    def _t(self, t: float) -> float:
        if self._origin is None:
            self._origin = t
            self.charts.set_origin(t)
        return t - self._origin

    def _on_report(self, ready: ReportReady) -> None:
        if isinstance(ready.report, Report):
            self._pending = ready
        else:
            self._pending = None
            self.state.post_message(str(ready.report), level="warning")

    def _on_started(self, event: Started) -> None:
        s = self.state
        self._run_start = self._t(event.t)
        self.charts.follow()
        self._pending = None
        self.batches_seen = 0
        self.num_batches = event.num_batches
        self.charts.set_stages(list(event.stages))
        self._tracker = dict(event.tracker or {})
        self._configs = [event.config]
        self._num_queries = event.num_queries
        self._device_name = event.device_name
        title = self._title()
        if self._run_config is not None and event.config != self._run_config:
            self.charts.mark(self._t(event.t), event.config.label())  # a marker says the whole config
        self._run_config = event.config
        if s.current is None or len(s.current.tracks) != event.num_queries:
            num_frames = 0 if s.frames is None else len(s.frames)
            s.current = RunData.empty(title, event.config.to_dict(), s.queries, num_frames)
        s.current.label = title
        s.current.config = event.config.to_dict()
        gate_note = f" ({event.precision_gate})" if event.precision_gate else ""
        self.status.emit(f"Running on {event.device_name}{gate_note}: 0 / {event.num_batches} batches")
        compiled = compile_status_text(self._tracker)  # "CorrTrack: eager, compiling in the background…"
        if compiled and compiled != self.compile_status:  # said once per change, not at every looped run
            self.compile_status = compiled
            self.note.emit(compiled)
        kernels = fused_status_text(self._tracker, event.device)  # "CorrTrack: fused kernels on for CUDA …"
        if kernels and kernels != self.kernel_status:
            self.kernel_status = kernels
            self.note.emit(kernels)

    def _title(self) -> str:
        """The running tracker with every value of its settings used so far ('corrtrack fp32 p64→32 f16')."""
        name = self._configs[0].tracker if self._configs else "?"
        return sized_title(name, run_settings(self._tracker, self._configs))

    def _on_batch(self, event: BatchDone) -> None:
        self.batches_seen += 1
        run = self.state.current
        if event.config not in self._configs:
            self._configs.append(event.config)
        title = self._title()
        left = max(0, self._num_queries - event.stop)  # points still to track, at the batch size now in use
        self.num_batches = self.batches_seen + math.ceil(left / max(1, event.config.points_per_batch))
        if run is not None and event.stop <= len(run.tracks):
            run.tracks[event.start:event.stop] = event.tracks
            run.visible[event.start:event.stop] = event.visible
            run.label = title
            self.state.update_tracks()
        t_end = self._t(event.t)
        if self._run_config is not None and event.config != self._run_config:
            self.charts.mark(t_end - event.wall_ms / 1e3, event.config.label())
        self._run_config = event.config
        self.charts.add_batch(t_end, event.wall_ms, event.stage_ms)
        self.status.emit(f"{title}: batch {self.batches_seen} / {self.num_batches}, "
                         f"{event.wall_ms:.0f} ms")

    def _on_finished(self, event: Finished) -> None:
        s = self.state
        run = s.current
        self._keep_done(event.tracks, event.visible)
        ready, self._pending = self._pending, None
        report = ready.report if ready is not None and isinstance(ready.report, Report) else None
        if self._run_start is not None and not self.controller.loop:
            self.charts.focus(self._run_start, self._t(event.t))
        self.status.emit(f"{'stopped' if event.cancelled else 'finished'} in {event.wall_ms:.0f} ms")
        if run is None:
            return
        snapshot = RunData(run.label, dict(run.config), run.queries, run.tracks.copy(), run.visible.copy(), report,
                           s.video_path)  # the history keeps a copy: a loop's next run writes into ``run``
        if report is not None:
            run.report = report
            s.set_report(report, ready.recorder if ready else None, ready.analysis if ready else None)
            self.charts.set_cost(s.analysis.cost if s.analysis else None)
        last = next(iter(reversed(list(s.runs))), None)
        repeat = (self.controller.loop and last is not None and last.source == "run" and last.title == run.label
                  and last.video == video_name(s.video_path))
        if not repeat:  # a loop's repeats of one configuration are one entry
            self._add_entry(snapshot, STOPPED if event.cancelled else FINISHED, report,
                            ready.recorder if ready is not None and report is not None else None)
        self.run_finished.emit(run)

    def _add_entry(self, run: RunData, status: str, report: Report | None, recorder: Any) -> None:
        """The run as an entry of the history (compared with the previous one of its video when it finished)."""
        s = self.state
        machine = report.device_name if report is not None else self._device_name
        tracker = self._configs[0].tracker if self._configs else str(run.config.get("tracker", "?"))
        entry = s.new_entry(video=video_name(s.video_path), tracker=tracker, machine=machine,
                            settings=run_settings(self._tracker, self._configs), status=status, source="run",
                            run=run, report=report, analysis=s.analysis if report is not None else None,
                            recorder=recorder, num_frames=run.num_frames)
        s.add_entry(entry, compare_previous=status == FINISHED, select=report is not None)

    def _on_failed(self, event: Failed) -> None:
        s = self.state
        self._pending = None
        run = s.current
        self._keep_done(event.tracks, event.visible)
        kept = 0 if run is None else int(np.isfinite(run.tracks).all(axis=(1, 2)).sum())
        if run is not None and self._configs:  # it started: an entry, with what it kept
            self._add_entry(RunData(run.label, dict(run.config), run.queries, run.tracks.copy(), run.visible.copy(),
                                    None, s.video_path), f"{FAILED} ({event.kind})", None, None)
        if kept == 0 and self._previous is not None:  # nothing new: show the last results again
            s.set_current(self._previous)
            self.status.emit(f"failed ({event.kind}); showing the previous run")
        else:
            self.status.emit(f"failed ({event.kind}); {kept} points kept")
        s.post_message(event.message, event.suggestion, "error")

    def _keep_done(self, tracks: np.ndarray | None, visible: np.ndarray | None) -> None:
        """Copy the finished points of a run's final tracks [N, T, 2] into the current run (a stopped or
        failed run leaves the rest NaN: the points shown from earlier batches stay)."""
        run = self.state.current
        if run is None or tracks is None or visible is None or tracks.shape != run.tracks.shape:
            return
        # only the points the batches did not deliver (a run's last batch already wrote, and redrew, all of
        # them): copying the whole [N, T, 2] again and redrawing the view on the GUI thread at the end of
        # every run was part of its end-of-run stall (issue 12)
        missing = ~np.isfinite(run.tracks).all(axis=(1, 2))  # [N]
        if not missing.any():
            return
        done = missing & np.isfinite(tracks).all(axis=(1, 2))  # [N]
        if not done.any():
            return
        run.tracks[done] = tracks[done]
        run.visible[done] = visible[done]
        self.state.update_tracks()
