"""Capture rules for the runtime around the kernels: the allocator, torch.compile, the host side, threads,
and GPU idle time with its breakdown (why the GPU waited).

They read the run-level evidence (``MemoryFacts``, ``CompileFacts``, ``HostFacts``, ``IdleBreakdown``) of
the captured warm run; ``gpu_idle_gaps`` also reads the summary's idle gaps, net of trackscope's own loop
and stages and of the profiler's added host time.
"""

from __future__ import annotations

from engine.capture.attribution import OUTSIDE_STAGES
from engine.capture.finding import (
    FIX_GAIN,
    REPORT_SHARE,
    Context,
    Finding,
    at,
    deflated,
    finding,
    gpu_share_of,
    share_of,
    size,
    tracker_wall_ms,
    user_rows,
)
from engine.capture.rules_sync import SYNC_COST_MS
from engine.capture.summary import ADAPTER_STAGES, CaptureSummary
from engine.capture.threads import AB_RUNS, PROBE_FAIR_MS, PROBE_MS, ab_saving_ms, probe_penalty_ms

#: cudaFree synchronises the device: at least a sync's cost on top of its own host time
FREE_SYNC_MS = SYNC_COST_MS
MiB = 1 << 20
GiB = 1 << 30
LARGE_ALLOCATION_BYTES = 256 * MiB  # one allocation per call this large is worth a look
LARGE_ALLOCATION_OF_CAPACITY = 0.1  # ... or this share of the card's memory
#: a kernel group counts as a sweep of the allocation when its op's tensors (read and written) average at least
#: this multiple of the allocation per kernel: a fill or a read-write pass over all of it is about 2x, a pass
#: over a slice of it less
SWEEP_BYTES_OF_ALLOCATION = 1.0
NEAR_CAPACITY_INFO = 0.85  # peak reserved over capacity: info from here
NEAR_CAPACITY_WARNING = 0.95  # warning from here (the next larger input runs out of memory)
FRAGMENTATION_RATIO = 1.5  # reserved over allocated peak above this: the pool holds unused blocks
#: what one recompilation costs where the record has no compile frames to measure it (dynamo trace + inductor
#: codegen of a small graph: 50 ms is the low end)
RECOMPILE_COST_MS = 50.0
#: what a graph break costs per call: a guard check and a return to eager between two compiled graphs
GRAPH_BREAK_COST_MS = 0.05
#: CPU runs: time lost to oversubscribed intra-op threads (context switches, cache thrash): a stated fifth of the
#: CPU op time, the low end of what PyTorch's tuning guide reports for torch threads > physical cores
OVERSUBSCRIPTION_LOSS = 0.2
#: GPU runs without a probe (engine.capture.threads): what each CPU op loses to an oversubscribed team, ms. The low
#: end of the H200 machine's measured losses at 2x and 4x its 16 cores (0.1-0.4 ms per small op, 0.25-0.5 for an
#: exp over 1 M floats, 0.4-0.85 for a 512^3 matmul, 0.65-1.8 for a 16-filter conv)
OVERSUBSCRIBED_OP_LOSS_MS = 0.1


def allocator_churn(s: CaptureSummary, ctx: Context) -> list[Finding]:
    """cudaMalloc / cudaFree / empty_cache inside a warm run: the caching allocator should serve it all."""
    m = s.evidence.memory
    if not (m.mallocs or m.frees or m.empty_cache_calls) or not s.wall_ms:
        return []
    at_stake = m.malloc_ms + m.free_ms + m.frees * FREE_SYNC_MS
    share = gpu_share_of(s, at_stake)  # driver time: the profiler hardly slows it
    if share < REPORT_SHARE:
        return []
    site = m.empty_cache_site if m.empty_cache_calls else m.malloc_site
    ratio = m.peak_reserved_bytes / m.peak_allocated_bytes if m.peak_allocated_bytes else 0.0
    what = (f"{m.empty_cache_calls} torch.cuda.empty_cache() calls, " if m.empty_cache_calls else "")
    suggestion = ("remove torch.cuda.empty_cache() from the loop: it returns the pool to the driver, and the next "
                  "allocations cudaMalloc it back (each cudaFree synchronises the device)" if m.empty_cache_calls
                  else "keep the shapes fixed from call to call (pad to a bucket size) and allocate the big "
                  "buffers once; with many sizes set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True")
    return [finding("allocator_churn", share,
                    f"allocator churn in a warm run{at(site)}: {what}{m.mallocs} cudaMalloc and {m.frees} cudaFree "
                    f"({m.malloc_ms + m.free_ms:.2f} ms)",
                    {"mallocs": m.mallocs, "frees": m.frees, "empty_cache_calls": m.empty_cache_calls,
                     "malloc_ms": m.malloc_ms, "free_ms": m.free_ms, "reserved_over_allocated": ratio,
                     "fragmented": ratio > FRAGMENTATION_RATIO},
                    suggestion, typical_wall_ms=ctx["typical"], call_site=site)]


