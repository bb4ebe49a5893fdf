"""Constructed capture summaries for the rule tests (tests/test_rules_*.py): a clean GPU run and a clean CPU
run with trackscope's own evidence in them, and helpers to plant one problem's evidence at a user site."""

from __future__ import annotations

import dataclasses

from engine.capture.attribution import OUTSIDE_STAGES
from engine.capture.evidence import (
    TRACKSCOPE,
    USER,
    CopyRow,
    Evidence,
    HostFacts,
    IdleBreakdown,
    MemoryFacts,
    SyncRow,
)
from engine.capture.rules import diagnose_capture
from engine.capture.summary import CaptureSummary, Counts, Row

SITE = "tracker/model.py:40 refine_step"
OTHER_SITE = "tracker/model.py:90 score"
MiB = 1 << 20
GiB = 1 << 30
H200_BYTES = 141 * 10**9


def row(stage: str, module: str, **kw) -> Row:
    base = dict(wall_ms=0.0, kernel_ms=0.0, kernels=0, launches=0, syncs=0, sync_ms=0.0, copies=0, copy_bytes=0,
                copy_ms=0.0, dtoh=0, htod=0, dtod=0, pageable=0, pinned=0, memsets=0, idle_ms=0.0, cpu_ops=0)
    base.update(kw)
    return Row(stage, module, **base)


def trackscope_evidence() -> Evidence:
    """What every plugin capture holds of trackscope's own work: the upload, the download and its sync."""
    upload = CopyRow("memcpy", "HtoD", "Pageable", "Device", count=1, bytes=9 * MiB, ms=0.9, api="cudaMemcpyAsync",
                     blocking=1, host_ms=1.0, site="engine/trackers/plugin.py:80 _to_device", layer=TRACKSCOPE,
                     stage="upload", module="(stage body)")
    download = CopyRow("memcpy", "DtoH", "Device", "Pageable", count=2, bytes=2 * MiB, ms=0.3,
                       api="cudaMemcpyAsync", blocking=2, host_ms=0.4, site="engine/trackers/plugin.py:103 _to_numpy",
                       layer=TRACKSCOPE, stage="download", module="(stage body)")
    sync = SyncRow("to_host", "aten::_to_copy", count=2, wait_ms=0.4, idle_after_ms=0.2,
                   site="engine/trackers/plugin.py:103 _to_numpy", layer=TRACKSCOPE, stage="download",
                   module="(stage body)")
    return Evidence(syncs=(sync,), copies=(upload, download),
                    memory=MemoryFacts(allocations=40, allocated_bytes=200 * MiB, largest_allocation_bytes=20 * MiB,
                                       peak_allocated_bytes=1 * GiB, peak_reserved_bytes=2 * GiB,
                                       capacity_bytes=H200_BYTES),
                    host=HostFacts(num_threads=16, cores=16, busy_threads=1),
                    settings={"cudnn_benchmark": "False", "allow_tf32_matmul": "True", "device_name": "NVIDIA H200"})


def clean_gpu(**kw) -> CaptureSummary:
    """A well-behaved GPU run: kernels busy 80 % of 20 ms, 100 launches, the GPU idle only in trackscope's
    own upload, download and loop."""
    base = dict(device="cuda:0", precision="bf16", torch_version="2.11", capability=(9, 0), wall_ms=20.0,
                profiled_wall_ms=20.0, unprofiled_wall_ms=20.0, kernel_ms=16.0, gpu_busy_ms=16.0, gpu_idle_ms=1.0,
                has_gpu=True, counts=Counts(kernels=100, launches=100, syncs=2, copies=3, dtoh=2, htod=1,
                                           pageable=3, cpu_ops=400),
                stages=(row("upload", "", wall_ms=1.0, idle_ms=0.5), row("refine", "", wall_ms=18.0),
                        row("download", "", wall_ms=0.5)),
                cells=(row("refine", "refine.mlp", wall_ms=18.0, kernel_ms=16.0, kernels=100, launches=100,
                           cpu_ops=380),
                       row(OUTSIDE_STAGES, OUTSIDE_STAGES, wall_ms=0.5, idle_ms=0.5)),
                idle_by_cause_ms={"host": 1.0}, evidence=trackscope_evidence())
    base.update(kw)
    return CaptureSummary(**base)


def clean_cpu(**kw) -> CaptureSummary:
    """A well-behaved CPU run: 200 ops of 0.4 ms each (real work per op), threads matching the cores."""
    base = dict(device="cpu", precision="fp32", torch_version="2.11", wall_ms=82.0, profiled_wall_ms=82.0,
                unprofiled_wall_ms=80.0, counts=Counts(cpu_ops=210),
                stages=(row("upload", "", wall_ms=1.0), row("refine", "", wall_ms=80.0),
                        row("download", "", wall_ms=1.0)),
                cells=(row("refine", "refine.mlp", wall_ms=80.0, cpu_ops=200), row("upload", "(stage body)",
                                                                                  wall_ms=1.0, cpu_ops=10)),
                evidence=Evidence(host=HostFacts(num_threads=2, cores=2, busy_threads=2)))
    base.update(kw)
    return CaptureSummary(**base)


def planted(s: CaptureSummary, **parts) -> CaptureSummary:
    """``s`` with evidence parts added: tuples are appended to the clean run's rows, facts replace them."""
    ev = s.evidence
    changes = {}
    for name, value in parts.items():
        old = getattr(ev, name)
        changes[name] = (*old, *value) if isinstance(old, tuple) else value
    return dataclasses.replace(s, evidence=dataclasses.replace(ev, **changes))


def as_trackscope(rows: tuple, stage: str = "download") -> tuple:
    """The same evidence rows, as trackscope's own work (its layer, in an adapter stage)."""
    out = []
    for r in rows:
        fields = {"layer": TRACKSCOPE}
        if hasattr(r, "stage"):
            fields["stage"] = stage
        out.append(dataclasses.replace(r, **fields))
    return tuple(out)


def in_adapter_stage(rows: tuple, stage: str = "upload") -> tuple:
    """The same rows marked as user code but lying in an adapter stage (trackscope's upload/download)."""
    return tuple(dataclasses.replace(r, layer=USER, stage=stage) for r in rows)


def findings(s: CaptureSummary, **kw) -> list[dict]:
    return diagnose_capture(s, **kw)


def by_rule(found: list[dict]) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for f in found:
        out.setdefault(f["rule"], f)
    return out


def above_info(found: list[dict]) -> list[dict]:
    return [f for f in found if f["severity"] != "info"]


__all__ = ["GiB", "H200_BYTES", "IdleBreakdown", "MiB", "OTHER_SITE", "SITE", "above_info", "as_trackscope",
           "by_rule", "clean_cpu", "clean_gpu", "findings", "in_adapter_stage", "planted", "row"]
