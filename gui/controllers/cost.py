"""Counts a report's cost model in a worker when the Diagnosis panel asks: what-if and roofline for any run.

A live run or a ``track --report`` file has no per-stage work (FLOPs, bytes); the panel asks for it
with ``count_requested`` and this controller counts it (its tracker rebuilt and run once on the CPU)
from a worker thread (``gui.worker.start_worker``), never on the GUI thread: the worker waits on a child
process (``engine.api.CountProcess``: the counter's dispatch mode holds the GIL through every op, which
froze the event loop up to 0.45 s when counted in a thread) and analyses the counted report. Counted
reports are kept per report for the session. One count at a time: a request made while one is
counting waits for it, and only the newest one waits. While a tracking run is in progress the count
waits for it to end, so a counted pass on the same cores never skews the run's timings. Shutdown stops
the child at once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, NamedTuple

from PySide6.QtCore import QObject, QThread, Signal

from engine.api import Analysis, CountProcess, Report, UserError, analyse
from gui.worker import GeneratorWorker, WorkerHandle, start_worker

log = logging.getLogger(__name__)

COUNT_THREAD_NAME = "trackscope-cost-count"
#: where the cost model is counted: the CPU, so a GPU run in progress is never disturbed
COUNT_DEVICE = "cpu"
#: counted reports kept for the session (the latest ones), so a report shown again is not counted again
MAX_COUNTED = 8


class Counted(NamedTuple):
    """What a count returns to the GUI thread: the report asked about, and its counted copy or the reason."""

    original: Report
    counted: Report | None = None
    analysis: Analysis | None = None
    error: str = ""


def count_report(report: Report, process: Any) -> Counted:
    """The worker's job: ``report`` with its work counted in ``process``, and its analysis (never raises)."""
    try:
        counted = process.run(report)
        return Counted(report, counted, analyse(counted))
    except UserError as exc:
        return Counted(report, error=str(exc))
    except Exception as exc:  # noqa: BLE001 - a tracker's own failure is shown, not raised into the thread
        log.warning("counting the work of a report failed", exc_info=exc)
        return Counted(report, error=f"{type(exc).__name__}: {exc}")


class CostController(QObject):
    """Answers a DiagnosisPanel's ``count_requested`` by counting in a worker; ``shutdown`` joins it."""

    answered = Signal(object)  # a Counted, after the panel was given it

    def __init__(self, panel: Any, is_running: Callable[[], bool] = lambda: False,
                 device: str = COUNT_DEVICE, process: Callable[[str], Any] = CountProcess) -> None:
        """process: makes the counter of one count from the device (its ``run(report)`` and ``stop()``)."""
        super().__init__()
        self.panel = panel
        self.device = device
        self._make_process = process
        self._is_running = is_running  # () -> bool: a tracking run is in progress
        self._job: WorkerHandle | None = None
        self._process: Any = None  # the CountProcess of the count in progress
        self._counted: dict[int, Counted] = {}  # id(report) -> its answer (the report is kept in it)
        self._waiting: Report | None = None  # the newest request not started yet
        panel.count_requested.connect(self.request)
        panel.counts_on_demand = True

    @property
    def busy(self) -> bool:
        """Whether a count is in progress."""
        return self._job is not None and self._job.running

    def request(self, report: Report) -> None:
        """Count ``report``'s cost model now, or when the count or run in progress ends (once per report)."""
        known = self._counted.get(id(report))
        if known is not None and known.original is report:
            self._done(known)
            return
        self._waiting = report
        self.resume()

    def resume(self) -> None:
        """Start the waiting count if nothing is in the way (call it when a run ends)."""
        if self._waiting is None or self.busy:
            return
        if self._is_running():
            self.panel.set_count_waiting(self._waiting)
            return
        report, self._waiting = self._waiting, None
        self.panel.set_count_started(report)
        self._forget_job()

        def connect(worker: GeneratorWorker, thread: QThread) -> None:
            worker.returned.connect(self._done)
            thread.finished.connect(self.resume)

        process = self._process = self._make_process(self.device)
        self._job = start_worker(lambda: count_report(report, process), COUNT_THREAD_NAME, on_quit=process.stop,
                                 connect=connect)

    def _done(self, result: Counted) -> None:
        if result.counted is not None:
            self._counted[id(result.original)] = result
            for key in list(self._counted)[:-MAX_COUNTED]:
                del self._counted[key]
        if result.counted is not None and result.analysis is not None:
            self.panel.set_counted(result.original, result.counted, result.analysis)
        else:
            self.panel.set_count_failed(result.original, result.error or "unknown error")
        self.answered.emit(result)

    def _forget_job(self) -> None:
        if self._job is not None and not self._job.running:
            self._job.delete_later()
            self._job = None

    def shutdown(self) -> None:
        """Drop waiting requests, stop the child process of a count in progress and join its worker."""
        self._waiting = None
        if self._process is not None:
            self._process.stop()
        if self._job is not None and self._job.join():  # one still running is kept, never deleted under it
            self._job.delete_later()
            self._job = None
