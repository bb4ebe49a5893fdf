"""What-if projection and `trackscope compare` on synthetic reports with known numbers."""

from __future__ import annotations

import dataclasses

import pytest

from engine import cli
from engine.analysis.compare import FLAG_MIN_EXCESS_SHARE, FLAG_RATIO, compare_reports, format_compare
from engine.analysis.roofline import report_cost
from engine.analysis.whatif import format_projection, project
from engine.core.errors import UserError
from engine.report.files import save
from engine.report.schema import Report

A100 = {"gpu": {"name": "NVIDIA A100-SXM4-80GB", "compute_capability": [8, 0]}}
T4 = {"gpu": {"name": "Tesla T4", "compute_capability": [7, 5]}}
GMM = 1e9  # a unit of work: 1 GFLOP


def synthetic_report(environment: dict, precision: str, stages: dict[str, tuple[float, float, float]],
                     findings: list | None = None) -> Report:
    """A valid report whose stages are {name: (ms, flops, bytes)}; the roofline is derived on load."""
    stage_ms = {name: ms for name, (ms, _, _) in stages.items()}
    costs = {name: {"flops": f, "bytes": b, "ops": 10, "precision": "tf32" if precision == "tf32" and f else
                    (precision if f else "fp32")} for name, (_, f, b) in stages.items()}
    report = {
        "format": "trackscope-report", "version": 2, "environment": environment,
        "config": {"tracker": "synthetic", "device": "cuda", "precision": precision, "points_per_batch": 256,
                   "frames_per_batch": 16},
        "stages": list(stages), "runs": [{"stage_ms": stage_ms, "batches": [], "cold": False, "wall_ms": 0}],
        "totals": {"stage_ms": stage_ms, "warm_ms_median": sum(stage_ms.values()), "cold_ms": None},
        "work": costs, "recorded_findings": findings or [],
    }
    return Report.from_dict(report)


# A100 fp32: a compute-bound backbone at 50 % of 19.5 TFLOP/s, a memory-bound cost volume at 50 % of
# 2039 GB/s, and a latency-bound refine loop (many tiny ops).
BACKBONE = (100 * GMM / (0.5 * 19.5e12) * 1e3, 100 * GMM, 0.1 * GMM)
COST_VOLUME = (2 * GMM / (0.5 * 2039e9) * 1e3, 0.2 * GMM, 2 * GMM)
REFINE = (5.0, 0.001 * GMM, 0.01 * GMM)


def a100_report(precision: str = "fp32") -> Report:
    backbone = BACKBONE
    if precision == "tf32":  # the same work, at 50 % of the TF32 peak
        backbone = (100 * GMM / (0.5 * 156e12) * 1e3, 100 * GMM, 0.1 * GMM)
    return synthetic_report(A100, precision, {"backbone": backbone, "cost_volume": COST_VOLUME,
                                              "refine": REFINE})


def test_a100_stages_are_classified():
    stages = report_cost(a100_report()).stages
    assert stages["backbone"].bound == "compute"
    assert stages["cost_volume"].bound == "memory"
    assert stages["refine"].bound == "latency"
    assert stages["backbone"].pct_of_roofline == pytest.approx(50.0)


def test_whatif_a100_to_t4_fp32_vs_tf32():
    fp32 = project(a100_report("fp32"), "Tesla T4")
    tf32 = project(a100_report("tf32"), "T4")
    assert fp32["target"] == "Tesla T4"
    ratio_fp32 = fp32["stages"]["backbone"]["projected_ms"] / fp32["stages"]["backbone"]["observed_ms"]
    ratio_tf32 = tf32["stages"]["backbone"]["projected_ms"] / tf32["stages"]["backbone"]["observed_ms"]
    assert ratio_fp32 == pytest.approx(19.5 / 8.1)  # same efficiency, fp32 peaks
    assert ratio_tf32 == pytest.approx(156 / 8.1)  # TF32 on the A100, IEEE fp32 on the T4
    assert ratio_tf32 > ratio_fp32
    cv = fp32["stages"]["cost_volume"]
    assert cv["projected_ms"] / cv["observed_ms"] == pytest.approx(2039 / 320)
    assert fp32["stages"]["refine"]["kept"] and fp32["stages"]["refine"]["projected_ms"] == REFINE[0]
    assert fp32["projected_ms"] == pytest.approx(sum(s["projected_ms"] for s in fp32["stages"].values()))
    text = " | ".join(tf32["assumptions"])
    assert "silently runs IEEE fp32" in text and "refine (latency)" in text and "efficiency" in text
    assert "assumptions:" in format_projection(tf32)


def test_whatif_bf16_on_t4_is_emulated_and_unknown_gpu_is_refused():
    result = project(synthetic_report(A100, "bf16", {"backbone": (1.0, 100 * GMM, 0.1 * GMM)}), "Tesla T4")
    assert result["stages"]["backbone"]["target_path"] == "emulated"
    assert any("emulated" in a for a in result["assumptions"])
    with pytest.raises(UserError, match="unknown GPU 'Voodoo 2'") as info:
        project(a100_report(), "Voodoo 2")
    assert "Tesla T4" in info.value.suggestion


