"""What oversubscribed intra-op threads cost on this machine, measured once after a capture that saw them.

Two measurements, the second preferred where it exists:

- ``oversubscription_ab``: the tracker itself, unprofiled, a few runs at the run's thread count and as many at
  the core count, alternating (its own CPU ops, in the thread they run in: the plugin guard's worker as well as
  this one; a ``torch.set_num_threads`` the tracker makes itself while the fair runs go on is held at the core
  count). The medians' difference is what ``torch.set_num_threads(cores)`` saves the run. The loop is
  ``engine.capture.settings_ab.alternate``, shared with the cuDNN benchmark A/B. On the H200 machine the
  stand-in op below read a third of the loss that the re-planted field plugin's own 116 CPU ops had (0.055 ms per
  op in the bench process against 0.19 ms when those ops were timed alone): a stand-in is not the user's ops.
- ``oversubscription_probe``: one stand-in parallel op timed at both counts (kept for captures without a
  run to repeat).

A capture whose run had more torch intra-op threads than the cores the process may use (``num_threads`` >
``cores`` in its settings) times one parallel CPU op at the run's thread count and at the core count, right
after the profiled run and outside it (the op is not in the trace), and records both medians in the
evidence's settings. ``thread_oversubscription`` turns their difference into the time each CPU op of the run
lost: what an oversubscribed OpenMP team loses is mostly per parallel region (threads woken, descheduled and
waited for at the region's barrier), hardly per element, so it is charged per op.

Measured on the H200 machine (16 cores, torch 2.11, medians of 15): at 64 threads against 16, an ``exp`` over
1 M floats took 0.29-0.52 ms against 0.04; 100 small ops (65,536 floats) 19-41 ms against 1.5; a 512^3
matmul 0.72-1.13 ms against 0.29; a 16-filter 21x21 conv over 256x256 2.3-3.4 ms against 1.7.
"""

from __future__ import annotations

import statistics
import time

from engine.capture.settings_ab import alternate

#: elements of the probe op: above at::parallel_for's grain (32,768), so it runs as one parallel region
PROBE_ELEMENTS = 1 << 20
PROBE_REPEATS = 9  # medians of this many timed calls (after one untimed)
#: the evidence settings' keys the probe writes
PROBE_MS = "thread_probe_ms"  # the probe op at the run's thread count, ms
PROBE_FAIR_MS = "thread_probe_fair_ms"  # the same at the core count, ms
PROBE_THREADS = "thread_probe_threads"
AB_MS = "thread_ab_ms"  # the tracker's unprofiled run at the run's thread count (median), ms
AB_FAIR_MS = "thread_ab_fair_ms"  # the same at the core count, ms
AB_RUNS = "thread_ab_runs"  # timed runs each way
AB_REPEATS = 3  # timed runs each way (after one untimed run each way)


def _median_ms(fn, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def oversubscription_probe(threads: int, cores: int, repeats: int = PROBE_REPEATS) -> dict[str, str]:
    """The probe op's median time at ``threads`` and at ``cores`` intra-op threads, as settings strings; the
    calling thread's thread count is put back. Nothing when ``threads`` does not exceed ``cores``."""
    if cores <= 0 or threads <= cores:
        return {}
    import torch  # here, not at import: the rules read this module's keys without torch

    x = torch.rand(PROBE_ELEMENTS)
    out = torch.empty_like(x)
    before = torch.get_num_threads()
    try:
        # the fair count first: right after an oversubscribed team its idle workers still spin (OpenMP's wait
        # policy) and take the cores a smaller team would use (on the H200 machine a fair op timed right after the
        # oversubscribed ones read 0.13 ms against 0.05 on its own)
        torch.set_num_threads(cores)
        fair = _median_ms(lambda: torch.exp(x, out=out), repeats)
        torch.set_num_threads(threads)
        over = _median_ms(lambda: torch.exp(x, out=out), repeats)
    finally:
        torch.set_num_threads(before)
    return {PROBE_MS: f"{over:.4f}", PROBE_FAIR_MS: f"{fair:.4f}", PROBE_THREADS: str(threads)}


def probe_penalty_ms(settings: dict[str, str]) -> float | None:
    """What one parallel CPU op lost to the oversubscription, by the recorded probe (ms), or None unrecorded."""
    try:
        over, fair = float(settings[PROBE_MS]), float(settings[PROBE_FAIR_MS])
    except (KeyError, ValueError):
        return None
    return max(0.0, over - fair)


def oversubscription_ab(run_ms, threads: int, cores: int, repeats: int = AB_REPEATS) -> dict[str, str]:
    """The tracker's run at ``cores`` intra-op threads against ``threads``: ``run_ms()`` runs it once unprofiled and
    returns its wall ms. Each way is set in this thread and in every plugin worker (engine.trackers.guard), and
    while the fair runs go on ``torch.set_num_threads`` is held at ``cores`` (a tracker that sets its own count in
    every call). The runs alternate, each way's first untimed. Everything is put back; nothing when ``threads``
    does not exceed ``cores``."""
    if cores <= 0 or threads <= cores:
        return {}
    import torch

    from engine.trackers import guard

    real = torch.set_num_threads
    before = torch.get_num_threads()

    def everywhere(n: int) -> None:
        real(n)
        guard.in_each_worker(lambda: real(n))

    def capped(n: int) -> None:
        real(max(1, min(int(n), cores)))

    def fair_run() -> float:
        torch.set_num_threads = capped  # type: ignore[assignment]
        everywhere(cores)
        return run_ms()

    def over_run() -> float:
        torch.set_num_threads = real  # type: ignore[assignment]
        everywhere(threads)
        return run_ms()

    def restore() -> None:
        torch.set_num_threads = real  # type: ignore[assignment]
        everywhere(threads)
        real(before)

    fair, over = alternate([fair_run, over_run], restore, repeats)
    return {AB_MS: f"{over:.4f}", AB_FAIR_MS: f"{fair:.4f}",
            AB_RUNS: str(repeats), PROBE_THREADS: str(threads)}


def ab_saving_ms(settings: dict[str, str]) -> tuple[float, float, float] | None:
    """(ms saved per run at the core count, run ms at the run's count, at the core count) by the recorded A/B,
    or None unrecorded."""
    try:
        over, fair = float(settings[AB_MS]), float(settings[AB_FAIR_MS])
    except (KeyError, ValueError):
        return None
    return max(0.0, over - fair), over, fair
