"""cold_start once per bench: the configuration with the most first-run setup, its severity from the seconds
at stake (not the cold/warm ratio); a single report gets at most one by the same rule."""

from __future__ import annotations

from engine.analysis.analyse import analyse, analyse_many
from engine.analysis.rules import diagnose_many
from tests.test_diagnose import gpu_report

#: six configurations' first runs, ms (warm runs are 10 ms): 30-80x the warm median, under a second each
FIRST_RUNS_MS = (300.0, 420.0, 510.0, 640.0, 730.0, 800.0)


def _bench(first_runs_ms, precisions=("fp32", "tf32", "fp16", "bf16", "int8", "fp8")) -> list[dict]:
    return [gpu_report(cold_ms=ms, precision=p, label=f"x {p} p256 f16") for ms, p in zip(first_runs_ms, precisions)]


def test_a_bench_of_six_sub_second_first_runs_gets_one_info_finding():
    findings = [x for x in diagnose_many(_bench(FIRST_RUNS_MS)) if x.rule == "cold_start"]
    assert len(findings) == 1
    (one,) = findings
    assert one.severity == "info" and one.label == "x fp8 p256 f16"  # the worst: 800 ms
    assert one.evidence["configurations"] == 6 and one.evidence["of_configurations"] == 6
    assert "worst of 6 of 6 configurations" in one.title and "0.29-0.72 s" in one.title
    assert [x.rule for x in analyse_many(_bench(FIRST_RUNS_MS)).findings].count("cold_start") == 1


def test_a_plugin_that_compiles_for_six_seconds_is_a_warning_naming_it():
    first_runs = (*FIRST_RUNS_MS[:5], 6000.0)
    reports = _bench(first_runs[:3]) + [gpu_report(cold_ms=6000.0, label="mymodel:build fp32 p256 f16")] \
        + _bench(first_runs[3:5], precisions=("bf16", "int8"))
    (one,) = [x for x in diagnose_many(reports) if x.rule == "cold_start"]
    assert one.severity == "warning" and one.label == "mymodel:build fp32 p256 f16"
    assert "6 s more than a warm one" in one.title


def test_a_single_report_gets_at_most_one_by_the_same_rule():
    (one,) = [x for x in analyse(gpu_report(cold_ms=640.0)).findings if x.rule == "cold_start"]
    assert one.severity == "info"
    (slow,) = [x for x in analyse(gpu_report(cold_ms=25_000.0)).findings if x.rule == "cold_start"]
    assert slow.severity == "critical"
