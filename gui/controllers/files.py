"""What comes in: videos, queries and reports (menu, recent files, drag and drop), and comparisons.

Every change goes into the ``AppState``; the widgets that show it subscribe to its signals. Reports and
bench files are opened by the report half of the controller, ``gui.controllers.reports.ReportOpener``.
Problems are posted as messages to the state (the window shows them in its banner), never raised to Qt.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from PySide6.QtCore import QObject
from PySide6.QtWidgets import QFileDialog, QWidget

from engine.api import (
    APP_BUDGET_BYTES,
    VIDEO_EXTENSIONS,
    FrameStore,
    UserError,
    VideoGeometry,
    analyse,
    grid_queries,
    ground_truth_sidecar,
    load_any,
    load_ground_truth,
    open_frames,
    queries_sidecar,
    read_queries_csv,
)
from gui.controllers.reports import ReportOpener, is_large_report
from gui.model import RunData
from gui.settings import Settings
from gui.state import AppState
from gui.worker import GeneratorWorker, WorkerHandle, start_worker

REPORT_SUFFIXES = (".json",)
QUERY_SUFFIXES = (".csv",)
VIDEO_PATTERNS = " ".join(f"*{ext}" for ext in VIDEO_EXTENSIONS)
#: a video whose kept frames are at most this many bytes is decoded at once on opening (a few ms); a larger one
#: in a worker thread, its first frame shown at once, with progress and Cancel
DECODE_IN_PLACE_BYTES = 16 * 2**20
DECODE_THREAD_NAME = "decode-video"
#: a video file at most this large is opened here (a few ms, errors at once); a larger one in the worker (opening
#: a 1080p stream, its first frame included, took 60-140 ms here: over the 100 ms the event loop may stall)
OPEN_IN_PLACE_FILE_BYTES = 2 * 2**20
#: the most memory a video's frames take in the app, whatever its length (longer videos are kept smaller)
VIDEO_MEMORY_BYTES = APP_BUDGET_BYTES


def sidecar_ground_truth(video: Path) -> dict[str, np.ndarray] | None:
    """``<video stem>.gt.npz`` next to the video, if there is one and it reads."""
    path = ground_truth_sidecar(video)
    if not path.is_file():
        return None
    try:
        return load_ground_truth(path)
    except UserError:
        return None


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
        self._decoder: WorkerHandle | None = None  # the worker decoding the video shown
        self._decoding_store: FrameStore | None = None  # what it decodes
        self._ending: list[WorkerHandle] = []  # decoders that are done, until their threads have ended
        self._decoding_path: tuple[Path, np.ndarray | None] = (Path(), None)  # what the decoder opens
        self.reports = ReportOpener(state, settings, open_video=self.open_video, set_video=self.set_video,
                                    parent=self)

    # -- opening -------------------------------------------------------------------------------------
    def load_path(self, path: str | Path) -> bool:
        """Open a video, an image folder, a report/bench JSON, or a queries CSV; errors become messages."""
        path = Path(path)
        try:
            suffix = path.suffix.lower()
            if suffix in REPORT_SUFFIXES:
                if is_large_report(path):
                    self.reports.read_in_background(path)  # listed in the recent files once it has opened
                    return True
                self.reports.open_report(path)
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

    def open_video(self, path: str | Path, queries: np.ndarray | None = None, background: bool = True) -> None:
        """Open a video and show its first frame with its queries CSV or a grid; the rest decodes in a worker
        into a store of bounded size. A file over OPEN_IN_PLACE_FILE_BYTES (with ``background``) is opened in
        the worker too, its problems posted as messages; a smaller one here (VideoError on failure)."""
        path = Path(path)
        self.stop_decoding()  # the previous video's decoding ends first
        if background and path.is_file() and path.stat().st_size > OPEN_IN_PLACE_FILE_BYTES:
            self._start_decoding(None, path, queries)
            return
        store = open_frames(path, budget_bytes=VIDEO_MEMORY_BYTES)  # the header and frame 0 only
        if store.nbytes <= DECODE_IN_PLACE_BYTES:
            try:
                store.decode_all()
            finally:
                store.close()
            self._show_store(store, path, queries)
            self._decoded(store)
        else:
            self._show_store(store, path, queries)
            self._start_decoding(store, path, queries)

    def _show_store(self, store: FrameStore, path: Path, queries: np.ndarray | None) -> None:
        """A newly opened video into the state, with its sidecar queries and ground truth."""
        info = {**store.info.to_dict(), **store.geometry.to_dict()} if store.info is not None else {}
        try:
            self.set_video(store, fps=info.get("fps"), path=str(path), info=info, queries=queries)
        except BaseException:
            store.close()
            raise
        sidecar = queries_sidecar(path)
        try:
            if queries is None and sidecar.exists():
                self.set_queries(self.csv_queries(sidecar))
        finally:
            self.state.set_ground_truth(sidecar_ground_truth(path))

    @property
    def decoding(self) -> bool:
        """Whether a video is being decoded in the background."""
        return self._decoder is not None

    def _start_decoding(self, store: FrameStore | None, path: Path, queries: np.ndarray | None) -> None:
        """Decode ``store`` in a worker; with none, the worker opens ``path`` first and yields the store."""

        def work() -> Any:
            opened = store if store is not None else open_frames(path, budget_bytes=VIDEO_MEMORY_BYTES)
            try:
                if store is None:
                    yield opened  # shown on the GUI thread, then decoded on
                return (yield from opened.decode())
            except GeneratorExit:  # cancelled: release the decoder here (the GUI may never take the store)
                opened.close()
                raise

        def connect(worker: GeneratorWorker, thread: Any) -> None:  # bound slots: delivered on the GUI thread
            worker.yielded.connect(self._on_progress)
            worker.returned.connect(self._on_decoded)
            worker.errored.connect(self._on_decode_failed)
            worker.done.connect(self._on_decoder_done)
            thread.finished.connect(self._forget_ended)

        self._decoding_store = store
        self._decoding_path = (path, queries)
        self._decoder = start_worker(work, DECODE_THREAD_NAME, connect=connect)
        if store is not None:
            self.state.video_decoding(store.progress)

    def _current_decoder(self) -> FrameStore | None:
        """The store the signal's sender decodes, when that is the current decoding (else a stale signal)."""
        handle = self._decoder
        return self._decoding_store if handle is not None and self.sender() is handle.worker else None

    def _on_progress(self, value: Any) -> None:
        handle = self._decoder
        if handle is None or self.sender() is not handle.worker:
            return  # a stale value of a stopped decoder
        handle.worker.handled()
        if isinstance(value, FrameStore):  # opened in the worker: show it now
            self._decoding_store = value
            path, queries = self._decoding_path
            try:
                self._show_store(value, path, queries)
            except UserError as exc:
                self.state.post_message(exc.message, exc.suggestion)
            self.state.video_decoding(value.progress)
        elif self._decoding_store is not None:
            self.state.video_decoding(value)

    def _on_decoded(self, _result: Any) -> None:
        store = self._current_decoder()
        if store is not None:
            self._decoded(store)

    def _on_decode_failed(self, exc: BaseException) -> None:
        handle = self._decoder
        if handle is None or self.sender() is not handle.worker:
            return
        store = self._decoding_store
        if store is None:  # the video did not open: the one shown stays, and it leaves the recent files
            self.settings.remove_recent(str(self._decoding_path[0].resolve()))
            self.state.post_message(exc.message if isinstance(exc, UserError) else f"cannot open the video: {exc}",
                                    getattr(exc, "suggestion", None))
            return
        store.keep_decoded()
        store.close()
        if store is self.state.video:
            self.state.video_decoding(store.progress)
            text = exc.message if isinstance(exc, UserError) else f"decoding stopped: {type(exc).__name__}: {exc}"
            self.state.post_message(text, getattr(exc, "suggestion", None))

    def _on_decoder_done(self) -> None:
        handle = self._decoder
        if handle is not None and self.sender() is handle.worker:
            self._decoder = None
            self._ending.append(handle)  # kept (a QThread must outlive its thread) until it has ended

    def _forget_ended(self) -> None:
        for handle in [h for h in self._ending if not h.running]:
            self._ending.remove(handle)
            handle.delete_later()

    @property
    def lingering(self) -> int:
        """Worker threads of this controller (decoders, report readers) still running after they were told
        to stop."""
        return sum(1 for h in self._ending if h.running) + self.reports.lingering

    def _decoded(self, store: FrameStore) -> None:
        """Decoding ended (all frames, or the first N at a truncated stream)."""
        store.close()
        if store is not self.state.video:
            return
        self.state.video_decoding(store.progress)
        if store.warnings:
            self.state.post_message("; ".join(store.warnings), level="warning")

    def cancel_decoding(self) -> None:
        """Cancel: the video becomes the frames decoded so far (a message says how many)."""
        store = self.state.video
        if self._decoder is None or store is None or store.complete:
            return
        self.stop_decoding()
        total = store.progress.total
        store.keep_decoded()
        store.close()
        self.state.video_decoding(store.progress)
        self.state.post_message(f"decoding cancelled: showing the first {len(store)} of {total} frames",
                                "open the video again to decode all of it", level="info")

    def stop_decoding(self) -> None:
        """End the background decoding, if any, and wait for its thread (opening another video, closing); a
        report being read is forgotten too."""
        self.reports.stop_reading_report()
        handle, self._decoder = self._decoder, None
        if handle is not None:
            handle.join()
            handle.delete_later()
        for ending in self._ending:
            ending.join()

    def set_video(self, frames: np.ndarray | FrameStore, fps: float | None = None, path: str | None = None,
                  info: dict[str, Any] | None = None, queries: np.ndarray | None = None) -> None:
        """Show frames uint8 [T, H, W, 3] (or a store, decoding); queries default to a grid on frame 0."""
        if self._is_running():
            self._shutdown_run()
        if not isinstance(frames, FrameStore):
            self.stop_decoding()
        info = info or {}
        # queries and tracks are the geometry's source pixels
        geometry = frames.geometry if isinstance(frames, FrameStore) else VideoGeometry.from_info(info, frames)
        self.state.set_video(frames, path, {**info, "path": path, "num_frames": len(frames),
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
        self.reports.add_report_entry(report, other, str(path), analyse(report))  # a report opened: in the history too
        self.state.compare(self.state.current, other)
        return True

    def bench_path_dialog(self) -> str | None:
        """Ask for a bench, report or accuracy file (eval/cycle --json) to add to the trade-offs."""
        path, _ = QFileDialog.getOpenFileName(self._parent, "Add bench, report or accuracy file", "",
                                              "Bench, report or accuracy file (*.json)")
        return path or None
