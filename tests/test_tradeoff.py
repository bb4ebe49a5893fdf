"""The precision trade-off model (engine.analysis.tradeoff) on constructed reports: no runs, no Qt."""

from __future__ import annotations

import numpy as np
import pytest

from engine.analysis.tradeoff import (
    MEMORY_DEVICE_PEAK,
    MEMORY_PROCESS_RSS,
    MS_COLD,
    MS_WARM,
    PX_BASELINE,
    PX_FROM_REPORT,
    PX_FROM_TRACKS,
    TradeoffTable,
    accuracy_axis,
    compare_rows,
    find_baseline,
    row_from_report,
    speedup_over,
    typical_ms,
)
from engine.report.schema import as_report

NUM_POINTS, NUM_FRAMES = 4, 5


def report(precision: str = "fp32", ms: float | None = 30.0, *, ppb: int = 256, fpb: int = 16,
           device: str = "NVIDIA H200", video: str = "sample.mp4", tracker: str = "corrtrack",
           shift_px: float | None = None, accuracy: dict | None = None, cold_ms: float | None = None) -> dict:
    """A minimal run report (JSON; the table parses it once); ``shift_px`` adds tracks shifted that many px in x."""
    data = {"format": "trackscope-report", "version": 2, "environment": {}, "stages": [],
            "config": {"tracker": tracker, "precision": precision, "points_per_batch": ppb,
                       "frames_per_batch": fpb, "device": "cuda:0"},
            "device_name": device, "video": {"name": video},
            "totals": {"warm_ms_median": ms, "cold_ms": cold_ms, "num_points": NUM_POINTS, "num_runs": 3,
                       "frames_per_s": None if ms is None else NUM_FRAMES / ms * 1e3,
                       "peak_memory_bytes": 2 ** 30},
            "runs": [], "accuracy": accuracy}
    if shift_px is not None:
        tracks = np.zeros((NUM_POINTS, NUM_FRAMES, 2), np.float32)
        tracks[..., 0] += shift_px
        data["_arrays"] = (tracks, np.ones((NUM_POINTS, NUM_FRAMES), bool))
    return data


def table(*reports: dict) -> TradeoffTable:
    out = TradeoffTable()
    for r in reports:
        out.add(r, r.pop("_arrays", None))
    return out


def by_precision(t: TradeoffTable) -> dict:
    return {(r.precision, r.points_per_batch, r.device): r for r in t.rows.values()}


def test_speedup_is_over_fp32_of_the_same_configuration():
    rows = by_precision(table(report("fp32", 30.0), report("fp16", 12.0), report("bf16", 15.0)))
    assert rows["fp32", 256, "NVIDIA H200"].speedup == 1.0
    assert rows["fp16", 256, "NVIDIA H200"].speedup == pytest.approx(2.5)
    assert rows["bf16", 256, "NVIDIA H200"].speedup == pytest.approx(2.0)
    assert rows["fp16", 256, "NVIDIA H200"].baseline is rows["fp32", 256, "NVIDIA H200"]


@pytest.mark.parametrize("other", [{"ppb": 1024}, {"fpb": 8}, {"device": "Tesla T4"}, {"video": "other.mp4"},
                                   {"tracker": "lk"}])
def test_no_baseline_without_fp32_at_the_same_batch_sizes_device_video_and_tracker(other):
    rows = table(report("fp32", 30.0), report("fp16", 12.0, **other)).rows.values()
    fp16 = next(r for r in rows if r.precision == "fp16")
    assert fp16.baseline is None and fp16.speedup is None


def test_rerun_replaces_its_row_and_the_latest_baseline_wins():
    t = table(report("fp32", 30.0), report("fp16", 12.0))
    t.add(report("fp32", 40.0))
    rows = by_precision(t)
    assert len(t) == 2
    assert rows["fp16", 256, "NVIDIA H200"].speedup == pytest.approx(40.0 / 12.0)


