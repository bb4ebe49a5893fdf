"""`trackscope gate`: constructed reports against baselines (time, noise, memory, accuracy, findings, devices,
bench label matching) and the verb's exit codes and JSON."""

from __future__ import annotations

import dataclasses
import json
import statistics

import pytest

from engine import cli
from engine.analysis.gate import (
    GATE_FORMAT,
    GateFinding,
    GateRefused,
    GateTolerances,
    format_gate,
    gate,
    gate_all,
    report_findings,
)
from engine.core.errors import UserError
from engine.report.files import load_report, save
from engine.report.schema import BenchFile, Report

GIB = 2**30
H200 = {"name": "NVIDIA H200", "compute_capability": [9, 0], "memory_total_bytes": 141 * GIB}
T4 = {"name": "Tesla T4", "compute_capability": [7, 5], "memory_total_bytes": 16 * GIB}
#: the baseline's stages, ms of its typical run (5.0 ms in all)
STAGES = {"upload": 0.5, "backbone": 1.5, "cost_volume": 1.0, "refine": 1.8, "download": 0.2}
#: warm runs of the baseline: median 5.0 ms, a tight spread (p10-p90 about 4.96-5.04)
TIGHT = (4.95, 4.97, 4.99, 5.0, 5.0, 5.01, 5.03, 5.05)
ITEM_PER_POINT = "tests/data/h200/deep/item_per_point.json"


def make_report(*, gpu: dict | None = None, precision: str = "bf16", points_per_batch: int = 256,
                stages: dict[str, float] | None = None, walls: tuple[float, ...] = TIGHT, peak_gib: float = 1.0,
                accuracy: dict | None = None, label: str = "", failed: int = 0) -> Report:
    """A valid report: warm runs of ``walls`` ms (stage times scaled to each), totals from their median."""
    stages = dict(STAGES if stages is None else stages)
    median = statistics.median(walls)
    scale = median / sum(stages.values())
    typical = {k: v * scale for k, v in stages.items()}
    runs = [{"index": i, "cold": False, "status": "finished", "wall_ms": w, "batches": [],
             "stage_ms": {k: v * w / median for k, v in typical.items()}} for i, w in enumerate(walls)]
    runs += [{"index": len(walls) + i, "cold": False, "status": "failed", "wall_ms": 0.0, "batches": [],
              "stage_ms": {}, "error": {"message": "out of memory"}} for i in range(failed)]
    gpu = H200 if gpu is None else gpu
    data = {
        "format": "trackscope-report", "version": 2, "label": label,
        "environment": {"device": "cuda:0", "torch": "2.11.0", "gpu": gpu},
        "config": {"tracker": "corrtrack", "device": "cuda", "precision": precision,
                   "points_per_batch": points_per_batch, "frames_per_batch": 16},
        "stages": list(stages), "runs": runs,
        "totals": {"warm_ms_median": median, "stage_ms": typical, "stage_ms_basis": "warm median",
                   "peak_memory_bytes": int(peak_gib * GIB), "num_points": 256, "num_frames": 47,
                   "num_runs": len(runs), "num_warm_runs": len(walls), "num_failed_runs": failed},
        "accuracy": accuracy,
    }
    return Report.from_dict(data)


def slower(factor: float, walls: tuple[float, ...] = TIGHT, stage: str | None = None, **kw) -> Report:
    """The baseline made ``factor`` slower: every stage (stage None) or all of the slowdown in one stage."""
    stages = dict(STAGES)
    if stage is None:
        stages = {k: v * factor for k, v in stages.items()}
    else:
        stages[stage] += sum(STAGES.values()) * (factor - 1.0)
    return make_report(stages=stages, walls=tuple(w * factor for w in walls), **kw)


def test_the_same_run_passes_and_every_check_is_there():
    base = make_report(accuracy={"vs": "ground truth", "aj": 0.94, "delta_avg": 0.97, "oa": 0.96})
    result = gate(base, base)
    assert result.verdict == "pass"
    assert [c.what for c in result.checks] == ["time", "memory", "accuracy aj", "accuracy delta_avg", "accuracy oa"]
    assert all(c.passed and not c.within_noise for c in result.checks)
    assert result.moved_stages == () and result.new_findings == () and result.gone_findings == ()
    assert result.summary().startswith("PASS: corrtrack bf16 p256 f16 on NVIDIA H200: 1.00x")


