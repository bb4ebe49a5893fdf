"""Diagnosis rules over a CaptureSummary: stateless functions, one per problem a capture shows.

Each finding is a plain dict: ``rule``, ``severity`` ('critical' | 'warning' | 'info'), ``title``,
``evidence`` (numbers; ``share`` is the fraction of the captured run's wall time at stake, and
``ms_at_stake`` that share of the typical unprofiled wall), ``suggestion``, ``stage``, ``module``
(the module path or bucket) and ``call_site`` (syncs). Severity follows the share: nothing under
``WARNING_SHARE`` of the run is above 'info', so the costliest problem comes out on top; findings
are sorted by share.

"Time at stake" is what a fix could save, estimated conservatively where the fix does not remove
the work (``FIX_GAIN``): moving an op from fp32 to bf16 or onto tensor cores at least halves it.
"""

from __future__ import annotations

from typing import Any

from engine.capture.attribution import OUTSIDE_STAGES
from engine.capture.kernels import generation
from engine.capture.summary import ADAPTER_STAGES, AUTOCAST_PRECISIONS, CaptureSummary

CRITICAL_SHARE = 0.25
WARNING_SHARE = 0.05
REPORT_SHARE = 0.01  # a finding about less than this share of the run is not reported
SYNC_MIN = 8  # host syncs per run (outside the adapter's own stages) before host_sync fires
SYNC_COST_MS = 0.015  # the least a host sync costs: the GPU drains and waits for the next launch
LAUNCH_COST_MS = 0.01  # host time per kernel launch from Python (measured ~10-15 us on the H200)
LAUNCHES_PER_MS = 10.0  # launch rate above which a run with an idle GPU is launch-bound
LAUNCH_BUSY_MAX = 0.5  # kernels busy under this share of the wall
FIX_GAIN = 0.5  # share of an op's time a precision / tensor-core fix saves, at least
TENSOR_CORE_MODES = ("tf32", "fp16", "bf16")


def severity(share: float) -> str:
    if share >= CRITICAL_SHARE:
        return "critical"
    if share >= WARNING_SHARE:
        return "warning"
    return "info"


def _finding(rule: str, share: float, title: str, evidence: dict[str, Any], suggestion: str, *,
             typical_wall_ms: float | None, stage: str | None = None, module: str | None = None,
             call_site: str | None = None) -> dict[str, Any]:
    share = max(0.0, min(1.0, share))
    ev = {k: (round(v, 4) if isinstance(v, float) else v) for k, v in evidence.items()}
    ev["share"] = round(share, 4)
    if typical_wall_ms:
        ev["ms_at_stake"] = round(share * typical_wall_ms, 3)
    return {"rule": rule, "severity": severity(share), "title": title, "evidence": ev, "suggestion": suggestion,
            "stage": stage, "module": module, "call_site": call_site}


def host_sync(s: CaptureSummary, ctx: dict[str, Any]) -> list[dict[str, Any]]:
    cells = [c for c in s.cells if c.stage not in ADAPTER_STAGES and c.syncs]
    count = sum(c.syncs for c in cells)
    if count < SYNC_MIN or not s.wall_ms:
        return []
    top = max(cells, key=lambda c: c.syncs)
    idle = s.idle_by_cause_ms.get("sync", 0.0)
    at_stake = min(s.wall_ms, max(idle, count * SYNC_COST_MS))
    site = s.sync_sites[0] if s.sync_sites else None
    evidence = {"syncs": count, "syncs_total": s.counts.syncs, "sync_wait_ms": sum(c.sync_ms for c in cells),
                "gpu_idle_after_sync_ms": idle, "dtoh_copies": s.counts.dtoh}
    if site is not None:
        evidence["top_site_syncs"] = site.count
    where = f" at {site.call_site}" if site else ""
    return [_finding("host_sync", at_stake / s.wall_ms,
                     f"{count} host-device syncs per run{where} (in {top.module})", evidence,
                     "keep results on the GPU inside the loop (no .item(), .cpu(), .tolist() or Python `if` on "
                     "tensors per point); batch the reads into one copy after the loop",
                     typical_wall_ms=ctx["typical"], stage=top.stage, module=top.module,
                     call_site=site.call_site if site else None)]


