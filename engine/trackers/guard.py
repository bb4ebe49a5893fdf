"""Plugin code run so that it cannot take its caller with it.

``call_plugin`` runs one call into a plugin (its import, its factory, a batch) in a daemon helper thread
and waits for it in short slices:

- an exception the plugin raises comes back to the caller as it was (the session names it as today);
- ``sys.exit``, ``KeyboardInterrupt`` or another ``BaseException`` from the plugin becomes a
  :class:`TrackerError` naming the plugin and what it did ("called sys.exit(3)"): never the caller's
  exit, never a vanished run;
- while a ``cancel_scope`` is active (the session sets one around its work) and its cancel flag is
  set, the call is given ``ABANDON_AFTER_S`` more to return; past that it is abandoned: the helper
  thread is left running (daemon, named, logged, listed by ``abandoned_threads``) and the caller gets
  :class:`PluginAbandoned` at once. A Stop therefore returns control whatever the plugin does.

Under torch's profiler (a deep capture) or a dispatch mode (the cost counter's pass) the call runs in the
caller's thread, the only one they see: exits and interrupts are still caught, but a hang there cannot be
abandoned.

``lingering_threads`` lists what a finished command leaves behind (non-daemon threads a plugin started,
abandoned calls), so the CLI can say so and exit instead of waiting for them forever.
"""

from __future__ import annotations

import logging
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
#: the helper threads' name prefix (the plugin's name and the call follow)
THREAD_PREFIX = "trackscope-plugin"

_local = threading.local()
_abandoned: list[threading.Thread] = []  # kept (named) until they end; read by abandoned_threads
_abandoned_lock = threading.Lock()


class PluginAbandoned(TrackerError):
    """A plugin call that did not return after its run was stopped; its thread was left running."""


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
    """``fn()`` (plugin code) run in a daemon helper thread; its result, or its exception re-raised.

    ``what`` says which call it is, for messages ("in its factory", "while tracking points 0-7").
    """
    cancel: threading.Event | None = getattr(_local, "cancel", None)
    box: dict[str, object] = {}
    finished = threading.Event()

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - every way out of plugin code is brought back
            box["error"] = exc
        finally:
            finished.set()

    if _instrumented():  # the profiler and dispatch modes see only their own thread: the call runs here
        target()
        return _outcome(name, what, box)
    thread = threading.Thread(target=target, name=f"{THREAD_PREFIX} {name}", daemon=True)
    thread.start()
    stopped_at: float | None = None
    while not finished.wait(POLL_S):
        if cancel is None or not cancel.is_set():
            continue
        now = time.monotonic()
        if stopped_at is None:
            stopped_at = now
        elif now - stopped_at >= ABANDON_AFTER_S:
            with _abandoned_lock:
                _abandoned.append(thread)
            log.warning("plugin %r did not return %s within %g s after Stop: thread %r abandoned",
                        name, what, ABANDON_AFTER_S, thread.name)
            raise PluginAbandoned(
                f"plugin {name!r} did not return {what} within {ABANDON_AFTER_S:g} s after Stop: abandoned "
                f"(its thread {thread.name!r} is left running)",
                "the plugin hangs: fix it or choose another tracker; restart to free what it holds")
    thread.join()
    return _outcome(name, what, box)


def _outcome(name: str, what: str, box: dict[str, object]) -> Any:
    """The call's value, or its exception raised here (an exit or interrupt as a TrackerError)."""
    if "error" in box:
        exc = box["error"]
        assert isinstance(exc, BaseException)
        if isinstance(exc, Exception):
            raise exc
        raise _escaped(name, what, exc) from None
    return box["value"]


def _instrumented() -> bool:
    """Whether this thread runs under torch's profiler (a deep capture) or a dispatch or function mode (the
    cost counter's FlopCounterMode): thread-local state a helper thread would not have."""
    return bool(torch._C._autograd._profiler_enabled() or torch._C._len_torch_dispatch_stack()
                or torch._C._len_torch_function_stack())


def abandoned_threads() -> list[threading.Thread]:
    """Helper threads of abandoned plugin calls that are still running."""
    with _abandoned_lock:
        _abandoned[:] = [t for t in _abandoned if t.is_alive()]
        return list(_abandoned)


def lingering_threads() -> list[threading.Thread]:
    """Threads that would keep the process alive or hold it at exit: non-daemon threads other than the main
    thread (a plugin's), and abandoned plugin calls."""
    main = threading.main_thread()
    stray = [t for t in threading.enumerate() if t is not main and not t.daemon and t.is_alive()]
    return stray + [t for t in abandoned_threads() if t not in stray]
