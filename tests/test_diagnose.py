"""Diagnosis rules: synthetic report dicts for GPU-only signals, real CPU runs of the planted trackers.

The planted runs give real stages, batches and counted work; the rules are judged on chosen stage times
(tests.helpers.retimed), so no assertion depends on how fast or how loaded this machine is."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import torch

from engine.analysis import rules as dg
from engine.cli import main
from engine.core.config import RunConfig
from engine.report.files import save
from engine.workflows.bench import Bench, BenchInput
from tests.helpers import moving_square_video, retimed

H200 = {"name": "NVIDIA H200", "compute_capability": [9, 0], "memory_total_bytes": 150_000_000_000}
T4 = {"name": "Tesla T4", "compute_capability": [7, 5], "memory_total_bytes": 16_000_000_000}
SAMPLES = 20
RUN_SPACING_S = 0.5  # seconds between the runs of a synthetic report (telemetry: SAMPLES at 0.1 s)
PLANTED = "tests.plugins.pathological:"


def gpu_report(gpu=H200, precision="fp32", stage_ms=None, cold_ms=None, telemetry=None, cost=None, points=256,
               label="synthetic", runs=3) -> dict:
    """A minimal report dict as a GPU run would write it."""
    stage_ms = stage_ms or {"backbone": 5.0, "refine": 5.0}
    warm = float(sum(stage_ms.values()))
    run_list = []
    if cold_ms is not None:
        run_list.append({"cold": True, "status": "finished", "wall_ms": cold_ms, "stage_ms": dict(stage_ms),
                         "batches": [{"start": 0, "stop": points, "stage_ms": dict(stage_ms), "wall_ms": cold_ms,
                                      "prepared": True, "cold": True}]})
    for _ in range(runs):
        run_list.append({"cold": False, "status": "finished", "wall_ms": warm, "stage_ms": dict(stage_ms),
                         "batches": [{"start": 0, "stop": points, "stage_ms": dict(stage_ms), "wall_ms": warm,
                                      "prepared": True, "cold": False}]})
    for i, run in enumerate(run_list):  # the runs spread over the telemetry window, as recorded ones are
        run["start_s"] = i * RUN_SPACING_S
    metrics = {k: list(np.full(SAMPLES, v, dtype=float)) for k, v in (telemetry or {}).items()}
    return {
        "format": "trackscope-report", "version": 1, "label": label,
        "environment": {"device": "cuda:0" if gpu else "cpu", "gpu": copy.deepcopy(gpu)},
        "config": RunConfig(tracker="x", device="cuda" if gpu else "cpu", precision=precision,
                            points_per_batch=points).to_dict(),
        "video": {"name": "v.mp4"}, "stages": list(stage_ms), "runs": run_list,
        "telemetry": {"t": list(np.arange(SAMPLES) * 0.1), "metrics": metrics, "availability": {},
                      "static": {"max_sm_clock_mhz": 1980, "pcie_max_gen": 5, "pcie_max_width": 16}},
        "cost": {"stages": cost or {}, "peak": {"fp32_tflops": 67.0, "tf32_tflops": 495.0}},
        "totals": {"warm_ms_median": warm, "cold_ms": cold_ms, "stage_ms": dict(stage_ms), "num_points": points,
                   "num_frames": 47, "peak_memory_bytes": None},
        "findings": [],
    }


def rules(findings) -> set[str]:
    return {f.rule for f in findings}


# -- single rules on synthetic GPU reports -----------------------------------------------------
def test_bf16_on_t4_is_critical_and_fine_on_h200():
    found = dg.diagnose(gpu_report(T4, "bf16"))
    hit = [f for f in found if f.rule == "precision_unsupported"]
    assert hit and hit[0].severity == "critical" and hit[0].evidence["compute_capability"] == pytest.approx(7.5)
    assert "precision_unsupported" not in rules(dg.diagnose(gpu_report(H200, "bf16")))
    tf32 = [f for f in dg.diagnose(gpu_report(T4, "tf32")) if f.rule == "precision_unsupported"]
    assert tf32 and tf32[0].severity == "warning" and "fp32" in tf32[0].title


MATMUL_COST = {"projection": {"flops": 4e11, "bytes": 2e9, "bound": "compute", "pct_of_roofline": 60.0,
                              "ops": 20},
               "match": {"flops": 1e8, "bytes": 5e8, "bound": "memory", "pct_of_roofline": 40.0, "ops": 10}}


def test_tf32_off_fires_for_matmul_heavy_fp32_on_tf32_card_only():
    stage_ms = {"projection": 8.0, "match": 2.0}
    found = [f for f in dg.diagnose(gpu_report(H200, "fp32", stage_ms, cost=MATMUL_COST)) if f.rule == "tf32_off"]
    assert found and found[0].stage == "projection"
    assert found[0].evidence["matmul_stage_share"] == pytest.approx(0.8)
    assert "tf32_off" not in rules(dg.diagnose(gpu_report(T4, "fp32", stage_ms, cost=MATMUL_COST)))
    assert "tf32_off" not in rules(dg.diagnose(gpu_report(H200, "tf32", stage_ms, cost=MATMUL_COST)))
    light = {"match": MATMUL_COST["match"]}
    assert "tf32_off" not in rules(dg.diagnose(gpu_report(H200, "fp32", {"match": 10.0}, cost=light)))


def test_host_bound_needs_idle_gpu_and_busy_cpu():
    found = dg.diagnose(gpu_report(telemetry={"gpu_busy_pct": 12.0, "process_cpu_pct": 100.0}))
    hit = [f for f in found if f.rule == "host_bound"]
    assert hit and hit[0].evidence["gpu_busy_pct"] == pytest.approx(12.0)
    assert "host_bound" not in rules(dg.diagnose(gpu_report(telemetry={"gpu_busy_pct": 95.0,
                                                                       "process_cpu_pct": 100.0})))


def test_launch_bound_from_op_counts_and_from_gpm():
    cost = {"refine": {"flops": 0, "bytes": 3e6, "ops": 6000, "bound": "latency", "pct_of_roofline": 0.01}}
    found = [f for f in dg.diagnose(gpu_report(stage_ms={"refine": 30.0, "backbone": 5.0}, cost=cost))
             if f.rule == "launch_bound"]
    assert found and found[0].stage == "refine" and found[0].evidence["us_per_op"] == pytest.approx(5.0)
    few = {"refine": {**cost["refine"], "ops": 40}}
    assert "launch_bound" not in rules(dg.diagnose(gpu_report(stage_ms={"refine": 30.0}, cost=few)))
    gpm = dg.diagnose(gpu_report(telemetry={"gpu_busy_pct": 30.0, "sm_active_pct": 0.5}))
    assert "launch_bound" in rules(gpm)
    assert "launch_bound" not in rules(dg.diagnose(gpu_report(telemetry={"gpu_busy_pct": 90.0,
                                                                         "sm_active_pct": 80.0})))


def test_cold_start_ratio_threshold():
    found = [f for f in dg.diagnose(gpu_report(cold_ms=400.0)) if f.rule == "cold_start"]
    assert found and found[0].evidence["ratio"] == pytest.approx(40.0)
    assert found[0].evidence["threshold_ratio"] == dg.COLD_WARM_RATIO
    assert "cold_start" not in rules(dg.diagnose(gpu_report(cold_ms=20.0)))


def test_memory_near_capacity_from_peak_and_from_telemetry():
    report = gpu_report()
    report["totals"]["peak_memory_bytes"] = 0.98 * H200["memory_total_bytes"]
    hit = [f for f in dg.diagnose(report) if f.rule == "memory_near_capacity"]
    assert hit and hit[0].severity == "critical"
    used = gpu_report(telemetry={"mem_used_bytes": 0.92 * H200["memory_total_bytes"]})
    assert [f.severity for f in dg.diagnose(used) if f.rule == "memory_near_capacity"] == ["warning"]
    assert "memory_near_capacity" not in rules(dg.diagnose(gpu_report(telemetry={"mem_used_bytes": 1e9})))


def test_clocks_limited_by_temperature():
    tel = {"gpu_busy_pct": 99.0, "clock_reasons": 0x40, "sm_clock_mhz": 1200.0, "temperature_c": 91.0}
    hit = [f for f in dg.diagnose(gpu_report(telemetry=tel)) if f.rule == "clocks_limited"]
    assert hit and hit[0].severity == "warning" and "temperature" in hit[0].title
    assert hit[0].evidence["mean_sm_clock_mhz"] == pytest.approx(1200.0)
    at_max = {**tel, "sm_clock_mhz": 1980.0, "clock_reasons": 0x4}
    assert "clocks_limited" not in rules(dg.diagnose(gpu_report(telemetry=at_max)))


def test_pcie_below_max_only_while_busy():
    tel = {"gpu_busy_pct": 80.0, "pcie_gen": 3.0, "pcie_width": 16.0}
    hit = [f for f in dg.diagnose(gpu_report(telemetry=tel)) if f.rule == "pcie_below_max"]
    assert hit and hit[0].evidence["pcie_gen"] == 3.0 and hit[0].evidence["pcie_max_gen"] == 5.0
    idle = {**tel, "gpu_busy_pct": 0.0}  # links train down at idle to save power: not a finding
    assert "pcie_below_max" not in rules(dg.diagnose(gpu_report(telemetry=idle)))


def test_below_roofline_is_a_fallback():
    cost = {"refine": {"flops": 1e9, "bytes": 1e8, "ops": 50}}  # the roofline is derived on load
    found = dg.diagnose(gpu_report(stage_ms={"refine": 10.0}, cost=cost))
    assert rules(found) == {"below_roofline"}
    h200_roof_ms = 1e8 / 4800e9 * 1e3  # memory roof: 1e8 bytes at the H200's 4.8 TB/s
    assert found[0].evidence["pct_of_roofline"] == pytest.approx(100 * h200_roof_ms / 10.0)
    found = dg.diagnose(gpu_report(stage_ms={"refine": 10.0}, cost=cost, cold_ms=3000.0))  # a warning explains it
    assert "below_roofline" not in rules(found)
    found = dg.diagnose(gpu_report(stage_ms={"refine": 10.0}, cost=cost, cold_ms=500.0))  # 0.5 s of setup: info
    assert rules(found) == {"below_roofline", "cold_start"}


def test_growth_rules_across_batch_sizes():
    tel = {"gpu_busy_pct": 20.0, "process_cpu_pct": 100.0}

    def pair(small_ms, large_ms, cost_small, cost_large, telemetry=None):
        a = gpu_report(stage_ms={"smooth": small_ms, "backbone": 5.0}, points=64, label="p64",
                       cost=cost_small, telemetry=telemetry)
        b = gpu_report(stage_ms={"smooth": large_ms, "backbone": 5.0}, points=256, label="p256",
                       cost=cost_large, telemetry=telemetry)
        b["config"]["points_per_batch"] = 256
        return [a, b]

    lat = {"bound": "latency", "pct_of_roofline": 0.5, "ops": 2000}
    quad = pair(2.0, 32.0, {"smooth": {**lat, "flops": 1e6, "bytes": 1e6}},
                {"smooth": {**lat, "flops": 1.6e7, "bytes": 1.6e7}})
    hit = [f for f in dg.diagnose_many(quad) if f.rule == "superlinear_growth"]
    assert hit and hit[0].stage == "smooth" and hit[0].evidence["exponent"] == pytest.approx(2.0)
    assert hit[0].evidence["flops_ratio"] == pytest.approx(16.0) and hit[0].label == "p256"
    lin = pair(3.2, 12.8, {"smooth": {**lat, "flops": 1e6, "bytes": 1e6}},
               {"smooth": {**lat, "flops": 4e6, "bytes": 4e6}}, tel)
    found = dg.diagnose_many(lin)
    assert "host_sync_per_point" in rules(found) and "superlinear_growth" not in rules(found)
    flat = pair(20.0, 21.0, {"smooth": {**lat, "flops": 1e6, "bytes": 1e6}},
                {"smooth": {**lat, "flops": 4e6, "bytes": 4e6}})
    found = dg.diagnose_many(flat)
    assert {f.stage for f in found if f.rule == "launch_bound"} == {"smooth"}
    assert not {"host_sync_per_point", "superlinear_growth"} & rules(found)


def test_findings_are_json_numbers():
    found = dg.diagnose(gpu_report(T4, "bf16", cold_ms=900.0, telemetry={"gpu_busy_pct": 10.0,
                                                                         "process_cpu_pct": 150.0}))
    data = json.loads(json.dumps([f.to_dict() for f in found]))
    assert {"rule", "severity", "title", "evidence", "suggestion"} <= set(data[0])
    assert all(isinstance(v, (int, float)) or v is None for d in data for v in d["evidence"].values())
    assert [d["severity"] for d in data] == sorted((d["severity"] for d in data), key=dg.SEVERITIES.index)


# -- planted trackers run on the CPU -------------------------------------------------------------
@pytest.fixture(autouse=True)
def one_thread():
    """One intra-op thread: on a loaded 2-core machine, OpenMP barriers add noise larger than the signal."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def planted_reports(name: str, points_per_batch=(8,), num_points=8, frames=8, size=32, warmup=1, repeat=3):
    video = moving_square_video(frames, size)
    rng = np.random.default_rng(0)
    xy = rng.uniform(2, size - 3, size=(num_points, 2))
    queries = np.concatenate([np.zeros((num_points, 1)), xy], axis=1).astype(np.float32)
    data = BenchInput(video, queries, {"name": "square", "num_frames": frames, "width": size, "height": size},
                      None, "test")
    bench = Bench(data, PLANTED + name, "cpu", telemetry=False)
    for ppb in points_per_batch:
        bench.run_config(RunConfig(tracker=PLANTED + name, device="cpu", points_per_batch=ppb), warmup, repeat)
    bench.close()
    return [r.to_dict() for r in bench.reports]  # JSON, for the tests to edit (the rules parse it once)


