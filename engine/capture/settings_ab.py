"""Rerun the tracker with one setting changed: the A/B a capture makes after its profiled run.

``alternate`` is the shared loop: each way (a callable that sets its setting and runs the tracker once,
unprofiled, returning its wall ms) runs ``repeats + 1`` times, the ways taking turns, each way's first run
untimed; the caller's ``restore`` runs in ``finally``, also when a run raises. Its users:

- ``engine.capture.threads.oversubscription_ab``: the run's intra-op thread count against the core count;
- ``cudnn_benchmark_ab`` here: ``torch.backends.cudnn.benchmark`` on against off, after a GPU capture whose
  run had conv kernels with it off.

Why the cuDNN A/B runs each way in a thread of its own: cuDNN v8's execution-plan cache is ``thread_local``
and its key has no benchmark flag (``aten/src/ATen/native/cudnn/Conv_v8.cpp``: ``CacheKeyWrapper(operation,
y, x, w, padding, stride, dilation, groups, deterministic, allow_tf32)``; the first lookup serves whatever
plan the thread cached). The thread the tracker ran in holds the heuristic plans of its shapes, so switching
benchmark on there searches nothing and reads the same plans: a same-thread A/B measures no difference
whatever cuDNN would have picked. A fresh thread per way starts with an empty cache: in the "on" thread the
first (untimed) run searches and caches the fastest plans, as ``cudnn.benchmark = True`` at start-up would;
in the "off" thread it caches the heuristic ones. A plugin's call runs on its guard worker
(``engine.trackers.guard``) unless the calling thread is instrumented, so each way's thread runs the tracker
under an empty TorchFunctionMode (the guard then runs it inline there): both ways pay that mode's per-op
Python cost, which adds to both medians alike (the saving's share of the run is understated, never inflated).
"""

from __future__ import annotations

import queue
import statistics
import threading
from collections.abc import Callable, Sequence
from typing import Any

#: the evidence settings' keys the cuDNN A/B writes
CUDNN_AB_ON_MS = "cudnn_ab_on_ms"  # the tracker's unprofiled run with cudnn.benchmark on (median), ms
CUDNN_AB_OFF_MS = "cudnn_ab_off_ms"  # the same with it off, ms
CUDNN_AB_RUNS = "cudnn_ab_runs"  # timed runs each way
CUDNN_AB_ON_ALL = "cudnn_ab_on_runs_ms"  # every timed run with it on, ms, comma-separated
CUDNN_AB_OFF_ALL = "cudnn_ab_off_runs_ms"  # the same with it off
#: "True" when the tracker switched benchmark off again during an "on" run (it sets the flag itself): no medians
CUDNN_AB_OVERRIDDEN = "cudnn_ab_overridden"
#: timed runs each way (after one untimed run each way: the "on" one does the search). The gains to tell apart
#: are a few % of the run (the H200 sweep's fixed-shape convs: -1.7 % to +8 %), so more than the thread A/B's 3
CUDNN_AB_REPEATS = 7  # quartiles of 7 runs each way tell a gain from the jitter (engine.capture.settings_ab.separated)
CUDNN_AB_MIN_REPEATS = 3  # fewer runs each way than this cannot tell a gain from the jitter
#: the most seconds the A/B's runs may take together (2 ways x (repeats + 1) runs): a deep capture waits for it
CUDNN_AB_BUDGET_S = 12.0
#: how long a way's thread may take to end after its last run, s (it is a daemon: a hang holds nothing up)
LANE_JOIN_S = 5.0


def alternate(ways: Sequence[Callable[[], float]], restore: Callable[[], None], repeats: int) -> list[float]:
    """The median ms of each way over ``repeats`` timed runs (``alternate_runs``)."""
    return [statistics.median(t) for t in alternate_runs(ways, restore, repeats)]


def alternate_runs(ways: Sequence[Callable[[], float]], restore: Callable[[], None], repeats: int
                   ) -> list[list[float]]:
    """Each way's ``repeats`` timed runs, ms: the ways take turns, ``repeats + 1`` rounds, the first round
    untimed; ``restore()`` runs whatever happens (a run that raises propagates after it)."""
    times: list[list[float]] = [[] for _ in ways]
    try:
        for i in range(repeats + 1):
            for way, out in zip(ways, times):
                ms = way()
                if i:
                    out.append(ms)
    finally:
        restore()
    return times