def test_px_divergence_from_tracks_report_and_baseline():
    t = table(report("fp32", 30.0, shift_px=0.0), report("fp16", 12.0, shift_px=0.5),
              report("bf16", 15.0, accuracy={"vs": "fp32", "mean_px": 0.25}), report("tf32", 20.0))
    rows = by_precision(t)
    fp32, fp16 = rows["fp32", 256, "NVIDIA H200"], rows["fp16", 256, "NVIDIA H200"]
    bf16, tf32 = rows["bf16", 256, "NVIDIA H200"], rows["tf32", 256, "NVIDIA H200"]
    assert (fp32.px_vs_fp32, fp32.px_source) == (0.0, PX_BASELINE)
    assert fp16.px_vs_fp32 == pytest.approx(0.5) and fp16.px_source == PX_FROM_TRACKS
    assert (bf16.px_vs_fp32, bf16.px_source) == (0.25, PX_FROM_REPORT)
    assert tf32.px_vs_fp32 is None and tf32.px_source == ""  # no tracks to compare
    assert accuracy_axis(t.rows.values()) == "px"


def test_aj_from_ground_truth_sets_the_accuracy_axis():
    rows = table(report("fp32", 30.0, accuracy={"aj": 0.8}), report("bf16", 15.0)).rows.values()
    assert accuracy_axis(rows) == "aj"
    assert next(r for r in rows if r.precision == "fp32").aj == 0.8


def test_typical_ms_prefers_the_warm_median_then_the_cold_run():
    assert typical_ms(as_report(report("fp32", 10.0, cold_ms=50.0))) == (10.0, MS_WARM)
    assert typical_ms(as_report(report("fp32", None, cold_ms=50.0))) == (50.0, MS_COLD)
    assert typical_ms(as_report(report("fp32", float("nan")))) == (None, "")
    row = row_from_report(report("fp32", None, cold_ms=70.0))
    assert (row.ms, row.ms_basis) == (70.0, MS_COLD)


def test_a_row_without_time_is_never_a_baseline():
    rows = compare_rows([row_from_report(report("fp32", None)), row_from_report(report("fp16", 12.0))])
    assert find_baseline(rows[1], rows) is None and rows[1].speedup is None


def test_memory_falls_back_to_process_rss_from_telemetry():
    cpu = report("fp32", 30.0, device="CPU")
    cpu["totals"]["peak_memory_bytes"] = None
    cpu["telemetry"] = {"t": [0.0, 0.1, 0.2, 0.3],
                        "metrics": {"process_rss_bytes": [1.0e9, 3.0e9, float("nan"), 2.0e9]}}
    row = row_from_report(cpu)
    assert (row.peak_memory_bytes, row.memory_kind) == (3.0e9, MEMORY_PROCESS_RSS)
    assert row_from_report(report()).memory_kind == MEMORY_DEVICE_PEAK


def test_untrained_learned_tracker_is_marked_and_kept_apart():
    untrained = report("fp32", 25.0)
    untrained["tracker"] = {"name": "corrtrack", "weights": None}
    t = table(report("fp32", 30.0), untrained, report("fp16", 12.0))
    assert len(t) == 3
    assert {r.tracker for r in t.rows.values()} == {"corrtrack", "corrtrack (untrained)"}
    fp16 = next(r for r in t.rows.values() if r.precision == "fp16")
    assert fp16.speedup == pytest.approx(2.5)  # against the trained fp32 run, not the untrained one


def test_speedup_over_missing_or_zero_times():
    assert speedup_over(30.0, 10.0) == pytest.approx(3.0)
    assert speedup_over(None, 10.0) is None and speedup_over(30.0, None) is None
    assert speedup_over(0.0, 10.0) is None and speedup_over(30.0, 0.0) is None


def test_bench_uses_the_same_speedup_rule():
    from engine.workflows import bench

    assert bench.speedup_over is speedup_over
