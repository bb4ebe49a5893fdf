"""Run > Deep capture: one more warm run of a run's configuration under torch.profiler, off the GUI thread.

The capture belongs to a run: the history entry selected when it starts (a run made here, of the open
video), with that run's configuration and queries; without one, the toggles' configuration and the
current queries (a capture of no run). Its summary joins that entry's report (and the current one,
when that entry is still the one shown), so File > Export > Run report exports the run it was made of;
its trace is copied beside an exported report (``trace_path_for``) and File > Export > Trace saves it
anywhere. Traces live in this session's temporary folder until then.

Under the profiler the plugin call runs in the capturing thread itself (engine.trackers.guard), so a
hung plugin cannot be abandoned from inside. The capture therefore runs in a plain daemon thread
named ``CAPTURE_THREAD_NAME`` that the controller can give up on: Stop sets the capture's cancel flag
(a run ends at its next batch, the profiled one at its next op) and waits ``STOP_WAIT_MS``; a capture
still running then is left behind (named, listed in ``abandoned``, said in the window) and its late
result ignored. ``shutdown`` is bounded the same way. Results reach the GUI thread through the queued
signals of a parentless QObject; the thread never touches a widget. Runs are refused while a capture
runs (``busy``), and a capture while a run does.
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QFileDialog, QWidget

from engine.api import (
    DeepCapture,
    Report,
    RunConfig,
    Session,
    UserError,
    atomic_path,
    deep_capture,
    load_tracker,
    trace_path_for,
)
from gui.history import HistoryEntry, video_name
from gui.state import AppState
from gui.worker import CLOSE_WAIT_MS

CAPTURE_THREAD_NAME = "trackscope-capture"
TRACE_NAME = "capture.trace.json.gz"
#: how long Stop waits for a capture to end before leaving its thread behind, ms
STOP_WAIT_MS = 1_000
#: how long closing the window waits for a capture, ms (the file controller's bound)
SHUTDOWN_WAIT_MS = CLOSE_WAIT_MS


class _Delivery(QObject):
    """Carries a capture's outcome from its thread to the GUI thread (queued: created on the GUI thread)."""

    finished = Signal(int, object)  # token, DeepCapture
    failed = Signal(int, object)  # token, the exception


@dataclasses.dataclass
class _Job:
    token: int
    thread: threading.Thread
    cancel: threading.Event
    entry_id: int | None
    label: str
    trace: Path