def test_slower_than_the_limit_fails_and_names_the_stage_that_moved():
    base = make_report()
    run = slower(1.18, stage="cost_volume")  # 0.9 ms more, all in cost_volume: 1.0 -> 1.9 ms
    result = gate(run, base)
    time = result.check("time")
    assert result.verdict == "fail" and not time.passed
    assert time.run / time.baseline == pytest.approx(1.18)
    assert [m.stage for m in result.moved_stages] == ["cost_volume"]
    assert result.moved_stages[0].ratio == pytest.approx(1.9, rel=1e-3)
    summary = result.summary()
    assert summary.startswith("FAIL: corrtrack bf16 p256 f16 on NVIDIA H200: 1.18x slower (limit 1.10x): "
                              "cost_volume 1.90x")
    assert "backbone" not in summary  # unchanged stages are not named
    assert gate(run, base, GateTolerances(max_slowdown=1.20)).verdict == "pass"


def test_stages_are_named_worst_first_and_small_moves_are_not():
    stages = dict(STAGES, refine=STAGES["refine"] * 1.25, cost_volume=STAGES["cost_volume"] * 1.6,
                  download=STAGES["download"] * 1.3)  # download: +0.06 ms, under 2 % of the 5 ms run
    total = sum(stages.values()) / sum(STAGES.values())
    run = make_report(stages=stages, walls=tuple(w * total for w in TIGHT))
    moved = gate(run, make_report()).moved_stages
    assert [m.stage for m in moved] == ["cost_volume", "refine"]


def test_a_slowdown_within_the_baselines_spread_is_noise_and_fails_only_when_strict():
    noisy = (4.0, 4.5, 4.8, 5.0, 5.0, 5.2, 5.8, 6.2)  # median 5.0, p90 about 5.9
    base = make_report(walls=noisy)
    run = slower(1.12, walls=noisy)  # 5.6 ms: beyond 1.10x, inside the baseline's p10-p90
    loose = gate(run, base)
    time = loose.check("time")
    assert loose.verdict == "pass" and time.passed and time.within_noise
    assert "within noise" in loose.summary() and "--strict" in loose.summary()
    strict = gate(run, base, GateTolerances(strict=True))
    assert strict.verdict == "fail" and strict.check("time").within_noise
    assert "failed by --strict" in strict.summary()
    # the same slowdown over a tight baseline is no noise
    assert gate(slower(1.12), make_report()).verdict == "fail"
    assert not gate(slower(1.12), make_report()).check("time").within_noise


def test_noise_needs_warm_runs_with_spread_in_both_reports():
    noisy = (4.0, 4.5, 4.8, 5.0, 5.0, 5.2, 5.8, 6.2)
    one_run = slower(1.12, walls=(5.0,))  # a single warm run: no spread of its own
    result = gate(one_run, make_report(walls=noisy))
    assert result.verdict == "fail" and not result.check("time").within_noise
    far = slower(1.30, walls=noisy)  # beyond the baseline's p90
    assert gate(far, make_report(walls=noisy)).verdict == "fail"


def test_memory_growth_fails():
    result = gate(make_report(peak_gib=1.25), make_report(peak_gib=1.0))
    memory = result.check("memory")
    assert result.verdict == "fail" and not memory.passed
    assert "device memory peak 1.25x (limit 1.10x)" in result.summary()
    assert gate(make_report(peak_gib=1.25), make_report(), GateTolerances(max_memory_growth=1.3)).passed


def test_accuracy_drop_fails_and_a_different_reference_is_not_gated():
    base = make_report(accuracy={"vs": "ground truth", "aj": 0.940, "delta_avg": 0.975})
    run = make_report(accuracy={"vs": "ground truth", "aj": 0.925, "delta_avg": 0.972})
    result = gate(run, base)
    assert result.verdict == "fail"
    assert not result.check("accuracy aj").passed and result.check("accuracy delta_avg").passed
    assert "AJ dropped 0.015 (0.940 -> 0.925; limit a drop of 0.010)" in result.summary()
    assert "delta_avg" not in result.summary()  # a passed check other than time is not in the verdict line
    other = make_report(accuracy={"vs": "fp32", "visibility_agreement": 0.5})
    unlike = gate(other, base)
    assert unlike.passed and not [c for c in unlike.checks if c.what.startswith("accuracy")]
    assert any("accuracy not gated" in n for n in unlike.notes)
    agreement = gate(make_report(accuracy={"vs": "fp32", "visibility_agreement": 0.95}),
                     make_report(accuracy={"vs": "fp32", "visibility_agreement": 0.99}))
    assert not agreement.check("accuracy visibility_agreement").passed


