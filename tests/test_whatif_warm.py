"""What-if needs warm timings: a cold-only report is refused with the bench command (or gets warm runs timed
now on this machine, on its own device); a projection where every stage is kept is refused; ratios never
read "0.00x" and the text agrees with the table."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest

from engine import cli
from engine.analysis.whatif import WARM_MEASURED_KEY, format_projection, project
from engine.core.errors import UserError
from engine.core.paths import SAMPLE_VIDEO
from engine.core.units import format_time_ratio, ratio_value
from engine.report.files import load_report, load_reports
from engine.run.warm import PROCESS_WARM
from engine.workflows.warm_runs import with_warm_runs
from tests.test_compare import GMM, synthetic_report

H200 = {"gpu": {"name": "NVIDIA H200", "compute_capability": [9, 0]}, "device": "cuda:0"}
DEEP_H200 = Path(__file__).parent / "data" / "h200" / "deep" / "fp32_grid_sample.json"
#: an H200 fp32 stage at 75 % of its 67 TFLOP/s: the T4 (8.1 TFLOP/s) takes 8.3x as long
BACKBONE = (2.0, 100 * GMM, 1e6)
#: a stage of many tiny ops: latency-bound, kept
TINY = (1.0, 1e6, 1e6)


def _cold_only(report):
    return dataclasses.replace(report, runs=tuple(dataclasses.replace(r, cold=True) for r in report.runs),
                               totals=dataclasses.replace(report.totals, warm_ms_median=None, cold_ms=3.0))


def test_a_cold_only_report_is_refused_with_the_bench_command():
    report = _cold_only(synthetic_report(H200, "fp32", {"backbone": BACKBONE}))
    with pytest.raises(UserError, match="holds only a cold run") as refused:
        project(report, "Tesla T4")
    assert refused.value.suggestion.endswith("run: trackscope bench VIDEO --tracker synthetic --device cuda "
                                             "--precisions fp32 --points-per-batch 256 --frames-per-batch 16 "
                                             "--out bench-out")


def test_a_projection_where_every_stage_is_kept_is_refused_with_the_reason():
    report = synthetic_report(H200, "fp32", {"refine": TINY, "download": (0.2, 0, 1e5)})
    with pytest.raises(UserError, match="every stage is kept at its observed time") as refused:
        project(report, "Tesla T4")
    assert "1.00x" in refused.value.message and "refine (latency)" in refused.value.message
    moved = project(synthetic_report(H200, "fp32", {"backbone": BACKBONE, "refine": TINY}), "Tesla T4")
    assert not moved["stages"]["backbone"]["kept"] and moved["stages"]["refine"]["kept"]


def test_ratios_never_read_zero_and_say_faster_or_slower():
    assert ratio_value(0.004) == "<0.01" and ratio_value(0.042) == "0.042" and ratio_value(8.33) == "8.33"
    assert format_time_ratio(35.2, 839.4) == "0.042x the time (24x faster)"
    assert format_time_ratio(2600.0, 839.4) == "3.10x the time (3.1x slower)"
    assert format_time_ratio(1.0, 839.4) == "<0.01x the time (839x faster)"
    # an H200 report projected onto the same H200 class of card would be 1x; onto an H200 from a T4, far faster
    t4 = {"gpu": {"name": "Tesla T4", "compute_capability": [7, 5]}}
    result = project(synthetic_report(t4, "fp32", {"backbone": (100 * GMM / 8.1e12 * 1e3 / 0.75, 100 * GMM, 1e6)}),
                     "NVIDIA H200")
    text = format_projection(result)
    assert "0.00" not in text and "x faster) of Tesla T4" in text


def test_the_text_agrees_with_the_table():
    """Was: "its stages read as latency-bound and keep their times" above a table projecting them at 0.04x."""
    report = synthetic_report(H200, "fp32", {"backbone": BACKBONE, "refine": TINY})
    text = format_projection(project(report, "Tesla T4"))
    assert "read as latency-bound" not in text
    assert "kept at the observed time" in text and "refine (latency)" in text  # the one stage kept, by name
    assert "x slower) of H200" in text


def test_the_app_summary_has_no_zero_ratio(qtbot):
    """A Tesla P4 bf16 run (no bf16 units: fp32 rate) projected onto the H200 takes about 0.6 % of the time: the app
    wrote two decimals ("0.01x", "0.00x" below 0.5 %) and never said faster or slower."""
    from gui.panels.diagnosis import DiagnosisPanel

    p4 = {"gpu": {"name": "Tesla P4", "compute_capability": [6, 1]}, "device": "cuda:0"}
    report = synthetic_report(p4, "bf16", {"backbone": (100 * GMM / 5.5e12 * 1e3 / 0.75, 100 * GMM, 1e6)})
    result = project(report, "H200")
    assert result["projected_ms"] / result["observed_ms"] < 0.01
    panel = DiagnosisPanel()
    qtbot.addWidget(panel)
    panel.set_report(report)
    panel.gpu_combo.setCurrentText("H200")
    summary = panel.whatif_summary.text()
    assert "&lt;0.01x the time (180x faster)" in summary, summary
    total = panel.whatif_table.item(panel.whatif_table.rowCount() - 1, 5).text()
    assert total == "<0.01"


def test_warm_runs_of_another_device_are_refused_with_the_command_for_its_machine(capsys):
    """An H200 `track`-style report (one cold run) on this CPU machine: no warm times are made up here."""
    report = load_reports(DEEP_H200)[0]
    assert not report.warm_runs
    with pytest.raises(UserError, match="its warm runs must be timed on NVIDIA H200|would be another device's") \
            as refused:
        with_warm_runs(report)
    assert "on a machine with NVIDIA H200, run: trackscope bench resources/sample.mp4" in refused.value.suggestion
    assert "--device cuda --precisions bf16" in refused.value.suggestion
    assert cli.main(["compare", str(DEEP_H200), "--what-if", "Tesla T4"]) == 2
    assert "trackscope bench resources/sample.mp4" in capsys.readouterr().err


@pytest.mark.parametrize("tracker", ["lk", "corrtrack"])
def test_a_cold_only_cpu_track_report_gets_warm_timings_measured_now(tracker, tmp_path, capsys):
    """`track --report` in a fresh process (cold), then `compare --what-if`: warm runs timed here, on this CPU."""
    PROCESS_WARM.clear()  # as in a fresh process: the track run below is cold
    path = tmp_path / "track.json"
    assert cli.main(["track", str(SAMPLE_VIDEO), "--grid", "3", "--max-frames", "8", "--out", str(tmp_path / "t.npz"),
                     "--report", str(path), "--tracker", tracker, "--device", "cpu"]) == 0
    report = load_report(path)
    assert report.cold_run is not None and not report.warm_runs
    warmed = with_warm_runs(report, runs=2)
    assert len(warmed.warm_runs) == 2 and warmed.extra[WARM_MEASURED_KEY]["device"] == "CPU"
    assert warmed.totals.warm_ms_median is not None and warmed.totals.stage_ms_basis == "warm median"
    capsys.readouterr()
    code = cli.main(["compare", str(path), "--what-if", "Tesla T4", "--warm-runs", "2"])
    out, err = capsys.readouterr()
    assert "holds only a cold run: timing 1 + 2 warm runs" in err
    if code == 0:  # a projection: it says where the warm times came from
        assert "warm times measured now on this machine (CPU" in out
    else:  # refused, never a table of 1.00x: the reason says every stage is kept
        assert code == 2 and "every stage is kept" in err
