"""The main window: composition of the state, the controllers, the widgets, menus and docks.

The window owns no app state of its own: ``AppState`` holds it and says when it changes; the
controllers (``gui.controllers``: files, runs, exports) change it; the widgets and panels are wired
here to its signals. Panels not on screen get their updates when their tab is next shown.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import (
    QApplication,
    QDockWidget,
    QMainWindow,
    QMenu,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from engine.api import Report, RunConfig, TelemetrySampler, UserError
from gui.controllers.capture import CaptureController
from gui.controllers.cost import CostController
from gui.controllers.diff import DiffController
from gui.controllers.exports import ExportController
from gui.controllers.files import FileController
from gui.controllers.runs import RunActions
from gui.history import MAX_HISTORY, HistoryEntry, video_name
from gui.layout import WindowLayout
from gui.model import RunData, report_title
from gui.panels.ab_view import ABView
from gui.panels.capture_panel import CapturePanel
from gui.panels.diagnosis import DiagnosisPanel
from gui.panels.diff_panel import DiffPanel
from gui.panels.history import HistoryPanel
from gui.panels.queue import PanelQueue
from gui.panels.run_panel import RunPanel
from gui.panels.tradeoff import TradeoffPanel
from gui.settings import Settings
from gui.state import AppState, Comparison, Message
from gui.widgets.banner import MessageBanner
from gui.widgets.charts import ChartsPanel
from gui.widgets.text import plain_label
from gui.widgets.video_view import VideoView

log = logging.getLogger(__name__)

MESSAGE_MS = 10_000  # how long a problem stays in the status bar
_heap_frozen = False  # whether freeze_startup_heap() has run in this process


def freeze_startup_heap() -> bool:
    """Collect once, then move every object alive now (modules, classes, the first window's widgets: ~200k
    objects once torch and pyqtgraph are imported) out of the cyclic garbage collector's reach, once per process.

    Issue 12: a full (generation 2) collection walks every tracked object while holding the GIL, so whichever
    thread triggers it (the GUI thread on a run's start, the worker building its report at the end) stalls
    the event loop: 140-290 ms each here (bench_app_video, 500 frames). Frozen objects are still freed by
    reference counting; only reference cycles among them are never collected. True when it froze.
    """
    global _heap_frozen
    if _heap_frozen:
        return False
    _heap_frozen = True
    gc.collect()  # before the window is shown: what is garbage now is not kept forever
    gc.freeze()
    return True


FPS_DECIMALS = 2


def format_fps(fps: float | None) -> str:
    """A frame rate for people: '29.97', '23.98', '25'; '?' when unknown."""
    if not fps:
        return "?"
    return f"{fps:.{FPS_DECIMALS}f}".rstrip("0").rstrip(".")


class MainWindow(QMainWindow):
    """trackscope's window: open a video or report, place queries, run, watch, compare, export."""

    run_finished = Signal(object)  # RunData of a finished run (tests, bench)
    message_shown = Signal(str)

    def __init__(self, settings: Settings | None = None, sampler: Any = "auto", config: RunConfig | None = None):
        super().__init__()
        self.setWindowTitle("trackscope")
        self.setAcceptDrops(True)
        self.settings = settings or Settings()
        notes: list[str] = []
        if config is None:
            config, notes = self.settings.checked_config()
        self.state = AppState(config, self)
        self._closing = False
        self.sampler: Any = None
        self._build_central()
        self._build_run_dock(self.state.config)
        self._build_charts_dock()
        self._build_history_dock()
        self.runs = RunActions(self.state, self.charts, lambda: self.sampler, self)
        self.controller = self.runs.controller
        self.files = FileController(self.state, self.settings, self, is_running=lambda: self.runs.running,
                                    shutdown_run=self.controller.shutdown, grid_size=self.grid_spin.value,
                                    current_frame=lambda: self.view.frame)
        self.capture = CaptureController(self.state, is_running=lambda: self.runs.running,
                                         config=self.toggles.config, parent=self)
        self.exports = ExportController(self.state, self, lambda: self.sampler,
                                        lambda: (self.view.fps, self.view.trail),
                                        with_trace=self.capture.with_trace_beside)
        self.cost = (CostController(self.diagnosis, is_running=lambda: self.runs.running)
                     if self.diagnosis is not None else None)  # what-if for any run: counts in a worker
        if self.cost is not None:
            self.controller.running_changed.connect(self.cost.resume)
        self.differ = DiffController(self.state, self)  # diffs of two runs or reports, in a worker
        self.state.set_config(self.toggles.config(), announce=False)  # what the toggles show (gated modes off)
        self._connect()
        self._build_menus()
        self._restore_layout()
        self.sampler = self._make_sampler() if sampler == "auto" else sampler
        self.charts.attach_sampler(self.sampler)
        if notes:
            self.show_message("; ".join(notes), level="warning")
        app = QApplication.instance()
        if app is not None:
            app.aboutToQuit.connect(self.shutdown)
        freeze_startup_heap()  # the first window: full collections stay short from here on (issue 12)

    # -- construction ------------------------------------------------------------------------------------
    def _build_central(self) -> None:
        self.banner = MessageBanner()
        self.view = VideoView()
        self.tabs = QTabWidget()
        self.panels = PanelQueue(self.tabs, lambda text: self.show_message(text, level="warning"))
        self.tabs.currentChanged.connect(lambda _: self.flush_panels(self.tabs.currentWidget()))
        self.tabs.addTab(self.view, "Video")
        self.ab_view = self._add_panel(ABView, "A/B")
        self.tradeoff = self._add_panel(TradeoffPanel, "Precision trade-offs")
        self.diagnosis = self._add_panel(DiagnosisPanel, "Diagnosis")
        self.capture_panel = self._add_panel(CapturePanel, "Capture")
        self.diff_panel = self._add_panel(DiffPanel, "Diff")
        central = QWidget()
        lay = QVBoxLayout(central)
        lay.setContentsMargins(4, 4, 4, 4)
        lay.addWidget(self.tabs, 1)
        self.banner.float_over(self.tabs, self.tabs.tabBar())  # over the pages: showing it moves no tab
        self.setCentralWidget(central)
        self.status_label = plain_label("No video")
        self.statusBar().addPermanentWidget(self.status_label)  # temporary messages use the left side

    def _add_panel(self, panel_cls: type, title: str) -> Any:
        try:
            panel = panel_cls()
        except Exception as exc:  # a broken panel must not take the window down
            log.exception("the %s panel failed to load", title)
            self.banner.show_message(f"the {title} panel failed to load: {exc}", level="warning")
            return None
        self.tabs.addTab(panel, title)
        return panel

    def _build_run_dock(self, config: RunConfig) -> None:
        self.run_panel = RunPanel(config, self.settings.grid())
        p = self.run_panel
        self.toggles, self.run_button, self.stop_button = p.toggles, p.run_button, p.stop_button
        self.loop_box, self.grid_spin, self.run_label = p.loop_box, p.grid_spin, p.run_label
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

    def _build_history_dock(self) -> None:
        self.history_panel = HistoryPanel(self.state)
        self.history_dock = QDockWidget("Runs", self)
        self.history_dock.setObjectName("history_dock")
        self.history_dock.setWidget(self.history_panel)
        self.addDockWidget(Qt.DockWidgetArea.BottomDockWidgetArea, self.history_dock)

    def _connect(self) -> None:
        """Wire the state to the widgets that show it, and the controls to the controllers."""
        s, p, files, runs = self.state, self.run_panel, self.files, self.runs
        s.video_changed.connect(self._show_video)
        s.video_progress.connect(self.view.show_decoding)
        self.view.cancel_decoding.connect(files.cancel_decoding)
        s.queries_changed.connect(self._show_queries)
        s.current_changed.connect(self._show_tracks)
        s.tracks_updated.connect(self._show_tracks)
        s.report_changed.connect(lambda: self.panels.call(self.diagnosis, self.diagnosis.set_report, s.report,
                                                          s.analysis) if self.diagnosis is not None else None)
        s.report_replayed.connect(self._show_replayed)
        s.entry_added.connect(self._add_tradeoff_entry)
        s.video_changed.connect(self._history_on_new_video)
        self.history_panel.ab_requested.connect(lambda: self.tabs.setCurrentWidget(self.ab_view)
                                                if self.ab_view is not None else None)
        s.comparison_changed.connect(self._show_comparison)
        s.config_changed.connect(self.toggles.set_config)
        s.message_posted.connect(self._show_message)
        self.view.query_added.connect(files.add_query)
        self.toggles.config_changed.connect(self._on_config_changed)
        p.run_requested.connect(self.start_run)
        p.stop_requested.connect(self.stop_run)
        p.loop_box.toggled.connect(self.controller.set_loop)
        p.grid_requested.connect(files.set_grid)
        p.load_queries_requested.connect(files.load_queries_dialog)
        p.clear_queries_requested.connect(files.clear_queries)
        p.click_box.toggled.connect(self.view.set_click_adds_queries)
        runs.starting.connect(self.banner.hide)
        runs.status.connect(self.run_label.setText)
        runs.note.connect(lambda text: self.statusBar().showMessage(text, 5000))
        runs.run_finished.connect(self.run_finished)
        self.controller.running_changed.connect(lambda: p.set_running(self.controller.running))
        self.exports.note.connect(self.statusBar().showMessage)
        self.capture.note.connect(self.statusBar().showMessage)
        self.capture.captured.connect(self._show_capture)
        self.history_panel.diff_requested.connect(self.differ.diff_entries)
        self.differ.started.connect(self._diff_started)
        self.differ.diffed.connect(self.show_diff)
        self.differ.failed.connect(self._diff_failed)

    def _build_menus(self) -> None:
        bar, files, exports = self.menuBar(), self.files, self.exports
        file = bar.addMenu("&File")
        self._action(file, "&Open video or report…", files.open_dialog, QKeySequence.StandardKey.Open)
        self.recent_menu = file.addMenu("Open &recent")
        self.recent_menu.aboutToShow.connect(self._fill_recent)
        self._fill_recent()
        self._action(file, "Load &queries CSV…", files.load_queries_dialog)
        exp = file.addMenu("&Export")
        self._action(exp, "Tracks (NPZ or CSV)…", exports.export_tracks_dialog)
        self._action(exp, "Run report (JSON)…", exports.export_report_dialog)
        self._action(exp, "Trace of the deep capture (Perfetto)…", self.capture.export_trace_dialog)
        self._action(exp, "Overlaid video (MP4)…", exports.export_video_dialog)
        self._action(exp, "Window as PNG…", lambda: exports.export_png_dialog(self))
        self._action(exp, "Charts as PNG…", lambda: exports.export_png_dialog(self.charts))
        file.addSeparator()
        self._action(file, "&Quit", self.close, QKeySequence.StandardKey.Quit)
        run = bar.addMenu("&Run")
        self._action(run, "&Run", self.start_run, "Ctrl+R")
        self._action(run, "&Stop", self.stop_run, "Esc")
        run.addSeparator()
        self._action(run, "&Deep capture (torch.profiler)", self.capture.start, "Ctrl+Shift+R")
        self._action(run, "Stop &capture", self.capture.stop)
        compare = bar.addMenu("&Compare")
        self._action(compare, "A/B: current run against a report…", files.compare_with_report_dialog)
        self._action(compare, "Trade-offs: add a bench, report or accuracy file…", self.add_bench_dialog)
        self._action(compare, "Diff two reports…", self.differ.diff_files_dialog)
        view = bar.addMenu("&View")
        self._action(view, "Play / pause", lambda: self.view.set_playing(not self.view.playing), "Space")
        self._action(view, "Next frame", lambda: self.view.step(1), ".")
        self._action(view, "Previous frame", lambda: self.view.step(-1), ",")
        self._action(view, "Fit video", self.view.fit, "F")
        view.addSeparator()
        view.addAction(self.run_dock.toggleViewAction())
        view.addAction(self.charts_dock.toggleViewAction())
        view.addAction(self.history_dock.toggleViewAction())
        self._action(view, "Reset &layout", self.reset_layout)

    def _action(self, menu: QMenu, text: str, slot: Callable[..., Any], shortcut: Any = None) -> QAction:
        action = QAction(text, self)
        if shortcut is not None:
            action.setShortcut(QKeySequence(shortcut))
        action.triggered.connect(slot)
        menu.addAction(action)
        return action

    def _fill_recent(self) -> None:
        self.recent_menu.clear()
        files = self.settings.recent_files()
        for f in files:
            action = self.recent_menu.addAction(f)
            action.triggered.connect(lambda _=False, f=f: self.files.open_recent(f))
        self.recent_menu.setEnabled(bool(files))

    def _make_sampler(self) -> Any:
        try:
            sampler = TelemetrySampler()
            sampler.start()
            return sampler
        except Exception as exc:  # telemetry is never fatal
            log.warning("telemetry unavailable", exc_info=exc)
            self.banner.show_message(f"telemetry unavailable: {exc}", level="warning")
            return None

    def _restore_layout(self) -> None:
        """The saved geometry clamped to this screen, the saved docks if they fit (gui.layout)."""
        self.layout_keeper = WindowLayout(self)  # after every dock is built: its defaults are Reset layout's
        note = self.layout_keeper.restore(self.settings.geometry(), self.settings.state())
        if note is not None:
            self.statusBar().showMessage(note, MESSAGE_MS)

    def reset_layout(self) -> None:
        """View > Reset layout: every dock back where it was built, the window sized to its screen."""
        self.layout_keeper.reset()

    # -- showing the state ----------------------------------------------------------------------------------
    def _show_video(self) -> None:
        s = self.state
        assert s.frames is not None
        fps = s.video_info.get("fps")
        self.view.set_video(s.frames, fps, s.geometry)
        t, h, w = s.frames.shape[:3]
        name = Path(s.video_path).name if s.video_path else "video"
        self.setWindowTitle(f"trackscope — {name}")
        g = s.geometry
        size = f"{g.source_width}x{g.source_height}"  # the video's own size; the frames kept may be smaller
        if (w, h) != (g.source_width, g.source_height):
            size += f" (shown at {w}x{h})"
        self.status_label.setText(f"{name}: {t} frames, {size}, {format_fps(fps)} fps")

    def _show_queries(self) -> None:
        self.view.set_queries(self.state.queries)
        self.run_panel.set_query_count(len(self.state.queries))

    def _show_tracks(self) -> None:
        run = self.state.current
        self.view.set_tracks(None if run is None else run.tracks, None if run is None else run.visible)

    def _show_replayed(self, replayed: tuple[Report, str]) -> None:
        report, source = replayed
        analysis = self.state.analysis if self.state.report is report else None
        self.charts.show_report(report, analysis.cost if analysis is not None else None)
        if self.capture_panel is not None and report.capture is not None:
            self.panels.call(self.capture_panel, self.capture_panel.set_report, report, Path(source))
        self.status_label.setText(f"Report: {report_title(report)}")

    def _show_capture(self, deep: Any) -> None:
        """A deep capture made here: into its panel (shown); the controller has put it into its run's report."""
        if self.capture_panel is None:
            return
        self.capture_panel.set_capture(deep.to_dict(), deep.findings, deep.trace_path)
        self.tabs.setCurrentWidget(self.capture_panel)

    def show_diff(self, diff: Any) -> None:
        """A diff of two runs (engine.api.Diff) in the Diff tab, shown."""
        if self.diff_panel is None:
            return
        self.diff_panel.set_diff(diff)
        self.tabs.setCurrentWidget(self.diff_panel)

    def _diff_started(self, a_name: str, b_name: str) -> None:
        self.statusBar().showMessage(f"diffing {a_name} and {b_name}…", MESSAGE_MS)
        if self.diff_panel is not None:
            self.diff_panel.show_busy(a_name, b_name)
            self.tabs.setCurrentWidget(self.diff_panel)

    def _diff_failed(self, text: str) -> None:
        """No diff: why, in the Diff tab and the status bar."""
        self.statusBar().showMessage(text, MESSAGE_MS)
        self.message_shown.emit(text)
        if self.diff_panel is not None:
            self.diff_panel.show_error(text)
            self.tabs.setCurrentWidget(self.diff_panel)

    def _add_tradeoff_entry(self, entry: HistoryEntry) -> None:
        if self.tradeoff is not None:
            self.panels.call(self.tradeoff, self.tradeoff.add_entry, entry, replace=False, keep_last=MAX_HISTORY)

    def _history_on_new_video(self) -> None:
        """Another video: the previous one's problem leaves the banner; the trade-offs show the new one's rows."""
        self.banner.hide()
        if self.ab_view is not None:  # its runs tracked the previous video
            self.panels.call(self.ab_view, self.ab_view.clear)
        if self.tradeoff is not None:
            self.panels.call(self.tradeoff, self.tradeoff.set_video, video_name(self.state.video_path))

    def _show_comparison(self, comparison: Comparison) -> None:
        if self.ab_view is None:
            return
        self.panels.call(self.ab_view, self.ab_view.set_frames, self.state.frames, self.state.geometry)
        self.panels.call(self.ab_view, self.ab_view.set_runs, comparison.a, comparison.b, comparison.ground_truth)

    def _show_message(self, message: Message) -> None:
        self.banner.show_message(message.text, message.suggestion, message.level)
        self.statusBar().showMessage(message.text, MESSAGE_MS)
        self.message_shown.emit(message.text)

    def flush_panels(self, panel: QWidget | None = None) -> None:
        """Apply the calls queued for ``panel`` (or for every panel)."""
        self.panels.flush(panel)

    # -- commands ---------------------------------------------------------------------------------------------
    def show_message(self, message: str, suggestion: str | None = None, level: str = "error") -> None:
        """Show a problem in the window (never a modal dialog) and in the status bar."""
        self.state.post_message(message, suggestion, level)

    def start_run(self) -> bool:
        """Start tracking the queries with the current toggles; False (and a message) when it cannot."""
        if self.capture.busy:  # they would share the tracker and the machine, and time each other
            self.state.post_message("a deep capture is running: wait for it, or Run > Stop capture, then run",
                                    level="warning")
            return False
        self.state.set_config(self.toggles.config(), announce=False)  # the toggles are what the user sees
        return self.runs.start_run()

    def stop_run(self) -> None:
        """Stop after the current batch (and a deep capture in flight)."""
        self.runs.stop_run()
        if self.capture.busy:
            self.capture.stop()

    def _on_config_changed(self, change: Any) -> None:  # a ConfigChange
        self.state.set_config(self.toggles.config(), announce=False)
        self.settings.set_config(self.toggles.config())
        self.runs.apply_config(change)

    def add_bench_dialog(self) -> None:
        """Compare > add a bench, report or accuracy file (eval/cycle --json) to the trade-offs."""
        path = self.files.bench_path_dialog()
        if path and self.tradeoff is not None:
            try:
                self.tradeoff.add_file(path)
                self.tabs.setCurrentWidget(self.tradeoff)
            except UserError as exc:
                self.show_message(exc.message, exc.suggestion)

    def compare_with_report(self, path: str) -> bool:
        """A/B: the current run against a report's; shows the A/B tab."""
        ok = self.files.compare_with_report(path)
        if ok and self.ab_view is not None:
            self.tabs.setCurrentWidget(self.ab_view)
        return ok

    # the files and exports controllers' commands, as the window's (the CLI, tests and scripts use them)
    def load_path(self, path: Any) -> bool:
        """Open a video, image folder, report/bench JSON or queries CSV; False (and a message) on error."""
        return self.files.load_path(path)

    def open_video(self, path: Any, queries: np.ndarray | None = None) -> None:
        """Decode and show a video (VideoError on failure)."""
        self.files.open_video(path, queries)

    def set_video(self, frames: np.ndarray, fps: float | None = None, path: str | None = None,
                  info: dict[str, Any] | None = None, queries: np.ndarray | None = None) -> None:
        """Show frames uint8 [T, H, W, 3]."""
        self.files.set_video(frames, fps, path, info, queries)

    def set_queries(self, queries: np.ndarray) -> None:
        """New queries [N, 3] (refused during a run)."""
        self.files.set_queries(queries)

    def set_grid(self, k: int) -> None:
        """A k x k grid of queries on the frame shown."""
        self.files.set_grid(k)

    def matching_ground_truth(self) -> dict[str, np.ndarray] | None:
        """The video's ground truth when it fits the current queries."""
        return self.state.matching_ground_truth()

    def full_report(self) -> Report | None:
        """The current report with its tracks."""
        return self.exports.full_report()

    def export_video_dialog(self) -> None:
        """File > Export > Overlaid video."""
        self.exports.export_video_dialog()

    # -- the state, read through the window (tests and scripts) -----------------------------------------------
    @property
    def frames(self) -> np.ndarray | None:
        return self.state.frames

    @property
    def queries(self) -> np.ndarray:
        return self.state.queries

    @property
    def current(self) -> RunData | None:
        return self.state.current

    @current.setter
    def current(self, run: RunData | None) -> None:
        self.state.set_current(run)

    @property
    def history(self) -> list[RunData]:
        return self.state.history

    @property
    def report(self) -> Report | None:
        return self.state.report

    @property
    def video_path(self) -> str | None:
        return self.state.video_path

    @property
    def batches_seen(self) -> int:
        return self.runs.batches_seen

    # -- drag and drop, shutdown --------------------------------------------------------------------------------
    def dragEnterEvent(self, event: Any) -> None:  # noqa: N802
        if event.mimeData().hasUrls() and any(u.isLocalFile() for u in event.mimeData().urls()):
            event.acceptProposedAction()

    def dropEvent(self, event: Any) -> None:  # noqa: N802
        for url in event.mimeData().urls():
            if url.isLocalFile():
                self.files.load_path(url.toLocalFile())
        event.acceptProposedAction()

    def shutdown(self) -> None:
        """Stop the run, exports, the sampler and every timer; save settings. Safe to call twice."""
        if self._closing:
            return
        self._closing = True
        self.controller.close()
        self.files.stop_decoding()
        self.exports.shutdown()
        self.capture.shutdown()
        self.differ.shutdown()
        if self.cost is not None:
            self.cost.shutdown()
        if self.capture_panel is not None:
            self.capture_panel.shutdown()
        self.view.stop_timers()
        self.charts.stop()
        if self.sampler is not None:
            try:
                self.sampler.stop()
            except Exception:  # noqa: BLE001 - shutting down regardless
                log.debug("the telemetry sampler failed to stop", exc_info=True)
        self.settings.set_config(self.toggles.config())
        self.settings.save_window(self.saveGeometry(), self.saveState())
        self.settings.sync()

    def closeEvent(self, event: Any) -> None:  # noqa: N802
        self.shutdown()
        super().closeEvent(event)
