"""CompiledSwitch: compile in a background thread while runs go on eagerly; switch when it is done.

A tracker asks ``request(keys, job)`` for the configuration it is about to run (its shapes, precision):
the job (warm-up calls of the compiled functions on those shapes, which is when torch.compile compiles)
runs in a daemon thread, one job at a time; until it ends ``ready(key)`` is False and the tracker runs
eagerly. When it succeeds its keys are ready: the tracker uses the compiled functions from its next batch.
A job that fails leaves the tracker eager for good (``error`` says why, and no job runs again). ``inline``
runs the same job in the caller's thread (``--compile on``: compile before the run, as torch.compile does).

What the switch does not do, the tracker must: keep the two threads off each other's CUDA streams and
captures (CorrTrack: the job runs on its own stream, captures use thread-local capture mode).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

#: compile modes: off (eager), on (compile in the run, before its first batch), background (this switch)
COMPILE_MODES = ("off", "on", "background")
#: the worker thread's name (seen in py-spy and the app's thread checks)
THREAD_NAME = "trackscope-compile"


def compile_in_flight() -> bool:
    """Whether a background compile thread is still running (a process exiting under it aborts: Inductor's C++
    threads are torn down while in use; session 19 on the H200, "terminate called without an active exception")."""
    return any(t.name == THREAD_NAME and t.is_alive() for t in threading.enumerate())
#: state words (the label a report and the app show is ``CompileStatus.label``)
IDLE, COMPILING, COMPILED, FAILED = "idle", "compiling", "compiled", "failed"
#: RetryLater repeats of one job before the switch gives up (FAILED, saying why): a job cannot retry forever
MAX_RETRIES = 3
#: the most events a JobLog keeps
MAX_JOB_EVENTS = 64


@dataclass(frozen=True)
class CompileStatus:
    """Where the switch stands: ``state`` (idle, compiling, compiled, failed), the last job's seconds and
    whether it came from the on-disk cache, and the error of a failed one."""

    mode: str
    state: str
    seconds: float | None = None
    from_cache: bool = False
    error: str = ""
    retries: int = 0  # RetryLater repeats of the current (or last) job

    @property
    def label(self) -> str:
        """What runs now: "eager", "eager, compiling in the background", "compiled", "compiled (from cache)"."""
        if self.mode == "off":
            return "eager"
        if self.state == FAILED:
            return "eager"
        if self.state == COMPILED:
            return "compiled (from cache)" if self.from_cache else "compiled"
        if self.state == COMPILING and self.mode == "background":
            return "eager, compiling in the background"
        return "compiled" if self.mode == "on" else "eager"

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"mode": self.mode, "state": self.state, "label": self.label}
        if self.seconds is not None:
            out["seconds"] = round(self.seconds, 3)
            out["from_cache"] = self.from_cache
        if self.error:
            out["error"] = self.error
        if self.retries:
            out["retries"] = self.retries
        return out


class JobLog:
    """What a compile job did, for the log and the report: timed events (start, each function compiled or
    loaded, cache counts, retries, end or failure), kept to MAX_JOB_EVENTS, written to ``logger`` as they come."""

    def __init__(self, logger: logging.Logger, clock: Callable[[], float] = time.perf_counter) -> None:
        self._log = logger
        self._clock = clock
        self._t0 = clock()
        self._lock = threading.Lock()
        self.events: list[dict[str, Any]] = []
        self.fields: dict[str, Any] = {}

    def restart(self) -> None:
        with self._lock:
            self._t0 = self._clock()

    def event(self, text: str, **fields: Any) -> None:
        """Log ``text`` (seconds since the job started in front) and keep it with ``fields``."""
        with self._lock:
            at = round(self._clock() - self._t0, 3)
            self.events = [*self.events, {"t_s": at, "event": text, **fields}][-MAX_JOB_EVENTS:]
        self._log.info("compile job +%.2f s: %s", at, text)

    def set(self, **fields: Any) -> None:
        with self._lock:
            self.fields.update(fields)

    def to_dict(self) -> dict[str, Any]:
        with self._lock:
            return {**self.fields, "events": list(self.events)}


#: a job returns whether its compile came from the on-disk cache
Job = Callable[[], bool]


class RetryLater(Exception):
    """A job's result cannot be trusted this time (e.g. a global flag changed under it): its keys stay not
    ready, nothing failed, and the next ``request`` runs it again."""


class CompiledSwitch:
    """Per-key readiness of compiled code, filled by jobs in a background thread (or inline)."""

    def __init__(self, mode: str = "background", clock: Callable[[], float] = time.perf_counter):
        if mode not in COMPILE_MODES:
            raise ValueError(f"compile mode must be one of {', '.join(COMPILE_MODES)}, not {mode!r}")
        self.mode = mode
        self._clock = clock
        self._lock = threading.Lock()
        self._ready: set[Hashable] = set()
        self._pending: set[Hashable] = set()
        self._thread: threading.Thread | None = None
        self._done = threading.Event()  # set whenever no job runs
        self._done.set()
        self._listeners: list[Callable[[CompileStatus], Any]] = []
        self._status = CompileStatus(mode, IDLE)
        self._retries = 0  # RetryLater repeats since the last job that ended otherwise

    # -- queries, from any thread ------------------------------------------------------------------------
    def ready(self, key: Hashable) -> bool:
        with self._lock:
            return key in self._ready

    @property
    def status(self) -> CompileStatus:
        with self._lock:
            return self._status

    @property
    def error(self) -> str:
        return self.status.error

    @property
    def busy(self) -> bool:
        return not self._done.is_set()

    def on_change(self, listener: Callable[[CompileStatus], Any]) -> None:
        """Call ``listener(status)`` (in the job's thread) when a job starts, succeeds or fails."""
        self._listeners.append(listener)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until no job runs (True) or ``timeout`` seconds pass (False)."""
        return self._done.wait(timeout)

    # -- jobs --------------------------------------------------------------------------------------------
    def request(self, keys: Iterable[Hashable], job: Job) -> bool:
        """Start ``job`` in the background for ``keys`` unless they are ready, a job runs already, the mode is
        not background, or a job failed; True when it started."""
        keys = tuple(keys)
        with self._lock:
            if (self.mode != "background" or self._status.state == FAILED or self._thread is not None
                    or all(k in self._ready for k in keys)):
                return False
            self._pending = set(keys)
            self._done.clear()
            self._thread = threading.Thread(target=self._run, args=(keys, job), name=THREAD_NAME, daemon=True)
            self._set(CompileStatus(self.mode, COMPILING, self._status.seconds, self._status.from_cache,
                                    retries=self._retries))
            self._thread.start()
        log.info("background compile started in thread %s (%d keys%s)", THREAD_NAME, len(keys),
                 f", retry {self._retries}" if self._retries else "")
        self._notify()
        return True

    def inline(self, keys: Iterable[Hashable], job: Job) -> bool:
        """Run ``job`` for ``keys`` here and now (unless ready or failed); True when its keys are ready after."""
        keys = tuple(keys)
        with self._lock:
            if self._status.state == FAILED:
                return False
            if all(k in self._ready for k in keys):
                return True
        self._execute(keys, job)
        return self.ready(keys[0]) if keys else False

    def adopt(self, keys: Iterable[Hashable], seconds: float, from_cache: bool = True) -> None:
        """Mark ``keys`` ready without a job (their compiled code was loaded by the caller, e.g. from disk)."""
        with self._lock:
            self._ready.update(keys)
            self._set(CompileStatus(self.mode, COMPILED, seconds, from_cache))
        self._notify()

    def _run(self, keys: tuple[Hashable, ...], job: Job) -> None:
        try:
            self._execute(keys, job)
        finally:
            with self._lock:
                self._thread = None
                self._pending = set()
                self._done.set()

    def _execute(self, keys: tuple[Hashable, ...], job: Job) -> None:
        t0 = self._clock()
        try:
            from_cache = bool(job())
        except RetryLater as exc:
            with self._lock:
                self._retries += 1
                retries = self._retries
                if retries > MAX_RETRIES:
                    error = f"RetryLater: gave up after {MAX_RETRIES} retries: {exc}"
                    self._set(CompileStatus(self.mode, FAILED, self._clock() - t0, False, error, retries))
                else:
                    self._set(CompileStatus(self.mode, IDLE, self._status.seconds, self._status.from_cache,
                                            retries=retries))
            if retries > MAX_RETRIES:
                log.warning("background compile gave up after %d retries, runs stay eager: %s", MAX_RETRIES, exc)
            else:
                log.info("background compile to be repeated (retry %d of %d): %s", retries, MAX_RETRIES, exc)
        except Exception as exc:  # a compile error, a lost device: eager for good, saying why
            error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            log.warning("background compile failed, runs stay eager: %s", error)
            with self._lock:
                self._set(CompileStatus(self.mode, FAILED, self._clock() - t0, False, error, self._retries))
        else:
            with self._lock:
                self._ready.update(keys)
                self._retries = 0
                self._set(CompileStatus(self.mode, COMPILED, self._clock() - t0, from_cache))
            log.info("compile done in %.2f s (%s), %d keys ready", self._clock() - t0,
                     "from the cache" if from_cache else "compiled", len(keys))
        self._notify()

    def _set(self, status: CompileStatus) -> None:
        self._status = status

    def _notify(self) -> None:
        status = self.status
        for listener in list(self._listeners):
            try:
                listener(status)
            except Exception:  # a listener's bug must not stop the switch
                log.exception("compile status listener failed")

    def forget(self) -> None:
        """Drop every ready key (the model moved to another device: its compiled code no longer applies)."""
        with self._lock:
            self._ready.clear()


#: how a tracker's name reads in a status line
DISPLAY_NAMES = {"corrtrack": "CorrTrack", "corrtrack-nopolish": "CorrTrack (no polish)"}


def compile_status_text(tracker: dict[str, Any]) -> str:
    """A status line from a tracker's description ('CorrTrack: eager, compiling in the background…', 'CorrTrack:
    compiled (took 45 s; cached for next start)'); '' for a tracker that does not compile."""
    mode = tracker.get("compile_mode", "off")
    if mode == "off":
        return ""
    name = str(tracker.get("name", ""))
    who = DISPLAY_NAMES.get(name, name or "tracker")
    label = str(tracker.get("compile", "eager"))
    seconds = tracker.get("compile_s")
    if tracker.get("compile_error"):
        return f"{who}: eager (the compile failed: {tracker['compile_error']})"
    if label == "eager, compiling in the background":
        return f"{who}: eager, compiling in the background…"
    if label.startswith("compiled") and isinstance(seconds, (int, float)):
        if label == "compiled (from cache)":
            return f"{who}: compiled (from the cache, {seconds:.1f} s)"
        cached = "cached for next start" if tracker.get("compile_cache") else "not cached"
        return f"{who}: compiled (took {seconds:.0f} s; {cached})"
    return f"{who}: {label}"