def as_gpu(report: dict, telemetry: dict[str, float]) -> dict:
    """A CPU report dressed as an H200 run with the given (constant) telemetry."""
    report = copy.deepcopy(report)
    report["environment"] = {"device": "cuda:0", "gpu": copy.deepcopy(H200)}
    runs = report.get("runs") or []
    end = max([r["start_s"] + r["wall_ms"] / 1e3 for r in runs] + [(SAMPLES - 1) * 0.1])
    t = np.linspace(0.0, end + 0.05, max(SAMPLES, int(end * 100) + 1))  # sampled throughout the runs
    report["telemetry"] = {"t": list(t), "availability": {},
                           "metrics": {k: [v] * len(t) for k, v in telemetry.items()},
                           "static": {"max_sm_clock_mhz": 1980, "pcie_max_gen": 5, "pcie_max_width": 16}}
    return report


def recorded_consistently(report: dict, stages: set[str]) -> None:
    """What a real CPU run can be asked without depending on its speed: the stages are there, the runs
    finished, and it records no findings (measurements only: the rules run on load)."""
    assert stages <= set(report["stages"]) and report["runs"]
    assert all(r["status"] == "finished" and r["wall_ms"] > 0 for r in report["runs"])
    assert "findings" not in report and report["recorded_findings"] == [] and report["work"]
    dg.diagnose(report)