def large_allocation(s: CaptureSummary, ctx: Context) -> list[Finding]:
    """A very large allocation in every call: a buffer sized for the worst case, made (and swept) each call.

    At stake: the GPU time, at the allocation's call site, of the kernels whose op's tensors hold at least the
    allocation (``buffer_sweep`` groups: its fill and every pass over all of it), times ``FIX_GAIN``: what sizing
    the buffer to the call's need, or reusing it, saves; an estimate, since the capture cannot see how much of
    the buffer a call uses. Allocator driver time is allocator_churn's (the pool serves a repeated size). Info
    (share 0) where those kernels are a negligible share or the capture has no such groups (a CPU capture, one
    made before them): what is at stake then is memory (how close the card is to full is memory_near_capacity's).
    """
    m = s.evidence.memory
    big = m.largest_allocation_bytes
    threshold = LARGE_ALLOCATION_BYTES
    if m.capacity_bytes:
        threshold = min(threshold, int(LARGE_ALLOCATION_OF_CAPACITY * m.capacity_bytes))
    if not big or big < threshold or not s.wall_ms:
        return []
    site = m.largest_allocation_site
    of_capacity = big / m.capacity_bytes if m.capacity_bytes else 0.0
    # what the allocating function's kernels take, all of them: context for the title
    site_ms = sum(r.kernel_ms for r in s.evidence.functions if site and r.site == site)
    sweeps = [g for g in user_rows(s.evidence.kernel_groups) if g.kind == "buffer_sweep" and site
              and g.site == site and g.count and g.bytes / g.count >= SWEEP_BYTES_OF_ALLOCATION * big]
    sweep_ms, sweep_kernels = sum(g.ms for g in sweeps), sum(g.count for g in sweeps)
    share = gpu_share_of(s, FIX_GAIN * sweep_ms)
    held = (f"{size(m.allocated_bytes)} allocated in the run over {m.allocations} allocations; "
            f"{100 * of_capacity:.1f} % of the card")
    evidence = {"largest_allocation_bytes": big, "allocated_bytes": m.allocated_bytes,
                "allocations": m.allocations, "capacity_bytes": m.capacity_bytes, "of_capacity": of_capacity,
                "site_kernel_ms": site_ms, "sweep_ms": sweep_ms, "sweep_kernels": sweep_kernels,
                "fix_gain": FIX_GAIN, "names": [n for g in sweeps for n in g.names][:3]}
    if share >= REPORT_SHARE:
        return [finding("large_allocation", share,
                        f"one allocation of {size(big)} per call{at(site)}: {sweep_kernels} kernels over all of it "
                        f"(its fill, passes over the whole buffer) take {sweep_ms:.2f} ms "
                        f"({100 * gpu_share_of(s, sweep_ms):.1f} % of the run) ({held})",
                        evidence,
                        "size the buffer to what the call needs (this input's frames and points, not the longest "
                        "supported) or allocate it once and reuse it, zeroing only the part a call uses; the time at "
                        f"stake is an estimate, {100 * FIX_GAIN:.0f} % of those kernels' time: the capture cannot see "
                        "how much of the buffer a call uses",
                        typical_wall_ms=ctx["typical"], call_site=site)]
    swept = (f"; its function's kernels take {site_ms:.2f} ms ({100 * gpu_share_of(s, site_ms):.1f} % of the run)"
             if site_ms > 0 else "")
    return [finding("large_allocation", 0.0,
                    f"one allocation of {size(big)} per call{at(site)} ({held}){swept}",
                    evidence,
                    "allocate the buffer once and reuse it across calls (a preallocated tensor written with out= "
                    "or in-place ops), or process the points/frames in chunks so the peak shrinks",
                    typical_wall_ms=ctx["typical"], call_site=site)]


