"""Capture diagnosis rules on constructed summaries (GPU captures cannot be made on the CPU)."""

from __future__ import annotations

import dataclasses

import pytest

from engine.capture.attribution import OUTSIDE_STAGES
from engine.capture.rules import WARNING_SHARE, diagnose_capture, severity
from engine.capture.summary import (
    CaptureSummary,
    Counts,
    Fp32Op,
    GapRow,
    KernelRow,
    RoundTripRow,
    Row,
    SyncSite,
)

SITE = "tests/plugins/planted_capture.py:40 forward (.item)"


def row(stage: str, module: str, **kw) -> Row:
    base = dict(wall_ms=0.0, kernel_ms=0.0, kernels=0, launches=0, syncs=0, sync_ms=0.0, copies=0, copy_bytes=0,
                copy_ms=0.0, dtoh=0, htod=0, dtod=0, pageable=0, pinned=0, memsets=0, idle_ms=0.0, cpu_ops=0)
    base.update(kw)
    return Row(stage, module, **base)


def gpu_summary(**kw) -> CaptureSummary:
    base = dict(device="cuda:0", precision="bf16", torch_version="2.11", capability=(9, 0), wall_ms=16.8,
                profiled_wall_ms=16.8, unprofiled_wall_ms=11.0, kernel_ms=3.9, gpu_busy_ms=3.9, gpu_idle_ms=12.9,
                has_gpu=True)
    base.update(kw)
    return CaptureSummary(**base)


def by_rule(findings):
    return {f["rule"]: f for f in findings}


def test_host_sync_fires_with_call_site_and_severity_by_share():
    cells = (row("match", "match.scorer", syncs=512, sync_ms=4.0, wall_ms=12.0, launches=270),
             row("download", "(stage body)", syncs=2))
    s = gpu_summary(counts=Counts(kernels=1038, launches=270, syncs=514, copies=512, dtoh=512),
                    cells=cells, sync_sites=(SyncSite(SITE, 512, 4.0),), idle_by_cause_ms={"sync": 9.5, "host": 1.0})
    findings = diagnose_capture(s)
    f = by_rule(findings)["host_sync"]
    assert f["evidence"]["syncs"] == 512  # the download stage's own syncs are not counted
    assert f["call_site"] == SITE and f["module"] == "match.scorer" and f["stage"] == "match"
    assert f["severity"] == "critical" and findings[0]["rule"] == "host_sync"
    assert f["evidence"]["share"] == round(9.5 / 16.8, 4)
    assert f["evidence"]["ms_at_stake"] == pytest.approx(9.5 / 16.8 * 11.0, abs=2e-3)
    # the same syncs in a long run are a small share: info, never above
    long = dataclasses.replace(s, wall_ms=1000.0, idle_by_cause_ms={"sync": 9.5})
    assert by_rule(diagnose_capture(long))["host_sync"]["severity"] == "info"
    few = dataclasses.replace(s, cells=(row("match", "m", syncs=3),))
    assert "host_sync" not in by_rule(diagnose_capture(few))


def test_cpu_round_trip_names_the_module():
    trip = RoundTripRow("filter", "filter", dtoh_bytes=8 << 20, htod_bytes=8 << 20, host_ms=4.0, copy_ms=3.3,
                        ops=("aten::fft_r2c", "aten::fft_c2r"))
    s = gpu_summary(wall_ms=16.4, round_trips=(trip,), counts=Counts(copies=2, dtoh=1, htod=1))
    f = by_rule(diagnose_capture(s))["cpu_round_trip"]
    assert f["module"] == "filter" and f["evidence"]["dtoh_bytes"] == 8 << 20
    assert f["severity"] == "critical" and "aten::fft_r2c" in f["title"]


def test_launch_bound_from_the_kernel_record():
    cells = (row("refine", "refine", launches=5000, kernels=5000, kernel_ms=4.5),)
    s = gpu_summary(wall_ms=96.1, kernel_ms=5.8, gpu_busy_ms=5.8, gpu_idle_ms=90.0, cells=cells,
                    counts=Counts(kernels=5015, launches=5015, syncs=3), idle_by_cause_ms={"short": 90.0})
    findings = diagnose_capture(s, precision="fp32")
    f = by_rule(findings)["launch_bound_capture"]
    assert f["module"] == "refine" and f["evidence"]["launches"] == 5015
    assert f["evidence"]["share"] == round(5015 * 0.01 / 96.1, 4) and f["severity"] == "critical"
    assert findings[0]["rule"] == "launch_bound_capture"
    busy = dataclasses.replace(s, kernel_ms=80.0)
    assert "launch_bound_capture" not in by_rule(diagnose_capture(busy))


def test_fp32_under_autocast_only_in_autocast_runs():
    s = gpu_summary(wall_ms=148.0, profiled_wall_ms=148.0, unprofiled_wall_ms=148.0,
                    fp32_ops=(Fp32Op("aten::grid_sampler", "sampler", 4, 9.4, 0.2),))
    f = by_rule(diagnose_capture(s))["fp32_under_autocast"]
    assert f["module"] == "sampler" and f["evidence"]["ms"] == 9.4 and f["severity"] == "info"  # 3 % at stake
    assert "fp32_under_autocast" not in by_rule(diagnose_capture(s, precision="tf32"))


