"""Opening reports and bench files: read (in a worker when large), analysed, replayed, listed in the history.

``ReportOpener`` is the report half of ``gui.controllers.files.FileController``: a collaborator the
controller holds, given the state, the settings and the two video calls it needs (``open_video``,
``set_video``), with its own worker bookkeeping. Each report opened (each report of a bench file) becomes
an entry of the run history, with the analysis of its whole file (a bench's growth across batch sizes
included). A report never selects a plugin tracker. Problems are posted as messages, never raised to Qt.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from PySide6.QtCore import QObject

from engine.api import (
    Analysis,
    Report,
    ReportVideo,
    UserError,
    analyse,
    analyse_many,
    available_trackers,
    format_bytes,
    load_any,
    sample_video_path,
)
from gui.history import OPENED, analysis_for, report_settings, video_name
from gui.model import RunData
from gui.settings import Settings
from gui.state import AppState
from gui.worker import CLOSE_WAIT_MS, GeneratorWorker, WorkerHandle, start_worker

#: report fields a replayed report sets in the toggles (not its device: Run repeats it here)
ADOPTED_CONFIG = ("tracker", "precision", "points_per_batch", "frames_per_batch")
#: a report file at most this large is read here; a larger one in a worker (JSON parses at tens of MB/s, so a
#: report of hundreds of MB held the window for tens of seconds)
OPEN_REPORT_IN_PLACE_BYTES = 4 * 2**20
REPORT_THREAD_NAME = "read-report"
#: FileController.open_video(path, queries=..., background=...)
OpenVideo = Callable[..., None]
#: FileController.set_video(frames, fps=..., info=..., queries=...)
SetVideo = Callable[..., None]


def read_report(path: str | Path) -> Analysis:
    """A report or bench file read and analysed (any thread): its reports are the analysis's."""
    reports, recorded = load_any(path)
    if not reports:
        raise UserError(f"{path}: the bench file holds no reports")
    return analyse_many(reports, recorded) if len(reports) > 1 or recorded else analyse(reports[0])


def resolve_report_video(report_path: Path, video: ReportVideo) -> Path | None:
    """The report's video: its recorded path, the same name beside the report, or the bundled sample."""
    candidates = []
    if video.path:
        p = Path(video.path)
        candidates += [p, report_path.parent / p.name]
    name = video.name or (Path(video.path).name if video.path else "")
    sample = sample_video_path()
    if sample is not None and name == sample.name:
        candidates.append(sample)
    return next((c for c in candidates if c.is_file()), None)


def is_large_report(path: Path) -> bool:
    """Whether ``path`` is a report file large enough to read in a worker."""
    return path.is_file() and path.stat().st_size > OPEN_REPORT_IN_PLACE_BYTES