def cpu_round_trip(s: CaptureSummary, ctx: dict[str, Any]) -> list[dict[str, Any]]:
    if not s.round_trips or not s.wall_ms:
        return []
    groups: dict[tuple[str, str], list[Any]] = {}
    for r in s.round_trips:
        groups.setdefault((r.stage, r.module), []).append(r)
    out = []
    for (stage, module), trips in groups.items():
        at_stake = sum(r.host_ms + r.copy_ms for r in trips)
        ops = sorted({op for r in trips for op in r.ops})
        out.append(_finding(
            "cpu_round_trip", at_stake / s.wall_ms,
            f"data goes to the host and back inside the GPU run ({', '.join(ops[:3]) or 'CPU ops'}) in {module}",
            {"round_trips": len(trips), "dtoh_bytes": sum(r.dtoh_bytes for r in trips),
             "htod_bytes": sum(r.htod_bytes for r in trips), "host_ms": sum(r.host_ms for r in trips),
             "copy_ms": sum(r.copy_ms for r in trips)},
            "do this step on the GPU (torch.fft, torch ops on device tensors) instead of .cpu() ... .to(device); "
            "if it must run on the host, copy through pinned memory with non_blocking=True",
            typical_wall_ms=ctx["typical"], stage=stage, module=module))
    return out


def launch_bound_capture(s: CaptureSummary, ctx: dict[str, Any]) -> list[dict[str, Any]]:
    if not s.has_gpu or not s.wall_ms or not s.counts.launches:
        return []
    busy = s.kernel_ms / s.wall_ms
    rate = s.counts.launches / s.wall_ms
    mean_us = 1e3 * s.kernel_ms / s.counts.kernels if s.counts.kernels else 0.0
    if busy >= LAUNCH_BUSY_MAX or rate < LAUNCHES_PER_MS:
        return []
    host_idle = s.gpu_idle_ms - s.idle_by_cause_ms.get("sync", 0.0) - s.idle_by_cause_ms.get("copy", 0.0)
    at_stake = min(max(0.0, host_idle), s.counts.launches * LAUNCH_COST_MS)
    ctx["launch_at_stake"] = at_stake
    top = max(s.cells, key=lambda c: c.launches) if s.cells else None
    return [_finding("launch_bound_capture", at_stake / s.wall_ms,
                     f"launch-bound: {s.counts.launches} launches, kernels busy {100 * busy:.0f} % of the run"
                     + (f" (most in {top.module})" if top else ""),
                     {"launches": s.counts.launches, "kernels": s.counts.kernels, "mean_kernel_us": mean_us,
                      "kernel_busy": busy, "launches_per_ms": rate, "launches_x_mean_kernel_ms":
                      s.counts.launches * mean_us / 1e3, "wall_ms": s.wall_ms},
                     "fuse the small ops (vectorise the Python loop over points/frames, torch.compile the loop "
                     "body) or capture the step in a CUDA graph",
                     typical_wall_ms=ctx["typical"], stage=top.stage if top else None,
                     module=top.module if top else None)]


def fp32_under_autocast(s: CaptureSummary, ctx: dict[str, Any]) -> list[dict[str, Any]]:
    if ctx["precision"] not in AUTOCAST_PRECISIONS or not s.fp32_ops or not s.wall_ms:
        return []
    by_op: dict[str, list[Any]] = {}
    for row in s.fp32_ops:
        by_op.setdefault(row.op, []).append(row)
    out = []
    for op, rows in by_op.items():
        ms = sum((r.gpu_ms if s.has_gpu else r.cpu_ms) for r in rows)
        share = FIX_GAIN * ms / s.wall_ms
        if share < REPORT_SHARE:
            continue
        top = max(rows, key=lambda r: r.gpu_ms if s.has_gpu else r.cpu_ms)
        out.append(_finding(
            "fp32_under_autocast", share,
            f"{op} runs in float32 under {ctx['precision']} autocast ({ms:.1f} ms, in {top.module})",
            {"ms": ms, "calls": sum(r.count for r in rows)},
            f"cast its inputs to {ctx['precision']} explicitly (autocast leaves {op} in float32), or check that "
            "the float32 result is needed",
            typical_wall_ms=ctx["typical"], module=top.module))
    return out


def no_tensor_cores(s: CaptureSummary, ctx: dict[str, Any]) -> list[dict[str, Any]]:
    if ctx["precision"] not in TENSOR_CORE_MODES or not s.has_gpu or not s.wall_ms:
        return []
    rows = [k for k in s.top_kernels if k.kind in ("gemm", "conv") and k.tensor_core is False
            and k.precision != "fp64"]
    ms = sum(k.total_ms for k in rows)
    share = FIX_GAIN * ms / s.wall_ms
    if not rows or share < REPORT_SHARE:
        return []
    top = max(rows, key=lambda k: k.total_ms)
    depthwise = "depthwise" in top.name
    return [_finding("no_tensor_cores", share,
                     f"{ms:.1f} ms of GEMM/conv on CUDA cores in {ctx['precision']} mode "
                     f"({top.kind} {top.precision or ''}, in {top.module})",
                     {"ms": ms, "kernels": len(rows), "top_kernel_ms": top.total_ms},
                     "depthwise convolutions never use tensor cores: replace them by grouped/pointwise convs "
                     "or accept the cost" if depthwise else
                     "make the GEMM/conv inputs the mode's dtype (an fp32 tensor under autocast, a dimension not "
                     "a multiple of 8, or TF32 switched off keeps cuBLAS on CUDA cores)",
                     typical_wall_ms=ctx["typical"], stage=top.stage, module=top.module)]


