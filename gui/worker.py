"""One worker idiom for everything slow: a generator run in a QThread, its values sent as signals.

``GeneratorWorker`` (after superqt's GeneratorWorker and napari's create_worker) iterates a generator
function in its own thread and emits each yielded value as ``yielded``, its return value as
``returned`` and an exception as ``errored``, all delivered on the GUI thread, so widgets are only ever
touched there. It keeps our backpressure: at most ``MAX_IN_FLIGHT`` values may be unhandled by the GUI
before the worker waits (a fast tracker or a loop cannot flood the event queue). ``start_worker``
creates the parentless worker, moves it to a new QThread and starts it; ``WorkerHandle`` stops and
joins it. Runs (``gui.controllers.runs``) and exports (``gui.controllers.exports``) both use it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

from PySide6.QtCore import QObject, QThread, Signal, Slot

#: how long a shutdown waits for the worker thread to end, ms
SHUTDOWN_WAIT_MS = 10_000
#: how long closing the window waits for a run's batch to end before leaving it behind, ms (issue 13: close
#: returns within 2 s whatever the tracker does; a batch still running then is abandoned, see gui.app.main)
CLOSE_WAIT_MS = 1_500
#: values the worker may emit before the GUI has handled them; past this the worker waits (backpressure,
#: so a fast tracker or a loop cannot flood the GUI's event queue)
MAX_IN_FLIGHT = 4
#: how often a waiting worker re-checks its stop flag, s
WAIT_POLL_S = 0.1


def _finished_work() -> None:
    """What a worker holds once its work has ended."""


class GeneratorWorker(QObject):
    """Iterates ``work()`` in a worker thread; created without a parent so ``moveToThread`` works.

    ``quit()`` (thread-safe) asks it to stop. With ``on_quit`` the work is told at once and winds down
    itself, its last values still delivered (a cancelled session still yields its ``Finished``); without,
    the loop closes the generator at its next value. The GUI calls ``handled()`` once per ``yielded``
    value it has dealt with; the worker waits while ``max_in_flight`` are unhandled (never after quit).
    """

    yielded = Signal(object)
    returned = Signal(object)  # the generator's return value (a plain function's result)
    errored = Signal(object)  # the exception that ended it
    done = Signal()  # the loop has ended (after quit, an error, or the last value)

    def __init__(self, work: Callable[[], Iterator[Any] | Any], on_quit: Callable[[], None] | None = None,
                 max_in_flight: int = MAX_IN_FLIGHT):
        super().__init__()
        self._work = work
        self._on_quit = on_quit
        self._max_in_flight = max_in_flight
        self._stop = threading.Event()
        self._in_flight = 0
        self._handled = threading.Condition()

    # -- called from the GUI thread (thread-safe) -----------------------------------------------
    @property
    def aborted(self) -> bool:
        """Whether ``quit()`` was called."""
        return self._stop.is_set()

    def quit(self) -> None:
        """Ask the work to stop: tell it through ``on_quit``, else stop at its next value."""
        self._stop.set()
        on_quit = self._on_quit
        if on_quit is not None:
            on_quit()
        with self._handled:
            self._handled.notify_all()

    def handled(self) -> None:
        """The GUI has handled one yielded value."""
        with self._handled:
            self._in_flight = max(0, self._in_flight - 1)
            self._handled.notify_all()

    # -- runs in the worker thread ----------------------------------------------------------------
    @Slot()
    def run(self) -> None:
        """Iterate the work (or call it, when it is a plain function); emits as it goes, then ``done``."""
        try:
            result = self._work()
            if isinstance(result, Iterator):
                result = self._iterate(result)
            self.returned.emit(result)
        except BaseException as exc:  # noqa: BLE001 - reported on the GUI thread, never raised into Qt: a
            self.errored.emit(exc)  # SystemExit or KeyboardInterrupt out of the work must not end the app
        finally:
            # the work is over: let go of it (a run's job holds its session, frames and tracks) even while Qt or
            # a late signal still holds this worker
            self._work, self._on_quit = _finished_work, None
            self.done.emit()

    def _iterate(self, gen: Iterator[Any]) -> Any:
        while True:
            if self._stop.is_set() and self._on_quit is None:
                close = getattr(gen, "close", None)
                if close is not None:
                    close()
                return None
            try:
                value = next(gen)
            except StopIteration as stop:
                return stop.value
            self._emit(value)

    def _emit(self, value: Any) -> None:
        """Emit, waiting first while too many values are unhandled (never after quit)."""
        with self._handled:
            while self._in_flight >= self._max_in_flight and not self._stop.is_set():
                self._handled.wait(WAIT_POLL_S)
            self._in_flight += 1
        self.yielded.emit(value)


class WorkerHandle:
    """A started worker and its thread: ``stop`` asks it to end, ``join`` waits and cleans up."""

    def __init__(self, worker: GeneratorWorker, thread: QThread):
        self.worker = worker
        self.thread = thread

    @property
    def running(self) -> bool:
        """Whether the thread has not finished yet."""
        return not self.thread.isFinished()

    def stop(self) -> None:
        """Ask the worker to stop; returns at once."""
        self.worker.quit()

    def join(self, wait_ms: int = SHUTDOWN_WAIT_MS) -> bool:
        """Stop, wait up to ``wait_ms`` for the thread to end; True when it did."""
        self.worker.quit()
        self.thread.quit()
        return bool(self.thread.wait(wait_ms))

    def delete_later(self) -> None:
        """Schedule the thread and the worker for deletion (only once the thread has ended)."""
        self.thread.deleteLater()
        self.worker.deleteLater()


def start_worker(work: Callable[[], Iterator[Any] | Any], name: str, on_quit: Callable[[], None] | None = None,
                 connect: Callable[[GeneratorWorker, QThread], None] | None = None) -> WorkerHandle:
    """Run ``work`` in a new QThread named ``name``; ``connect(worker, thread)`` wires signals before it starts."""
    worker = GeneratorWorker(work, on_quit=on_quit)
    thread = QThread()
    thread.setObjectName(name)
    worker.moveToThread(thread)
    if connect is not None:
        connect(worker, thread)
    worker.done.connect(thread.quit)
    thread.started.connect(worker.run)
    thread.start()
    return WorkerHandle(worker, thread)