def memory_near_capacity(s: CaptureSummary, ctx: Context) -> list[Finding]:
    """Peak reserved memory near the card's capacity: the next larger input fails. Severity by the margin."""
    m = s.evidence.memory
    if not m.capacity_bytes or not m.peak_reserved_bytes:
        return []
    used = m.peak_reserved_bytes / m.capacity_bytes
    if used < NEAR_CAPACITY_INFO:
        return []
    f = finding("memory_near_capacity", 0.0,
                f"peak reserved memory {size(m.peak_reserved_bytes)} of {size(m.capacity_bytes)} "
                f"({100 * used:.0f} %)",
                {"peak_reserved_bytes": m.peak_reserved_bytes, "peak_allocated_bytes": m.peak_allocated_bytes,
                 "capacity_bytes": m.capacity_bytes, "used": used},
                "lower the points or frames per batch, run in bf16/fp16, or free intermediates (del, "
                "torch.no_grad / inference_mode); the margin left is what a larger input can use",
                typical_wall_ms=ctx["typical"])
    if used >= NEAR_CAPACITY_WARNING:
        f["severity"] = "warning"  # a memory margin, not time: the one rule whose severity is not its share
    return [f]


def _counter(settings: dict[str, str], key: str) -> int:
    try:
        return int(settings.get(key, "0") or 0)
    except ValueError:
        return 0


def warm_recompiles(s: CaptureSummary) -> tuple[int, tuple[str, ...]]:
    """Recompilations in the captured warm run and dynamo's reasons: the evidence's count, else frames dynamo
    compiled in the run (``dynamo_run.frames.total``) with compile time in it, after frames had been compiled
    before it (the warm-up): a guard that failed, or the recompile limit hit on every call."""
    c, settings = s.evidence.compile, s.evidence.settings
    run_frames = _counter(settings, "dynamo_run.frames.total")
    inferred = run_frames if (c.compile_ms > 0 and run_frames
                              and _counter(settings, "dynamo_total.frames.total") > run_frames) else 0
    reasons = tuple((k.split(".", 2)[2].splitlines() or [""])[0].strip() for k in settings
                    if k.startswith(("dynamo_run.unimplemented.", "dynamo_run.recompiles.")))
    return max(c.recompiles, inferred), c.reasons or reasons


def recompile(s: CaptureSummary, ctx: Context) -> list[Finding]:
    """torch.compile recompiling in a warm run: a guard on a Python value or shape that changes."""
    c = s.evidence.compile
    count, why = warm_recompiles(s)
    if not count or not s.wall_ms:
        return []
    measured = c.compile_ms + c.autotune_ms  # the stated floor only where the record has no compile frames
    at_stake = min(s.wall_ms, measured if measured > 0 else count * RECOMPILE_COST_MS)
    reasons = "; ".join(r[:120] for r in why[:2])
    return [finding("recompile", share_of(s, at_stake),
                    f"{count} recompilations in a warm run{at(c.compile_site)} ({c.compile_ms:.0f} ms "
                    "compiling)" + (f": {reasons}" if reasons else ""),
                    {"recompiles": count, "compile_ms": c.compile_ms, "autotune_ms": c.autotune_ms,
                     "regions": c.regions, "reasons": list(why[:5])},
                    "find the changing guard (TORCH_LOGS=recompiles): pass a changing Python number as a tensor, "
                    "mark a changing size with torch._dynamo.mark_dynamic(x, dim), or compile with dynamic=True",
                    typical_wall_ms=ctx["typical"], call_site=c.compile_site)]