def legacy_arch_kernels(s: CaptureSummary, ctx: dict[str, Any]) -> list[dict[str, Any]]:
    cap = ctx["capability"]
    rows = [k for k in s.legacy_kernels if k.kind in ("gemm", "conv") and k.tensor_core]
    if not cap or not rows or not s.wall_ms:
        return []
    ms = sum(k.total_ms for k in rows)
    share = FIX_GAIN * ms / s.wall_ms
    if share < REPORT_SHARE:
        return []
    top = max(rows, key=lambda k: k.total_ms)
    return [_finding("legacy_arch_kernels", share,
                     f"{ms:.1f} ms of tensor-core kernels built for sm{top.arch} on a CC {cap[0]}.{cap[1]} card",
                     {"ms": ms, "kernels": len(rows), "kernel_arch": top.arch or 0,
                      "card_generation": generation(cap[0] * 10 + cap[1])},
                     "these come from an old library path (CUTLASS/cuBLAS heuristics for this shape or dtype): pad "
                     "dimensions to multiples of 16, try another dtype, or update torch/cuBLAS",
                     typical_wall_ms=ctx["typical"], stage=top.stage, module=top.module)]


def emulated_bf16(s: CaptureSummary, ctx: dict[str, Any]) -> list[dict[str, Any]]:
    cap = ctx["capability"]
    if not cap or tuple(cap) >= (8, 0) or not s.has_gpu or not s.wall_ms:
        return []
    ms = sum(v for label, v in s.kernel_class_ms.items() if "bf16" in label.split())
    if ms <= 0 and ctx["precision"] != "bf16":
        return []
    share = (ms or s.kernel_ms) / s.wall_ms
    return [_finding("emulated_bf16", share,
                     f"bf16 on a CC {cap[0]}.{cap[1]} card runs emulated ({ms:.1f} ms of bf16 kernels)",
                     {"bf16_kernel_ms": ms, "kernel_ms": s.kernel_ms},
                     "use fp16 autocast on this card (tensor cores from CC 7.0), or fp32",
                     typical_wall_ms=ctx["typical"])]


def _session_key(stage: str, module: str) -> bool:
    """True for the session's own time around the tracker: its adapter stages and its loop between stages."""
    return stage in ADAPTER_STAGES or (stage == OUTSIDE_STAGES and module == OUTSIDE_STAGES)


