"""Capture rules for the host waiting on the device: syncs of every kind, slow or repeated copies, round trips.

Each rule reads the typed evidence (``CaptureSummary.evidence``: SyncRow, CopyRow) of the tracker's own
code only (``finding.user_rows``): trackscope's upload, download and loop are never the user's problem.
``host_sync`` falls back to the summary's sync call sites for a summary written before the evidence existed.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from engine.capture.evidence import CopyRow, SyncRow
from engine.capture.finding import (
    REPORT_SHARE,
    Context,
    Finding,
    at,
    by_site,
    finding,
    share_of,
    size,
    user_rows,
    where,
)
from engine.capture.summary import ADAPTER_STAGES, CaptureSummary

SYNC_MIN = 8  # host syncs per run (outside the adapter's own stages) before host_sync fires
SYNC_COST_MS = 0.015  # the least a host sync costs: the GPU drains and waits for the next launch
#: practical host<->device rate of a PCIe gen4 x16 link with pinned memory (32 GB/s raw, ~25 measured)
PCIE_PRACTICAL_GBPS = 25.0
#: copies smaller than this each are scalars (``.item()``: host_sync's), not bulk data
BULK_COPY_MIN_BYTES = 16 * 1024
#: the least a synchronous memcpy/memset API call costs the host: it waits for the device to drain
SYNC_API_COST_MS = SYNC_COST_MS
SYNC_APIS = ("cudaMemcpy", "cudaMemset", "cudaMemcpy2D", "cudaMemcpy3D", "cudaMemcpyToSymbol",
             "cudaMemcpyFromSymbol", "cudaMemset2D", "cudaMemset3D")

#: what to change, by the kind of sync (engine.capture.evidence.SyncRow.kind)
SYNC_FIX = {
    "item": "keep the value on the GPU: no .item()/.tolist()/float()/print or a Python `if` on a tensor inside "
            "the loop; use torch.where / masked arithmetic on device tensors and read one result after the loop",
    "to_host": "copy to the host once after the loop, not per step: collect the results on the GPU "
               "(torch.stack / a preallocated tensor) and make one .to('cpu', non_blocking=True) into pinned memory",
    "nonzero": "use fixed-size masking instead of data-dependent shapes: torch.where(mask, x, 0) or "
               "x.masked_fill(~mask, 0) over the whole tensor, rather than x[mask], nonzero(), masked_select or "
               "unique, whose output size the host must wait for",
    "synchronize": "remove torch.cuda.synchronize() from the loop (kernels on one stream already run in order); "
                   "to time GPU work use torch.cuda.Event(enable_timing=True) pairs read once at the end",
    "blocking_copy": "use cudaMemcpyAsync / tensor.copy_(src, non_blocking=True) with pinned host memory, "
                     "and fill with torch.zeros/fill_ on the device instead of a synchronous memset",
    "upload": "the host waits for each upload of host data (.to(device) of a CPU tensor syncs): create the tensor "
              "on the GPU once and reuse it, or copy from pinned memory with non_blocking=True",
    "other": "find the call that waits for the GPU there (a host read of a device value) and keep the value "
             "on the GPU until after the loop",
}
SYNC_WHAT = {"item": ".item()/scalar reads", "to_host": "device-to-host copies", "nonzero": "data-dependent shapes",
             "synchronize": "explicit synchronize", "blocking_copy": "blocking copies", "upload": "waits for uploads",
             "other": "host reads"}


def host_sync(s: CaptureSummary, ctx: Context) -> list[Finding]:
    """Host-device syncs of the tracker's code, one finding per call site, with the fix for their kind."""
    if not s.wall_ms:
        return []
    if not s.evidence.syncs:
        return _host_sync_from_cells(s, ctx)
    copies = user_rows(s.evidence.copies)
    blocking_sites = {c.site for c in copies if _sync_api(c)}
    uploads = {c.site for c in copies if c.direction == "HtoD"} - {c.site for c in copies if c.direction == "DtoH"}
    rows = [r if not (r.kind == "to_host" and r.site in uploads) else dataclasses.replace(r, kind="upload")
            for r in user_rows(s.evidence.syncs)  # a copy op's sync at a site that only uploads: an upload's
            if not (r.kind == "blocking_copy" and r.site in blocking_sites)]  # a synchronous memcpy: sync_copy's
    if sum(r.count for r in rows) < SYNC_MIN:
        return []
    out = []
    for site, group in by_site(rows).items():
        count = sum(r.count for r in group)
        wait = sum(r.wait_ms for r in group)
        idle = sum(r.idle_after_ms for r in group)
        at_stake = min(s.wall_ms, max(wait + idle, count * SYNC_COST_MS))
        share = share_of(s, at_stake)
        if share < REPORT_SHARE:
            continue
        kinds: dict[str, int] = {}
        for r in group:
            kinds[r.kind] = kinds.get(r.kind, 0) + r.count
        kind = max(kinds, key=lambda k: kinds[k])
        top = max(group, key=lambda r: r.count)
        evidence = {"syncs": count, "kind": kind, "syncs_by_kind": dict(sorted(kinds.items())), "sync_wait_ms": wait,
                    "gpu_idle_after_sync_ms": idle, "ops": sorted({r.op for r in group})[:5],
                    "syncs_total": s.counts.syncs}
        out.append(finding("host_sync", share,
                           f"{count} host-device syncs per run{at(site)}: {SYNC_WHAT.get(kind, kind)} "
                           f"({top.op}){where(top.module, top.stage)}",
                           evidence, SYNC_FIX.get(kind, SYNC_FIX["other"]), typical_wall_ms=ctx["typical"],
                           stage=top.stage, module=top.module, call_site=site))
    return out


