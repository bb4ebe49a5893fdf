"""`trackscope diff`: two constructed runs aligned, ranked, explained and split (engine.analysis.diff)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from engine.analysis.diff import Diff, diff_runs, format_diff, split_line
from engine.analysis.whatif_by_batch import project_by_batch
from engine.capture.evidence import Evidence, FunctionRow
from engine.capture.summary import CaptureSummary, Counts, Fp32Op, Row
from engine.report.projection import Projection
from engine.report.schema import Report

H200 = {"gpu": {"name": "NVIDIA H200", "compute_capability": [9, 0]}}
A100 = {"gpu": {"name": "NVIDIA A100-SXM4-80GB", "compute_capability": [8, 0]}}
T4 = {"gpu": {"name": "Tesla T4", "compute_capability": [7, 5]}}
GFLOP = 1e9


def report(environment: dict, precision: str, stages: dict[str, tuple[float, float, float]], *,
           tracker: str = "synthetic", capture: CaptureSummary | None = None, total_ms: float | None = None) -> Report:
    """A valid report whose stages are {name: (ms, flops, bytes)} (no work counted when flops and bytes are 0)."""
    stage_ms = {name: ms for name, (ms, _, _) in stages.items()}
    work = {name: {"flops": f, "bytes": b, "ops": 10, "precision": precision if f else "fp32"}
            for name, (_, f, b) in stages.items() if f or b}
    data: dict[str, Any] = {
        "format": "trackscope-report", "version": 2, "environment": environment,
        "config": {"tracker": tracker, "device": "cuda", "precision": precision, "points_per_batch": 256,
                   "frames_per_batch": 16},
        "stages": list(stages), "runs": [{"stage_ms": stage_ms, "batches": [], "cold": False, "wall_ms": 0}],
        "totals": {"stage_ms": stage_ms, "warm_ms_median": total_ms if total_ms is not None else sum(stage_ms.values()),
                   "cold_ms": None},
        "work": work, "capture": capture.to_dict() if capture else None,
    }
    return Report.from_dict(data)


def row(stage: str, module: str, kernel_ms: float, *, syncs: int = 0, launches: int = 10, copies: int = 0) -> Row:
    return Row(stage, module, wall_ms=kernel_ms * 1.5, kernel_ms=kernel_ms, kernels=launches, launches=launches,
               syncs=syncs, sync_ms=0.0, copies=copies, copy_bytes=0, copy_ms=0.0, dtoh=0, htod=0, dtod=0, pageable=0,
               pinned=0, memsets=0, idle_ms=0.0, cpu_ops=launches)


def capture(precision: str, classes: dict[str, float], *, capability: tuple[int, int] = (9, 0), syncs: int = 2,
            fp32_ops: tuple[Fp32Op, ...] = (), functions: tuple[FunctionRow, ...] = ()) -> CaptureSummary:
    """A deep-capture summary of a one-stage ('backbone') tracker with the given kernel classes (label: ms)."""
    kernel_ms = sum(classes.values())
    return CaptureSummary(device="cuda:0", precision=precision, torch_version="2.11", capability=capability,
                          wall_ms=kernel_ms * 2, kernel_ms=kernel_ms, has_gpu=True,
                          counts=Counts(kernels=100, launches=100, syncs=syncs),
                          stages=(row("backbone", "", kernel_ms, syncs=syncs),),
                          modules=(row("", "net.conv1", kernel_ms * 0.8), row("", "net.head", kernel_ms * 0.2)),
                          kernel_class_ms=dict(classes), fp32_ops=fp32_ops,
                          evidence=Evidence(functions=functions))


# -- ranking, and the split adding up ----------------------------------------------------------------------
def cross_device_pair() -> tuple[Report, Report]:
    """A100 fp32 -> T4 fp32: a compute-bound backbone, a memory-bound cost volume, a latency-bound refine."""
    a = report(A100, "fp32", {"backbone": (10.0, 100 * GFLOP, 0.1 * GFLOP), "cost_volume": (2.0, 0.2 * GFLOP,
                                                                                           2 * GFLOP),
                              "refine": (5.0, 0.001 * GFLOP, 0.01 * GFLOP)})
    b = report(T4, "fp32", {"backbone": (30.0, 100 * GFLOP, 0.1 * GFLOP), "cost_volume": (9.0, 0.2 * GFLOP,
                                                                                          2 * GFLOP),
                            "refine": (40.0, 0.001 * GFLOP, 0.01 * GFLOP)})
    return a, b


def test_rows_are_ranked_by_absolute_delta():
    a, b = cross_device_pair()
    d = diff_runs(a, b)
    deltas = [abs(r.delta_ms) for r in d.rows]
    assert deltas == sorted(deltas, reverse=True)
    assert [r.name for r in d.top(3, level="stage")] == ["refine", "backbone", "cost_volume"]
    assert d.rows[0].level == "total" and d.rows[0].delta_ms == pytest.approx(62.0)


def test_the_split_sums_exactly_to_b():
    a, b = cross_device_pair()
    s = diff_runs(a, b).split
    assert s.total_ratio == pytest.approx(79.0 / 17.0)
    assert s.explained_ms + s.rest_ms == pytest.approx(79.0 - 17.0, abs=1e-12)
    kinds = [x.kind for x in s.steps]
    assert kinds[0] == "start" and kinds[1] == "spec" and kinds[-2:] == ["rest", "end"]
    assert s.steps[0].ms == 17.0 and s.steps[-1].ms == 79.0
    assert sum(x.ms for x in s.steps[:-1]) == pytest.approx(s.steps[-1].ms, abs=1e-9)
    # the backbone (compute-bound) moves by the fp32 peaks, the cost volume by the bandwidth; refine is kept
    rows = {r.name: r for r in diff_runs(a, b).rows if r.level == "stage"}
    assert rows["backbone"].explained_ms == pytest.approx(10.0 * (19.5 / 8.1 - 1.0), rel=1e-6)
    assert rows["cost_volume"].explained_ms == pytest.approx(2.0 * (2039 / 320 - 1.0), rel=1e-6)
    assert rows["refine"].explained_ms == 0.0
    assert s.spec_ratio == pytest.approx((17.0 + s.explained_ms) / 17.0)
    assert "fp32 peak 19.5 vs 8.1 TF/s" in s.peaks and "bandwidth" in s.peaks
    # the named deltas are what each stage moved beyond the specs, the largest first: refine's 35 ms
    named = [x for x in s.steps if x.kind == "named"]
    assert named[0].label == "refine" and named[0].ms == pytest.approx(35.0)


def test_same_device_the_specs_explain_nothing():
    a = report(H200, "fp32", {"backbone": (8.0, 100 * GFLOP, GFLOP), "refine": (2.0, 0, 0)})
    b = report(H200, "bf16", {"backbone": (2.0, 100 * GFLOP, GFLOP), "refine": (2.5, 0, 0)})
    d = diff_runs(a, b)
    assert d.split.spec_ratio == 1.0 and d.split.explained_ms == 0.0
    assert "same device" in d.split.basis and "explain nothing" in split_line(d)
    assert d.split.rest_ms == pytest.approx(-5.5)
    backbone = next(r for r in d.rows if r.name == "backbone")
    assert "precision fp32 -> bf16" in backbone.reason and backbone.explained_ms == 0.0
    assert sum(x.ms for x in d.split.steps[:-1]) == pytest.approx(d.split.steps[-1].ms, abs=1e-9)


# -- reasons from the kernel facts --------------------------------------------------------------------------
def test_fp32_vs_bf16_names_the_precision_change_on_the_gemm_row():
    a = report(H200, "fp32", {"backbone": (20.0, 0, 0)},
               capture=capture("fp32", {"gemm simt fp32": 15.0, "other fp32": 3.0}))
    b = report(H200, "bf16", {"backbone": (6.0, 0, 0)},
               capture=capture("bf16", {"gemm tc bf16 sm90": 3.0, "other bf16": 2.0, "other fp32": 0.5},
                               fp32_ops=(Fp32Op("aten::grid_sampler", "net.head", 4, 0.5, 0.1),)))
    d = diff_runs(a, b)
    gemm = next(r for r in d.rows if r.level == "kernel_class" and r.name == "gemm")
    assert gemm.a_ms == 15.0 and gemm.b_ms == 3.0
    assert "precision fp32 -> bf16" in gemm.reason and "tensor cores 0% -> 100%" in gemm.reason
    assert gemm.evidence["a_classes"] == {"gemm simt fp32": 15.0}
    other = next(r for r in d.rows if r.level == "kernel_class" and r.name == "other")
    assert "grid_sampler stay fp32 under bf16 in B" in other.reason
    # the same device: the named deltas come from the kernel kinds, the GEMMs' 12 ms the largest
    named = [x for x in d.split.steps if x.kind == "named"]
    assert named[0].label == "gemm" and named[0].ms == pytest.approx(-12.0)
    assert {r.level for r in d.rows} == {"total", "stage", "kernel_class", "module"}


def test_legacy_architecture_kernels_and_emulated_bf16_are_named():
    a = report(H200, "bf16", {"backbone": (5.0, 0, 0)},
               capture=capture("bf16", {"gemm tc bf16 sm90": 2.0, "gemm tc bf16 sm75": 1.0}))
    b = report(T4, "bf16", {"backbone": (50.0, 0, 0)},
               capture=capture("bf16", {"gemm simt bf16": 40.0}, capability=(7, 5)))
    d = diff_runs(a, b)
    gemm = next(r for r in d.rows if r.level == "kernel_class" and r.name == "gemm")
    assert "sm75 kernels on a CC 9.0 card in A (1 ms)" in gemm.reason
    assert "bf16 emulated on Tesla T4 in B" in gemm.reason
    # A has no cost model: the specs' part comes from its capture's kernel classes on the two devices' peaks
    assert d.split.spec_ratio is not None and d.split.spec_ratio > 1.0
    assert "kernel class" in d.split.basis
    assert d.split.explained_ms + d.split.rest_ms == pytest.approx(45.0)


def test_sync_and_launch_counts_that_differ_are_named_on_the_stage():
    fn = FunctionRow(module="net.head", function="sample (model.py:88)", site="model.py:88 sample", layer="user",
                     wall_ms=1.0, kernel_ms=2.0, kernels=5, launches=5, syncs=40, cpu_ops=5, stage="backbone")
    a = report(H200, "fp32", {"backbone": (10.0, 0, 0)}, capture=capture("fp32", {"other fp32": 4.0}, syncs=2))
    b = report(H200, "fp32", {"backbone": (14.0, 0, 0)},
               capture=capture("fp32", {"other fp32": 4.0}, syncs=40, functions=(fn,)))
    d = diff_runs(a, b)
    stage = next(r for r in d.rows if r.level == "stage" and r.name == "backbone")
    assert "syncs 2 -> 40" in stage.reason
    function = next(r for r in d.rows if r.level == "function")
    assert function.name == "model.py:88 sample" and function.a_ms is None and "only in B" in function.reason
    total = next(r for r in d.rows if r.level == "total")
    assert "syncs 2 -> 40" in total.reason


# -- a projection reads the same way as a measured pair ------------------------------------------------------
def test_a_projection_side_reads_like_a_measured_one():
    a, _ = cross_device_pair()
    projection = Projection.from_dict(project_by_batch(a, "Tesla T4"))
    beside = diff_runs(a, projection)
    assert beside.b_is_projection and not beside.a_is_projection
    assert beside.b_ms == pytest.approx(projection.projected_ms)
    assert beside.split.rest_ms == pytest.approx(0.0, abs=1e-9)  # a projection is all specs
    # a measured T4 run with exactly the projected times diffs to the same rows and split
    measured = report(T4, "fp32", {name: (ms, *_work(a, name)) for name, ms in projection.stage_ms.items()})
    pair = diff_runs(a, measured)
    assert not pair.b_is_projection
    assert pair.split.explained_ms == pytest.approx(beside.split.explained_ms)
    assert pair.split.spec_ratio == pytest.approx(beside.split.spec_ratio)
    rows = {(r.level, r.name): (r.a_ms, r.b_ms, r.explained_ms) for r in pair.rows}
    for r in beside.rows:
        assert rows[(r.level, r.name)] == pytest.approx((r.a_ms, r.b_ms, r.explained_ms))
    # and a measured run slower than its projection leaves the model's miss as the rest, on that stage
    slower = report(T4, "fp32", {name: (ms + (7.0 if name == "refine" else 0.0), *_work(a, name))
                                 for name, ms in projection.stage_ms.items()})
    missed = diff_runs(a, slower)
    assert missed.split.rest_ms == pytest.approx(7.0)
    assert next(x for x in missed.split.steps if x.kind == "named").label == "refine"
    # the projection as a mapping (as compare --what-if --json writes it) reads the same
    assert diff_runs(a, projection.to_dict()) == beside


def _work(r: Report, stage: str) -> tuple[float, float]:
    w = r.work.get(stage)
    return (w.flops, w.bytes) if w else (0.0, 0.0)


# -- different trackers, missing captures, JSON ----------------------------------------------------------------
def test_different_trackers_align_shared_stage_names_and_list_the_rest():
    a = report(H200, "fp32", {"upload": (1.0, 0, 0), "backbone": (10.0, 0, 0)}, tracker="corrtrack")
    b = report(H200, "fp32", {"upload": (1.2, 0, 0), "tapir": (200.0, 0, 0)}, tracker="tapir")
    d = diff_runs(a, b)
    names = {r.name: r for r in d.rows if r.level == "stage"}
    assert names["upload"].a_ms == 1.0 and names["upload"].b_ms == 1.2
    assert names["backbone"].b_ms is None and "only in A" in names["backbone"].reason
    assert names["tapir"].a_ms is None and "only in B" in names["tapir"].reason
    assert any("different trackers" in n for n in d.notes)
    assert any("A has no deep capture" in n for n in d.notes)
    assert "tracker corrtrack -> tapir" in next(r for r in d.rows if r.level == "total").reason


def test_diff_json_round_trips():
    a, b = cross_device_pair()
    d = diff_runs(a, b)
    back = Diff.from_dict(d.to_dict())
    assert back == d
    assert back.to_dict() == d.to_dict()


def test_time_outside_the_stages_is_a_row_so_the_stages_add_up():
    a = report(H200, "fp32", {"backbone": (10.0, 0, 0)}, total_ms=12.0)
    b = report(H200, "fp32", {"backbone": (10.0, 0, 0)}, total_ms=15.0)
    d = diff_runs(a, b)
    outside = next(r for r in d.rows if r.name == "(outside stages)")
    assert (outside.a_ms, outside.b_ms) == pytest.approx((2.0, 5.0))


def test_format_diff_prints_the_split_first_then_the_rows():
    a, b = cross_device_pair()
    text = format_diff(diff_runs(a, b), top=2)
    lines = text.splitlines()
    assert lines[3].startswith("B/A 4.65x: specs explain") and "named rest: refine +35.0 ms" in lines[3]
    assert lines[4].startswith("waterfall: A 17.0 ms | specs +")
    table = [x for x in lines if x.startswith("stage ")]
    assert len(table) == 2 and table[0].split()[1] == "refine"


def test_an_unknown_device_leaves_the_specs_unplaced():
    a, b = cross_device_pair()
    odd = dataclasses.replace(b, environment=dataclasses.replace(b.environment, gpu=dataclasses.replace(
        b.environment.gpu, name="Mystery GPU 9000")))
    d = diff_runs(a, odd)
    # an NVML estimate stands in when the card is not in the table; without its facts the specs stay unplaced
    assert d.split.explained_ms + d.split.rest_ms == pytest.approx(62.0)
    assert sum(x.ms for x in d.split.steps[:-1]) == pytest.approx(79.0, abs=1e-9)


def test_a_run_without_a_cost_model_is_projected_from_its_capture_and_reads_like_a_measured_pair():
    from engine.analysis.diff_split import capture_projection
    from engine.telemetry import specs

    classes = {"gemm tc bf16 sm90": 4.0, "conv simt bf16": 2.0, "other fp32": 3.0}
    a = report(H200, "bf16", {"backbone": (12.0, 0, 0)}, capture=capture("bf16", classes))
    t4 = specs.lookup("Tesla T4")
    assert t4 is not None
    projection = capture_projection(a, t4)
    assert projection.priced_by == "kernel classes" and "bf16 peak 989 vs 8.1 TF/s, emulated" in projection.peaks
    # each class on its peak: bf16 tensor-core GEMMs at the T4's fp32 rate (emulated), SIMT convs at fp32,
    # the rest at bandwidth; the 3 ms outside the kernels kept
    expected = 4.0 * 989 / 8.1 + 2.0 * 67 / 8.1 + 3.0 * 4800 / 320 + (12.0 - 9.0)
    assert projection.projected_ms == pytest.approx(expected)
    beside = diff_runs(a, projection)
    assert beside.split.rest_ms == pytest.approx(0.0, abs=1e-9)
    measured = report(T4, "bf16", {"backbone": (expected + 5.0, 0, 0)},
                      capture=capture("bf16", {"gemm simt bf16": 60.0}, capability=(7, 5)))
    pair = diff_runs(a, measured)
    assert pair.split.explained_ms == pytest.approx(beside.split.explained_ms)
    assert pair.split.rest_ms == pytest.approx(5.0)
    assert Projection.from_dict(projection.to_dict()) == projection


def test_a_run_without_a_finished_run_is_said_and_has_no_waterfall():
    a, b = cross_device_pair()
    data = a.to_dict()
    data["runs"] = [{"stage_ms": {}, "batches": [], "status": "failed", "wall_ms": 0}]
    data["totals"] = {"stage_ms": {}}
    d = diff_runs(Report.from_dict(data), b)
    assert d.a_ms is None and d.split.total_ratio is None and d.split.steps == ()
    assert any("A has no finished run" in n for n in d.notes)
    assert "B/A -" in format_diff(d)


def test_a_row_below_one_sides_recorded_cut_is_left_out_not_called_only_in_the_other(monkeypatch):
    """A capture keeps its largest module rows only: a module missing from a full list may have run below the cut,
    so its delta is unknown (left out, with a note); missing from a short list, it is "only in" the other side."""
    import engine.analysis.diff as diff_mod

    a = report(H200, "fp32", {"backbone": (20.0, 0, 0)}, capture=capture("fp32", {"other fp32": 10.0}))
    b_capture = dataclasses.replace(capture("bf16", {"other bf16": 5.0}), modules=(row("", "net.conv1", 4.0),))
    b = report(H200, "bf16", {"backbone": (6.0, 0, 0)}, capture=b_capture)
    short = {r.name: r for r in diff_runs(a, b).rows if r.level == "module"}
    assert "only in A" in short["net.head"].reason  # B's list (1 row) is not full: net.head did not run there
    monkeypatch.setattr(diff_mod, "TOP_MODULES", 1)  # B's list is full now
    d = diff_runs(a, b)
    full = {r.name for r in d.rows if r.level == "module"}
    assert full == {"net.conv1"} and any("1 module or function rows left out" in n for n in d.notes)