def gpu_idle_gaps(s: CaptureSummary, ctx: dict[str, Any]) -> list[dict[str, Any]]:
    """GPU idle the tracker's host side causes, in its own stages and modules, net of the profiler.

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
    inflation = max(0.0, (s.profiled_wall_ms or 0.0) - (s.unprofiled_wall_ms or s.profiled_wall_ms or 0.0))
    round_trip_host = sum(r.host_ms for r in s.round_trips)
    host = (tracker_idle - tracker_blocked - inflation - round_trip_host - ctx.get("launch_at_stake", 0.0))
    host = max(0.0, host)
    share = host / s.wall_ms
    evidence = {"idle_ms": s.gpu_idle_ms, "idle_share": s.gpu_idle_ms / s.wall_ms, "host_idle_ms": host,
                "tracker_idle_ms": tracker_idle, "session_idle_ms": session_idle,
                "profiler_added_ms": inflation, **{f"idle_{k}_ms": v for k, v in causes.items()}}
    if share < REPORT_SHARE:
        if session_idle / s.wall_ms < REPORT_SHARE:
            return []
        evidence["scope"] = "session"
        evidence["session_idle_share"] = session_idle / s.wall_ms
        return [_finding("gpu_idle_gaps", 0.0,
                         f"session overhead between stages: GPU idle {session_idle:.1f} ms of {s.wall_ms:.1f} ms "
                         "in trackscope's own loop, upload and download (not the tracker's)",
                         evidence, "nothing to change in the tracker; this time is the session's own",
                         typical_wall_ms=ctx["typical"], stage=OUTSIDE_STAGES, module=OUTSIDE_STAGES)]
    inside = [g for g in s.gaps if g.cause == "host" and not _session_key(g.stage, g.module)]
    top = inside[0] if inside else None
    evidence["scope"] = "tracker"
    if top is not None:
        evidence["longest_gap_ms"] = top.dur_ms
    return [_finding("gpu_idle_gaps", share,
                     f"GPU idle {host:.1f} ms of {s.wall_ms:.1f} ms while the tracker's host side works"
                     + (f"; longest gap {top.dur_ms:.2f} ms in {top.module}" if top else ""),
                     evidence,
                     "the host is busy between kernels there: move that work to the GPU, overlap it with GPU work "
                     "(another stream, prefetch), or batch it",
                     typical_wall_ms=ctx["typical"], stage=top.stage if top else None,
                     module=top.module if top else None, call_site=top.call_site if top else None)]


RULES = (host_sync, cpu_round_trip, launch_bound_capture, fp32_under_autocast, no_tensor_cores,
         legacy_arch_kernels, emulated_bf16, gpu_idle_gaps)
SEVERITY_ORDER = {"critical": 0, "warning": 1, "info": 2}


def diagnose_capture(summary: CaptureSummary, *, precision: str | None = None,
                     capability: tuple[int, int] | None = None,
                     typical_wall_ms: float | None = None) -> list[dict[str, Any]]:
    """Findings from a capture summary, costliest first. An errored capture gives no findings."""
    if summary.error and not summary.wall_ms:
        return []
    ctx: dict[str, Any] = {
        "precision": precision or summary.precision,
        "capability": tuple(capability or summary.capability or ()) or None,
        "typical": typical_wall_ms or summary.unprofiled_wall_ms,
    }
    findings: list[dict[str, Any]] = []
    for rule in RULES:
        findings.extend(rule(summary, ctx))
    findings = _idle_explained_by_its_cause(_syncs_explain_launches(findings, ctx))
    findings.sort(key=lambda f: (-f["evidence"]["share"], SEVERITY_ORDER[f["severity"]]))
    return findings


#: rules whose finding already accounts for the GPU idle time in its module (their fix removes the gap)
IDLE_CAUSES = ("host_sync", "cpu_round_trip", "launch_bound_capture")


def _idle_explained_by_its_cause(findings: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """GPU idle gaps in a module that a sync, round-trip or launch finding names are that finding's time,
    and a launch-bound run's leftover host idle is its loop's overhead: named once, by the cause, which then
    carries the idle time as evidence."""
    causes = [f for f in findings if f["rule"] in IDLE_CAUSES and f["severity"] != "info"]
    if not causes:
        return findings
    out = []
    for f in findings:
        if f["rule"] == "gpu_idle_gaps" and f["evidence"].get("scope") != "session":
            owner = next((c for c in causes if c["module"] == f["module"]), None)
            if owner is None and any(c["rule"] == "launch_bound_capture" for c in causes):
                owner = next(c for c in causes if c["rule"] == "launch_bound_capture")
            if owner is not None:
                owner["evidence"]["gpu_idle_also_ms"] = f["evidence"].get("host_idle_ms", 0.0)
                continue
        out.append(f)
    return out


def _syncs_explain_launches(findings: list[dict[str, Any]], ctx: dict[str, Any]) -> list[dict[str, Any]]:
    """A loop that syncs per item is also a loop of small launches: one problem, named once, by its cause.

    When host_sync and launch_bound_capture point at the same module, the launch finding is folded into
    the sync one (whose fix, taking the loop off the host, removes both); the larger share is kept.
    """
    synced = {f["module"] for f in findings if f["rule"] == "host_sync" and f["module"]}
    launches = {f["module"]: f for f in findings if f["rule"] == "launch_bound_capture" and f["module"] in synced}
    out = []
    for f in findings:
        if f["rule"] == "launch_bound_capture" and launches.get(f["module"]) is f:
            continue  # folded into the sync finding of the same module
        launch = launches.get(f["module"]) if f["rule"] == "host_sync" else None
        if launch is not None:
            evidence = {k: v for k, v in f["evidence"].items() if k not in ("share", "ms_at_stake")}
            evidence.update({"launches_in_the_loop": launch["evidence"].get("launches", 0),
                             "launch_bound_share": launch["evidence"]["share"]})
            f = _finding("host_sync", max(f["evidence"]["share"], launch["evidence"]["share"]), f["title"],
                         evidence, f["suggestion"], typical_wall_ms=ctx["typical"], stage=f["stage"],
                         module=f["module"], call_site=f["call_site"])
        out.append(f)
    return out