def graph_break(s: CaptureSummary, ctx: Context) -> list[Finding]:
    """Graph breaks in compiled code: eager Python between graphs, no fusion across the break."""
    c = s.evidence.compile
    if not c.graph_breaks or not s.wall_ms:
        return []
    # each call crosses every break once: of the compiled regions' entries, all but one per call are breaks
    crossings = c.region_calls * c.graph_breaks / (c.graph_breaks + 1) if c.region_calls else c.graph_breaks
    at_stake = crossings * GRAPH_BREAK_COST_MS
    return [finding("graph_break", share_of(s, min(at_stake, s.wall_ms)),
                    f"{c.graph_breaks} graph breaks in the compiled code{at(c.compile_site)} "
                    f"({c.regions} compiled regions entered {c.region_calls} times)",
                    {"graph_breaks": c.graph_breaks, "regions": c.regions, "region_calls": c.region_calls,
                     "break_crossings": crossings, "reasons": list(c.reasons[:5])},
                    "find them with torch._dynamo.explain(fn)(*args) or torch.compile(fullgraph=True), then move "
                    "the breaking Python (print, .item(), data-dependent control flow, unsupported calls) out of "
                    "the compiled function",
                    typical_wall_ms=ctx["typical"], call_site=c.compile_site)]


def compile_in_warm_run(s: CaptureSummary, ctx: Context) -> list[Finding]:
    """Compilation or autotuning inside a warm run that is no recompile: it should have happened once."""
    c = s.evidence.compile
    ms = c.compile_ms + c.autotune_ms
    if warm_recompiles(s)[0] or ms <= 0 or not s.wall_ms:
        return []
    share = share_of(s, min(ms, s.wall_ms))
    if share < REPORT_SHARE:
        return []
    return [finding("compile_in_warm_run", share,
                    f"{ms:.0f} ms of compilation or autotuning in a warm run{at(c.compile_site)}",
                    {"compile_ms": c.compile_ms, "autotune_ms": c.autotune_ms, "regions": c.regions},
                    "compile once, outside the per-call path (torch.compile the module at start-up and keep the "
                    "compiled object; do not call torch.compile inside forward), and warm it up on the real shapes",
                    typical_wall_ms=ctx["typical"], call_site=c.compile_site)]


def host_bound(s: CaptureSummary, ctx: Context) -> list[Finding]:
    """The host side slower than the GPU: user Python with no torch op under it while the GPU waits.

    GPU runs only: on a CPU run the Python self time also holds the torch ops a function calls through
    operators (``0.25 * x`` records no Python frame), so it cannot tell Python from the ops' own work; there
    the tiny-op loop is launch_bound_capture's.
    """
    h, idle = s.evidence.host, s.evidence.idle
    if not s.has_gpu or not h.python_ms or not (idle.host_wait_ms or idle.sync_ms) or not s.wall_ms:
        return []
    # the Python the GPU waited for. While it idled for the host: that Python less all the profiler added (its
    # Python tracer slows exactly this code; a tracker with no Python problem reads 1-3 ms of it here). After a
    # sync (the host can no longer run ahead, so the Python that follows is what the GPU waits on): scaled to
    # the unprofiled run
    during_wait = max(0.0, min(h.python_ms, idle.host_wait_ms) - profiler_added_ms(s))
    after_sync = deflated(s, min(max(0.0, h.python_ms - during_wait), idle.sync_ms))
    at_stake = deflated(s, during_wait) + after_sync
    share = gpu_share_of(s, at_stake)
    if share < REPORT_SHARE:
        return []
    site = h.python_site or getattr(idle, "host_wait_site", None)
    return [finding("host_bound", share,
                    f"the GPU waits on the host's Python: {h.python_ms:.1f} ms of it with no torch op under it "
                    f"(about {at_stake:.1f} ms unprofiled){at(site)}",
                    {"python_ms": h.python_ms, "host_wait_ms": idle.host_wait_ms, "gpu_idle_ms": s.gpu_idle_ms,
                     "sync_idle_ms": idle.sync_ms, "unprofiled_python_ms": at_stake},
                    "move that Python off the per-call path (precompute it once, vectorise it with torch ops on "
                    "the GPU), or overlap it with GPU work",
                    typical_wall_ms=ctx["typical"], call_site=site)]


