"""Plugin code run so that it cannot take its caller with it.

``call_plugin`` runs one call into a plugin (its import, its factory, a batch) on that plugin's worker: one
long-lived daemon thread per plugin name, reused across calls, runs and sessions in the process, while the
caller waits for it in short slices:

- an exception the plugin raises comes back to the caller as it was (the session names it as today);
- ``sys.exit``, ``KeyboardInterrupt`` or another ``BaseException`` from the plugin becomes a
  :class:`TrackerError` naming the plugin and what it did ("called sys.exit(3)"): never the caller's
  exit, never a vanished run;
- while a ``cancel_scope`` is active (the session sets one around its work) and its cancel flag is
  set, the call is given ``ABANDON_AFTER_S`` more to return; past that it is abandoned: the worker is
  retired and left running (daemon, named, logged, listed by ``abandoned_threads``), the caller gets
  :class:`PluginAbandoned` at once, and the plugin's next call starts a fresh worker. A Stop therefore
  returns control whatever the plugin does.

Why one worker and not a thread per call: PyTorch keeps per-thread state that a fresh thread starts cold.
The cuDNN v8 API's execution-plan cache is ``thread_local`` (``aten/src/ATen/native/cudnn/Conv_v8.cpp``,
since PyTorch PR #103939), so a new thread rebuilds the plan of every convolution shape it meets;
cuBLAS/cuBLASLt handles come from a per-thread pool; autocast's cast cache, grad mode and the current stream
are thread-local too. A thread per call made TAPIR 1.5x and CoTracker3 1.2x slower than a direct call.

A call made from a worker thread (plugin code calling ``call_plugin``) runs inline there: queueing it
behind the call that made it would deadlock. Under torch's profiler (a deep capture) or a dispatch mode
(the cost counter's pass) the call runs in the caller's thread, the only one they see: exits and
interrupts are still caught, but a hang there cannot be abandoned.

``lingering_threads`` lists what a finished command leaves behind (non-daemon threads a plugin started,
abandoned calls), so the CLI can say so and exit instead of waiting for them forever. Idle workers are
daemon threads and hold nothing up.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import torch

from engine.core.errors import TrackerError

log = logging.getLogger(__name__)

T = TypeVar("T")

#: how long a call still running when its run is stopped may take to return before it is abandoned, s
ABANDON_AFTER_S = 1.0
#: how often the waiting caller checks the call and the cancel flag, s
POLL_S = 0.02
#: the worker threads' name prefix (the plugin's name follows)
THREAD_PREFIX = "trackscope-plugin"

_local = threading.local()
_abandoned: list[threading.Thread] = []  # kept (named) until they end; read by abandoned_threads
_abandoned_lock = threading.Lock()


class PluginAbandoned(TrackerError):
    """A plugin call that did not return after its run was stopped; its thread was left running."""


class _Call:
    """One call into plugin code: run once (on a worker or inline), its value or the way out of it kept."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.fn = fn
        self.value: Any = None
        self.error: BaseException | None = None
        self.finished = threading.Event()

    def run(self) -> None:
        try:
            self.value = self.fn()
        except BaseException as exc:  # noqa: BLE001 - every way out of plugin code is brought back
            self.error = exc
        finally:
            self.finished.set()