def _host_sync_from_cells(s: CaptureSummary, ctx: Context) -> list[Finding]:
    """host_sync of a summary without typed evidence: the cells' sync counts and the top sync call site."""
    cells = [c for c in s.cells if c.stage not in ADAPTER_STAGES and c.syncs]
    count = sum(c.syncs for c in cells)
    if count < SYNC_MIN:
        return []
    top = max(cells, key=lambda c: c.syncs)
    idle = s.idle_by_cause_ms.get("sync", 0.0)
    at_stake = min(s.wall_ms, max(idle, count * SYNC_COST_MS))
    site = s.sync_sites[0] if s.sync_sites else None
    evidence = {"syncs": count, "syncs_total": s.counts.syncs, "sync_wait_ms": sum(c.sync_ms for c in cells),
                "gpu_idle_after_sync_ms": idle, "dtoh_copies": s.counts.dtoh}
    if site is not None:
        evidence["top_site_syncs"] = site.count
    return [finding("host_sync", share_of(s, at_stake),
                    f"{count} host-device syncs per run{at(site.call_site if site else None)} (in {top.module})",
                    evidence, "keep results on the GPU inside the loop (no .item(), .cpu(), .tolist() or Python "
                    "`if` on tensors per point); batch the reads into one copy after the loop",
                    typical_wall_ms=ctx["typical"], stage=top.stage, module=top.module,
                    call_site=site.call_site if site else None)]


def _sync_api(c: CopyRow) -> bool:
    return bool(c.blocking) and c.api in SYNC_APIS


def _gbps(nbytes: int, ms: float) -> float:
    return nbytes / ms / 1e6 if ms > 0 else 0.0


def pageable_copy(s: CaptureSummary, ctx: Context) -> list[Finding]:
    """Bulk host<->device copies through pageable host memory: staged by the driver, synchronous, slow."""
    rows = [c for c in user_rows(s.evidence.copies) if c.op == "memcpy" and c.direction in ("HtoD", "DtoH")
            and "Pageable" in (c.src, c.dst) and c.count and c.bytes / c.count >= BULK_COPY_MIN_BYTES]
    out = []
    for site, group in by_site(rows).items():
        nbytes, ms = sum(c.bytes for c in group), sum(c.ms for c in group)
        host = sum(c.host_ms for c in group)
        at_link_ms = nbytes / (PCIE_PRACTICAL_GBPS * 1e6)
        at_stake = max(0.0, max(ms, host) - at_link_ms)  # what copying at the pinned link rate would save
        share = share_of(s, at_stake)
        if share < REPORT_SHARE:
            continue
        top = max(group, key=lambda c: c.bytes)
        directions = "/".join(sorted({c.direction for c in group}))
        out.append(finding(
            "pageable_copy", share,
            f"{sum(c.count for c in group)} {directions} copies of pageable memory{at(site)}: "
            f"{size(nbytes)} at {_gbps(nbytes, ms):.1f} GB/s (pinned PCIe ~{PCIE_PRACTICAL_GBPS:.0f} GB/s)",
            {"copies": sum(c.count for c in group), "bytes": nbytes, "copy_ms": ms, "host_ms": host,
             "achieved_gbps": _gbps(nbytes, ms), "link_gbps": PCIE_PRACTICAL_GBPS, "direction": directions,
             "api": top.api},
            "allocate the host tensor in pinned memory once (torch.empty(..., pin_memory=True) or "
            "tensor.pin_memory()) and copy with .to(device, non_blocking=True) / .copy_(src, non_blocking=True); "
            "better still, keep the data on the GPU",
            typical_wall_ms=ctx["typical"], stage=top.stage, module=top.module, call_site=site))
    return out