class CaptureController(QObject):
    """Starts deep captures, ties each to its run, stops them, and hands results to ``captured``."""

    captured = Signal(object)  # DeepCapture
    note = Signal(str, int)  # status bar text, ms (0: until replaced)

    def __init__(self, state: AppState, is_running: Any, config: Any, parent: QWidget | None = None) -> None:
        super().__init__()
        self.state = state
        self._parent = parent
        self._is_running = is_running  # () -> bool: a tracking run is in progress
        self._config = config  # () -> RunConfig: what the toggles say now
        self._job: _Job | None = None
        self._token = 0
        self.abandoned: list[threading.Thread] = []  # capture threads given up on (still running)
        self.traces: dict[int, Path] = {}  # history entry id -> its capture's trace
        self.last_trace: Path | None = None  # the latest capture's trace (of a run or of none)
        self._delivery = _Delivery()
        self._delivery.finished.connect(self._done)
        self._delivery.failed.connect(self._failed)
        self._folder = tempfile.TemporaryDirectory(prefix="trackscope-capture-")  # traces of this session

    @property
    def busy(self) -> bool:
        """Whether a capture is running (one given up on no longer counts)."""
        return self._job is not None and self._job.thread.is_alive()

    # -- what a capture is of ----------------------------------------------------------------------------
    def _selected_run(self) -> HistoryEntry | None:
        """The selected history entry when it is a run made here of the open video (its frames are the ones shown).
        An opened report's entry never is: its tracker name comes from a file (a plugin is code)."""
        s = self.state
        entry = s.runs.get(s.selected) if s.selected is not None else None
        if entry is None or entry.run is None or entry.source != "run" or s.frames is None:
            return None
        if entry.video != video_name(s.video_path) or entry.run.num_frames != len(s.frames):
            return None
        return entry

    def start(self) -> bool:
        """Capture the selected run (else the toggles' configuration); False (with a message) when it cannot."""
        s = self.state
        if s.frames is None or not len(s.queries) or s.decoding:
            s.post_message("open a video (decoded to its end) and add query points before a deep capture",
                           level="warning")
            return False
        if self._is_running() or self.busy:
            s.post_message("a run or a capture is in progress: stop it, then capture", level="warning")
            return False
        entry = self._selected_run()
        if entry is not None and entry.run is not None:
            config = (entry.report.config if entry.report is not None
                      else RunConfig.from_dict(dict(entry.run.config)))
            queries = entry.run.queries.copy()
        else:
            config, queries = self._config(), s.queries.copy()
        frames = s.frames.copy()  # the worker's own: the app may open another video
        info, geometry = dict(s.video_info), s.geometry
        self._token += 1
        trace = Path(self._folder.name) / f"{self._token}-{TRACE_NAME}"
        cancel = threading.Event()
        token, delivery = self._token, self._delivery

        def work() -> None:
            try:
                tracker = load_tracker(config.tracker)  # one instance: its modules are the capture's roots
                deep = deep_capture(lambda: Session(frames, queries, config, tracker=tracker, video_info=info,
                                                    geometry=geometry),
                                    precision=config.precision, typical_wall_ms=None, trace_path=trace, cancel=cancel)
            except BaseException as exc:  # noqa: BLE001 - reported on the GUI thread; never ends the app
                delivery.failed.emit(token, exc)
            else:
                delivery.finished.emit(token, deep)

        thread = threading.Thread(target=work, name=CAPTURE_THREAD_NAME, daemon=True)
        self._job = _Job(token, thread, cancel, entry.id if entry is not None else None, config.label(), trace)
        thread.start()
        of = f"run #{entry.id} ({config.label()})" if entry is not None else config.label()
        self.note.emit(f"deep capture of {of}… (Run > Stop capture ends it)", 0)
        return True

    # -- stopping ----------------------------------------------------------------------------------------
    def stop(self, wait_ms: int = STOP_WAIT_MS) -> bool:
        """Stop the capture in flight: cancel it, wait ``wait_ms``, else leave its thread behind. True when it
        ended (or none ran)."""
        job = self._job
        if job is None:
            return True
        job.cancel.set()
        job.thread.join(wait_ms / 1000)
        self._job = None
        self._token += 1  # whatever it still delivers is stale
        if not job.thread.is_alive():
            self.note.emit("deep capture stopped", 5000)
            return True
        self.abandoned.append(job.thread)
        self.state.post_message(
            f"the deep capture of {job.label} did not stop within {wait_ms / 1000:g} s (its plugin call does not "
            f"return): its thread {job.thread.name!r} is left running in the background until the app exits",
            "the plugin hangs under the profiler: fix it or choose another tracker", level="warning")
        return False

    def shutdown(self) -> None:
        """Closing the window: stop a capture in flight within ``SHUTDOWN_WAIT_MS``, then drop this session's
        traces (an abandoned capture may still be writing one: its folder is removed regardless)."""
        self.stop(SHUTDOWN_WAIT_MS)
        self._folder.cleanup()

    # -- results (GUI thread) ----------------------------------------------------------------------------
    def _done(self, token: int, deep: DeepCapture) -> None:
        job = self._job
        if job is None or token != job.token:
            return
        self._job = None
        if deep.error:
            self.state.post_message(f"deep capture not available: {deep.error}", level="warning")
        else:
            self._attach(job.entry_id, deep)
        if deep.trace_path is not None:
            self.last_trace = deep.trace_path
            if job.entry_id is not None:
                self.traces[job.entry_id] = deep.trace_path
        self.note.emit("deep capture done" + (f": {deep.stopped}" if deep.stopped else ""), 5000)
        self.captured.emit(deep)

    def _attach(self, entry_id: int | None, deep: DeepCapture) -> None:
        """The capture joins its run's report; the current report too when that run is still the one shown."""
        s = self.state
        entry = s.runs.get(entry_id) if entry_id is not None else None
        if entry is None or entry.report is None:
            return
        entry.report = dataclasses.replace(entry.report, capture=deep.to_dict())
        entry.analysis = None  # today's capture rules run on the next analysis
        if s.selected == entry.id:
            s.set_report(entry.report, entry.recorder)
            entry.analysis = s.analysis

    def _failed(self, token: int, exc: BaseException) -> None:
        job = self._job
        if job is None or token != job.token:
            return
        self._job = None
        message = getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"
        self.state.post_message(f"deep capture failed: {message}", getattr(exc, "suggestion", None))

    # -- the trace out -----------------------------------------------------------------------------------
    def trace_of_current(self) -> Path | None:
        """The trace of what is shown: the selected entry's capture (made here, or beside its report file), else
        the latest capture of no run."""
        s = self.state
        entry = s.runs.get(s.selected) if s.selected is not None else None
        if entry is not None:
            if entry.id in self.traces:
                return self.traces[entry.id]
            capture = entry.report.capture if entry.report is not None else None
            name = capture.get("trace_file") if isinstance(capture, dict) else None
            if isinstance(name, str) and name and entry.source != "run":
                beside = Path(entry.source).parent / Path(name).name
                return beside if beside.is_file() else None
            return None
        return self.last_trace

    def with_trace_beside(self, report: Report | None, report_path: str | Path) -> Report | None:
        """Before a report is exported to ``report_path``: its capture's trace copied beside it
        (NAME.trace.json.gz, as ``bench --deep`` writes it) and the report's ``trace_file`` naming that copy."""
        capture = report.capture if report is not None else None
        trace = self.trace_of_current()
        if report is None or not isinstance(capture, dict) or trace is None or not trace.is_file():
            return report
        target = trace_path_for(report_path)
        if target.resolve() != trace.resolve():
            with atomic_path(target) as temp:
                shutil.copyfile(trace, temp)
        return dataclasses.replace(report, capture={**capture, "trace_file": target.name})

    def export_trace(self, path: str | Path) -> Path:
        """File > Export > Trace: the shown capture's trace copied to ``path`` (atomically)."""
        trace = self.trace_of_current()
        if trace is None or not trace.is_file():
            raise UserError("no capture trace to export", "select a run and use Run > Deep capture first")
        with atomic_path(path) as temp:
            shutil.copyfile(trace, temp)
        return Path(path)

    def export_trace_dialog(self) -> None:
        """Ask where, then export the trace (a message when there is none)."""
        if self.trace_of_current() is None:
            self.state.post_message("no capture trace to export", "select a run and use Run > Deep capture first",
                                    level="info")
            return
        path, _ = QFileDialog.getSaveFileName(self._parent, "Export capture trace", "capture.trace.json.gz",
                                              "Chrome/Perfetto trace (*.json.gz)")
        if not path:
            return
        try:
            out = self.export_trace(path)
        except UserError as exc:
            self.state.post_message(exc.message, exc.suggestion)
            return
        except OSError as exc:
            self.state.post_message(f"could not save the trace: {exc}")
            return
        self.note.emit(f"saved {out}", 5000)
