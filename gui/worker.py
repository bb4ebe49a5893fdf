"""Running a session off the GUI thread: a parentless QObject moved to a QThread.

The worker iterates ``Session.events()`` in its thread and re-emits every event as a Qt signal (one
per batch), so widgets are only ever touched on the GUI thread. Stop cancels the session between
batches; Loop starts the same run again when one finishes, with the latest configuration. The
worker also records the events and builds each run's report, so that work stays off the GUI thread.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

import numpy as np
from PySide6.QtCore import QObject, QThread, Signal, Slot

from engine.api import BatchDone, Failed, Finished, RunConfig, Session, Started, TrackerCache

#: how long closing the window waits for the worker thread to end, ms
SHUTDOWN_WAIT_MS = 10_000
#: events the worker may emit before the GUI has handled them; past this the worker waits (backpressure,
#: so a fast tracker or a loop cannot flood the GUI's event queue)
MAX_IN_FLIGHT = 4
#: how often a waiting worker re-checks its stop flag, s
WAIT_POLL_S = 0.1


class SessionWorker(QObject):
    """Drives sessions in a worker thread; created without a parent so ``moveToThread`` works."""

    started_run = Signal(object)  # Started
    batch_done = Signal(object)  # BatchDone
    finished_run = Signal(object)  # Finished
    failed = Signal(object)  # Failed
    report_ready = Signal(object)  # (report dict or error str, RunRecorder), emitted before finished_run/failed
    done = Signal()  # the worker's loop has ended (after stop, error, or the last run)

    def __init__(self, frames: np.ndarray, queries: np.ndarray, config: RunConfig, loop: bool = False,
                 session_factory: Callable[..., Session] = Session, video_info: dict[str, Any] | None = None,
                 telemetry: Any = None, ground_truth: dict[str, np.ndarray] | None = None,
                 tracker_loader: Callable[[str], Any] | None = None):
        super().__init__()
        self._tracker_loader = tracker_loader
        self._frames = frames
        self._queries = queries
        self._config = config
        self._video_info = dict(video_info or {})
        self._factory = session_factory
        self._telemetry = telemetry
        self._ground_truth = ground_truth
        self._lock = threading.Lock()
        self._session: Session | None = None
        self._stop = threading.Event()
        self._loop = loop
        self._in_flight = 0
        self._handled = threading.Condition()

    # -- called from the GUI thread (thread-safe) ---------------------------------------------
    def stop(self) -> None:
        """Cancel the current run between batches and do not loop again."""
        self._stop.set()
        with self._lock:
            if self._session is not None:
                self._session.cancel()
        with self._handled:
            self._handled.notify_all()

    def handled(self) -> None:
        """The GUI has handled one event."""
        with self._handled:
            self._in_flight = max(0, self._in_flight - 1)
            self._handled.notify_all()

    def set_loop(self, loop: bool) -> None:
        self._loop = loop

    def update_config(self, **changes: Any) -> None:
        """Apply config changes from the next batch, and to every later looped run."""
        with self._lock:
            self._config = self._config.with_changes(**changes)
            if self._session is not None:
                self._session.update_config(**changes)

    # -- runs in the worker thread ----------------------------------------------------------------
    @Slot()
    def run(self) -> None:
        """Run (and loop) until stopped, finished or failed; emits one signal per event."""
        try:
            while not self._stop.is_set():
                with self._lock:
                    session = self._factory(self._frames, self._queries, self._config,
                                            video_info=self._video_info, tracker_loader=self._tracker_loader)
                    self._session = session
                ok = self._drive(session)
                with self._lock:
                    self._config = session.config  # keep changes made during the run
                    self._session = None
                if not ok or not self._loop:
                    break
        finally:
            self.done.emit()

    def _emit(self, signal: Any, payload: Any) -> None:
        """Emit, waiting first while too many events are unhandled (never after stop)."""
        with self._handled:
            while self._in_flight >= MAX_IN_FLIGHT and not self._stop.is_set():
                self._handled.wait(WAIT_POLL_S)
            self._in_flight += 1
        signal.emit(payload)

    def _report(self, recorder: Any) -> None:
        """Build the run report here, off the GUI thread, without the tracks.

        The tracks are converted to JSON only on export: turning 100k coordinates into Python floats
        holds the GIL long enough to stall the GUI. Emits (report dict or error text, the recorder).
        """
        try:
            report: Any = recorder.build(telemetry=self._telemetry, ground_truth=self._ground_truth,
                                         keep_tracks=False)
        except Exception as exc:  # the tracks are kept even if the report cannot be made
            report = f"could not build the run report: {type(exc).__name__}: {exc}"
        self._emit(self.report_ready, (report, recorder))

    def _drive(self, session: Session) -> bool:
        from engine.api import RunRecorder

        recorder = RunRecorder()
        for event in session.events():
            recorder.add(event)
            if isinstance(event, (Finished, Failed)):
                self._report(recorder)
            if isinstance(event, Started):
                self._emit(self.started_run, event)
            elif isinstance(event, BatchDone):
                self._emit(self.batch_done, event)
            elif isinstance(event, Finished):
                self._emit(self.finished_run, event)
                return not event.cancelled
            elif isinstance(event, Failed):
                self._emit(self.failed, event)
                return False
        return False


class RunController(QObject):
    """Owns the worker thread: start, stop, loop, live config changes, and a clean shutdown."""

    started_run = Signal(object)
    batch_done = Signal(object)
    finished_run = Signal(object)
    failed = Signal(object)
    report_ready = Signal(object)
    #: emitted when a run starts or its thread ends; read ``running`` (no bool argument: PySide6 6.12
    #: drops a reference to True/False on every Python-emitted bool and crashes the interpreter later)
    running_changed = Signal()

    def __init__(self, parent: QObject | None = None, session_factory: Callable[..., Session] = Session):
        super().__init__(parent)
        self._factory = session_factory
        self.trackers = TrackerCache()  # loaded once, reused by every run and loop of this window
        self._thread: QThread | None = None
        self._worker: SessionWorker | None = None
        self._latest: SessionWorker | None = None  # the worker of the latest start(); older ones are muted
        self._outlived: list[tuple[QThread, SessionWorker]] = []  # threads still in a batch after shutdown's wait
        self.loop = False

    @property
    def running(self) -> bool:
        return self._thread is not None

    def start(self, frames: np.ndarray, queries: np.ndarray, config: RunConfig,
              video_info: dict[str, Any] | None = None, telemetry: Any = None,
              ground_truth: dict[str, np.ndarray] | None = None) -> None:
        """Start a run in a new worker thread (stops and joins a previous one first).

        telemetry: the sampler whose window goes into each run's report; ground_truth: for its accuracy.
        """
        self.shutdown()
        worker = SessionWorker(frames, queries, config, loop=self.loop, session_factory=self._factory,
                               video_info=video_info, telemetry=telemetry, ground_truth=ground_truth,
                               tracker_loader=self.trackers)
        thread = QThread()
        thread.setObjectName("trackscope-worker")
        worker.moveToThread(thread)
        worker.started_run.connect(self._relay_started)
        worker.batch_done.connect(self._relay_batch)
        worker.finished_run.connect(self._relay_finished)
        worker.failed.connect(self._relay_failed)
        worker.report_ready.connect(self._relay_report)
        worker.done.connect(thread.quit)
        thread.started.connect(worker.run)
        thread.finished.connect(self._on_thread_finished)
        self._worker, self._thread = worker, thread
        self._latest = worker
        thread.start()
        self.running_changed.emit()

    # the relays run on the GUI thread: re-emit to the window, then tell the worker it was handled
    @Slot(object)
    def _relay_started(self, event: Started) -> None:
        self._relay(self.started_run, event)

    @Slot(object)
    def _relay_batch(self, event: BatchDone) -> None:
        self._relay(self.batch_done, event)

    @Slot(object)
    def _relay_finished(self, event: Finished) -> None:
        self._relay(self.finished_run, event)

    @Slot(object)
    def _relay_failed(self, event: Failed) -> None:
        self._relay(self.failed, event)

    @Slot(object)
    def _relay_report(self, payload: tuple[Any, Any]) -> None:
        self._relay(self.report_ready, payload)

    def _relay(self, signal: Any, payload: Any) -> None:
        sender = self.sender()
        if sender is not None and sender is not self._latest:
            return  # a late event of a run that was shut down before the latest one started
        try:
            signal.emit(payload)
        finally:
            # credit the running worker (a stopped worker's late event at most frees one extra slot)
            if self._worker is not None:
                self._worker.handled()

    def set_loop(self, loop: bool) -> None:
        self.loop = loop
        if self._worker is not None:
            self._worker.set_loop(loop)

    def update_config(self, **changes: Any) -> None:
        if self._worker is not None:
            self._worker.update_config(**changes)

    def stop(self) -> None:
        """Ask the run to stop between batches; returns at once."""
        if self._worker is not None:
            self._worker.stop()

    def shutdown(self, wait_ms: int = SHUTDOWN_WAIT_MS) -> bool:
        """Stop and join the worker thread; True when it ended within ``wait_ms``."""
        thread, worker = self._thread, self._worker
        if thread is None:
            return True
        if worker is not None:
            worker.stop()
        thread.quit()
        ok = thread.wait(wait_ms)
        self._latest = None  # events it queued before stopping are dropped, not shown over the next video
        self._cleanup()
        return bool(ok)

    @Slot()
    def _on_thread_finished(self) -> None:
        if self._thread is not None and self._thread.isFinished():  # not a newer thread that is running
            self._cleanup()
        for thread, worker in [tw for tw in self._outlived if tw[0].isFinished()]:
            self._outlived.remove((thread, worker))
            thread.deleteLater()
            worker.deleteLater()

    def _cleanup(self) -> None:
        if self._thread is None:
            return
        thread, worker = self._thread, self._worker
        self._thread = self._worker = None
        if thread.isRunning():  # a batch outlived shutdown's wait: deleting a running QThread aborts the process
            self._outlived.append((thread, worker))  # deleted by _on_thread_finished when it ends
        else:
            thread.deleteLater()
            worker.deleteLater()
        self.running_changed.emit()
