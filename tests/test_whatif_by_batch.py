"""A run whose precision changed mid-run is projected batch by batch at the precision each ran with (issue 20,
item 5): the what-if priced every batch at the first precision."""

from __future__ import annotations

import pytest

from engine.analysis.whatif import project
from engine.analysis.whatif_by_batch import precision_shares, project_by_batch
from engine.core.errors import UserError
from engine.report.schema import as_report
from tests.test_gui_panels import make_report

TARGET = "A100 80GB SXM"
H200_FP32_FLOPS = 67e12
HALF_FLOPS = 2 * H200_FP32_FLOPS * 0.004  # the work of 128 points that takes 4 ms at the H200's fp32 peak


def batched_report(precisions=("fp32", "fp16"), stage_ms=(4.0, 2.0), points=(128, 128)) -> dict:
    """An H200 report whose batches ran at ``precisions`` (one batch each), its backbone's work counted."""
    report = make_report(precisions[0], sum(stage_ms))
    config, start, batches = report["config"], 0, []
    for i, (precision, ms, n) in enumerate(zip(precisions, stage_ms, points)):
        batches.append({"index": i, "start": start, "stop": start + n, "wall_ms": ms, "stage_ms": {"backbone": ms},
                        "config": {**config, "precision": precision}})
        start += n
    for run in report["runs"]:
        run["stage_ms"], run["batches"] = {"backbone": sum(stage_ms)}, batches
    report["totals"]["stage_ms"] = {"backbone": sum(stage_ms)}
    report["work"] = {"backbone": {"flops": int(HALF_FLOPS * start / 128), "bytes": 1000, "ops": 10,
                                   "precision": precisions[0]}}
    return report


def test_shares_come_from_the_batches_configs():
    shares = precision_shares(as_report(batched_report(points=(64, 192), stage_ms=(1.0, 3.0))))
    assert shares == {"fp32": (0.25, {"backbone": 0.25}), "fp16": (0.75, {"backbone": 0.75})}


def test_each_batch_is_projected_at_its_own_precision():
    mixed = batched_report()
    result = project_by_batch(mixed, TARGET)
    # the same as projecting the fp32 half and the fp16 half as runs of their own
    fp32_half = project(batched_report(("fp32",), (4.0,), (128,)), TARGET)
    fp16_half = project(batched_report(("fp16",), (2.0,), (128,)), TARGET)
    assert result["projected_ms"] == pytest.approx(fp32_half["projected_ms"] + fp16_half["projected_ms"])
    assert result["projected_ms"] < 0.8 * project(mixed, TARGET)["projected_ms"]  # all-fp32 pricing overstates
    assert result["precision"] == "fp32→fp16" and result["stages"]["backbone"]["precision"] == "fp32 / fp16"
    assert result["observed_ms"] == pytest.approx(6.0)
    assert "each batch is projected at the precision it ran with" in result["assumptions"][0]


def test_a_run_of_one_precision_is_projected_as_before():
    one = batched_report(("fp16", "fp16"))
    assert project_by_batch(one, TARGET) == project(one, TARGET)


def test_a_switch_into_a_quantised_mode_is_refused_with_the_reason():
    with pytest.raises(UserError, match="fp8 quantises") as err:
        project_by_batch(batched_report(("fp32", "fp8")), TARGET)
    assert "one precision" in (err.value.suggestion or "")