def test_no_tensor_cores_and_legacy_arch():
    simt = KernelRow("sm80_xmma_gemm_f32f32_f32f32_f32_ffma_kernel", "gemm", False, "fp32", 80, 200, 60.0,
                     True, "updater", "updater.blocks.0.attn.qkv")
    old = KernelRow("cutlass_75_tensorop_bf16_s1688gemm_bf16_128x256_32x2_nn_align8", "gemm", True, "bf16", 75,
                    50, 20.0, True, "updater", "updater.blocks.1.mlp.fc1")
    s = gpu_summary(wall_ms=150.0, profiled_wall_ms=150.0, unprofiled_wall_ms=150.0,
                    top_kernels=(simt, old), legacy_kernels=(simt, old))
    rules = by_rule(diagnose_capture(s))
    assert rules["no_tensor_cores"]["module"] == "updater.blocks.0.attn.qkv"
    assert rules["no_tensor_cores"]["severity"] == "warning"  # half of 60 of 150 ms
    assert rules["legacy_arch_kernels"]["evidence"]["kernel_arch"] == 75  # only tensor-core kernels count
    assert rules["legacy_arch_kernels"]["module"] == "updater.blocks.1.mlp.fc1"
    assert "no_tensor_cores" not in by_rule(diagnose_capture(s, precision="fp32"))


def test_emulated_bf16_on_a_t4():
    s = gpu_summary(capability=(7, 5), kernel_class_ms={"gemm tc bf16 sm75": 30.0, "other fp32": 5.0})
    f = by_rule(diagnose_capture(s))["emulated_bf16"]
    assert f["evidence"]["bf16_kernel_ms"] == 30.0 and f["severity"] == "critical"
    assert "emulated_bf16" not in by_rule(diagnose_capture(dataclasses.replace(s, capability=(8, 0))))


def test_idle_gaps_name_their_cause_and_findings_sort_by_share():
    gaps = (GapRow(1.0, 3.0, "head", "head.mlp", "host"), GapRow(5.0, 0.5, "match", "m", "sync", SITE))
    s = gpu_summary(wall_ms=20.0, gpu_idle_ms=4.0, gaps=gaps, idle_by_cause_ms={"host": 3.0, "sync": 0.5},
                    profiled_wall_ms=20.0, unprofiled_wall_ms=20.0,
                    fp32_ops=(Fp32Op("aten::grid_sampler", "sampler", 1, 2.0, 0.1),))
    findings = diagnose_capture(s)
    f = by_rule(findings)["gpu_idle_gaps"]
    assert f["module"] == "head.mlp" and f["evidence"]["longest_gap_ms"] == 3.0
    assert f["evidence"]["host_idle_ms"] == 3.5 and f["evidence"]["scope"] == "tracker"  # the sync is host_sync's
    shares = [x["evidence"]["share"] for x in findings]
    assert shares == sorted(shares, reverse=True)
    assert all(x["severity"] == "info" for x in findings if x["evidence"]["share"] < WARNING_SHARE)
    assert severity(0.3) == "critical" and severity(0.049) == "info"


def test_idle_gaps_discount_the_profiler_and_leave_the_session_loop_out():
    loop = row(OUTSIDE_STAGES, OUTSIDE_STAGES, wall_ms=4.0, idle_ms=4.0)
    inner = row("head", "head.mlp", wall_ms=6.0, idle_ms=3.0)
    upload = row("upload", "", wall_ms=1.0, idle_ms=1.0)
    gaps = (GapRow(0.0, 4.0, OUTSIDE_STAGES, OUTSIDE_STAGES, "host"), GapRow(5.0, 3.0, "head", "head.mlp", "host"))
    base = dict(wall_ms=12.0, gpu_idle_ms=8.0, gaps=gaps, cells=(loop, inner), stages=(upload,),
                idle_by_cause_ms={"host": 8.0}, profiled_wall_ms=12.0, unprofiled_wall_ms=12.0)
    # unprofiled as long as profiled: the 3 ms gap in head.mlp is the tracker's; the loop's 4 ms and the
    # upload's 1 ms are not
    f = by_rule(diagnose_capture(gpu_summary(**base), precision="fp32"))["gpu_idle_gaps"]
    assert f["evidence"]["host_idle_ms"] == 3.0 and f["module"] == "head.mlp" and f["severity"] == "critical"
    # the profiler added 2 ms of host time: 1 ms is left
    slower = gpu_summary(**{**base, "unprofiled_wall_ms": 10.0})
    f = by_rule(diagnose_capture(slower, precision="fp32"))["gpu_idle_gaps"]
    assert f["evidence"]["host_idle_ms"] == 1.0 and f["evidence"]["profiler_added_ms"] == 2.0
    # the profiler added it all: what is left is the session's loop, an info finding with nothing at stake
    inflated = gpu_summary(**{**base, "unprofiled_wall_ms": 6.0})
    findings = diagnose_capture(inflated, precision="fp32")
    f = by_rule(findings)["gpu_idle_gaps"]
    assert f["severity"] == "info" and f["evidence"]["scope"] == "session" and f["evidence"]["share"] == 0.0
    assert f["evidence"]["session_idle_ms"] == 5.0 and f["title"].startswith("session overhead between stages")


def test_a_cpu_capture_or_an_errored_one_gives_no_gpu_findings():
    cpu = CaptureSummary(device="cpu", precision="fp32", torch_version="2.13", wall_ms=5.0,
                         cells=(row("m", "m", wall_ms=5.0),))
    assert diagnose_capture(cpu) == []
    errored = CaptureSummary(device="cuda:0", precision="fp32", torch_version="x", error="no CUPTI")
    assert diagnose_capture(errored) == []