def test_failed_runs_fail_the_gate():
    result = gate(make_report(failed=2), make_report())
    assert result.verdict == "fail" and "2 failed run(s) (the baseline had 0)" in result.summary()


def test_a_new_warning_finding_is_named_and_fails_only_when_asked():
    card = dict(H200, memory_total_bytes=16 * GIB)  # so that 14.6 GiB is 91 % of the card: a warning
    base, run = make_report(gpu=card, peak_gib=14.0), make_report(gpu=card, peak_gib=14.6)
    assert not [x for x in report_findings(base) if x.rule == "memory_near_capacity"]
    result = gate(run, base)
    assert [x.rule for x in result.new_findings] == ["memory_near_capacity"]
    assert result.new_findings[0].severity == "warning"
    assert result.verdict == "pass"  # within the memory tolerance: named, not failed
    assert "new finding memory_near_capacity (warning)" in result.summary()
    asked = gate(run, base, GateTolerances(fail_on_new_findings=True))
    assert asked.verdict == "fail" and not asked.check("new findings").passed
    back = gate(base, run)  # the other way round: it went away
    assert [x.rule for x in back.gone_findings] == ["memory_near_capacity"] and not back.new_findings
    assert "gone: memory_near_capacity (warning)" in back.summary()


def test_a_new_capture_finding_is_named_with_its_call_site():
    run = load_report(ITEM_PER_POINT)  # recorded on the H200: 82 .item() syncs per run
    base = dataclasses.replace(run, capture=None)
    result = gate(run, base)
    new = {x.rule: x for x in result.new_findings}
    assert "host_sync" in new
    assert new["host_sync"].call_site.startswith("tests/plugins/planted_capture.py:43")
    assert "new finding host_sync (critical) at tests/plugins/planted_capture.py:43" in result.summary()
    # a deep run against a plain baseline: said, since the capture answers some telemetry guesses
    assert any("the run has a deep capture and the baseline has not" in n for n in result.notes)
    assert not any("deep capture" in n for n in gate(run, run).notes)


def test_a_finding_is_placed_by_its_call_site_else_its_stage():
    assert GateFinding("host_sync", "warning", "", "refine", "my dir/model.py:88 forward (.item)").text() == \
        "host_sync (warning) at my dir/model.py:88"
    assert GateFinding("tf32_off", "warning", "", "backbone").text() == "tf32_off (warning) in backbone"
    assert GateFinding("cold_start", "critical", "").text() == "cold_start (critical)"


def test_a_different_device_or_configuration_is_refused_unless_allowed():
    with pytest.raises(GateRefused) as info:
        gate(make_report(gpu=T4), make_report())
    message = str(info.value)
    assert "device: NVIDIA H200 (baseline), Tesla T4 (run)" in message and "--allow-different" in message
    with pytest.raises(GateRefused, match=r"precision: bf16 \(baseline\), fp32 \(run\)"):
        gate(make_report(precision="fp32"), make_report())
    allowed = gate(make_report(gpu=T4), make_report(), GateTolerances(allow_different=True))
    assert allowed.differences == ("device: NVIDIA H200 (baseline), Tesla T4 (run)",)
    assert "gated across differences: device" in allowed.summary()


def test_bench_files_are_matched_by_label_and_nothing_is_skipped_silently():
    base = [make_report(points_per_batch=256), make_report(points_per_batch=1024)]
    run = [make_report(points_per_batch=256), slower(1.3, points_per_batch=1024),
           make_report(points_per_batch=4096)]
    suite = gate_all(run, base)
    assert [r.label for r in suite.results] == ["corrtrack bf16 p256 f16 on NVIDIA H200",
                                                "corrtrack bf16 p1024 f16 on NVIDIA H200"]
    assert [r.verdict for r in suite.results] == ["pass", "fail"]
    assert suite.not_gated == ("corrtrack bf16 p4096 f16",)
    assert suite.verdict == "fail"
    text = format_gate(suite)
    assert "not gated, no baseline of the same label: corrtrack bf16 p4096 f16" in text
    # a baseline configuration the whole sweep lacks: named, and a failure when the run is a whole sweep
    partial = gate_all(run[:1], base, require_all=True)
    assert partial.missing_from_run == ("corrtrack bf16 p1024 f16",) and partial.verdict == "fail"
    assert "FAIL: in the baseline, missing from the run: corrtrack bf16 p1024 f16" in format_gate(partial)
    picked = gate_all(run[1:2], base)  # one report (or one picked from a sweep): its own label's baseline
    assert [r.baseline_label for r in picked.results] == ["corrtrack bf16 p1024 f16 on NVIDIA H200"]
    assert picked.missing_from_run == () and picked.verdict == "fail"  # 1.3x slower
    assert gate_all(run[:1], base).verdict == "pass"
    with pytest.raises(UserError, match="nothing to gate"):
        gate_all([make_report(points_per_batch=4096)], base)


