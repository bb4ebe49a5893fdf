"""Running sessions off the GUI thread, with the one worker idiom of ``gui.worker``.

``SessionJob`` is the generator the worker iterates: it makes a session, yields its events one by one
(one per batch) and each run's report, built in the worker thread; Loop starts the same run again
when one finishes, with the latest configuration. ``RunController`` owns the worker thread: start,
stop (between batches), loop, live config changes, and a clean shutdown; it re-emits the events as
typed signals on the GUI thread and tells the worker each was handled (the backpressure).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
from PySide6.QtCore import QObject, QThread, Signal, Slot

from engine.api import (
    Analysis,
    BatchDone,
    ConfigChange,
    Failed,
    Finished,
    Report,
    RunConfig,
    RunRecorder,
    Session,
    Started,
    TrackerCache,
    analyse,
    build_report,
)
from gui.worker import CLOSE_WAIT_MS, SHUTDOWN_WAIT_MS, GeneratorWorker, WorkerHandle, start_worker

log = logging.getLogger(__name__)

WORKER_THREAD_NAME = "trackscope-worker"


@dataclass
class ReportReady:
    """A run's report (or why it could not be built), its analysis and its recorder; yielded before
    Finished/Failed."""

    report: Report | str
    recorder: RunRecorder
    analysis: Analysis | None = None


class SessionJob:
    """Sessions over the same frames and queries, looped or not; iterate it in the worker thread."""

    def __init__(self, frames: np.ndarray, queries: np.ndarray, config: RunConfig, loop: bool = False,
                 session_factory: Callable[..., Session] = Session, video_info: dict[str, Any] | None = None,
                 telemetry: Any = None, ground_truth: dict[str, np.ndarray] | None = None,
                 tracker_loader: Callable[[str], Any] | None = None):
        self._frames = frames
        self._queries = queries
        self._config = config
        self._loop = loop
        self._factory = session_factory
        self._video_info = dict(video_info or {})
        self._telemetry = telemetry
        self._ground_truth = ground_truth
        self._tracker_loader = tracker_loader
        self._lock = threading.Lock()
        self._session: Session | None = None
        self._stop = threading.Event()

    # -- called from the GUI thread (thread-safe) ---------------------------------------------
    def stop(self) -> None:
        """Cancel the current run between batches and do not loop again."""
        self._stop.set()
        with self._lock:
            if self._session is not None:
                self._session.cancel()

    def set_loop(self, loop: bool) -> None:
        """Run again when a run finishes (or not)."""
        self._loop = loop

    def update_config(self, change: ConfigChange) -> None:
        """Apply a config change from the next batch, and to every later looped run.

        ConfigError (raised here, in the caller's thread) when it does not fit: nothing is changed then.
        """
        with self._lock:
            config = change.applied_to(self._config)
            if self._session is not None:
                self._session.update_config(change)
            self._config = config

    # -- iterated in the worker thread ----------------------------------------------------------
    def __call__(self) -> Iterator[Any]:
        """Events of every run (and each run's ReportReady), until stopped, failed or not looping."""
        while not self._stop.is_set():
            with self._lock:
                session = self._factory(self._frames, self._queries, self._config,
                                        video_info=self._video_info, tracker_loader=self._tracker_loader)
                self._session = session
            ok = yield from self._drive(session)
            with self._lock:
                self._config = session.config  # keep changes made during the run
                self._session = None
            if not ok or not self._loop:
                break

    def _report(self, recorder: RunRecorder) -> ReportReady:
        """The run report and its analysis (roofline, today's findings), made here off the GUI thread.

        The report leaves the tracks out until it is exported (the run's tracks are in the app already).
        """
        try:
            report = build_report(recorder, telemetry=self._telemetry, ground_truth=self._ground_truth,
                                  keep_tracks=False)
            return ReportReady(report, recorder, analyse(report))
        except Exception as exc:  # the tracks are kept even if the report cannot be made
            log.exception("could not build the run report")
            return ReportReady(f"could not build the run report: {type(exc).__name__}: {exc}", recorder)

    def _drive(self, session: Session) -> Generator[Any, None, bool]:
        """One session's events; returns whether the next looped run may start."""
        recorder = RunRecorder()
        for event in session.events():
            recorder.add(event)
            if isinstance(event, (Finished, Failed)):
                yield self._report(recorder)
            yield event
            if isinstance(event, Finished):
                return not event.cancelled
            if isinstance(event, Failed):
                return False
        return False


class RunController(QObject):
    """Owns the run's worker thread: start, stop, loop, live config changes, and a clean shutdown."""

    started_run = Signal(object)  # Started
    batch_done = Signal(object)  # BatchDone
    finished_run = Signal(object)  # Finished
    failed = Signal(object)  # Failed
    report_ready = Signal(object)  # ReportReady (a Report or error text), before finished_run/failed
    #: emitted when a run starts or its thread ends; read ``running`` (no bool argument: PySide6 6.12
    #: drops a reference to True/False on every Python-emitted bool and crashes the interpreter later)
    running_changed = Signal()

    def __init__(self, parent: QObject | None = None, session_factory: Callable[..., Session] = Session):
        super().__init__(parent)
        self._factory = session_factory
        self.trackers = TrackerCache()  # loaded once, reused by every run and loop of this window
        self._handle: WorkerHandle | None = None
        self._job: SessionJob | None = None
        self._latest: QObject | None = None  # the worker of the latest start(); older ones are muted
        self._outlived: list[WorkerHandle] = []  # threads still in a batch after shutdown's wait
        self.loop = False

    @property
    def running(self) -> bool:
        """Whether a run's thread exists (running or finishing)."""
        return self._handle is not None

    @property
    def _thread(self) -> Any:
        """The current worker thread, or None (tests)."""
        return None if self._handle is None else self._handle.thread

    def start(self, frames: np.ndarray, queries: np.ndarray, config: RunConfig,
              video_info: dict[str, Any] | None = None, telemetry: Any = None,
              ground_truth: dict[str, np.ndarray] | None = None) -> None:
        """Start a run in a new worker thread (stops and joins a previous one first).

        telemetry: the sampler whose window goes into each run's report; ground_truth: for its accuracy.
        """
        self.shutdown()
        job = SessionJob(frames, queries, config, loop=self.loop, session_factory=self._factory,
                         video_info=video_info, telemetry=telemetry, ground_truth=ground_truth,
                         tracker_loader=self.trackers)

        def connect(worker: GeneratorWorker, thread: QThread) -> None:
            worker.yielded.connect(self._relay)
            worker.errored.connect(self._relay_error)
            thread.finished.connect(self._on_thread_finished)
            self._latest = worker

        self._job = job
        self._handle = start_worker(job, WORKER_THREAD_NAME, on_quit=job.stop, connect=connect)
        self.running_changed.emit()

    # the relays run on the GUI thread: re-emit to the window, then tell the worker it was handled
    @Slot(object)
    def _relay(self, value: Any) -> None:
        sender = self.sender()
        if sender is not None and sender is not self._latest:
            return  # a late event of a run that was shut down before the latest one started
        try:
            if isinstance(value, ReportReady):
                self.report_ready.emit(value)
            elif isinstance(value, Started):
                self.started_run.emit(value)
            elif isinstance(value, BatchDone):
                self.batch_done.emit(value)
            elif isinstance(value, Finished):
                self.finished_run.emit(value)
            elif isinstance(value, Failed):
                self.failed.emit(value)
        finally:
            # credit the running worker (a stopped worker's late event at most frees one extra slot)
            if self._handle is not None:
                self._handle.worker.handled()

    @Slot(object)
    def _relay_error(self, exc: Exception) -> None:
        """An exception out of the job itself (not a session's Failed event): shown as a failed run."""
        if self.sender() is not self._latest:
            return
        self.failed.emit(Failed(time.perf_counter(), f"the run stopped: {type(exc).__name__}: {exc}", None,
                                "internal"))

    def set_loop(self, loop: bool) -> None:
        """Loop the current and later runs (or not)."""
        self.loop = loop
        if self._job is not None:
            self._job.set_loop(loop)

    def update_config(self, change: ConfigChange) -> None:
        """Apply a config change to the running session from its next batch (ConfigError when it does not fit)."""
        if self._job is not None:
            self._job.update_config(change)

    def stop(self) -> None:
        """Ask the run to stop between batches; returns at once."""
        if self._handle is not None:
            self._handle.stop()

    def shutdown(self, wait_ms: int = SHUTDOWN_WAIT_MS) -> bool:
        """Stop and join the worker thread; True when it ended within ``wait_ms``."""
        if self._handle is None:
            return True
        ok = self._handle.join(wait_ms)
        self._latest = None  # events it queued before stopping are dropped, not shown over the next video
        self._cleanup()
        return ok

    def close(self) -> bool:
        """Shut down for the window's close: wait at most CLOSE_WAIT_MS, then leave a batch behind."""
        return self.shutdown(CLOSE_WAIT_MS)

    @property
    def abandoned(self) -> int:
        """Worker threads still inside a batch after a shutdown stopped waiting for them."""
        return sum(1 for h in self._outlived if h.running)

    @Slot()
    def _on_thread_finished(self) -> None:
        if self._handle is not None and not self._handle.running:  # not a newer thread that is running
            self._cleanup()
        for handle in [h for h in self._outlived if not h.running]:
            self._outlived.remove(handle)
            handle.delete_later()

    def _cleanup(self) -> None:
        if self._handle is None:
            return
        handle, self._handle, self._job = self._handle, None, None
        if handle.running:  # a batch outlived shutdown's wait: deleting a running QThread aborts the process
            self._outlived.append(handle)  # deleted by _on_thread_finished when it ends
        else:
            handle.delete_later()
        self.running_changed.emit()