def cpu_ops_in_gpu_run(s: CaptureSummary, ctx: Context) -> list[Finding]:
    """torch ops that ran on the CPU in a GPU run (tensors left on the host)."""
    h, idle = s.evidence.host, s.evidence.idle
    if not s.has_gpu or not h.cpu_only_ops or not s.wall_ms:
        return []
    # on the GPU the same ops take microseconds: what they cost is the time the GPU waited on the host meanwhile
    # (its host-wait and after-sync idle), else, with no idle recorded, a conservative FIX_GAIN of their time
    waited = idle.host_wait_ms + idle.sync_ms
    at_stake = min(h.cpu_only_ms, waited) if waited else FIX_GAIN * h.cpu_only_ms
    share = share_of(s, at_stake)
    if share < REPORT_SHARE:
        return []
    names = ", ".join(h.cpu_only_names[:3])
    return [finding("cpu_ops_in_gpu_run", share,
                    f"{h.cpu_only_ops} torch ops ran on the CPU in a GPU run ({h.cpu_only_ms:.1f} ms: {names})"
                    f"{at(h.cpu_only_site)}",
                    {"cpu_ops": h.cpu_only_ops, "cpu_ms": h.cpu_only_ms, "names": list(h.cpu_only_names[:5])},
                    "create these tensors on the GPU (device= on torch.zeros/arange/tensor, or .to(device) once "
                    "in __init__ as a buffer), so the ops run there",
                    typical_wall_ms=ctx["typical"], call_site=h.cpu_only_site)]


def thread_oversubscription(s: CaptureSummary, ctx: Context) -> list[Finding]:
    """More torch intra-op threads than the cores this process may use, with CPU op time that matters.

    Measured where the capture ran the tracker again at the core count (``engine.capture.threads``'s A/B, GPU or
    CPU): at stake is what the fair count saved the run. Otherwise, GPU runs: each of the tracker's CPU ops (the
    top-level ones that launched no GPU work) loses the probe's measured per-op penalty
    (``OVERSUBSCRIBED_OP_LOSS_MS`` where the capture has no probe), at most its time and what the GPU waited
    meanwhile; CPU runs: a stated ``OVERSUBSCRIPTION_LOSS`` of the tracker's time.
    """
    h, idle = s.evidence.host, s.evidence.idle
    if not h.cores or h.num_threads <= h.cores or not s.wall_ms:
        return []
    probed = probe_penalty_ms(s.evidence.settings)
    per_op = probed if probed is not None else OVERSUBSCRIBED_OP_LOSS_MS
    ab = ab_saving_ms(s.evidence.settings)
    if ab is not None:
        saved, over, fair = ab
        cpu_ms = h.cpu_only_ms if s.has_gpu else tracker_wall_ms(s)
        site = h.cpu_only_site if s.has_gpu else None
        share = saved / over if over else 0.0  # of the unprofiled run it was measured on
        if share < REPORT_SHARE:
            return []
        runs = s.evidence.settings.get(AB_RUNS, "")
        return [finding("thread_oversubscription", share,
                        f"{h.num_threads} torch threads on {h.cores} cores: the run took {over:.1f} ms, "
                        f"{fair:.1f} ms at {h.cores} threads (medians of {runs} each; {cpu_ms:.1f} ms of CPU ops"
                        + (f" in {h.cpu_only_ops} ops{at(site)}" if s.has_gpu else "") + ")",
                        {"num_threads": h.num_threads, "interop_threads": h.interop_threads, "cores": h.cores,
                         "cpu_ms": cpu_ms, "cpu_ops": h.cpu_only_ops if s.has_gpu else 0, "run_ms": over,
                         "run_ms_at_cores": fair, "measured": True, "probed": probed is not None},
                        f"torch.set_num_threads({h.cores}) (or OMP_NUM_THREADS={h.cores}); with several worker "
                        "processes, divide the cores between them",
                        typical_wall_ms=ctx["typical"], call_site=site)]
    if s.has_gpu:
        cpu_ms = h.cpu_only_ms
        waited = idle.host_wait_ms + idle.sync_ms
        at_stake = min(cpu_ms, h.cpu_only_ops * per_op, waited if waited else cpu_ms)
        site = h.cpu_only_site
    else:
        cpu_ms = tracker_wall_ms(s)
        at_stake = OVERSUBSCRIPTION_LOSS * cpu_ms
        site = None
    share = share_of(s, at_stake)
    if share < REPORT_SHARE:
        return []
    measured = (f"; a parallel op here takes {s.evidence.settings[PROBE_MS]} ms at {h.num_threads} threads, "
                f"{s.evidence.settings[PROBE_FAIR_MS]} ms at {h.cores}" if probed is not None else "")
    return [finding("thread_oversubscription", share,
                    f"{h.num_threads} torch threads on {h.cores} cores ({cpu_ms:.1f} ms of CPU ops"
                    + (f" in {h.cpu_only_ops} ops{at(site)}" if s.has_gpu else "") + f"{measured})",
                    {"num_threads": h.num_threads, "interop_threads": h.interop_threads, "cores": h.cores,
                     "cpu_ms": cpu_ms, "cpu_ops": h.cpu_only_ops if s.has_gpu else 0,
                     "loss_per_op_ms": per_op if s.has_gpu else 0.0, "probed": probed is not None,
                     "assumed_loss": 0.0 if s.has_gpu else OVERSUBSCRIPTION_LOSS},
                    f"torch.set_num_threads({h.cores}) (or OMP_NUM_THREADS={h.cores}); with several worker "
                    "processes, divide the cores between them",
                    typical_wall_ms=ctx["typical"], call_site=site)]