def test_tolerances_are_checked():
    with pytest.raises(UserError, match="--max-slowdown"):
        GateTolerances(max_slowdown=0.9)
    with pytest.raises(UserError, match="--max-accuracy-drop"):
        GateTolerances(max_accuracy_drop=float("nan"))


# -- the verb -----------------------------------------------------------------------------------
def _bench(reports: list[Report]) -> BenchFile:
    return BenchFile(reports=tuple(reports))


def test_cli_exit_codes_and_json(tmp_path, capsys):
    base, run_ok, run_slow = tmp_path / "base.json", tmp_path / "ok.json", tmp_path / "slow.json"
    save(make_report(), base)
    save(make_report(), run_ok)
    save(slower(1.18, stage="cost_volume"), run_slow)
    out = tmp_path / "gate.json"
    assert cli.main(["gate", str(run_ok), "--baseline", str(base), "--json", str(out)]) == 0
    assert "PASS: corrtrack bf16 p256 f16 on NVIDIA H200" in capsys.readouterr().out
    data = json.loads(out.read_text())
    assert data["format"] == GATE_FORMAT and data["verdict"] == "pass"
    assert set(data) >= {"tolerances", "results", "not_gated", "missing_from_run"}
    assert set(data["results"][0]) >= {"verdict", "label", "summary", "checks", "moved_stages", "new_findings",
                                       "gone_findings", "differences", "notes"}
    assert set(data["results"][0]["checks"][0]) == {"what", "baseline", "run", "limit", "passed", "within_noise",
                                                    "detail"}
    assert cli.main(["gate", str(run_slow), "--baseline", str(base), "--json", "-"]) == 1
    captured = capsys.readouterr()
    printed = json.loads(captured.out)  # stdout holds the JSON alone
    assert printed["verdict"] == "fail" and printed["results"][0]["moved_stages"][0]["stage"] == "cost_volume"
    assert captured.err.startswith("FAIL: corrtrack bf16 p256 f16 on NVIDIA H200: 1.18x slower (limit 1.10x)")
    assert cli.main(["gate", str(run_slow), "--baseline", str(base), "--max-slowdown", "1.2"]) == 0


def test_cli_bad_input_is_exit_2_with_one_line(tmp_path, capsys):
    base = tmp_path / "base.json"
    save(make_report(), base)
    broken = tmp_path / "broken.json"
    broken.write_text('{"format": "trackscope-report", "version": 2, "runs": "no"')
    t4 = tmp_path / "t4.json"
    save(make_report(gpu=T4), t4)
    out = tmp_path / "gate.json"
    for argv in (["gate", str(tmp_path / "missing.json"), "--baseline", str(base)],
                 ["gate", str(broken), "--baseline", str(base)],
                 ["gate", str(t4), "--baseline", str(base), "--json", str(out)],
                 ["gate", str(base), "--baseline", f"{base}#3"],
                 ["gate", str(base), "--baseline", str(base), "--max-slowdown", "0.5"],
                 ["gate", str(base), "--baseline", str(base), "--json", str(tmp_path)]):
        assert cli.main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err and err.startswith("trackscope gate: error:"), err
    assert not out.exists()  # refused: no verdict written
    assert cli.main(["gate", str(t4), "--baseline", str(base), "--allow-different"]) == 0


def test_cli_bench_file_and_pick(tmp_path, capsys):
    base, run = tmp_path / "base.json", tmp_path / "run.json"
    save(_bench([make_report(points_per_batch=256), make_report(points_per_batch=1024)]), base)
    save(_bench([make_report(points_per_batch=256)]), run)
    assert cli.main(["gate", str(run), "--baseline", str(base)]) == 1  # the sweep lost p1024
    assert "FAIL: in the baseline, missing from the run: corrtrack bf16 p1024 f16" in capsys.readouterr().out
    assert cli.main(["gate", f"{run}#0", "--baseline", str(base)]) == 0  # one picked report: p1024 not its concern
    assert cli.main(["gate", f"{run}#0", "--baseline", f"{base}#1"]) == 2  # p256 against p1024: refused
    assert "points per batch: 1024 (baseline), 256 (run)" in capsys.readouterr().err