def test_planted_cold_compile_is_named_with_its_stage():
    (report,) = planted_reports("cold_compile", num_points=64, points_per_batch=(64,), frames=16, size=48)
    recorded_consistently(report, {"features", "autotune", "match"})
    assert [r["cold"] for r in report["runs"]] == [True, False, False, False]
    # the rule, on chosen times: autotuning only in the first batch of the cold run
    found = dg.diagnose(retimed(report, {"features": 2.0, "autotune": 0.05, "match": 3.0},
                                cold_extra_ms={"autotune": 80.0}))
    hit = [f for f in found if f.rule == "cold_start"]
    assert hit and hit[0].stage == "autotune" and hit[0].evidence["ratio"] >= dg.COLD_WARM_RATIO
    assert not {"launch_bound", "tf32_off", "superlinear_growth", "host_sync_per_point"} & rules(found)


def test_planted_tiny_kernels_is_launch_bound_in_its_refine_stage():
    (report,) = planted_reports("tiny_kernels", frames=12)
    recorded_consistently(report, {"features", "match", "refine"})
    found = dg.diagnose(retimed(report, {"features": 1.0, "match": 0.5, "refine": 5.0}))
    assert [f.stage for f in found if f.rule == "launch_bound"] == ["refine"]
    ev = next(f for f in found if f.rule == "launch_bound").evidence
    assert ev["ops"] >= dg.LAUNCH_MANY_OPS and ev["bytes_per_op"] < 4096  # counted, not timed
    assert not {"cold_start", "tf32_off", "superlinear_growth", "host_sync_per_point"} & rules(found)


