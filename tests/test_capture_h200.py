"""Capture rules over the committed H200 captures (tests/data/capture/summaries.json, torch 2.11).

Each run's summary is replayed through ``diagnose_capture`` with its precision and unprofiled median, as a
report made on a remote GPU is replayed on a laptop: the planted problems keep their own rule on top, and
GPU idle time that is the profiler's or the session's own loop is never a finding above info.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from engine.capture.rules import diagnose_capture
from engine.capture.summary import CaptureSummary, Fp32Op

DATA = Path(__file__).parent / "data" / "capture" / "summaries.json"
RUNS = {run["label"]: run for run in json.loads(DATA.read_text())["runs"]}
CAPABILITY = tuple(json.loads(DATA.read_text())["env"]["capability"])


def findings_of(label: str) -> list[dict]:
    run = RUNS[label]
    summary = CaptureSummary.from_dict(run["summary"])
    return diagnose_capture(summary, precision=run["precision"], capability=CAPABILITY,
                            typical_wall_ms=run["wall_ms_median"])


def test_the_committed_runs_are_all_there():
    assert {"item_per_point", "cpu_round_trip", "fp32_grid_sample", "deep_nested", "deep_nested bf16",
            "tiny_kernels"} <= set(RUNS)
    assert sum(label.startswith("corrtrack") for label in RUNS) == 4


@pytest.mark.parametrize("label", [label for label in RUNS if label.startswith(("corrtrack", "deep_nested"))])
def test_idle_gaps_are_never_above_info_on_corrtrack_and_deep_nested(label):
    findings = findings_of(label)
    idle = [f for f in findings if f["rule"] == "gpu_idle_gaps"]
    assert all(f["severity"] == "info" for f in idle), idle
    assert not findings or findings[0]["rule"] != "gpu_idle_gaps" or findings[0]["evidence"]["share"] < 0.05


@pytest.mark.parametrize("label, rule", [("item_per_point", "host_sync"), ("cpu_round_trip", "cpu_round_trip"),
                                         ("tiny_kernels", "launch_bound_capture")])
def test_planted_problems_keep_their_own_rule_on_top(label, rule):
    findings = findings_of(label)
    assert findings[0]["rule"] == rule and findings[0]["severity"] == "critical"
    idle = [f for f in findings if f["rule"] == "gpu_idle_gaps"]
    assert all(f["severity"] == "info" for f in idle), idle


@pytest.mark.parametrize("label", sorted(RUNS))
def test_no_finding_under_five_percent_is_above_info_and_the_top_one_costs_most(label):
    findings = findings_of(label)
    shares = [f["evidence"]["share"] for f in findings]
    assert shares == sorted(shares, reverse=True)
    assert all(f["severity"] == "info" for f in findings if f["evidence"]["share"] < 0.05)
    for f in findings:
        if f["rule"] == "gpu_idle_gaps" and f["evidence"]["scope"] == "session":
            assert f["module"] == "(outside stages)" and f["evidence"]["share"] == 0.0


def test_session_loop_idle_is_reported_as_session_overhead():
    f = next(f for f in findings_of("deep_nested") if f["rule"] == "gpu_idle_gaps")
    assert f["title"].startswith("session overhead between stages") and f["evidence"]["session_idle_ms"] > 2.0
    # the profiler's added host time (12.6 ms profiled, 5.2 ms unprofiled) covers the tracker's own idle
    assert f["evidence"]["profiler_added_ms"] > 7.0 and f["evidence"]["host_idle_ms"] == 0.0


def test_fp32_grid_sampler_at_thirty_percent_of_the_run_is_the_top_finding():
    # the committed fp32_grid_sample capture, with its grid_sampler grown to 30 % of the run (as the planted
    # sampler now is meant to be, like the peers' 9-21 ms): the fp32 op is named on top, in its module
    run = RUNS["fp32_grid_sample"]
    summary = CaptureSummary.from_dict(run["summary"])
    heavy = Fp32Op("aten::grid_sampler", "sampler", 4, 0.3 * summary.wall_ms, 0.2)
    summary = dataclasses.replace(summary, fp32_ops=(heavy, *[r for r in summary.fp32_ops if r.op != heavy.op]))
    findings = diagnose_capture(summary, precision="bf16", capability=CAPABILITY,
                                typical_wall_ms=run["wall_ms_median"])
    top = findings[0]
    assert top["rule"] == "fp32_under_autocast" and top["module"] == "sampler"
    # its GPU time is 30 % of the profiled wall but a larger share of the run unprofiled (the profiler slows the
    # host, not the kernels): half of that is at stake
    unprofiled = summary.unprofiled_wall_ms
    assert unprofiled and unprofiled < summary.wall_ms
    assert top["evidence"]["share"] == pytest.approx(min(1.0, 0.5 * 0.3 * summary.wall_ms / unprofiled), abs=1e-3)
    assert top["severity"] == ("critical" if top["evidence"]["share"] >= 0.25 else "warning")
    assert "aten::grid_sampler" in top["title"]
    # as captured (the second H200 call's heavier sampler: 1.4 ms of an 8 ms run) it is named on its own
    committed = findings_of("fp32_grid_sample")
    assert committed[0]["rule"] == "fp32_under_autocast" and committed[0]["module"] == "sampler"


@pytest.mark.parametrize("label", ["deep_nested", "deep_nested bf16"])
def test_deep_nested_attribution_meets_the_issue_targets_on_the_h200(label):
    # >= 95 % of GPU kernel time and >= 90 % of the tracker's wall in a named module or forward body; the
    # whole window's named share is lower because it includes the session's upload, download and loop
    shares = CaptureSummary.from_dict(RUNS[label]["summary"]).shares
    assert shares.kernel_named >= 0.95 and shares.wall_named_of_tracker >= 0.90
    assert shares.wall_named < shares.wall_attributed <= 1.0
