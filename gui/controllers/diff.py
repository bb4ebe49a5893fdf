"""Diffs: two runs of the Runs list (the entries picked as A and B), or two report files chosen by the user
(a report, a deep capture's report, an entry of a fleet folder: all plain report JSON), diffed by
``engine.api.diff_runs`` in a worker and handed to the diff panel through ``diffed``.

The diff is computed off the GUI thread always: reading two report files and aligning their rows is quick
for the recorded reports (a 90 KB H200 report parses in 3-5 ms here), but a deep capture's report or a
bench file can be tens of MB, and the app's target is no event-loop stall over 100 ms. A new request
drops the result of one still being computed. Problems (a bad file, an entry without a report, a diff that
fails) come out as ``failed`` with a plain message, never raised to Qt.

``diff_runs`` is looked up on ``engine.api`` at call time (it is written beside this view, in another
branch); it is called with the two typed ``Report`` objects, A first.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QFileDialog, QWidget

import engine.api as engine_api
from engine.api import Diff, Report, UserError, load_any
from gui.state import AppState
from gui.worker import CLOSE_WAIT_MS, GeneratorWorker, WorkerHandle, start_worker

log = logging.getLogger(__name__)

DIFF_THREAD_NAME = "diff-runs"
REPORT_FILTER = "Run reports (*.json);;All files (*)"
NO_DIFF_RUNS = "this build of trackscope cannot diff runs yet (engine.api has no diff_runs)"


def read_one_report(path: str | Path) -> Report:
    """The report of a report file (a bench file's first); UserError when it holds none."""
    reports, _ = load_any(path)
    if not reports:
        raise UserError(f"{path}: the file holds no reports", "pick a run report (trackscope bench or track --report)")
    return reports[0]


def diff_reports(a: Report, b: Report) -> Diff:
    """A's and B's diff through engine.api.diff_runs (any thread)."""
    diff_runs = getattr(engine_api, "diff_runs", None)
    if diff_runs is None:
        raise UserError(NO_DIFF_RUNS, "update trackscope")
    diff = diff_runs(a, b)
    if not isinstance(diff, Diff):
        raise UserError(f"diff_runs gave a {type(diff).__name__}, not a Diff")
    return diff


def diff_files(path_a: str | Path, path_b: str | Path) -> Diff:
    """The diff of two report files (any thread)."""
    return diff_reports(read_one_report(path_a), read_one_report(path_b))


class DiffController(QObject):
    """Computes diffs in a worker: of the Runs list's A and B, or of two report files."""

    started = Signal(str, str)  # A's and B's names: a diff is being computed
    diffed = Signal(object)  # Diff
    failed = Signal(str)  # why no diff was made

    def __init__(self, state: AppState, parent: QWidget | None = None):
        super().__init__()
        self.state = state
        self._parent = parent
        self._handle: WorkerHandle | None = None  # the diff being computed
        self._ending: list[WorkerHandle] = []  # workers whose result is dropped, until their threads have ended

    @property
    def busy(self) -> bool:
        return self._handle is not None and self._handle.running

    @property
    def can_diff_ab(self) -> bool:
        """Whether the Runs list has both A and B picked."""
        return all(self.state.ab.get(side) is not None for side in ("A", "B"))

    # -- commands ------------------------------------------------------------------------------------------
    def diff_ab(self) -> bool:
        """Diff the entries picked as A and B; False (and ``failed``) when they cannot be."""
        a_id, b_id = self.state.ab.get("A"), self.state.ab.get("B")
        if a_id is None or b_id is None:
            self.failed.emit("pick A and B in the Runs list first (Set as A, Set as B)")
            return False
        return self.diff_entries(a_id, b_id)

    def diff_entries(self, a_id: int, b_id: int) -> bool:
        """Diff two history entries' reports; False (and ``failed``) when one has none."""
        reports: list[Report] = []
        names: list[str] = []
        for side, entry_id in (("A", a_id), ("B", b_id)):
            entry = self.state.runs.get(entry_id)
            if entry is None:
                self.failed.emit(f"{side} is no longer in the Runs list")
                return False
            if entry.report is None:
                self.failed.emit(f"{side} ({entry.describe()}) has no report to diff: only a finished run or an "
                                 "opened report has one")
                return False
            reports.append(entry.report)
            names.append(entry.describe())
        a, b = reports
        self._start(lambda: diff_reports(a, b), names[0], names[1])
        return True

    def diff_files(self, path_a: str | Path, path_b: str | Path) -> bool:
        """Diff two report files (read in the worker too)."""
        for side, path in (("A", path_a), ("B", path_b)):
            if not Path(path).is_file():
                self.failed.emit(f"{side}: {path} is not a file")
                return False
        self._start(lambda: diff_files(path_a, path_b), Path(path_a).name, Path(path_b).name)
        return True

    def diff_files_dialog(self) -> None:
        """Compare > Diff two reports: ask for A's report file, then B's."""
        path_a, _ = QFileDialog.getOpenFileName(self._parent, "Diff: report A", "", REPORT_FILTER)
        if not path_a:
            return
        path_b, _ = QFileDialog.getOpenFileName(self._parent, "Diff: report B (against A)", str(Path(path_a).parent),
                                                REPORT_FILTER)
        if path_b:
            self.diff_files(path_a, path_b)

    # -- the worker ------------------------------------------------------------------------------------------
    def _start(self, work: Callable[[], Diff], a_name: str, b_name: str) -> None:
        self._retire()  # a diff still being computed: its result is dropped when it comes

        def connect(worker: GeneratorWorker, thread: Any) -> None:  # bound slots: delivered on the GUI thread
            worker.returned.connect(self._on_done)
            worker.errored.connect(self._on_error)
            thread.finished.connect(self._forget_ended)

        self.started.emit(a_name, b_name)
        self._handle = start_worker(work, DIFF_THREAD_NAME, connect=connect)

    def _is_current(self) -> bool:
        return self._handle is not None and self.sender() is self._handle.worker

    def _on_done(self, diff: Any) -> None:
        if not self._is_current():
            return  # a diff that was replaced by a newer request
        self._retire()
        self.diffed.emit(diff)

    def _on_error(self, exc: BaseException) -> None:
        if not self._is_current():
            return
        self._retire()
        if isinstance(exc, UserError):
            text = exc.message + (f" ({exc.suggestion})" if exc.suggestion else "")
        else:
            log.error("the diff failed", exc_info=exc)
            text = f"the diff failed: {type(exc).__name__}: {exc}"
        self.failed.emit(text)

    def _retire(self) -> None:
        """The current worker is done with (its result delivered or to be dropped): kept until its thread ends."""
        handle, self._handle = self._handle, None
        if handle is not None:
            self._ending.append(handle)  # a QThread must outlive its thread
            self._forget_ended()

    def _forget_ended(self) -> None:
        for handle in [h for h in self._ending if not h.running]:
            self._ending.remove(handle)
            handle.delete_later()

    def shutdown(self) -> None:
        """Wait (bounded) for a diff in flight; its result is dropped."""
        self._retire()
        for handle in list(self._ending):
            if handle.join(CLOSE_WAIT_MS):
                self._ending.remove(handle)
                handle.delete_later()