class Lane:
    """A thread of its own for one way of an A/B: runs the calls handed to it, in order, and returns their value
    (or raises their exception) in the caller. Thread-local state it builds (cuDNN's plan cache) stays with it."""

    def __init__(self, name: str, wrap: Callable[[Callable[[], Any]], Any] | None = None) -> None:
        self._calls: queue.SimpleQueue[tuple[Callable[[], Any], queue.SimpleQueue] | None] = queue.SimpleQueue()
        self._wrap = wrap or (lambda fn: fn())
        self.thread = threading.Thread(target=self._serve, name=f"trackscope-ab {name}", daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            item = self._calls.get()
            if item is None:
                return
            fn, answer = item
            try:
                answer.put((True, self._wrap(fn)))
            except BaseException as exc:  # noqa: BLE001 - carried back to the caller, raised there
                answer.put((False, exc))
            del item, fn, answer

    def call(self, fn: Callable[[], Any]) -> Any:
        answer: queue.SimpleQueue = queue.SimpleQueue()
        self._calls.put((fn, answer))
        ok, value = answer.get()
        if not ok:
            raise value
        return value

    def close(self) -> None:
        self._calls.put(None)
        self.thread.join(LANE_JOIN_S)


def _inline(fn: Callable[[], Any]) -> Any:
    """``fn()`` under an empty TorchFunctionMode: a plugin call made inside runs in this thread (the guard's rule
    for instrumented threads), not on the plugin's long-lived worker."""
    from torch.overrides import TorchFunctionMode

    class _Passthrough(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            return func(*args, **(kwargs or {}))

    with _Passthrough():
        return fn()


def cudnn_benchmark_ab(run_ms: Callable[[], float], repeats: int = CUDNN_AB_REPEATS, *,
                       lane_wrap: Callable[[Callable[[], Any]], Any] | None = _inline) -> dict[str, str]:
    """The tracker's run with ``torch.backends.cudnn.benchmark`` on against off: ``run_ms()`` runs it once
    unprofiled and returns its wall ms. Each way runs in a fresh thread of its own (see the module's docstring),
    the ways alternating, each one's first run untimed (the "on" one searches). The flag is process-wide
    (torch's global context): it is set before every run and put back to the caller's value at the end, also
    when a run raises. A tracker that switches it off again itself makes the A/B void: then only
    ``CUDNN_AB_OVERRIDDEN``."""
    import torch

    cudnn = torch.backends.cudnn
    before = bool(cudnn.benchmark)
    overridden: list[bool] = []
    # the CUDA current device is per thread too: a way's thread starts on the caller's
    device = torch.cuda.current_device() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
    inner = lane_wrap or (lambda fn: fn())

    def wrap(fn: Callable[[], Any]) -> Any:
        if device is not None:
            torch.cuda.set_device(device)
        return inner(fn)

    lanes = {True: Lane("cudnn.benchmark on", wrap), False: Lane("cudnn.benchmark off", wrap)}

    def way(on: bool) -> Callable[[], float]:
        def run() -> float:
            cudnn.benchmark = on
            ms = lanes[on].call(run_ms)
            if on and not cudnn.benchmark:
                overridden.append(True)
            return ms
        return run

    def restore() -> None:
        cudnn.benchmark = before
        for lane in lanes.values():
            lane.close()

    on_runs, off_runs = alternate_runs([way(True), way(False)], restore, repeats)
    if overridden:
        return {CUDNN_AB_OVERRIDDEN: "True"}
    return {CUDNN_AB_ON_MS: f"{statistics.median(on_runs):.4f}", CUDNN_AB_OFF_MS: f"{statistics.median(off_runs):.4f}",
            CUDNN_AB_RUNS: str(repeats), CUDNN_AB_ON_ALL: ",".join(f"{ms:.4f}" for ms in on_runs),
            CUDNN_AB_OFF_ALL: ",".join(f"{ms:.4f}" for ms in off_runs)}


def ab_repeats(run_ms: float, budget_s: float = CUDNN_AB_BUDGET_S) -> int | None:
    """Timed runs each way for a run of ``run_ms`` so the A/B (both ways, each with its untimed first run) fits
    in ``budget_s``: at most CUDNN_AB_REPEATS; None where not even CUDNN_AB_MIN_REPEATS fit."""
    if run_ms <= 0:
        return CUDNN_AB_REPEATS
    fit = int(budget_s * 1e3 / (2 * run_ms)) - 1
    return min(CUDNN_AB_REPEATS, fit) if fit >= CUDNN_AB_MIN_REPEATS else None


def cudnn_ab(settings: dict[str, str]) -> tuple[float, float] | None:
    """(run ms with cudnn.benchmark on, off) by the recorded A/B, or None unrecorded."""
    try:
        return float(settings[CUDNN_AB_ON_MS]), float(settings[CUDNN_AB_OFF_MS])
    except (KeyError, ValueError):
        return None


def cudnn_ab_runs(settings: dict[str, str]) -> tuple[list[float], list[float]] | None:
    """Every timed run of the recorded A/B (on, off), ms; None where the capture kept only the medians."""
    try:
        return tuple([float(x) for x in settings[key].split(",")]  # type: ignore[return-value]
                     for key in (CUDNN_AB_ON_ALL, CUDNN_AB_OFF_ALL))
    except (KeyError, ValueError):
        return None


def separated(faster: Sequence[float], slower: Sequence[float]) -> bool:
    """Whether two sets of run times differ beyond their own spread: the faster way's upper quartile under the
    slower way's lower quartile (a gap smaller than the runs' jitter is not a measured gain)."""
    if len(faster) < 2 or len(slower) < 2:
        return False
    return statistics.quantiles(faster, n=4)[2] < statistics.quantiles(slower, n=4)[0]
