"""Diagnosis of a capture: every rule over a CaptureSummary, related findings folded, costliest first.

The rules are stateless functions by problem class: ``rules_sync`` (syncs, copies, round trips),
``rules_kernels`` (layout, launches, fusion, architecture, cuDNN), ``rules_precision`` (float64, fp32 in
reduced runs, TF32, tensor-core shapes) and ``rules_runtime`` (memory, compilation, host, threads, GPU
idle). The finding's shape and its severity are ``engine.capture.finding``'s; docs/diagnosis.md says
what each rule reads, when it fires, what it suggests and what it cannot see.

One problem is named once, by its cause (``_named_by_their_cause``): a sync loop's launches go into
host_sync; a pageable copy that is also repeated, synchronous, a sync or part of a round trip goes into
that finding; contiguous copies where layouts mix into layout_transpose; GPU idle gaps into the finding
that explains them (its module, or a run-wide host-side cause). The cause keeps the larger share and
carries the other's as evidence.
"""

from __future__ import annotations

from typing import Any, Callable

from engine.capture.finding import (
    CRITICAL_SHARE,
    FIX_GAIN,
    REPORT_SHARE,
    SEVERITY_ORDER,
    WARNING_SHARE,
    Context,
    Finding,
    _finding,
    finding,
    severity,
)
from engine.capture.rules_kernels import (
    LAUNCH_BUSY_MAX,
    LAUNCH_COST_MS,
    LAUNCHES_PER_MS,
    contiguous_copy,
    cudnn_benchmark_off,
    elementwise_chain,
    launch_bound_capture,
    layout_transpose,
    legacy_arch_kernels,
)
from engine.capture.rules_precision import (
    TENSOR_CORE_MODES,
    emulated_bf16,
    float64,
    fp32_under_autocast,
    gemm_misaligned,
    no_tensor_cores,
    tf32_off,
)
from engine.capture.rules_runtime import (
    allocator_churn,
    compile_in_warm_run,
    cpu_ops_in_gpu_run,
    gpu_idle_gaps,
    graph_break,
    host_bound,
    large_allocation,
    memory_near_capacity,
    recompile,
    thread_oversubscription,
)
from engine.capture.rules_sync import (
    SYNC_COST_MS,
    SYNC_MIN,
    cpu_round_trip,
    host_sync,
    pageable_copy,
    repeated_copy,
    sync_copy,
)
from engine.capture.summary import CaptureSummary

Rule = Callable[[CaptureSummary, Context], list[Finding]]

#: an elementwise chain is folded into the large allocation of its site when the buffer's sweep is this share of it
SWEEP_OF_CHAIN = 0.5

#: every rule, in the order they run (launch_bound_capture before gpu_idle_gaps: the idle rule reads what
#: the launch rule claimed)
RULES: tuple[Rule, ...] = (
    host_sync, pageable_copy, repeated_copy, sync_copy, cpu_round_trip,
    layout_transpose, contiguous_copy, launch_bound_capture, elementwise_chain, legacy_arch_kernels,
    cudnn_benchmark_off,
    float64, fp32_under_autocast, tf32_off, no_tensor_cores, gemm_misaligned, emulated_bf16,
    allocator_churn, large_allocation, memory_near_capacity, recompile, graph_break, compile_in_warm_run,
    host_bound, cpu_ops_in_gpu_run, thread_oversubscription,
    gpu_idle_gaps,
)


def diagnose_capture(summary: CaptureSummary, *, precision: str | None = None,
                     capability: tuple[int, int] | None = None, typical_wall_ms: float | None = None,
                     device_name: str | None = None) -> list[Finding]:
    """Findings from a capture summary, costliest first. An errored capture gives no findings.

    ``device_name`` (the report's GPU) picks the DRAM peak the memory-bound rules compare against.
    """
    if summary.error and not summary.wall_ms:
        return []
    ctx: Context = {
        "precision": precision or summary.precision,
        "capability": tuple(capability or summary.capability or ()) or None,
        "typical": typical_wall_ms or summary.unprofiled_wall_ms,
        "device_name": device_name,
    }
    findings: list[Finding] = []
    for rule in RULES:
        findings.extend(rule(summary, ctx))
    findings = _syncs_explain_launches(findings, ctx)
    findings = _named_by_their_cause(findings, ctx)
    findings = _idle_explained_by_its_cause(findings)
    findings.sort(key=lambda f: (-f["evidence"]["share"], SEVERITY_ORDER[f["severity"]]))
    return findings


#: rules whose finding accounts for the GPU idle time in its module (their fix removes the gap)
IDLE_CAUSES = ("host_sync", "cpu_round_trip", "launch_bound_capture", "sync_copy", "pageable_copy",
               "repeated_copy", "host_bound", "cpu_ops_in_gpu_run", "thread_oversubscription")