def repeated_copy(s: CaptureSummary, ctx: Context) -> list[Finding]:
    """The same site uploading tensors of the same sizes again within one run: constants re-sent per call."""
    rows = [c for c in user_rows(s.evidence.copies) if c.op == "memcpy" and c.direction == "HtoD" and c.repeated]
    out = []
    for site, group in by_site(rows).items():
        repeated = sum(c.repeated for c in group)
        count = sum(c.count for c in group)
        per_copy = (sum(c.ms for c in group) + sum(c.host_ms for c in group)) / count if count else 0.0
        at_stake = repeated * max(per_copy, SYNC_COST_MS)
        share = share_of(s, at_stake)
        if share < REPORT_SHARE:
            continue
        top = max(group, key=lambda c: c.repeated)
        out.append(finding(
            "repeated_copy", share,
            f"{repeated} of {count} host-to-device copies{at(site)} repeat sizes already copied in the run "
            f"({size(sum(c.bytes for c in group) / count)} each){where(top.module, top.stage)}",
            {"copies": count, "repeated": repeated, "bytes": sum(c.bytes for c in group), "sizes": top.sizes,
             "copy_ms": sum(c.ms for c in group), "host_ms": sum(c.host_ms for c in group)},
            "create the tensor on the device once (in __init__ as a registered buffer, or cached by shape) instead "
            "of torch.tensor(...)/.to(device) on every call",
            typical_wall_ms=ctx["typical"], stage=top.stage, module=top.module, call_site=site))
    return out


def sync_copy(s: CaptureSummary, ctx: Context) -> list[Finding]:
    """Synchronous memcpy/memset runtime calls in the tracker: each blocks the host until the device drains."""
    rows = [c for c in user_rows(s.evidence.copies) if _sync_api(c)]
    syncs = [r for r in user_rows(s.evidence.syncs) if r.kind == "blocking_copy"]
    out = []
    for site, group in by_site(rows).items():
        blocking = sum(c.blocking for c in group)
        idle = sum(r.idle_after_ms for r in syncs if r.site == site)
        host = sum(c.host_ms for c in group)
        at_stake = max(host + idle, blocking * SYNC_API_COST_MS)
        share = share_of(s, at_stake)
        if share < REPORT_SHARE:
            continue
        top = max(group, key=lambda c: c.blocking)
        ops = "/".join(sorted({c.op for c in group}))
        out.append(finding(
            "sync_copy", share,
            f"{blocking} synchronous {ops} calls ({top.api}){at(site)}{where(top.module, top.stage)}",
            {"calls": blocking, "api": top.api, "bytes": sum(c.bytes for c in group), "host_ms": host,
             "gpu_idle_after_ms": idle, "copy_ms": sum(c.ms for c in group)},
            SYNC_FIX["blocking_copy"],
            typical_wall_ms=ctx["typical"], stage=top.stage, module=top.module, call_site=site))
    return out


def cpu_round_trip(s: CaptureSummary, ctx: Context) -> list[Finding]:
    """Data copied to the host, worked on there, and copied back, inside the tracker's stages."""
    trips = [r for r in s.round_trips if r.stage not in ADAPTER_STAGES]
    if not trips or not s.wall_ms:
        return []
    groups: dict[tuple[str, str], list[Any]] = {}
    for r in trips:
        groups.setdefault((r.stage, r.module), []).append(r)
    out = []
    for (stage, module), group in groups.items():
        at_stake = sum(r.host_ms + r.copy_ms for r in group)
        ops = sorted({op for r in group for op in r.ops})
        out.append(finding(
            "cpu_round_trip", share_of(s, at_stake),
            f"data goes to the host and back inside the GPU run ({', '.join(ops[:3]) or 'CPU ops'}) in {module}",
            {"round_trips": len(group), "dtoh_bytes": sum(r.dtoh_bytes for r in group),
             "htod_bytes": sum(r.htod_bytes for r in group), "host_ms": sum(r.host_ms for r in group),
             "copy_ms": sum(r.copy_ms for r in group)},
            "do this step on the GPU (torch.fft, torch ops on device tensors) instead of .cpu() ... .to(device); "
            "if it must run on the host, copy through pinned memory with non_blocking=True",
            typical_wall_ms=ctx["typical"], stage=stage, module=module, call_site=_site_in(s.evidence.syncs, module)))
    return out


def _site_in(rows: tuple[SyncRow, ...], module: str) -> str | None:
    """The user call site of the syncs in ``module`` (a round trip's .cpu()), when the evidence has one."""
    hits = [r for r in user_rows(rows) if r.module == module and r.site]
    return max(hits, key=lambda r: r.count).site if hits else None
