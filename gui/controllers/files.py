"""What comes in: videos, queries and reports (menu, recent files, drag and drop), and comparisons.

Every change goes into the ``AppState``; the widgets that show it subscribe to its signals. Each report
opened (each report of a bench file) becomes an entry of the run history, with the analysis of its
whole file (a bench's growth across batch sizes included). Problems
are posted as messages to the state (the window shows them in its banner), never raised to Qt.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from PySide6.QtCore import QObject
from PySide6.QtWidgets import QFileDialog, QWidget

from engine.api import (
    VIDEO_EXTENSIONS,
    Analysis,
    Report,
    ReportVideo,
    UserError,
    VideoGeometry,
    analyse,
    analyse_many,
    available_trackers,
    grid_queries,
    ground_truth_sidecar,
    load_any,
    load_ground_truth,
    open_video,
    queries_sidecar,
    read_queries_csv,
    sample_video_path,
)
from gui.history import OPENED, analysis_for, report_settings, video_name
from gui.model import RunData
from gui.settings import Settings
from gui.state import AppState

REPORT_SUFFIXES = (".json",)
QUERY_SUFFIXES = (".csv",)
VIDEO_PATTERNS = " ".join(f"*{ext}" for ext in VIDEO_EXTENSIONS)
#: report fields a replayed report sets in the toggles (not its device: Run repeats it here)
ADOPTED_CONFIG = ("tracker", "precision", "points_per_batch", "frames_per_batch")


def sidecar_ground_truth(video: Path) -> dict[str, np.ndarray] | None:
    """``<video stem>.gt.npz`` next to the video, if there is one and it reads."""
    path = ground_truth_sidecar(video)
    if not path.is_file():
        return None
    try:
        return load_ground_truth(path)
    except UserError:
        return None


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


class FileController(QObject):
    """Opens files into the state and edits the queries; ``is_running`` guards changes during a run."""

    def __init__(self, state: AppState, settings: Settings, parent: QWidget, is_running: Callable[[], bool],
                 shutdown_run: Callable[[], Any], grid_size: Callable[[], int], current_frame: Callable[[], int]):
        super().__init__(parent)
        self.state = state
        self.settings = settings
        self._parent = parent
        self._is_running = is_running
        self._shutdown_run = shutdown_run
        self._grid_size = grid_size
        self._current_frame = current_frame

    # -- opening -------------------------------------------------------------------------------------
    def load_path(self, path: str | Path) -> bool:
        """Open a video, an image folder, a report/bench JSON, or a queries CSV; errors become messages."""
        path = Path(path)
        try:
            suffix = path.suffix.lower()
            if suffix in REPORT_SUFFIXES:
                self.open_report(path)
            elif suffix in QUERY_SUFFIXES:
                self.set_queries(self.csv_queries(path))
                return True
            else:
                self.open_video(path)
        except UserError as exc:
            self.state.post_message(exc.message, exc.suggestion)
            return False
        self.settings.add_recent(path)
        return True

    def open_video(self, path: str | Path, queries: np.ndarray | None = None) -> None:
        """Decode a video (VideoError on failure) and show it with its queries CSV or a grid."""
        path = Path(path)
        with open_video(path) as reader:
            frames = reader.read()
            info = {**reader.info.to_dict(), **VideoGeometry.from_info(reader.info, frames).to_dict()}
            warnings = list(reader.warnings)
        if len(frames) == 0:
            raise UserError(f"{path}: the video holds no frames")
        self.set_video(frames, fps=info.get("fps"), path=str(path), info=info, queries=queries)
        sidecar = queries_sidecar(path)
        if queries is None and sidecar.exists():
            self.set_queries(self.csv_queries(sidecar))
        self.state.set_ground_truth(sidecar_ground_truth(path))
        if warnings:
            self.state.post_message("; ".join(warnings), level="warning")

    def set_video(self, frames: np.ndarray, fps: float | None = None, path: str | None = None,
                  info: dict[str, Any] | None = None, queries: np.ndarray | None = None) -> None:
        """Show frames uint8 [T, H, W, 3]; queries default to a grid on frame 0."""
        if self._is_running():
            self._shutdown_run()
        info = info or {}
        geometry = VideoGeometry.from_info(info, frames)  # queries and tracks are its source pixels
        self.state.set_video(frames, path, {**info, "path": path, "num_frames": int(frames.shape[0]),
                                            **geometry.to_dict(), "width": geometry.source_width,
                                            "height": geometry.source_height, "fps": fps or info.get("fps")},
                             geometry)
        self.set_queries(grid_queries(self._grid_size(), *geometry.source_size) if queries is None else queries)

    def csv_queries(self, path: str | Path) -> np.ndarray:
        """A queries CSV, in source pixels as the app keeps queries (the view places frames in them)."""
        if self.state.frames is None:
            raise UserError(f"{path}: open a video before its queries")
        queries = read_queries_csv(path)
        num_frames, (width, height) = len(self.state.frames), self.state.geometry.source_size
        t = queries[:, 0]
        outside = np.flatnonzero((t < 0) | (t > num_frames - 1) | ~self.state.geometry.contains_source(queries[:, 1:]))
        if outside.size:  # refused now, not only at Run
            i = int(outside[0])
            raise UserError(f"{path}: query {i} (t={t[i]:g}, x={queries[i, 1]:g}, y={queries[i, 2]:g}) lies outside "
                            f"the video ({num_frames} frames of {width}x{height}); {outside.size} of {len(queries)} "
                            "queries do", "queries are t,x,y in the video's own pixels, frames from 0")
        return queries

    def open_report(self, path: str | Path) -> None:
        """Replay a run report (of a bench file: the first with tracks): tracks, video, stage and telemetry
        charts, and findings of the whole file; every report of the file becomes a history entry."""
        reports, recorded = load_any(path)
        if not reports:
            raise UserError(f"{path}: the bench file holds no reports")
        analysis = analyse_many(reports, recorded) if len(reports) > 1 or recorded else analyse(reports[0])
        reports = list(analysis.reports)  # typed once: the entries and the analysis share the same objects
        runs = [RunData.from_report(r) for r in reports]
        shown = next((i for i, r in enumerate(runs) if r is not None), 0)
        report, run = reports[shown], runs[shown]
        video = report.video
        video_path = resolve_report_video(Path(path), video)
        if video_path is not None:
            self.open_video(video_path, queries=run.queries if run else None)
        elif run is not None:
            if video.geometry is not None:  # a blank canvas of the decoded size, placed in source pixels
                (w, h), info = video.geometry.frame_size, video.geometry.to_dict()
            else:
                w, h, info = int(np.nanmax(run.tracks[..., 0])) + 2, int(np.nanmax(run.tracks[..., 1])) + 2, {}
            self.set_video(np.zeros((run.num_frames, h, w, 3), np.uint8), fps=video.fps, info=info,
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

    def open_dialog(self) -> None:
        """File > Open: a video or a report."""
        path, _ = QFileDialog.getOpenFileName(self._parent, "Open video or report", "",
                                              f"Videos and reports ({VIDEO_PATTERNS} *.json);;All files (*)")
        if path:
            self.load_path(path)

    def open_recent(self, path: str) -> None:
        """Open a recent file; one that no longer exists leaves the list (after the error is shown)."""
        if not self.load_path(path) and not Path(path).exists():
            self.settings.remove_recent(path)

    # -- queries -------------------------------------------------------------------------------------
    def set_queries(self, queries: np.ndarray) -> None:
        """New queries [N, 3] (refused during a run)."""
        if self._is_running():
            self.state.post_message("queries cannot change during a run", "stop the run first", level="warning")
            return
        self.state.set_queries(queries)

    def set_grid(self, k: int) -> None:
        """A k x k grid of queries on the frame shown."""
        if self.state.frames is None:
            return
        self.settings.set_value("grid", k)
        w, h = self.state.geometry.source_size  # queries are source pixels
        self.set_queries(grid_queries(k, w, h, t=self._current_frame()))

    def add_query(self, t: float, x: float, y: float) -> None:
        """One more query (a click on the video)."""
        self.set_queries(np.vstack([self.state.queries, np.array([[t, x, y]], np.float32)]))

    def clear_queries(self) -> None:
        """No queries."""
        self.set_queries(np.zeros((0, 3), np.float32))

    def load_queries_dialog(self) -> None:
        """File > Load queries CSV."""
        path, _ = QFileDialog.getOpenFileName(self._parent, "Load queries", "", "Queries CSV (*.csv)")
        if path:
            self.load_path(path)

    # -- compare -------------------------------------------------------------------------------------
    def compare_with_report_dialog(self) -> None:
        """A/B: the current run against a run report chosen by the user."""
        if self.state.current is None:
            self.state.post_message("no run to compare", "run the tracker first", "info")
            return
        path, _ = QFileDialog.getOpenFileName(self._parent, "Compare with report", "", "Run report (*.json)")
        if path:
            self.compare_with_report(path)

    def compare_with_report(self, path: str | Path) -> bool:
        """Put the current run and a report's run side by side; False (and a message) when it cannot."""
        try:
            reports, _ = load_any(path)
        except UserError as exc:
            self.state.post_message(exc.message, exc.suggestion)
            return False
        report = reports[0] if reports else None
        other = RunData.from_report(report) if report is not None else None
        if report is None or other is None:
            self.state.post_message(f"{path}: the report holds no tracks", "record it with tracks kept")
            return False
        if self.state.current is None:
            self.state.post_message("no run to compare", "run the tracker first", "info")
            return False
        self.add_report_entry(report, other, str(path), analyse(report))  # a report opened: in the history too
        self.state.compare(self.state.current, other)
        return True

    def bench_path_dialog(self) -> str | None:
        """Ask for a bench or report file to add to the trade-offs."""
        path, _ = QFileDialog.getOpenFileName(self._parent, "Add bench or report", "", "Bench or report (*.json)")
        return path or None
