"""quantised_slower: an int8/fp8 run that loses to bf16 of the same configuration is a finding, with the
stages that lost (constructed from a committed H200 report: no timing here)."""

from __future__ import annotations

import dataclasses

from engine.analysis.rules import diagnose_many
from engine.report.files import load_report
from tests.test_h200_recorded import DATA


def _as(report, precision: str, stage_ms: dict[str, float]):
    totals = dataclasses.replace(report.totals, warm_ms_median=sum(stage_ms.values()), stage_ms=stage_ms)
    return dataclasses.replace(report, label=f"corrtrack {precision}", totals=totals,
                               config=dataclasses.replace(report.config, precision=precision))


def test_int8_slower_than_bf16_names_the_stages_that_lost():
    base = load_report(DATA / "corrtrack_bf16_p256_sample.json")
    bf16 = _as(base, "bf16", {"backbone": 1.5, "cost_volume": 0.86, "refine": 9.7})
    int8 = _as(base, "int8", {"backbone": 2.1, "cost_volume": 3.04, "refine": 18.3})  # the H200's call-3 shape
    fp8 = _as(base, "fp8", {"backbone": 1.5, "cost_volume": 0.86, "refine": 9.8})  # within noise of bf16
    found = [f for f in diagnose_many([bf16, int8, fp8]) if f.rule == "quantised_slower"]
    assert len(found) == 1
    f = found[0]
    assert f.label == "corrtrack int8" and f.stage == "refine" and f.severity == "warning"
    assert "cost_volume +2.18 ms" in f.title and f.evidence["ratio"] > 1.9


def test_no_finding_without_a_half_precision_run_to_compare():
    base = load_report(DATA / "corrtrack_bf16_p256_sample.json")
    int8 = _as(base, "int8", {"refine": 18.3})
    assert not [f for f in diagnose_many([int8]) if f.rule == "quantised_slower"]
