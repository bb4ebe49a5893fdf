"""Reports recorded on the H200 (tests/data/h200/): they load here, and the diagnosis names each
planted problem from its real GPU report (scripts/device_measure.sh recorded them)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.diagnose import diagnose, diagnose_many
from engine.report import load_report

DATA = Path(__file__).parent / "data" / "h200"
PLANTED = DATA / "planted"


def _rules(findings) -> set[str]:
    return {f.rule for f in findings}


def _planted(name: str) -> list[dict]:
    return [load_report(p) for p in sorted(PLANTED.glob(f"{name}_fp32_*.json"))]


@pytest.mark.parametrize(
    "name, rule",
    [
        ("host_sync", "host_sync_per_point"),
        ("tf32_off", "tf32_off"),
        ("tiny_kernels", "launch_bound"),
        ("cold_compile", "cold_start"),
    ],
)
def test_planted_problem_is_named_from_its_h200_report(name, rule):
    reports = _planted(name)
    assert len(reports) == 2, "each planted tracker was benched at two batch sizes"
    assert all(r["environment"]["gpu"]["name"] == "NVIDIA H200" for r in reports)
    findings = diagnose_many(reports)
    for r in reports:
        findings += diagnose(r)
    assert rule in _rules(findings)


def test_healthy_planted_trackers_do_not_get_each_others_findings():
    assert "tf32_off" not in _rules(f for r in _planted("cold_compile") for f in diagnose(r))
    assert "host_sync_per_point" not in _rules(diagnose_many(_planted("tf32_off")))


def test_corrtrack_reports_carry_accuracy_and_gpu_telemetry():
    for path in sorted(DATA.glob("corrtrack_*_p256_sample.json")):
        r = load_report(path)
        assert r["accuracy"]["aj"] > 0.5
        assert r["telemetry"]["availability"]["gpu_busy_pct"] == ""
        assert r["totals"]["warm_ms_median"] < 50


def test_telemetry_under_test_loads_reads_what_the_loads_do():
    phases = json.loads((DATA / "telemetry_loads.json").read_text())["phases"]
    copy, matmul, tiny = (phases[k]["telemetry"] for k in ("copy", "matmul_bf16", "tiny_kernels"))
    assert copy["dram_bw_gbps"] > 3500 and copy["tensor_active_pct"] < 5
    assert matmul["tensor_active_pct"] > 80 and matmul["dram_bw_util_pct"] < 40
    assert tiny["gpu_busy_pct"] > 5 * max(tiny["sm_active_pct"], 1.0)