def test_planted_quadratic_points_grows_superlinearly():
    reports = planted_reports("quadratic_points", points_per_batch=(64, 512), num_points=512, repeat=2)
    for r in reports:
        recorded_consistently(r, {"features", "match", "smooth"})
    times = {"features": lambda n: 0.02 * n, "match": lambda n: 0.016 * n, "smooth": lambda n: (n / 64) ** 2}
    found = dg.diagnose_many([retimed(r, times) for r in reports])
    hit = [f for f in found if f.rule == "superlinear_growth"]
    assert {f.stage for f in hit} == {"smooth"}
    smooth = hit[0]
    assert smooth.evidence["exponent"] == pytest.approx(2.0)
    assert smooth.evidence["flops_ratio"] > smooth.evidence["work_ratio"]  # the counted FLOPs are quadratic too
    assert not {"launch_bound", "tf32_off", "host_sync_per_point"} & rules(found)


def test_planted_host_sync_with_gpu_telemetry_is_named():
    reports = planted_reports("host_sync", points_per_batch=(4, 32), num_points=32, repeat=2)
    for r in reports:
        recorded_consistently(r, {"features", "match"})
    # match: a host round trip per point (250 us each); features: per-video work, the same per batch
    times = {"features": 1.0, "match": lambda n: 0.25 * n}
    tel = {"gpu_busy_pct": 25.0, "process_cpu_pct": 100.0, "sm_active_pct": 3.0}
    dressed = [as_gpu(retimed(r, times), tel) for r in reports]
    found = dg.diagnose_many(dressed)
    hit = [f for f in found if f.rule == "host_sync_per_point"]
    assert [f.stage for f in hit] == ["match"]
    assert hit[0].evidence["us_per_point_large"] >= dg.HOST_SYNC_US_PER_POINT
    assert not {"tf32_off", "superlinear_growth", "cold_start", "launch_bound"} & rules(found)
    single = [f for f in dg.diagnose(dressed[1]) if f.rule == "host_bound"]  # one batch size
    assert single and single[0].stage == "match" and single[0].evidence["ops_per_point"] >= 1.0