def profiler_added_ms(s: CaptureSummary) -> float:
    """Host time the profiler added to the captured run: its profiled wall less the unprofiled one."""
    return max(0.0, (s.profiled_wall_ms or 0.0) - (s.unprofiled_wall_ms or s.profiled_wall_ms or 0.0))


def _session_key(stage: str, module: str) -> bool:
    """True for the session's own time around the tracker: its adapter stages and its loop between stages."""
    return stage in ADAPTER_STAGES or (stage == OUTSIDE_STAGES and module == OUTSIDE_STAGES)


def idle_breakdown(s: CaptureSummary, session_idle_ms: float) -> dict[str, float]:
    """GPU idle by cause (ms): the evidence's HTA-style breakdown, else the summary's gap causes with the
    session's own idle (``session_idle_ms``) taken out of the host wait."""
    i = s.evidence.idle
    parts = {"host_wait": i.host_wait_ms, "kernel_wait": i.kernel_wait_ms, "sync": i.sync_ms, "copy": i.copy_ms,
             "trackscope": i.trackscope_ms}
    if any(parts.values()):
        return parts
    causes = s.idle_by_cause_ms
    return {"host_wait": max(0.0, causes.get("host", 0.0) - session_idle_ms),
            "kernel_wait": causes.get("short", 0.0), "sync": causes.get("sync", 0.0),
            "copy": causes.get("copy", 0.0), "trackscope": session_idle_ms}


IDLE_LABELS = {"host_wait": "host wait", "kernel_wait": "launch latency", "sync": "sync", "copy": "copy wait",
               "trackscope": "trackscope's own"}


def why_idle(s: CaptureSummary, breakdown: dict[str, float]) -> str:
    """'8.0 ms host wait (Python in f at x.py:10), 3.0 ms sync, ...', largest first."""
    parts = []
    for key, ms in sorted(breakdown.items(), key=lambda kv: -kv[1]):
        if ms < 0.05:
            continue
        label = IDLE_LABELS.get(key, key)
        site = getattr(s.evidence.idle, "host_wait_site", None) or s.evidence.host.python_site
        if key == "host_wait" and site:
            label += f" (Python in {site})"
        parts.append(f"{ms:.1f} ms {label}")
    return ", ".join(parts)