def test_whatif_needs_a_cost_model():
    report = dataclasses.replace(a100_report(), work={})
    with pytest.raises(UserError, match="no cost model"):
        project(report, "Tesla T4")


def t4_report_with_planted_170x() -> Report:
    """The T4 run: backbone and cost volume as the specs say, refine 170x slower than on the A100."""
    backbone = (BACKBONE[0] * 19.5 / 8.1, BACKBONE[1], BACKBONE[2])
    cost_volume = (COST_VOLUME[0] * 2039 / 320, COST_VOLUME[1], COST_VOLUME[2])
    refine = (REFINE[0] * 170, REFINE[1], REFINE[2])
    findings = [{"rule": "bf16_emulated", "severity": "critical", "title": "bf16 is emulated on this GPU",
                 "evidence": {}, "suggestion": "use fp16 or fp32"}]
    return synthetic_report(T4, "fp32", {"backbone": backbone, "cost_volume": cost_volume, "refine": refine},
                            findings)


def test_compare_flags_the_planted_170x_stage():
    result = compare_reports(a100_report(), t4_report_with_planted_170x())
    rows = {r["stage"]: r for r in result["stages"]}
    assert rows["backbone"]["observed_ratio"] == pytest.approx(19.5 / 8.1)
    assert rows["backbone"]["explained_ratio"] == pytest.approx(19.5 / 8.1)
    assert rows["cost_volume"]["explained_ratio"] == pytest.approx(2039 / 320)
    assert rows["refine"]["observed_ratio"] == pytest.approx(170.0)
    assert rows["refine"]["explained_ratio"] == pytest.approx(2039 / 320)
    assert rows["refine"]["beyond_specs"] > FLAG_RATIO
    assert result["flagged"] == ["refine"] and rows["refine"]["flag"] == "B"
    swapped = compare_reports(t4_report_with_planted_170x(), a100_report())
    assert swapped["flagged"] == ["refine"] and swapped["stages"][2]["flag"] == "A"
    text = format_compare(result)
    refine_line = next(line for line in text.splitlines() if line.startswith("refine"))
    assert "170x" in refine_line and "<< B" in refine_line
    assert "backbone" in text and "<<" not in next(ln for ln in text.splitlines() if ln.startswith("backbone"))
    assert "bf16 is emulated on this GPU" in text  # B's recorded finding, that today's rules do not give
    assert "findings recorded in B, no longer given by today's rules:" in text
    assert result["recorded"]["b"][0]["rule"] == "bf16_emulated" and result["recorded"]["a"] == []


def test_compare_cli(tmp_path, capsys):
    a = save(a100_report(), tmp_path / "a.json")
    b = save(t4_report_with_planted_170x(), tmp_path / "b.json")
    assert cli.main(["compare", str(a), str(b), "--json", str(tmp_path / "cmp.json")]) == 0
    out = capsys.readouterr().out
    assert "refine" in out and "<< B" in out and (tmp_path / "cmp.json").exists()
    assert cli.main(["compare", str(a), "--what-if", "Tesla T4"]) == 0
    assert "assumptions:" in capsys.readouterr().out
    assert cli.main(["compare", str(a)]) == 2  # one report, no --what-if
    assert cli.main(["compare", str(a), "--what-if", "Voodoo 2"]) == 2
    (tmp_path / "bad.json").write_text("{not json")
    assert cli.main(["compare", str(a), str(tmp_path / "bad.json")]) == 2
    assert "bad.json is not valid JSON" in capsys.readouterr().err


def test_whatif_latency_bound_stage_is_floored_by_the_target_roof():
    h200 = {"gpu": {"name": "NVIDIA H200", "compute_capability": [9, 0]}}
    # 10 GFLOP in 1 ms at tf32: 2 % of the H200's 495 TFLOP/s -> latency bound; the T4 (fp32, 8.1) needs 1.23 ms
    report = synthetic_report(h200, "tf32", {"head": (1.0, 10 * GMM, 0.001 * GMM), "tiny": (1.0, 1e6, 1e6)})
    assert report_cost(report).stages["head"].bound == "latency"
    result = project(report, "Tesla T4")
    assert result["stages"]["head"]["projected_ms"] == pytest.approx(10 * GMM / 8.1e12 * 1e3)
    assert result["stages"]["tiny"]["projected_ms"] == 1.0  # launches stay


def test_compare_does_not_flag_a_trivial_stage():
    """Far beyond the specs, but under FLAG_MIN_EXCESS_SHARE of the run: reported, not flagged."""
    a = synthetic_report(A100, "fp32", {"backbone": BACKBONE, "download": (0.01, 0, 1e6)})
    b = synthetic_report(T4, "fp32", {"backbone": (BACKBONE[0] * 19.5 / 8.1, *BACKBONE[1:]),
                                      "download": (0.2, 0, 1e6)})
    rows = {r["stage"]: r for r in compare_reports(a, b)["stages"]}
    assert rows["download"]["beyond_specs"] > FLAG_RATIO and rows["download"]["flag"] == ""
    assert rows["download"]["excess_ms"] < FLAG_MIN_EXCESS_SHARE * b.totals.warm_ms_median