#: of those, the ones that explain a run's leftover host idle wherever it lies (no module of their own)
RUN_WIDE_IDLE_CAUSES = ("launch_bound_capture", "host_bound")


def _idle_explained_by_its_cause(findings: list[Finding]) -> list[Finding]:
    """GPU idle gaps in a module that a cause's finding names are that finding's time, and a launch- or
    host-bound run's leftover host idle is its loop's: named once, by the cause, which carries the idle time."""
    causes = [f for f in findings if f["rule"] in IDLE_CAUSES and f["severity"] != "info"]
    if not causes:
        return findings
    out = []
    for f in findings:
        if f["rule"] == "gpu_idle_gaps" and f["evidence"].get("scope") != "session":
            owner = next((c for c in causes if c["module"] and c["module"] == f["module"]), None)
            if owner is None:
                owner = next((c for c in causes if c["rule"] in RUN_WIDE_IDLE_CAUSES), None)
            if owner is not None:
                owner["evidence"]["gpu_idle_also_ms"] = f["evidence"].get("host_idle_ms", 0.0)
                continue
        out.append(f)
    return out


def _fold(findings: list[Finding], child_rule: str, owner_rules: tuple[str, ...],
          same: Callable[[Finding, Finding], bool], ctx: Context,
          which: Callable[[Finding], bool] = lambda f: True) -> list[Finding]:
    """Fold each ``child_rule`` finding (those ``which`` picks) into an ``owner_rules`` finding of the ``same``
    place (the first rule listed first): the owner names the cause, keeps the larger share (its fix removes
    both) and carries the child's share as ``CHILD_share`` in its evidence."""
    owners = sorted((f for f in findings if f["rule"] in owner_rules), key=lambda f: owner_rules.index(f["rule"]))
    out = []
    for f in findings:
        if f["rule"] == child_rule and which(f):
            owner = next((o for o in owners if o is not f and same(f, o)), None)
            if owner is not None:
                _grow(owner, f["evidence"]["share"], ctx)
                owner["evidence"][f"{child_rule}_share"] = f["evidence"]["share"]
                continue
        out.append(f)
    return out


def _grow(owner: Finding, share: float, ctx: Context) -> None:
    """Raise a finding's share (and with it its severity and ms at stake) to ``share`` if that is larger."""
    if share <= owner["evidence"]["share"]:
        return
    owner["evidence"]["share"] = round(share, 4)
    if ctx["typical"]:
        owner["evidence"]["ms_at_stake"] = round(share * ctx["typical"], 3)
    if SEVERITY_ORDER[severity(share)] < SEVERITY_ORDER[owner["severity"]]:
        owner["severity"] = severity(share)


def _same_site(child: Finding, owner: Finding) -> bool:
    return bool(child["call_site"]) and child["call_site"] == owner["call_site"]


def _same_module(child: Finding, owner: Finding) -> bool:
    return bool(child["module"]) and child["module"] == owner["module"]


def _chain_sweeps_the_buffer(child: Finding, owner: Finding) -> bool:
    """An elementwise chain at a large allocation's site that is mostly that buffer's fill and passes (the
    allocation's sweep time at least half the chain's): sizing the buffer to need is the fix."""
    sweep = owner["evidence"].get("sweep_ms", 0.0)
    return (_same_site(child, owner) and owner["evidence"]["share"] > 0
            and sweep >= SWEEP_OF_CHAIN * child["evidence"].get("ms", 0.0))