class _Worker:
    """A plugin's long-lived helper thread: runs its calls from a queue, one at a time, in order."""

    def __init__(self, name: str) -> None:
        self.calls: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        self.busy = False  # inside a call of plugin code (read by busy_threads)
        self.thread = threading.Thread(target=self._serve, name=f"{THREAD_PREFIX} {name}", daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        _local.worker = True
        while True:
            call = self.calls.get()
            if call is None:
                return
            self.busy = True
            try:
                call.run()
            finally:
                self.busy = False
            del call  # an idle worker holds no result (a prepared video on the device) alive

    def submit(self, call: _Call) -> None:
        self.calls.put(call)

    def retire(self) -> None:
        """Serve nothing more: the thread ends once the call it is in (a hung one) returns."""
        self.calls.put(None)


_workers: dict[str, _Worker] = {}
_workers_lock = threading.Lock()


def _worker_for(name: str) -> _Worker:
    """The plugin's worker, started on its first call (and again after an abandon)."""
    with _workers_lock:
        worker = _workers.get(name)
        if worker is None or not worker.thread.is_alive():
            worker = _workers[name] = _Worker(name)
        return worker


def _retire(name: str, worker: _Worker) -> None:
    """Take an abandoned call's worker out of service; it is listed by ``abandoned_threads`` until it ends."""
    with _workers_lock:
        if _workers.get(name) is worker:
            del _workers[name]
    worker.retire()
    with _abandoned_lock:
        _abandoned.append(worker.thread)


@contextmanager
def cancel_scope(cancel: threading.Event) -> Iterator[None]:
    """Plugin calls made by this thread inside the block are abandoned once ``cancel`` is set."""
    previous = getattr(_local, "cancel", None)
    _local.cancel = cancel
    try:
        yield
    finally:
        _local.cancel = previous


def _escaped(name: str, what: str, exc: BaseException) -> TrackerError:
    """The TrackerError for a BaseException that is not an Exception (exit, interrupt, ...)."""
    if isinstance(exc, SystemExit):
        did = f"called sys.exit({exc.code!r})"
    elif isinstance(exc, KeyboardInterrupt):
        did = "raised KeyboardInterrupt"
    else:
        did = f"raised {type(exc).__name__}: {exc}".rstrip(": ")
    return TrackerError(f"plugin {name!r} {did} {what}",
                        "a plugin must return or raise an exception, never exit the process; fix the plugin, "
                        "or choose another tracker")


def call_plugin(name: str, what: str, fn: Callable[[], T]) -> T:
    """``fn()`` (plugin code) run on the plugin's worker thread; its result, or its exception re-raised.

    ``what`` says which call it is, for messages ("in its factory", "while tracking points 0-7").
    """
    call = _Call(fn)
    # the profiler and dispatch modes see only their own thread; a worker calling in must not wait on itself
    if _instrumented() or getattr(_local, "worker", False):
        call.run()
        return _outcome(name, what, call)
    cancel: threading.Event | None = getattr(_local, "cancel", None)
    worker = _worker_for(name)
    worker.submit(call)
    stopped_at: float | None = None
    while not call.finished.wait(POLL_S):
        if cancel is None or not cancel.is_set():
            continue
        now = time.monotonic()
        if stopped_at is None:
            stopped_at = now
        elif now - stopped_at >= ABANDON_AFTER_S:
            _retire(name, worker)
            thread = worker.thread
            log.warning("plugin %r did not return %s within %g s after Stop: thread %r abandoned",
                        name, what, ABANDON_AFTER_S, thread.name)
            raise PluginAbandoned(
                f"plugin {name!r} did not return {what} within {ABANDON_AFTER_S:g} s after Stop: abandoned "
                f"(its thread {thread.name!r} is left running)",
                "the plugin hangs: fix it or choose another tracker; restart to free what it holds")
    return _outcome(name, what, call)


def _outcome(name: str, what: str, call: _Call) -> Any:
    """The call's value, or its exception raised here (an exit or interrupt as a TrackerError)."""
    exc = call.error
    if exc is not None:
        call.error = None  # the caller's traceback holds it from here; the worker keeps no reference
        if isinstance(exc, Exception):
            raise exc
        raise _escaped(name, what, exc) from None
    return call.value


def _instrumented() -> bool:
    """Whether this thread runs under torch's profiler (a deep capture) or a dispatch or function mode (the
    cost counter's FlopCounterMode): thread-local state a helper thread would not have."""
    return bool(torch._C._autograd._profiler_enabled() or torch._C._len_torch_dispatch_stack()
                or torch._C._len_torch_function_stack())


def in_each_worker(fn: Callable[[], Any], timeout_s: float = 5.0) -> int:
    """``fn()`` on every live, idle plugin worker (thread-local settings such as torch's intra-op thread count are
    set per thread); how many ran it. Not plugin code: a worker that does not answer within ``timeout_s`` is left."""
    with _workers_lock:
        workers = [w for w in _workers.values() if w.thread.is_alive() and not w.busy]
    calls = []
    for worker in workers:
        call = _Call(fn)
        worker.submit(call)
        calls.append(call)
    return sum(1 for call in calls if call.finished.wait(timeout_s) and call.error is None)


def abandoned_threads() -> list[threading.Thread]:
    """Worker threads of abandoned plugin calls that are still running."""
    with _abandoned_lock:
        _abandoned[:] = [t for t in _abandoned if t.is_alive()]
        return list(_abandoned)


def busy_threads() -> list[threading.Thread]:
    """Plugin worker threads inside a call right now (after a Ctrl-C the caller stopped waiting for them)."""
    with _workers_lock:
        return [w.thread for w in _workers.values() if w.busy and w.thread.is_alive()]


def lingering_threads() -> list[threading.Thread]:
    """Threads that would keep the process alive or hold it at exit: non-daemon threads other than the main
    thread (a plugin's), abandoned plugin calls, and plugin workers still inside a call (a daemon thread inside
    torch's C++ code when the interpreter shuts down ends the process with 'terminate called without an active
    exception', rc -6: seen after a Ctrl-C during a plugin's batch)."""
    main = threading.main_thread()
    stray = [t for t in threading.enumerate() if t is not main and not t.daemon and t.is_alive()]
    stray += [t for t in abandoned_threads() if t not in stray]
    return stray + [t for t in busy_threads() if t not in stray]
