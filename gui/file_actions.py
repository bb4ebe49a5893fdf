"""The main window's file actions: open (menu, recent, drag and drop), replay a report, compare, export.

A mixin of ``MainWindow``: it uses the window's widgets and state and keeps them in one place.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from PySide6.QtWidgets import QFileDialog, QWidget

from engine.api import VIDEO_EXTENSIONS, UserError, grid_queries, read_queries_csv
from gui import export
from gui.model import RunData

REPORT_SUFFIXES = (".json",)
QUERY_SUFFIXES = (".csv",)

VIDEO_PATTERNS = " ".join(f"*{ext}" for ext in VIDEO_EXTENSIONS)


def _sidecar_ground_truth(video: Path) -> dict[str, np.ndarray] | None:
    """``<video stem>.gt.npz`` next to the video, if there is one and it reads."""
    from engine.api import load_ground_truth

    path = video.with_suffix(".gt.npz")
    if not path.is_file():
        return None
    try:
        return load_ground_truth(path)
    except UserError:
        return None


class FileActions:
    """Opening, replaying, comparing and exporting, for MainWindow."""

    # -- opening files ------------------------------------------------------------------------------------------
    def load_path(self, path: str | Path) -> bool:
        """Open a video, an image folder, a report/bench JSON, or a queries CSV; errors go to the banner."""
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
            self.show_message(exc.message, exc.suggestion)
            return False
        self.settings.add_recent(path)
        return True

    def open_video(self, path: str | Path, queries: np.ndarray | None = None) -> None:
        """Decode a video (VideoError on failure) and show it with its queries CSV or a grid."""
        from engine.api import open_video

        path = Path(path)
        with open_video(path) as reader:
            frames = reader.read()
            info = reader.info.to_dict()
            warnings = list(reader.warnings)
        if len(frames) == 0:
            raise UserError(f"{path}: the video holds no frames")
        self.set_video(frames, fps=info.get("fps"), path=str(path), info=info, queries=queries)
        sidecar = path.with_suffix(".queries.csv")
        if queries is None and sidecar.exists():
            self.set_queries(self.csv_queries(sidecar))
        self.ground_truth = _sidecar_ground_truth(path)
        if warnings:
            self.show_message("; ".join(warnings), level="warning")

    def csv_queries(self, path: str | Path) -> np.ndarray:
        """A queries CSV (the video's own pixels) in the pixels of the frames shown, shrunk or not."""
        from engine.api import query_scale

        src = self.video_info
        return read_queries_csv(path) / query_scale(src.get("source_width") or src.get("width") or 1,
                                                    src.get("source_height") or src.get("height") or 1,
                                                    self.frames)

    def set_video(self, frames: np.ndarray, fps: float | None = None, path: str | None = None,
                  info: dict[str, Any] | None = None, queries: np.ndarray | None = None) -> None:
        """Show frames uint8 [T, H, W, 3]; queries default to a grid on frame 0."""
        if self.controller.running:
            self.controller.shutdown()
        self.frames = np.ascontiguousarray(frames)
        self.video_path = path
        t, h, w = self.frames.shape[:3]
        self.video_info = {**(info or {}), "path": path, "num_frames": t, "width": w, "height": h,
                           "source_width": (info or {}).get("width", w), "source_height": (info or {}).get("height", h),
                           "fps": fps or (info or {}).get("fps")}
        self.current = None
        self.report = None
        self.recorder = None  # the recorder belongs to self.report: an export must not rebuild an older run
        self.ground_truth = None
        self.view.set_video(self.frames, fps)
        self.charts.clear_runs()
        self._origin = None
        if queries is None:
            queries = grid_queries(self.grid_spin.value(), w, h)
        self.set_queries(queries)
        name = Path(path).name if path else "video"
        self.setWindowTitle(f"trackscope — {name}")
        self.status_label.setText(f"{name}: {t} frames, {w}x{h}, {self.video_info['fps'] or '?'} fps")

    def open_report(self, path: str | Path) -> None:
        """Replay a run report (or the first of a bench file): tracks, video, stage and telemetry charts."""
        from engine.api import load_reports

        reports = load_reports(path)
        report = reports[0]
        run = RunData.from_report(report)
        video = report.get("video") or {}
        video_path = self._resolve_report_video(Path(path), video)
        if video_path is not None:
            self.open_video(video_path, queries=run.queries if run else None)
        elif run is not None:
            w, h = int(video.get("width") or 0), int(video.get("height") or 0)
            if w < 1 or h < 1:
                w = int(np.nanmax(run.tracks[..., 0])) + 2
                h = int(np.nanmax(run.tracks[..., 1])) + 2
            self.set_video(np.zeros((run.num_frames, h, w, 3), np.uint8), fps=video.get("fps"),
                           queries=run.queries)
            self.show_message(f"the report's video {video.get('path') or '(none)'} was not found: "
                              "showing its tracks on a blank canvas", "open the video next to the report",
                              level="warning")
        else:
            raise UserError(f"{path}: the report holds no tracks and its video was not found")
        if run is not None:
            self._set_current(run)
        self.report = report
        self.recorder = None
        self._adopt_config(report.get("config") or {})
        self.charts.show_report(report)
        for r in reports:
            self._panel_call(self.tradeoff, "add_report", r)
        self._panel_call(self.diagnosis, "set_report", report)
        if run is not None:
            self._add_history(run)
        self.status_label.setText(f"Report: {report.get('label') or Path(path).name}")

    def _adopt_config(self, config: dict[str, Any]) -> None:
        """Set the toggles to a replayed report's tracker, precision and batch sizes (not its device),
        so Run repeats that configuration here."""
        keep = ("tracker", "precision", "points_per_batch", "frames_per_batch")
        try:
            adopted = self.toggles.config().with_changes(**{k: config[k] for k in keep if k in config})
        except (TypeError, ValueError):
            return
        self.toggles.set_config(adopted)

    @staticmethod
    def _resolve_report_video(report_path: Path, video: dict[str, Any]) -> Path | None:
        from engine.api import sample_video_path

        candidates = []
        if video.get("path"):
            p = Path(video["path"])
            candidates += [p, report_path.parent / p.name]
        name = video.get("name") or (Path(video["path"]).name if video.get("path") else "")
        sample = sample_video_path()
        if sample is not None and name == sample.name:
            candidates.append(sample)
        return next((c for c in candidates if c.is_file()), None)

    def open_dialog(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Open video or report", "",
                                              f"Videos and reports ({VIDEO_PATTERNS} *.json);;"
                                              "All files (*)")
        if path:
            self.load_path(path)

    def _fill_recent(self) -> None:
        self.recent_menu.clear()
        files = self.settings.recent_files()
        for f in files:
            action = self.recent_menu.addAction(f)
            action.triggered.connect(lambda _=False, f=f: self._open_recent(f))
        self.recent_menu.setEnabled(bool(files))

    def _open_recent(self, path: str) -> None:
        """Open a recent file; one that no longer exists leaves the list (after the error is shown)."""
        if not self.load_path(path) and not Path(path).exists():
            self.settings.remove_recent(path)

    # -- drag and drop ---------------------------------------------------------------------------------------------
    def dragEnterEvent(self, event) -> None:  # noqa: N802
        if event.mimeData().hasUrls() and any(u.isLocalFile() for u in event.mimeData().urls()):
            event.acceptProposedAction()

    def dropEvent(self, event) -> None:  # noqa: N802
        for url in event.mimeData().urls():
            if url.isLocalFile():
                self.load_path(url.toLocalFile())
        event.acceptProposedAction()

    # -- compare -----------------------------------------------------------------------------------------------
    def compare_with_report_dialog(self) -> None:
        """A/B: the current run against a run report chosen by the user."""
        if self.current is None:
            self.show_message("no run to compare", "run the tracker first", "info")
            return
        path, _ = QFileDialog.getOpenFileName(self, "Compare with report", "", "Run report (*.json)")
        if path:
            self.compare_with_report(path)

    def compare_with_report(self, path: str | Path) -> bool:
        from engine.api import load_report

        try:
            other = RunData.from_report(load_report(path))
        except UserError as exc:
            self.show_message(exc.message, exc.suggestion)
            return False
        if other is None:
            self.show_message(f"{path}: the report holds no tracks", "record it with tracks kept")
            return False
        self.show_ab(self.current, other)
        self.tabs.setCurrentWidget(self.ab_view)
        return True

    def add_bench_dialog(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Add bench or report", "", "Bench or report (*.json)")
        if path and self.tradeoff is not None:
            try:
                self.tradeoff.add_bench(path)
                self.tabs.setCurrentWidget(self.tradeoff)
            except UserError as exc:
                self.show_message(exc.message, exc.suggestion)

    # -- export ---------------------------------------------------------------------------------------------------
    def _save_path(self, title: str, default: str, filters: str) -> str | None:
        path, _ = QFileDialog.getSaveFileName(self, title, default, filters)
        return path or None

    def _guard(self, fn, *args) -> None:
        try:
            out = fn(*args)
            self.statusBar().showMessage(f"saved {out}", 5000)
        except UserError as exc:
            self.show_message(exc.message, exc.suggestion)
        except OSError as exc:
            self.show_message(f"could not save: {exc}")

    def export_tracks_dialog(self) -> None:
        if self.current is None:
            self.show_message("nothing to export yet", "run the tracker first", "info")
            return
        path = self._save_path("Export tracks", "tracks.npz", "Tracks NPZ (*.npz);;Tracks CSV (*.csv)")
        if path:
            self._guard(export.export_tracks, path, self.current)

    def export_report_dialog(self) -> None:
        if self.report is None:
            self.show_message("no run report yet", "finish a run first", "info")
            return
        path = self._save_path("Export run report", "report.json", "Run report (*.json)")
        if path:
            self._guard(export.export_report, path, self.full_report())

    def full_report(self) -> dict[str, Any] | None:
        """The current report with its tracks (runs made here are reported without them until saved)."""
        if self.report is None or self.report.get("tracks") is not None or self.recorder is None:
            return self.report
        try:
            self.report = self.recorder.build(telemetry=self.sampler, ground_truth=self.matching_ground_truth())
        except Exception as exc:  # keep the report without tracks
            self.show_message(f"could not add the tracks to the report: {exc}", level="warning")
        return self.report

    def export_video_dialog(self) -> None:
        if self.current is None or self.frames is None:
            self.show_message("nothing to export yet", "run the tracker first", "info")
            return
        path = self._save_path("Export overlaid video", "tracks.mp4", "MP4 video (*.mp4)")
        if path:  # off the GUI thread, on a snapshot of the run: drawing every frame takes seconds
            run = self.current
            snapshot = RunData(run.label, dict(run.config), run.queries.copy(), run.tracks.copy(),
                               run.visible.copy(), None, run.video_path)
            job = export.BackgroundExport(export.export_video, path, self.frames, snapshot, self.view.fps,
                                          self.view.trail)
            job.done.connect(self._export_done)
            self._exports.append(job)
            self.statusBar().showMessage(f"exporting {path}…")
            job.start()

    def _export_done(self, result: Any) -> None:
        self._exports = [j for j in self._exports if j is not self.sender() and j.thread.is_alive()]
        if isinstance(result, UserError):
            self.show_message(result.message, result.suggestion)
        elif isinstance(result, Exception):
            self.show_message(f"could not export the video: {type(result).__name__}: {result}")
        else:
            self.statusBar().showMessage(f"saved {result}", 5000)

    def export_png_dialog(self, widget: QWidget) -> None:
        path = self._save_path("Save PNG", "trackscope.png", "PNG image (*.png)")
        if path:
            self._guard(export.export_png, path, widget)