def test_planted_tf32_off_on_an_h200_report():
    (report,) = planted_reports("tf32_off")
    recorded_consistently(report, {"features", "projection", "match"})
    report = retimed(report, {"features": 1.0, "projection": 10.0, "match": 1.0})
    tel = {"gpu_busy_pct": 97.0, "sm_active_pct": 85.0, "tensor_active_pct": 0.0, "process_cpu_pct": 100.0}
    found = dg.diagnose(as_gpu(report, tel))
    hit = [f for f in found if f.rule == "tf32_off"]
    assert hit and hit[0].stage == "projection"
    assert not {"host_bound", "launch_bound", "host_sync_per_point"} & rules(found)
    tf32 = as_gpu(report, tel)
    tf32["config"]["precision"] = "tf32"
    assert "tf32_off" not in rules(dg.diagnose(tf32))


def test_planted_memory_hungry_on_an_h200_report():
    (report,) = planted_reports("memory_hungry")
    recorded_consistently(report, {"features", "cache", "match"})
    report = retimed(report, {"features": 1.0, "cache": 0.05, "match": 1.0})
    tel = {"gpu_busy_pct": 90.0, "mem_used_bytes": 0.95 * H200["memory_total_bytes"]}
    found = dg.diagnose(as_gpu(report, tel))
    assert "memory_near_capacity" in rules(found)
    assert not {"tf32_off", "host_bound", "launch_bound"} & rules(found)


