"""Run > Deep capture: one more warm run of the current configuration under torch.profiler, in a worker.

The capture runs in the app's worker idiom (``gui.worker``) on a snapshot of the video and queries;
only its compact summary, findings and the trace's path come back to the GUI thread. It never runs
beside a tracking run (they would share the tracker and the GPU, and time each other).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Signal

from engine.api import DeepCapture, RunConfig, Session, deep_capture, load_tracker
from gui.state import AppState
from gui.worker import GeneratorWorker, WorkerHandle, start_worker

CAPTURE_THREAD_NAME = "trackscope-capture"
TRACE_NAME = "capture.trace.json.gz"


class CaptureController(QObject):
    """Starts deep captures and hands their results to whoever listens on ``captured``."""

    captured = Signal(object)  # DeepCapture
    note = Signal(str, int)  # status bar text, ms (0: until replaced)

    def __init__(self, state: AppState, is_running: Any, config: Any) -> None:
        super().__init__()
        self.state = state
        self._is_running = is_running  # () -> bool: a tracking run is in progress
        self._config = config  # () -> RunConfig: what the toggles say now
        self._job: WorkerHandle | None = None
        self._folder = tempfile.TemporaryDirectory(prefix="trackscope-capture-")  # traces of this session

    @property
    def busy(self) -> bool:
        return self._job is not None and self._job.running

    def start(self) -> bool:
        """Capture the current video, queries and configuration; False (with a message) when it cannot."""
        s = self.state
        if s.frames is None or not len(s.queries) or s.decoding:
            s.post_message("open a video (decoded to its end) and add query points before a deep capture",
                           level="warning")
            return False
        if self._is_running() or self.busy:
            s.post_message("a run or a capture is in progress: stop it, then capture", level="warning")
            return False
        config: RunConfig = self._config()
        frames, queries = s.frames.copy(), s.queries.copy()  # the worker's own: the app may open another video
        info, geometry = dict(s.video_info), s.geometry
        trace = Path(self._folder.name) / f"{len(list(Path(self._folder.name).iterdir()))}-{TRACE_NAME}"

        def work() -> DeepCapture:
            tracker = load_tracker(config.tracker)  # one instance: its modules are the capture's roots
            return deep_capture(lambda: Session(frames, queries, config, tracker=tracker, video_info=info,
                                                geometry=geometry),
                                precision=config.precision, typical_wall_ms=None, trace_path=trace)

        def connect(worker: GeneratorWorker, thread: Any) -> None:
            worker.returned.connect(self._done)
            worker.errored.connect(self._failed)

        self._job = start_worker(work, CAPTURE_THREAD_NAME, connect=connect)
        self.note.emit(f"deep capture of {config.label()}…", 0)
        return True

    def _done(self, deep: DeepCapture) -> None:
        if deep.error:
            self.state.post_message(f"deep capture not available: {deep.error}", level="warning")
        self.note.emit("deep capture done", 5000)
        self.captured.emit(deep)

    def _failed(self, exc: Exception) -> None:
        message = getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"
        self.state.post_message(f"deep capture failed: {message}", getattr(exc, "suggestion", None))

    def shutdown(self) -> None:
        """Wait for a capture in flight, then drop this session's traces."""
        if self._job is not None:
            self._job.thread.quit()
            self._job.thread.wait()
            self._job = None
        self._folder.cleanup()
