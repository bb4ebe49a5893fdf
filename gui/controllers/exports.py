"""What goes out: tracks, the run report (with its tracks), the overlaid video, PNG screenshots.

The overlaid video is drawn off the GUI thread with the app's one worker idiom (``gui.worker``), on a
snapshot of the run: drawing every frame takes seconds.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from functools import partial
from typing import Any

from PySide6.QtCore import QObject, QThread, Signal
from PySide6.QtWidgets import QFileDialog, QWidget

from engine.api import Report, UserError, build_report
from gui import export
from gui.model import RunData
from gui.state import AppState
from gui.worker import GeneratorWorker, WorkerHandle, start_worker

EXPORT_THREAD_NAME = "trackscope-export"
SAVED_NOTE_MS = 5000


class ExportController(QObject):
    """The File > Export actions; results and problems go to ``note`` and the state's messages."""

    note = Signal(str, int)  # status bar text, ms (0: until replaced)

    def __init__(self, state: AppState, parent: QWidget, sampler: Callable[[], Any],
                 video_settings: Callable[[], tuple[float, int]],
                 with_trace: Callable[[Report | None, str], Report | None] | None = None):
        super().__init__(parent)
        self._with_trace = with_trace  # (report, path) -> the report, its capture's trace copied beside path
        self.state = state
        self._parent = parent
        self._sampler = sampler
        self._video_settings = video_settings  # (fps, trail length) of the video view
        self._jobs: list[WorkerHandle] = []  # background exports in flight (kept alive until done)

    def _save_path(self, title: str, default: str, filters: str) -> str | None:
        path, _ = QFileDialog.getSaveFileName(self._parent, title, default, filters)
        return path or None

    def _guard(self, fn: Callable[..., Any], *args: Any) -> None:
        try:
            out = fn(*args)
            self.note.emit(f"saved {out}", SAVED_NOTE_MS)
        except UserError as exc:
            self.state.post_message(exc.message, exc.suggestion)
        except OSError as exc:
            self.state.post_message(f"could not save: {exc}")

    def _run_to_export(self) -> RunData | None:
        """The run every export writes (``AppState.run_to_export``); when the queries changed since it ran, the
        window says so plainly before the file is chosen. None (and a message) when there is none."""
        run, changed = self.state.run_to_export()
        if run is None:
            self.state.post_message("nothing to export yet", "run the tracker first", "info")
        elif changed:
            self.state.post_message(changed, "run the tracker to export tracks of the queries now set", "info")
        return run

    def export_tracks_dialog(self) -> None:
        """Tracks as NPZ or CSV (the run ``_run_to_export`` names)."""
        run = self._run_to_export()
        if run is None:
            return
        path = self._save_path("Export tracks", "tracks.npz", "Tracks NPZ (*.npz);;Tracks CSV (*.csv)")
        if path:
            self._guard(export.export_tracks, path, run)

    def export_report_dialog(self) -> None:
        """The run report as JSON, with its tracks (of the same run as Export > Tracks)."""
        if self.state.report is None:
            self.state.post_message("no run report yet", "finish a run first", "info")
            return
        if self.state.current is None:  # new queries replaced the run shown: say whose report this is
            self._run_to_export()
        path = self._save_path("Export run report", "report.json", "Run report (*.json)")
        if path:
            self._guard(self._export_report, path)

    def _export_report(self, path: str) -> Any:
        report = self.full_report()
        if self._with_trace is not None:  # a deep capture's trace goes beside it, named after it
            report = self._with_trace(report, path)
        if report is None:
            raise UserError("there is no run report to export", "run the tracker or open a report first")
        return export.export_report(path, report)

    def full_report(self) -> Report | None:
        """The current report with its tracks (runs made here are reported without them until saved)."""
        s = self.state
        if s.report is None or s.report.tracks is not None or s.recorder is None:
            return s.report
        try:
            rebuilt = build_report(s.recorder, telemetry=self._sampler(), ground_truth=s.matching_ground_truth())
            s.report = dataclasses.replace(rebuilt, capture=s.report.capture)  # a deep capture joined it here
        except Exception as exc:  # keep the report without tracks
            s.post_message(f"could not add the tracks to the report: {exc}", level="warning")
        return s.report

    def export_video_dialog(self) -> None:
        """The video with the tracks drawn on it, written in the background."""
        s = self.state
        frames = s.frames
        if frames is None:
            s.post_message("nothing to export yet", "open a video and run the tracker first", "info")
            return
        run = self._run_to_export()
        if run is None:
            return
        path = self._save_path("Export overlaid video", "tracks.mp4", "MP4 video (*.mp4)")
        if not path:
            return
        try:  # before drawing a frame: a folder, a device, a read-only place is said now, not after the work
            export.check_video_path(path)
        except UserError as exc:
            s.post_message(exc.message, exc.suggestion)
            return
        snapshot = RunData(run.label, dict(run.config), run.queries.copy(), run.tracks.copy(), run.visible.copy(),
                           None, run.video_path)
        fps, trail = self._video_settings()
        work = partial(export.export_video, path, frames, snapshot, fps, trail, s.geometry)

        def connect(worker: GeneratorWorker, thread: QThread) -> None:
            worker.returned.connect(self._export_done)
            worker.errored.connect(self._export_failed)
            thread.finished.connect(self._forget_finished)

        self._jobs.append(start_worker(work, EXPORT_THREAD_NAME, connect=connect))
        self.note.emit(f"exporting {path}…", 0)

    def _export_done(self, result: Any) -> None:
        self.note.emit(f"saved {result}", SAVED_NOTE_MS)

    def _export_failed(self, exc: Exception) -> None:
        if isinstance(exc, UserError):
            self.state.post_message(exc.message, exc.suggestion)
        else:
            self.state.post_message(f"could not export the video: {type(exc).__name__}: {exc}")

    def _forget_finished(self) -> None:
        for job in [j for j in self._jobs if not j.running]:
            self._jobs.remove(job)
            job.delete_later()

    def export_png_dialog(self, widget: QWidget) -> None:
        """A PNG of the window or one of its parts."""
        path = self._save_path("Save PNG", "trackscope.png", "PNG image (*.png)")
        if path:
            self._guard(export.export_png, path, widget)

    def shutdown(self) -> None:
        """Wait for exports in flight (closing the window must not kill a half-written file)."""
        for job in self._jobs:
            job.thread.quit()
            job.thread.wait()
        self._jobs.clear()