def _named_by_their_cause(findings: list[Finding], ctx: Context) -> list[Finding]:
    """Related findings of one place named once, by the cause whose fix removes the others:

    - a pageable copy that is repeated per call, synchronous, a ``.cpu()`` sync or part of a round trip is
      that finding's (caching, async copies, one read after the loop or staying on the GPU fix it);
    - the host waiting for each upload of host data (a sync inside ``.to(device)``) is the upload's finding;
    - ``.contiguous()`` copies where layouts mix are the layout mismatch's; an elementwise chain of copy
      kernels is the copies' (or the layout's);
    - CUDA-core GEMMs in the module of a misaligned GEMM shape, and older-architecture kernels, are the
      misalignment's;
    - an elementwise chain that is mostly a large buffer's fill and passes is the allocation's (sized to need);
    - recompiles at a graph break's site are the break's;
    - CPU ops of a host round trip are the round trip's.
    """
    findings = _fold(findings, "pageable_copy", ("repeated_copy", "sync_copy", "host_sync"),
                     lambda child, owner: _same_site(child, owner) and owner["evidence"].get("kind") != "upload",
                     ctx)
    findings = _fold(findings, "pageable_copy", ("cpu_round_trip",), _same_module, ctx)
    findings = _fold(findings, "host_sync", ("repeated_copy", "pageable_copy"), _same_site, ctx,
                     which=lambda f: f["evidence"].get("kind") == "upload")
    findings = _fold(findings, "contiguous_copy", ("layout_transpose",), _same_site, ctx)
    findings = _fold(findings, "elementwise_chain", ("contiguous_copy", "layout_transpose"), _same_site, ctx)
    findings = _fold(findings, "elementwise_chain", ("large_allocation",), _chain_sweeps_the_buffer, ctx)
    findings = _fold(findings, "no_tensor_cores", ("gemm_misaligned",), _same_module, ctx)
    # cuBLAS picks older-architecture kernels for shapes its newer ones cannot tile: the misalignment is the cause
    findings = _fold(findings, "legacy_arch_kernels", ("gemm_misaligned",),
                     lambda child, owner: not child["module"] or _same_module(child, owner), ctx)
    # a compiled function's graph break is what makes it recompile when the break hands dynamo a changing
    # Python value (``.item()``): one problem, at one site
    findings = _fold(findings, "recompile", ("graph_break",), _same_site, ctx)
    findings = _fold(findings, "cpu_ops_in_gpu_run", ("cpu_round_trip",), lambda child, owner: True, ctx)
    return _cpu_ops_slowed_by_threads(findings)


#: thread_oversubscription names the CPU ops of a GPU run once its loss is at least this share of their time at
#: stake: the ops are slow mostly because of the thread count
THREADS_EXPLAIN_CPU_OPS = 0.5


def _cpu_ops_slowed_by_threads(findings: list[Finding]) -> list[Finding]:
    """CPU ops of a GPU run that lose most of their time to oversubscribed threads (the probe's per-op loss) are
    the thread count's finding: it carries their share and the second fix (the ops on the GPU), and keeps its own
    share (setting the threads saves that much, not the ops' whole time)."""
    threads = next((f for f in findings if f["rule"] == "thread_oversubscription"), None)
    ops = next((f for f in findings if f["rule"] == "cpu_ops_in_gpu_run"), None)
    if threads is None or ops is None or not threads["call_site"] or threads["call_site"] != ops["call_site"]:
        return findings
    if threads["evidence"]["share"] < THREADS_EXPLAIN_CPU_OPS * ops["evidence"]["share"]:
        return findings
    threads["evidence"]["cpu_ops_in_gpu_run_share"] = ops["evidence"]["share"]
    threads["suggestion"] += f"; then {ops['suggestion']}"
    return [f for f in findings if f is not ops]


def _syncs_explain_launches(findings: list[Finding], ctx: dict[str, Any]) -> list[Finding]:
    """A loop that syncs per item is also a loop of small launches: one problem, named once, by its cause.

    When host_sync and launch_bound_capture point at the same module, the launch finding is folded into
    the sync one (whose fix, taking the loop off the host, removes both); the larger share is kept.
    """
    synced = {f["module"] for f in findings if f["rule"] == "host_sync" and f["module"]}
    launches = {f["module"]: f for f in findings if f["rule"] == "launch_bound_capture" and f["module"] in synced}
    folded = {id(f) for f in launches.values()}
    out = []
    for f in findings:
        if id(f) in folded:
            continue  # folded into the sync finding of the same module
        # one sync finding (the first, costliest site of the module) takes the launches
        launch = launches.pop(f["module"], None) if f["rule"] == "host_sync" else None
        if launch is not None:
            evidence = {k: v for k, v in f["evidence"].items() if k not in ("share", "ms_at_stake")}
            evidence.update({"launches_in_the_loop": launch["evidence"].get("launches", 0),
                             "launch_bound_share": launch["evidence"]["share"]})
            f = finding("host_sync", max(f["evidence"]["share"], launch["evidence"]["share"]), f["title"],
                        evidence, f["suggestion"], typical_wall_ms=ctx["typical"], stage=f["stage"],
                        module=f["module"], call_site=f["call_site"])
        out.append(f)
    return out


__all__ = [
    "CRITICAL_SHARE", "FIX_GAIN", "LAUNCHES_PER_MS", "LAUNCH_BUSY_MAX", "LAUNCH_COST_MS", "REPORT_SHARE", "RULES",
    "SEVERITY_ORDER", "SYNC_COST_MS", "SYNC_MIN", "TENSOR_CORE_MODES", "WARNING_SHARE", "_finding",
    "diagnose_capture", "finding", "severity",
]