def test_diagnose_cli_prints_findings(tmp_path, capsys):
    path = save(gpu_report(T4, "bf16", cold_ms=900.0), tmp_path / "r.json")
    assert main(["diagnose", str(path)]) == 0
    out = capsys.readouterr().out
    assert "precision_unsupported" in out and "cold_start" in out and "evidence:" in out
    assert main(["diagnose", str(path), "--json"]) == 0
    assert {d["rule"] for d in json.loads(capsys.readouterr().out)} >= {"precision_unsupported", "cold_start"}
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert main(["diagnose", str(bad)]) == 2


def test_utilisation_rules_read_the_warm_runs_not_the_setup():
    """GPU-busy evidence comes from the samples that cover the warm runs; a busy setup or an idle one
    before them must not decide, and too few samples over the warm runs decide nothing."""
    (report,) = planted_reports("tiny_kernels", frames=8)
    report = retimed(report, {"features": 1.0, "match": 0.5, "refine": 5.0})
    warm = [r for r in report["runs"] if not r.get("cold")]
    lo = min(r["start_s"] for r in warm)
    hi = max(r["start_s"] + r["wall_ms"] / 1e3 for r in warm)

    def with_busy(setup_busy: float, warm_busy: float, step: float) -> dict:
        dressed = as_gpu(report, {})
        t = np.arange(lo - 1.0, hi + 0.05, step)
        inside = (t >= lo) & (t <= hi + 0.1)
        dressed["telemetry"]["t"] = list(t)
        dressed["telemetry"]["metrics"] = {
            "gpu_busy_pct": list(np.where(inside, warm_busy, setup_busy)),
            "process_cpu_pct": [100.0] * len(t)}
        return dressed

    fine_step = (hi - lo) / 8  # at least 8 samples over the warm runs
    idle_setup = dg.diagnose(with_busy(setup_busy=2.0, warm_busy=95.0, step=fine_step))
    assert "host_bound" not in rules(idle_setup)  # idle while loading, busy while tracking
    idle_warm = [f for f in dg.diagnose(with_busy(setup_busy=95.0, warm_busy=5.0, step=fine_step))
                 if f.rule == "host_bound"]
    assert idle_warm and idle_warm[0].evidence["gpu_busy_pct"] == pytest.approx(5.0)
    coarse = dg.diagnose(with_busy(setup_busy=95.0, warm_busy=5.0, step=max(1.0, hi - lo)))
    assert "host_bound" not in rules(coarse)  # one sample over the warm runs: not judged


def test_cold_start_severity_follows_the_seconds_of_setup_not_the_ratio():
    """First-run setup under a second comes with every configuration (CorrTrack on the H200: 0.06-1.4 s, 6-110x
    its warm median; the planted autotuner 0.5-0.7 s): info. A few seconds (a plugin that compiles for 6 s) is a
    warning, tens of seconds critical; a slow tracker's long setup counts even at a small ratio."""
    def severity(cold_ms: float, stage_ms: dict | None = None) -> str | None:
        found = [f for f in dg.diagnose(gpu_report(cold_ms=cold_ms, stage_ms=stage_ms)) if f.rule == "cold_start"]
        assert len(found) <= 1
        return found[0].severity if found else None

    assert severity(110.0) == severity(600.0) == severity(1400.0) == "info"
    assert severity(6000.0) == "warning" and severity(40_000.0) == "critical"
    assert severity(9000.0, {"backbone": 3000.0, "refine": 2000.0}) == "warning"  # 1.8x a 5 s run: 4 s at stake
    assert severity(5500.0, {"backbone": 3000.0, "refine": 2000.0}) is None  # 0.5 s over a 5 s run: not named


def test_findings_of_one_severity_are_ordered_by_the_time_they_explain():
    from engine.analysis.facts import Finding
    from engine.analysis.rules import _sorted

    small = Finding("cold_start", "warning", "small", {}, "", stake_ms=30.0)
    large = Finding("launch_bound", "warning", "large", {}, "", stage="refine", stake_ms=400.0)
    unknown = Finding("memory_near_capacity", "warning", "no stake", {}, "")
    critical = Finding("host_sync_per_point", "critical", "critical", {}, "", stake_ms=1.0)
    assert [x.title for x in _sorted([small, unknown, large, critical])] == ["critical", "large", "small", "no stake"]
    assert large.to_dict()["stake_ms"] == 400.0 and "stake_ms" not in unknown.to_dict()
