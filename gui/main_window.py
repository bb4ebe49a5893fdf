"""The main window: video with live tracks, run controls and toggles, live charts, and the panels.

Everything the worker computes arrives as signals on the GUI thread and is written into the current
``RunData`` batch by batch, so a run that is stopped or fails keeps what it computed.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import (
    QApplication,
    QDockWidget,
    QFileDialog,
    QLabel,
    QMainWindow,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from engine.api import BatchDone, Failed, Finished, RunConfig, Started, UserError, grid_queries
from gui.file_actions import FileActions
from gui.model import RunData
from gui.panels.ab_view import ABView
from gui.panels.diagnosis import DiagnosisPanel
from gui.panels.run_panel import DEFAULT_GRID, RunPanel
from gui.panels.tradeoff import TradeoffPanel
from gui.settings import Settings
from gui.widgets.banner import MessageBanner
from gui.widgets.charts import ChartsPanel
from gui.widgets.video_view import VideoView
from gui.worker import RunController

GT_QUERY_TOLERANCE_PX = 0.5  # ground truth fits the queries when it passes through them
MAX_HISTORY = 50  # finished runs kept for A/B and trade-offs
#: panel methods whose latest call replaces an earlier queued one (add_report, by contrast, accumulates)
LAST_CALL_WINS = frozenset({"set_frames", "set_runs", "set_report"})


class MainWindow(FileActions, QMainWindow):
    """trackscope's window: open a video or report, place queries, run, watch, compare, export."""

    run_finished = Signal(object)  # RunData of a finished run (tests, bench)
    message_shown = Signal(str)

    def __init__(self, settings: Settings | None = None, sampler: Any = "auto", config: RunConfig | None = None):
        super().__init__()
        self.setWindowTitle("trackscope")
        self.setAcceptDrops(True)
        self.settings = settings or Settings()
        self.frames: np.ndarray | None = None  # uint8 [T, H, W, 3]
        self.video_path: str | None = None
        self.video_info: dict[str, Any] = {}
        self.queries = np.zeros((0, 3), np.float32)  # [N, 3]
        self.current: RunData | None = None
        self.history: list[RunData] = []
        self.report: dict[str, Any] | None = None
        self.ground_truth: dict[str, np.ndarray] | None = None  # sidecar <video>.gt.npz, when it exists
        self._pending_report: dict[str, Any] | None = None  # built by the worker, arrives before Finished
        self._pending_recorder: Any = None  # engine.report.RunRecorder of that run (full report on export)
        self.recorder: Any = None  # the recorder of self.report, when it came from a run here
        self.batches_seen = 0
        self.num_batches = 0
        self._run_config: RunConfig | None = None
        self._origin: float | None = None
        self._closing = False
        self._previous: RunData | None = None
        self._run_start: float | None = None  # chart time of the current run's start

        self.controller = RunController(self)
        self.controller.started_run.connect(self._on_started)
        self.controller.batch_done.connect(self._on_batch)
        self.controller.finished_run.connect(self._on_finished)
        self.controller.failed.connect(self._on_failed)
        self.controller.report_ready.connect(self._on_report)
        self.controller.running_changed.connect(self._on_running_changed)

        self._build_central()
        self._build_run_dock(config or self.settings.config())
        self._build_charts_dock()
        self._build_menus()
        self._restore_layout()
        self.sampler = self._make_sampler() if sampler == "auto" else sampler
        self.charts.attach_sampler(self.sampler)
        app = QApplication.instance()
        if app is not None:
            app.aboutToQuit.connect(self.shutdown)

    # -- construction ------------------------------------------------------------------------------------
    def _build_central(self) -> None:
        self.banner = MessageBanner()
        self.view = VideoView()
        self.view.query_added.connect(self._add_query)
        self.tabs = QTabWidget()
        self._deferred: dict[QWidget, list[tuple[str, tuple]]] = {}
        self._exports: list = []  # background video exports in flight (kept alive until done)
        self.tabs.currentChanged.connect(lambda _: self.flush_panels(self.tabs.currentWidget()))
        self.tabs.addTab(self.view, "Video")
        self.ab_view = self._add_panel(ABView, "A/B")
        self.tradeoff = self._add_panel(TradeoffPanel, "Precision trade-offs")
        self.diagnosis = self._add_panel(DiagnosisPanel, "Diagnosis")
        central = QWidget()
        lay = QVBoxLayout(central)
        lay.setContentsMargins(4, 4, 4, 4)
        lay.addWidget(self.banner)
        lay.addWidget(self.tabs, 1)
        self.setCentralWidget(central)
        self.status_label = QLabel("No video")
        self.statusBar().addPermanentWidget(self.status_label)  # temporary messages use the left side

    def _add_panel(self, panel_cls: type, title: str) -> QWidget | None:
        try:
            panel = panel_cls()
        except Exception as exc:  # a broken panel must not take the window down
            self.banner.show_message(f"the {title} panel failed to load: {exc}", level="warning")
            return None
        self.tabs.addTab(panel, title)
        return panel

    def _build_run_dock(self, config: RunConfig) -> None:
        self.run_panel = RunPanel(config, int(self.settings.value("grid", DEFAULT_GRID)))
        p = self.run_panel
        self.toggles, self.run_button, self.stop_button = p.toggles, p.run_button, p.stop_button
        self.loop_box, self.grid_spin, self.run_label = p.loop_box, p.grid_spin, p.run_label
        self.toggles.config_changed.connect(self._on_config_changed)
        p.run_requested.connect(self.start_run)
        p.stop_requested.connect(self.stop_run)
        p.loop_box.toggled.connect(self.controller.set_loop)
        p.grid_requested.connect(self.set_grid)
        p.load_queries_requested.connect(self.load_queries_dialog)
        p.clear_queries_requested.connect(lambda: self.set_queries(np.zeros((0, 3), np.float32)))
        p.click_box.toggled.connect(lambda v: setattr(self.view, "click_adds_queries", v))
        self.run_dock = QDockWidget("Run", self)
        self.run_dock.setObjectName("run_dock")
        self.run_dock.setWidget(p)
        self.addDockWidget(Qt.DockWidgetArea.LeftDockWidgetArea, self.run_dock)

    def _build_charts_dock(self) -> None:
        self.charts = ChartsPanel()
        self.charts_dock = QDockWidget("Live charts", self)
        self.charts_dock.setObjectName("charts_dock")
        self.charts_dock.setWidget(self.charts)
        self.addDockWidget(Qt.DockWidgetArea.RightDockWidgetArea, self.charts_dock)
        self.resizeDocks([self.run_dock, self.charts_dock], [230, 520], Qt.Orientation.Horizontal)

    def _build_menus(self) -> None:
        bar = self.menuBar()
        file = bar.addMenu("&File")
        self._action(file, "&Open video or report…", self.open_dialog, QKeySequence.StandardKey.Open)
        self.recent_menu = file.addMenu("Open &recent")
        self.recent_menu.aboutToShow.connect(self._fill_recent)
        self._fill_recent()
        self._action(file, "Load &queries CSV…", self.load_queries_dialog)
        exp = file.addMenu("&Export")
        self._action(exp, "Tracks (NPZ or CSV)…", self.export_tracks_dialog)
        self._action(exp, "Run report (JSON)…", self.export_report_dialog)
        self._action(exp, "Overlaid video (MP4)…", self.export_video_dialog)
        self._action(exp, "Window as PNG…", lambda: self.export_png_dialog(self))
        self._action(exp, "Charts as PNG…", lambda: self.export_png_dialog(self.charts))
        file.addSeparator()
        self._action(file, "&Quit", self.close, QKeySequence.StandardKey.Quit)
        run = bar.addMenu("&Run")
        self._action(run, "&Run", self.start_run, "Ctrl+R")
        self._action(run, "&Stop", self.stop_run, "Esc")
        compare = bar.addMenu("&Compare")
        self._action(compare, "A/B: current run against a report…", self.compare_with_report_dialog)
        self._action(compare, "Trade-offs: add a bench or report file…", self.add_bench_dialog)
        view = bar.addMenu("&View")
        self._action(view, "Play / pause", lambda: self.view.set_playing(not self.view.playing), "Space")
        self._action(view, "Next frame", lambda: self.view.step(1), ".")
        self._action(view, "Previous frame", lambda: self.view.step(-1), ",")
        self._action(view, "Fit video", self.view.fit, "F")
        view.addSeparator()
        view.addAction(self.run_dock.toggleViewAction())
        view.addAction(self.charts_dock.toggleViewAction())

    def _action(self, menu, text: str, slot, shortcut=None) -> QAction:
        action = QAction(text, self)
        if shortcut is not None:
            action.setShortcut(QKeySequence(shortcut))
        action.triggered.connect(slot)
        menu.addAction(action)
        return action

    def _make_sampler(self) -> Any:
        try:
            from engine.api import TelemetrySampler

            sampler = TelemetrySampler()
            sampler.start()
            return sampler
        except Exception as exc:  # telemetry is never fatal
            self.banner.show_message(f"telemetry unavailable: {exc}", level="warning")
            return None

    def _restore_layout(self) -> None:
        geometry, state = self.settings.geometry(), self.settings.state()
        if geometry is not None:
            self.restoreGeometry(geometry)
        else:
            self.resize(1500, 900)
        if state is not None:
            self.restoreState(state)

    # -- messages ---------------------------------------------------------------------------------------------
    def show_message(self, message: str, suggestion: str | None = None, level: str = "error") -> None:
        """Show a problem in the window (never a modal dialog) and in the status bar."""
        self.banner.show_message(message, suggestion, level)
        self.statusBar().showMessage(message, 10_000)
        self.message_shown.emit(message)

    # -- queries ----------------------------------------------------------------------------------------------------
    def set_queries(self, queries: np.ndarray) -> None:
        if self.controller.running:
            self.show_message("queries cannot change during a run", "stop the run first", level="warning")
            return
        self.queries = np.asarray(queries, np.float32).reshape(-1, 3)
        if self.current is not None and not np.array_equal(self.current.queries, self.queries):
            self.current = None
            self.view.set_tracks(None, None)
        self.view.set_queries(self.queries)
        self.run_panel.set_query_count(len(self.queries))

    def set_grid(self, k: int) -> None:
        if self.frames is None:
            return
        self.settings.set_value("grid", k)
        h, w = self.frames.shape[1:3]
        self.set_queries(grid_queries(k, w, h, t=self.view.frame))

    def _add_query(self, t: float, x: float, y: float) -> None:
        self.set_queries(np.vstack([self.queries, np.array([[t, x, y]], np.float32)]))

    def load_queries_dialog(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Load queries", "", "Queries CSV (*.csv)")
        if path:
            self.load_path(path)

    # -- running ------------------------------------------------------------------------------------------------------
    def start_run(self) -> bool:
        """Start tracking the queries with the current toggles; False (and a message) when it cannot."""
        if self.controller.running:
            return False
        if self.frames is None:
            self.show_message("no video is open", "open a video (File > Open) or drop one on the window")
            return False
        if len(self.queries) == 0:
            self.show_message("no query points", "click on the video, make a grid, or load a queries CSV")
            return False
        config = self.toggles.config()
        self.banner.hide()
        self._previous = self.current  # still shown until the new run's first batch; back if it fails
        self.current = RunData.empty(config.label(), config.to_dict(), self.queries, len(self.frames))
        self.current.video_path = self.video_path
        self._run_config = None
        self._run_start = None
        self.controller.start(self.frames, self.queries, config, video_info=self.video_info,
                              telemetry=self.sampler, ground_truth=self.matching_ground_truth())
        return True

    def stop_run(self) -> None:
        self.controller.stop()

    def _on_running_changed(self) -> None:
        self.run_panel.set_running(self.controller.running)

    def _on_config_changed(self, changes: dict) -> None:
        self.settings.set_config(self.toggles.config())
        if self.controller.running:
            try:
                self.controller.update_config(**changes)
            except (ValueError, UserError) as exc:
                self.show_message(f"cannot apply {changes}: {exc}", level="warning")
                return
            self.statusBar().showMessage(f"{self.toggles.config().label()}: applies from the next batch", 5000)

    def _t(self, t: float) -> float:
        if self._origin is None:
            self._origin = t
            self.charts.set_origin(t)
        return t - self._origin

    def _on_report(self, payload: tuple[Any, Any]) -> None:
        report, self._pending_recorder = payload
        if isinstance(report, dict):
            self._pending_report = report
        else:
            self._pending_report = None
            self.show_message(str(report), level="warning")

    def _on_started(self, event: Started) -> None:
        self._run_start = self._t(event.t)
        self.charts.follow()
        self._pending_report = None
        self.batches_seen = 0
        self.num_batches = event.num_batches
        self.charts.set_stages(list(event.stages))
        if self._run_config is not None and event.config != self._run_config:
            self.charts.mark(self._t(event.t), event.config.label())
        self._run_config = event.config
        if self.current is None or len(self.current.tracks) != event.num_queries:
            self.current = RunData.empty(event.config.label(), event.config.to_dict(), self.queries,
                                         len(self.frames))
        self.current.label = event.config.label()
        self.current.config = event.config.to_dict()
        gate_note = f" ({event.precision_gate})" if event.precision_gate else ""
        self.run_label.setText(f"Running on {event.device_name}{gate_note}: 0 / {event.num_batches} batches")

    def _on_batch(self, event: BatchDone) -> None:
        self.batches_seen += 1
        run = self.current
        if run is not None and event.stop <= len(run.tracks):
            run.tracks[event.start:event.stop] = event.tracks
            run.visible[event.start:event.stop] = event.visible
            run.label = event.config.label()
            self.view.set_tracks(run.tracks, run.visible)
        t_end = self._t(event.t)
        if self._run_config is not None and event.config != self._run_config:
            self.charts.mark(t_end - event.wall_ms / 1e3, event.config.label())
        self._run_config = event.config
        self.charts.add_batch(t_end, event.wall_ms, event.stage_ms)
        self.run_label.setText(f"{event.config.label()}: batch {self.batches_seen} / {self.num_batches}, "
                               f"{event.wall_ms:.0f} ms")

    def _on_finished(self, event: Finished) -> None:
        run = self.current
        self._keep_done(event.tracks, event.visible)
        report, self._pending_report = self._pending_report, None
        if self._run_start is not None and not self.controller.loop:
            self.charts.focus(self._run_start, self._t(event.t))
        state = "stopped" if event.cancelled else "finished"
        self.run_label.setText(f"{state} in {event.wall_ms:.0f} ms")
        if run is None:
            return
        snapshot = None if event.cancelled else RunData(run.label, dict(run.config), run.queries, run.tracks.copy(),
                                                          run.visible.copy(), report, self.video_path)
        if report is not None:
            run.report = report
            self.report = report
            self.recorder = self._pending_recorder
            self._panel_call(self.diagnosis, "set_report", report)
            self.charts.set_cost(report.get("cost"))
            if not event.cancelled and (not self.controller.loop or not self.history
                                        or self.history[-1].label != run.label):
                # the report leaves the tracks out (kept small): px vs fp32 needs the run's own
                self._panel_call(self.tradeoff, "add_report", report, *(
                    (snapshot.tracks, snapshot.visible) if snapshot is not None else ()))
        if snapshot is not None:
            self._add_history(snapshot)
        self.run_finished.emit(run)

    def _on_failed(self, event: Failed) -> None:
        self._pending_report = None
        run = self.current
        self._keep_done(event.tracks, event.visible)
        kept = 0 if run is None else int(np.isfinite(run.tracks).all(axis=(1, 2)).sum())
        if kept == 0 and self._previous is not None:  # nothing new: show the last results again
            self.current = self._previous
            self.view.set_tracks(self.current.tracks, self.current.visible)
            self.run_label.setText(f"failed ({event.kind}); showing the previous run")
        else:
            self.run_label.setText(f"failed ({event.kind}); {kept} points kept")
        self.show_message(event.message, event.suggestion, "error")

    def _keep_done(self, tracks: np.ndarray | None, visible: np.ndarray | None) -> None:
        """Copy the finished points of a run's final tracks [N, T, 2] into the current run (a stopped or
        failed run leaves the rest NaN: the points shown from earlier batches stay)."""
        run = self.current
        if run is None or tracks is None or tracks.shape != run.tracks.shape:
            return
        done = np.isfinite(tracks).all(axis=(1, 2))  # [N]
        run.tracks[done] = tracks[done]
        run.visible[done] = visible[done]
        self.view.set_tracks(run.tracks, run.visible)

    def _set_current(self, run: RunData) -> None:
        self.current = run
        self.queries = run.queries
        self.view.set_queries(run.queries)
        self.view.set_tracks(run.tracks, run.visible)
        self.run_panel.set_query_count(len(run.queries))

    def matching_ground_truth(self) -> dict[str, np.ndarray] | None:
        """The video's ground truth when it was made for the current queries, else None."""
        gt, q = self.ground_truth, self.queries
        if gt is None or gt["tracks"].shape[0] != len(q) or gt["tracks"].shape[1] != self.view.num_frames:
            return None
        if not np.array_equal(gt["query_t"].astype(np.int64), np.round(q[:, 0]).astype(np.int64)):
            return None
        at_query = gt["tracks"][np.arange(len(q)), gt["query_t"].astype(np.int64)]  # [N, 2]
        return gt if np.nanmax(np.abs(at_query - q[:, 1:]), initial=0.0) <= GT_QUERY_TOLERANCE_PX else None

    def _add_history(self, run: RunData) -> None:
        previous = next((r for r in reversed(self.history) if r.tracks.shape == run.tracks.shape), None)
        self.history.append(run)
        del self.history[:-MAX_HISTORY]
        if previous is not None:
            self.show_ab(previous, run)

    def show_ab(self, a: RunData, b: RunData) -> None:
        """Put two runs side by side in the A/B tab (with ground truth when it fits both)."""
        if self.ab_view is None:
            return
        self._panel_call(self.ab_view, "set_frames", self.frames)
        gt = self.matching_ground_truth() if a.tracks.shape == b.tracks.shape else None
        self._panel_call(self.ab_view, "set_runs", a, b, gt)

    def _panel_call(self, panel: QWidget | None, method: str, *args: Any) -> None:
        """Call a panel now if its tab is shown, else when it is next shown (its work stays off the
        GUI thread's hot path while a run streams in: A/B divergence alone took ~23 ms per run)."""
        if panel is None:
            return
        if self.tabs.currentWidget() is panel:
            self._invoke(panel, method, args)
            return
        queue = self._deferred.setdefault(panel, [])
        if method in LAST_CALL_WINS:
            queue[:] = [(m, a) for m, a in queue if m != method]
        queue.append((method, args))

    def flush_panels(self, panel: QWidget | None = None) -> None:
        """Apply the calls queued for ``panel`` (or for every panel)."""
        for p in [panel] if panel is not None else list(self._deferred):
            for method, args in self._deferred.pop(p, []):
                self._invoke(p, method, args)

    def _invoke(self, panel: QWidget, method: str, args: tuple) -> None:
        try:
            getattr(panel, method)(*args)
        except Exception as exc:  # a panel bug is shown, not fatal
            self.show_message(f"{type(panel).__name__}.{method} failed: {type(exc).__name__}: {exc}",
                              level="warning")

    # -- shutdown -----------------------------------------------------------------------------------------------------
    def shutdown(self) -> None:
        """Stop the run, the sampler and every timer; save settings. Safe to call twice."""
        if self._closing:
            return
        self._closing = True
        self.controller.shutdown()
        self.view.stop_timers()
        self.charts.stop()
        if self.sampler is not None:
            try:
                self.sampler.stop()
            except Exception:  # noqa: BLE001 - shutting down regardless
                pass
        self.settings.set_config(self.toggles.config())
        self.settings.save_window(self.saveGeometry(), self.saveState())
        self.settings.sync()

    def closeEvent(self, event) -> None:  # noqa: N802
        self.shutdown()
        super().closeEvent(event)

