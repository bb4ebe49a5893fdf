"""Reports recorded on the H200 (tests/data/h200/): they load here, and the diagnosis names each
planted problem from its real GPU report (scripts/device_measure.sh recorded them)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from engine.analysis.analyse import analyse, analyse_many
from engine.analysis.metrics import tapvid_metrics
from engine.analysis.rules import diagnose, diagnose_many
from engine.report.files import load_report
from engine.report.schema import Report
from engine.telemetry.sampler import decode_clock_reasons

DATA = Path(__file__).parent / "data" / "h200"
PLANTED = DATA / "planted"
SAMPLE_GT = Path(__file__).parents[1] / "resources" / "sample.gt.npz"


def _rules(findings) -> set[str]:
    return {f.rule for f in findings}


def _planted(name: str) -> list[Report]:
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
    assert all(r.gpu.name == "NVIDIA H200" for r in reports)
    findings = diagnose_many(reports)
    for r in reports:
        findings += diagnose(r)
    assert rule in _rules(findings)


def test_recorded_findings_are_kept_apart_from_todays():
    for name in ("tf32_off", "tiny_kernels", "cold_compile"):
        reports = _planted(name)
        assert all(r.recorded_findings for r in reports)
        only = analyse_many(reports).recorded_only()
        if name != "cold_compile":
            assert only == ()  # today's rules give what was recorded
        else:  # recorded once per configuration; today once per bench, for the configuration with the most setup
            today = [x for x in analyse_many(reports).findings if x.rule == "cold_start"]
            assert len(today) == 1 and [x.rule for x in only] == ["cold_start"] and only[0].label != today[0].label
    # each host_sync report recorded launch_bound on its own; the sweep explains it by the host sync
    sweep = analyse_many(_planted("host_sync"))
    assert {x.rule for x in sweep.recorded_only()} == {"launch_bound"}
    assert "launch_bound" not in {x.rule for x in sweep.findings}
    # alone, the large host_sync report cannot show growth: its recorded finding is listed as recorded only
    large = analyse(_planted("host_sync")[0])  # p1024 (sorted by name)
    assert [x.rule for x in large.recorded_only()] == ["host_sync_per_point"]
    assert large.cost is not None and large.cost.spec.name == "H200"  # the spec table entry


def test_healthy_planted_trackers_do_not_get_each_others_findings():
    assert "tf32_off" not in _rules(f for r in _planted("cold_compile") for f in diagnose(r))
    assert "host_sync_per_point" not in _rules(diagnose_many(_planted("tf32_off")))


@pytest.mark.parametrize("precision", ["fp32", "tf32", "fp16", "bf16"])
def test_corrtrack_report_accuracy_recomputes_from_its_tracks(precision):
    r = load_report(DATA / f"corrtrack_{precision}_p256_sample.json")
    assert r.telemetry.availability["gpu_busy_pct"] == ""  # "" = NVML read it on the H200
    gt = np.load(SAMPLE_GT, allow_pickle=False)
    queries, tracks, visible = r.tracks_arrays()
    np.testing.assert_array_equal(queries[:, 0], gt["query_t"])
    scores = tapvid_metrics(tracks, visible, gt["tracks"], gt["visible"], gt["query_t"],
                            size=r.video.geometry.source_size)
    # the report stores tracks rounded to 0.01 px, so the recomputed scores agree to well under the README's 0.001
    for key in ("aj", "delta_avg", "oa"):
        assert getattr(scores, key) == pytest.approx(getattr(r.accuracy, key), abs=5e-4), key


def test_telemetry_under_test_loads_reads_what_the_loads_do():
    phases = json.loads((DATA / "telemetry_loads.json").read_text())["phases"]
    copy, matmul, tiny = (phases[k]["telemetry"] for k in ("copy", "matmul_bf16", "tiny_kernels"))
    assert copy["dram_bw_gbps"] > 3500 and copy["tensor_active_pct"] < 5
    assert matmul["tensor_active_pct"] > 80 and matmul["dram_bw_util_pct"] < 40
    assert tiny["gpu_busy_pct"] > 5 * max(tiny["sm_active_pct"], 1.0)


def test_telemetry_load_summaries_recompute_from_the_raw_samples():
    """The per-phase figures the README quotes are medians of the recorded samples; clock reasons decode."""
    from scripts.telemetry_loads import RAMP_S, SUMMARY_KEYS

    loads = json.loads((DATA / "telemetry_loads.json").read_text())
    t = np.asarray(loads["samples"]["t"])  # [S]
    metrics = {k: np.asarray(v, dtype=float) for k, v in loads["samples"]["metrics"].items()}  # each [S]
    for name, phase in loads["phases"].items():
        summary = phase["telemetry"]
        inside = (t >= phase["t0"] + RAMP_S) & (t <= phase["t1"])
        assert int(inside.sum()) == summary["samples"], name
        for key in SUMMARY_KEYS:
            values = metrics[key][inside]
            values = values[~np.isnan(values)]
            expected = float(np.median(values)) if values.size else None
            assert summary[key] == pytest.approx(expected), (name, key)
        masks = metrics["clock_reasons"][inside]
        reasons = {r for mask in masks[np.isfinite(masks)] for r in decode_clock_reasons(int(mask))}
        assert sorted(reasons) == summary["clock_reasons"], name


def test_diagnose_cli_shows_todays_findings_and_the_recorded_ones_apart(tmp_path, capsys):
    from engine.cli import main
    from engine.cli.diagnose import RECORDED_HEADING

    large = sorted(PLANTED.glob("host_sync_fp32_*.json"))[0]  # p1024: recorded with the sweep's growth finding
    assert main(["diagnose", str(large)]) == 0
    today, _, recorded = capsys.readouterr().out.partition(RECORDED_HEADING)
    assert "host_bound" in today and "host_sync_per_point" not in today  # one report shows no growth
    assert "host_sync_per_point" in recorded
    raws = [json.loads(p.read_text()) for p in sorted(PLANTED.glob("host_sync_fp32_*.json"))]
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps({"format": "trackscope-bench", "version": 1, "reports": raws}))
    assert main(["diagnose", str(bench)]) == 0  # analyse_many over the bench file's reports
    today, _, recorded = capsys.readouterr().out.partition(RECORDED_HEADING)
    assert "host_sync_per_point" in today and "launch_bound" not in today
    assert "launch_bound" in recorded  # each report recorded it alone; the sweep explains it by the host sync


def test_capture_rules_run_on_load_over_a_reports_deep_capture_summary(tmp_path, capsys):
    """A report's capture section is analysed on load by today's capture rules; on the H200 summaries they
    name what the device run printed (scripts/device_capture.py recorded them; today's order may differ)."""
    import dataclasses

    from engine.capture.rules import diagnose_capture
    from engine.capture.summary import CaptureSummary

    runs = json.loads((DATA.parent / "capture" / "summaries.json").read_text())["runs"]
    base = load_report(DATA / "corrtrack_fp32_p256_sample.json")
    checked = 0
    for run in runs:
        report = dataclasses.replace(
            base, label=run["label"], capture=run["summary"],
            config=dataclasses.replace(base.config, precision=run["precision"]),
            totals=dataclasses.replace(base.totals, warm_ms_median=run["wall_ms_median"]))
        found = analyse(report).capture_findings
        today = diagnose_capture(CaptureSummary.from_dict(run["summary"]), precision=run["precision"],
                                 capability=report.capability, typical_wall_ms=run["wall_ms_median"],
                                 device_name=report.device_name)
        assert [{k: v for k, v in f.items() if k != "label"} for f in found] == today, run["label"]
        # today's rules name what the device run named, less what one finding now folds into another
        # (a sync loop's launches, a cause's idle gaps)
        assert {f["rule"] for f in found} <= {f["rule"] for f in run["findings"]}, run["label"]
        assert all(f["label"] == run["label"] for f in found)
        checked += bool(found)
    assert checked >= 3  # the planted captures do fire
    from engine.cli import main
    from engine.cli.diagnose import CAPTURE_HEADING
    from engine.report.files import save

    assert main(["diagnose", str(save(report, tmp_path / "r.json"))]) == 0
    out = capsys.readouterr().out
    assert (CAPTURE_HEADING in out) == bool(found)
    assert analyse(base).capture_findings == ()  # no capture section: no capture findings


def test_a_capture_answers_the_host_side_guesses_of_its_report():
    """A report whose capture names a host-side cause (the H200 capture of the per-point .item() plant) drops
    the telemetry/op-count guesses about the same run (host_bound, launch_bound, untimed_work); others stay."""
    from engine.analysis.analyse import _defer_to_captures, capture_findings
    from engine.analysis.facts import Finding

    deep = load_report(DATA / "deep" / "item_per_point.json")
    captured = capture_findings(deep)
    assert any(f["rule"] == "host_sync" and f["severity"] == "critical" for f in captured)
    label = deep.label or None
    guesses = [Finding("host_bound", "warning", "the GPU waits", {}, "", label=label),
               Finding("untimed_work", "info", "outside every stage", {}, "", label=label),
               Finding("tf32_off", "warning", "fp32 with TF32 off", {}, "", label=label),
               Finding("host_bound", "warning", "another report", {}, "", label="other")]
    kept = _defer_to_captures(guesses, captured)
    assert [(f.rule, f.label) for f in kept] == [("tf32_off", label), ("host_bound", "other")]
    assert _defer_to_captures(guesses, ()) == tuple(guesses)  # without a capture the guesses stand