class ReportOpener(QObject):
    """Opens reports and bench files into ``state``; the video a report names is opened through ``open_video``
    (a path) or, when it is missing, a blank canvas through ``set_video`` (frames)."""

    def __init__(self, state: AppState, settings: Settings, open_video: OpenVideo, set_video: SetVideo,
                 parent: QObject | None = None):
        super().__init__(parent)
        self.state = state
        self.settings = settings
        self._open_video = open_video
        self._set_video = set_video
        self._ending: list[WorkerHandle] = []  # readers that are done, until their threads have ended
        self._report_reader: WorkerHandle | None = None  # the worker reading a large report
        self._report_path = Path()  # what it reads

    def open_report(self, path: str | Path) -> None:
        """Replay a run report (of a bench file: the first with tracks): tracks, video, stage and telemetry
        charts, and findings of the whole file; every report of the file becomes a history entry."""
        self._show_report(path, read_report(path))

    def read_in_background(self, path: Path) -> None:
        """Read and analyse a large report in a worker (parsing hundreds of MB would hold the window for
        seconds); it is shown when ready, its problem posted as a message."""
        self.stop_reading_report()
        self._report_path = path
        self.state.post_message(f"reading {path.name} ({format_bytes(path.stat().st_size)})…", level="info")

        def connect(worker: GeneratorWorker, thread: Any) -> None:  # bound slots: delivered on the GUI thread
            worker.returned.connect(self._on_report_read)
            worker.errored.connect(self._on_report_failed)
            thread.finished.connect(self._forget_ended)

        self._report_reader = start_worker(lambda: read_report(path), REPORT_THREAD_NAME, connect=connect)

    def _reader_is_sender(self) -> bool:
        handle = self._report_reader
        return handle is not None and self.sender() is handle.worker

    def _on_report_read(self, analysis: Analysis) -> None:
        if not self._reader_is_sender():
            return  # a reading that was stopped
        path = self._report_path
        self._end_reader()
        try:
            self._show_report(path, analysis)
        except UserError as exc:
            self.state.post_message(exc.message, exc.suggestion)
            return
        self.settings.add_recent(path)

    def _on_report_failed(self, exc: BaseException) -> None:
        if not self._reader_is_sender():
            return
        self._end_reader()
        self.state.post_message(exc.message if isinstance(exc, UserError) else f"cannot open the report: {exc}",
                                getattr(exc, "suggestion", None))

    def _forget_ended(self) -> None:
        for handle in [h for h in self._ending if not h.running]:
            self._ending.remove(handle)
            handle.delete_later()

    def _end_reader(self) -> None:
        handle, self._report_reader = self._report_reader, None
        if handle is not None:
            self._ending.append(handle)  # kept (a QThread must outlive its thread) until it has ended
            self._forget_ended()  # when its thread ended already

    def stop_reading_report(self) -> None:
        """Forget a report being read (another file opened, closing): its result is dropped; waits for it."""
        handle, self._report_reader = self._report_reader, None
        if handle is None:
            return
        if handle.join(CLOSE_WAIT_MS):  # a parse in progress cannot be interrupted: past the wait it is left
            handle.delete_later()
        else:
            self._ending.append(handle)  # never deleted while its thread runs

    @property
    def lingering(self) -> int:
        """Report readers still running after they were told to stop."""
        return sum(1 for h in self._ending if h.running)

    def _show_report(self, path: str | Path, analysis: Analysis) -> None:
        reports = list(analysis.reports)  # typed once: the entries and the analysis share the same objects
        runs = [RunData.from_report(r) for r in reports]
        shown = next((i for i, r in enumerate(runs) if r is not None), 0)
        report, run = reports[shown], runs[shown]
        video = report.video
        video_path = resolve_report_video(Path(path), video)
        if video_path is not None:
            self._open_video(video_path, queries=run.queries if run else None, background=False)  # the run goes on it
        elif run is not None:
            if video.geometry is not None:  # a blank canvas of the decoded size, placed in source pixels
                (w, h), info = video.geometry.frame_size, video.geometry.to_dict()
            else:
                w, h, info = int(np.nanmax(run.tracks[..., 0])) + 2, int(np.nanmax(run.tracks[..., 1])) + 2, {}
            self._set_video(np.zeros((run.num_frames, h, w, 3), np.uint8), fps=video.fps, info=info,
                           queries=run.queries)
            self.state.post_message(f"the report's video {video.path or '(none)'} was not found: "
                                    "showing its tracks on a blank canvas", "open the video next to the report",
                                    level="warning")
        else:
            raise UserError(f"{path}: the report holds no tracks and its video was not found")
        if run is not None:
            self.state.set_current(run, adopt_queries=True)
        self._adopt_config(report.config.to_dict())
        self.state.replay_report(report, str(path), analysis_for(analysis, report))
        for i, (r, r_run) in enumerate(zip(reports, runs)):
            self.add_report_entry(r, r_run, str(path), analysis, shown=i == shown)

    def add_report_entry(self, report: Report, run: RunData | None, source: str, analysis: Analysis | None,
                         shown: bool = False) -> int:
        """An opened report as a history entry (``shown``: the one replayed, compared with the previous run of
        its video and queries, and selected); returns its id."""
        entry = self.state.new_entry(
            video=video_name(report.video.path or report.video.name), tracker=report.config.tracker,
            settings=report_settings(report), machine=report.device_name, status=OPENED, source=source, run=run,
            report=report, analysis=analysis_for(analysis, report) if analysis is not None else None,
            num_frames=run.num_frames if run is not None else report.video.num_frames)
        self.state.add_entry(entry, compare_previous=shown, select=shown)
        return entry.id

    def _adopt_config(self, config: dict[str, Any]) -> None:
        """Take a replayed report's tracker, precision and batch sizes, so Run repeats them here.

        A report never selects a plugin (``module:factory`` or an installed name this app does not list):
        a plugin is code, and a shared file must not choose what the app imports. It is named instead,
        and runs only after the user picks it.
        """
        changes = {k: config[k] for k in ADOPTED_CONFIG if k in config}
        tracker = changes.get("tracker")
        if tracker is not None and tracker not in available_trackers():
            del changes["tracker"]
            self.state.post_message(f"the report was made with the plugin tracker {str(tracker)[:200]!r}; it is "
                                    "not selected (a plugin is code: pick it yourself to run it)", level="info")
        try:
            adopted = self.state.config.with_changes(**changes)
        except (TypeError, ValueError):
            return
        self.state.set_config(adopted)
