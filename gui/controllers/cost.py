"""Counts a report's cost model in a worker when the Diagnosis panel asks: what-if and roofline for any run.

A live run or a ``track --report`` file has no per-stage work (FLOPs, bytes); the panel asks for it
with ``count_requested`` and this controller runs ``engine.api.with_counted_work`` (its tracker rebuilt
and run once on the CPU, cached per configuration) and the analysis of the counted report in a worker
thread (``gui.worker.start_worker``), never on the GUI thread. One count at a time: a request made while
one is counting waits for it, and only the newest one waits. While a tracking run is in progress the
count waits for it to end, so a counted pass on the same cores never skews the run's timings.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from PySide6.QtCore import QObject, QThread, Signal

from engine.api import Analysis, Report, UserError, analyse, with_counted_work
from gui.worker import GeneratorWorker, WorkerHandle, start_worker

COUNT_THREAD_NAME = "trackscope-cost-count"
#: where the cost model is counted: the CPU, so a GPU run in progress is never disturbed
COUNT_DEVICE = "cpu"


class Counted(NamedTuple):
    """What a count returns to the GUI thread: the report asked about, and its counted copy or the reason."""

    original: Report
    counted: Report | None = None
    analysis: Analysis | None = None
    error: str = ""


def count_report(report: Report, device: str = COUNT_DEVICE) -> Counted:
    """The worker's job: ``report`` with its work counted, and its analysis (never raises)."""
    try:
        counted = with_counted_work(report, device=device)
        return Counted(report, counted, analyse(counted))
    except UserError as exc:
        return Counted(report, error=str(exc))
    except Exception as exc:  # noqa: BLE001 - a tracker's own failure is shown, not raised into the thread
        return Counted(report, error=f"{type(exc).__name__}: {exc}")


class CostController(QObject):
    """Answers a DiagnosisPanel's ``count_requested`` by counting in a worker; ``shutdown`` joins it."""

    answered = Signal(object)  # a Counted, after the panel was given it

    def __init__(self, panel: Any, is_running: Callable[[], bool] = lambda: False,
                 device: str = COUNT_DEVICE) -> None:
        super().__init__()
        self.panel = panel
        self.device = device
        self._is_running = is_running  # () -> bool: a tracking run is in progress
        self._job: WorkerHandle | None = None
        self._waiting: Report | None = None  # the newest request not started yet
        panel.count_requested.connect(self.request)
        panel.counts_on_demand = True

    @property
    def busy(self) -> bool:
        """Whether a count is in progress."""
        return self._job is not None and self._job.running

    def request(self, report: Report) -> None:
        """Count ``report``'s cost model now, or when the count or run in progress ends."""
        self._waiting = report
        self.resume()

    def resume(self) -> None:
        """Start the waiting count if nothing is in the way (call it when a run ends)."""
        if self._waiting is None or self.busy or self._is_running():
            return
        report, self._waiting = self._waiting, None
        self._forget_job()

        def connect(worker: GeneratorWorker, thread: QThread) -> None:
            worker.returned.connect(self._done)
            thread.finished.connect(self.resume)

        self._job = start_worker(lambda: count_report(report, self.device), COUNT_THREAD_NAME, connect=connect)

    def _done(self, result: Counted) -> None:
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
        """Drop waiting requests and wait for a count in progress (a torch pass cannot be interrupted)."""
        self._waiting = None
        if self._job is not None and self._job.join():  # one still running is kept, never deleted under it
            self._job.delete_later()
            self._job = None