def gpu_idle_gaps(s: CaptureSummary, ctx: Context) -> list[Finding]:
    """GPU idle the tracker's host side causes, in its own stages and modules, net of the profiler; the title
    and evidence say why the GPU waited (the idle breakdown).

    - Only idle whose gap lies inside a tracker stage or module counts: the session's loop between stages
      ("(outside stages)") and its upload/download/decode stages are not the tracker's, so idle there is
      at most an info finding ("session overhead between stages", share 0: nothing a tracker fix saves).
    - Idle a sync or a blocking DtoH copy causes is host_sync's; a round trip's host time is
      cpu_round_trip's; launch gaps launch_bound_capture's: none of these is counted again here.
    - The profiler inflates the host side (profiled wall 1.0-2.4x the unprofiled one on the H200), and on
      a mostly idle GPU that shows as idle time: its added wall (profiled - unprofiled) is subtracted.
    """
    if not s.has_gpu or not s.wall_ms:
        return []
    causes = s.idle_by_cause_ms
    session_idle = sum(c.idle_ms for c in s.stages if c.stage in ADAPTER_STAGES)
    loop = next((c for c in s.cells if c.stage == OUTSIDE_STAGES and c.module == OUTSIDE_STAGES), None)
    if loop is None:
        loop = next((c for c in s.modules if c.module == OUTSIDE_STAGES), None)
    session_idle += loop.idle_ms if loop is not None else 0.0
    tracker_idle = max(0.0, s.gpu_idle_ms - session_idle)
    blocked = causes.get("sync", 0.0) + causes.get("copy", 0.0)
    blocked_session = sum(g.dur_ms for g in s.gaps if g.cause in ("sync", "copy") and _session_key(g.stage, g.module))
    tracker_blocked = max(0.0, blocked - blocked_session)
    inflation = profiler_added_ms(s)
    round_trip_host = sum(r.host_ms for r in s.round_trips)
    host = (tracker_idle - tracker_blocked - inflation - round_trip_host - ctx.get("launch_at_stake", 0.0))
    host = max(0.0, host)
    share = host / s.wall_ms
    breakdown = idle_breakdown(s, session_idle)
    why = why_idle(s, breakdown)
    evidence = {"idle_ms": s.gpu_idle_ms, "idle_share": s.gpu_idle_ms / s.wall_ms, "host_idle_ms": host,
                "tracker_idle_ms": tracker_idle, "session_idle_ms": session_idle,
                "profiler_added_ms": inflation, **{f"idle_{k}_ms": v for k, v in causes.items()},
                **{f"why_{k}_ms": v for k, v in breakdown.items()}}
    if share < REPORT_SHARE:
        if session_idle / s.wall_ms < REPORT_SHARE:
            return []
        evidence["scope"] = "session"
        evidence["session_idle_share"] = session_idle / s.wall_ms
        return [finding("gpu_idle_gaps", 0.0,
                        f"session overhead between stages: GPU idle {session_idle:.1f} ms of {s.wall_ms:.1f} ms "
                        "in trackscope's own loop, upload and download (not the tracker's)",
                        evidence, "nothing to change in the tracker; this time is the session's own",
                        typical_wall_ms=ctx["typical"], stage=OUTSIDE_STAGES, module=OUTSIDE_STAGES)]
    inside = [g for g in s.gaps if g.cause == "host" and not _session_key(g.stage, g.module)]
    top = inside[0] if inside else None
    evidence["scope"] = "tracker"
    if top is not None:
        evidence["longest_gap_ms"] = top.dur_ms
    return [finding("gpu_idle_gaps", share,
                    f"GPU idle {s.gpu_idle_ms:.1f} ms of {s.wall_ms:.1f} ms" + (f": {why}" if why else "")
                    + f"; {host:.1f} ms of it while the tracker's host side works (net of trackscope and the "
                    "profiler)" + (f"; longest gap {top.dur_ms:.2f} ms in {top.module}" if top else ""),
                    evidence,
                    "the host is busy between kernels there: move that work to the GPU, overlap it with GPU work "
                    "(another stream, prefetch), or batch it",
                    typical_wall_ms=ctx["typical"], stage=top.stage if top else None,
                    module=top.module if top else None, call_site=top.call_site if top else None)]
