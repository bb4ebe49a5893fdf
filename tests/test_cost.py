"""Cost model: FLOPs and bytes per stage on the CPU, and roofline classification."""

from __future__ import annotations

import dataclasses
import math
import threading

import pytest
import torch

from engine.analysis import cost
from engine.analysis.cost import UNSTAGED, CostCounter, count_cost
from engine.analysis.roofline import LATENCY_FRACTION, device_spec, report_cost, roofline
from engine.core.precision import precision_context
from engine.core.stages import StageTimer
from engine.report.parts import Environment, StageWork
from engine.report.schema import Report
from engine.telemetry.environment import capture_environment

# hand counts: a conv is 2 x N x Cout x Hout x Wout x Cin x k x k; a matmul [m, k] @ [k, n] is 2 m k n
CONV_N, CONV_CIN, CONV_COUT, CONV_HW, CONV_K = 2, 3, 8, 16, 3
CONV_FLOPS = 2 * CONV_N * CONV_COUT * CONV_HW * CONV_HW * CONV_CIN * CONV_K * CONV_K
MM_M, MM_K, MM_N = 4, 16, 32
MM_FLOPS = 2 * MM_M * MM_K * MM_N
FP32_BYTES = 4


class TinyNet(torch.nn.Module):
    """conv (no bias) then a matmul, each in its own stage of the timer."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(CONV_CIN, CONV_COUT, CONV_K, padding=1, bias=False)
        self.weight = torch.nn.Parameter(torch.randn(MM_K, MM_N))

    def forward(self, image: torch.Tensor, rows: torch.Tensor, timer: StageTimer) -> torch.Tensor:
        with timer.stage("decode", host=True):
            pass  # host work only: no torch op
        with timer.stage("backbone"):
            feats = self.conv(image)
        with timer.stage("head"):
            out = rows @ self.weight
        return feats.sum() + out.sum()


def run_counted(timer: StageTimer | None = None, precision: str = "fp32") -> dict:
    net = TinyNet()
    image = torch.randn(CONV_N, CONV_CIN, CONV_HW, CONV_HW)
    rows = torch.randn(MM_M, MM_K)
    timer = timer or StageTimer("cpu")
    with torch.inference_mode(), CostCounter(precision) as counter, precision_context(precision, "cpu"):
        net(image, rows, timer)
    return counter.result()


def test_flops_match_hand_count_for_conv_and_matmul():
    result = run_counted()
    assert result["backbone"].flops == CONV_FLOPS
    assert result["head"].flops == MM_FLOPS
    conv_bytes = FP32_BYTES * (CONV_N * CONV_CIN * CONV_HW**2 + CONV_COUT * CONV_CIN * CONV_K**2
                               + CONV_N * CONV_COUT * CONV_HW**2)
    assert result["backbone"].bytes == conv_bytes
    assert result["head"].bytes == FP32_BYTES * (MM_M * MM_K + MM_K * MM_N + MM_M * MM_N)
    assert result["decode"] == StageWork(flops=0, bytes=0, ops=0, precision="fp32")
    # the two sums run outside any stage
    assert result[UNSTAGED].flops == 0 and result[UNSTAGED].ops >= 2


def test_counting_works_with_timing_disabled():
    result = run_counted(StageTimer("cpu", enabled=False))
    assert result["backbone"].flops == CONV_FLOPS and result["head"].flops == MM_FLOPS


def test_nested_stages_book_to_the_innermost():
    timer = StageTimer("cpu")
    a, b = torch.randn(8, 8), torch.randn(8, 8)
    with CostCounter() as counter, timer.stage("outer"):
        a @ b
        with timer.stage("inner"):
            a @ b
            a @ b
    result = counter.result()
    assert result["outer"].flops == 2 * 8**3 and result["inner"].flops == 2 * 2 * 8**3


def test_other_threads_are_not_counted():
    timer = StageTimer("cpu")
    done = threading.Event()

    def elsewhere():
        t = StageTimer("cpu")
        with t.stage("foreign"):
            torch.randn(16, 16) @ torch.randn(16, 16)
        done.set()

    with CostCounter() as counter, timer.stage("mine"):
        thread = threading.Thread(target=elsewhere)
        thread.start()
        thread.join()
        torch.randn(4, 4) @ torch.randn(4, 4)
    assert done.is_set()
    result = counter.result()
    assert "foreign" not in result and result["mine"].flops == 2 * 4**3


def test_stage_precision_follows_the_dtype_the_flops_ran_in():
    assert run_counted(precision="bf16")["backbone"].precision == "bf16"
    assert run_counted(precision="bf16")["decode"].precision == "fp32"  # no FLOPs: not half
    assert run_counted(precision="tf32")["head"].precision == "tf32"



def test_autocast_casts_are_counted_as_bytes_moved():
    half = run_counted(precision="bf16")["head"]  # under inference_mode, as sessions run
    bf16_bytes = 2
    casts = (FP32_BYTES + bf16_bytes) * (MM_M * MM_K + MM_K * MM_N)  # read fp32, write bf16, both operands
    matmul = bf16_bytes * (MM_M * MM_K + MM_K * MM_N + MM_M * MM_N)
    assert half.flops == MM_FLOPS and half.bytes == casts + matmul
    assert half.ops == 3  # two casts and the matmul


def test_real_views_move_no_bytes_but_copies_do():
    timer = StageTimer("cpu")
    x = torch.randn(4, 8)
    with torch.inference_mode(), CostCounter() as counter:
        with timer.stage("views"):
            x.view(8, 4), x.t(), x.reshape(32), x.to(torch.float32)
        with timer.stage("copy"):
            x.t().reshape(32)  # not viewable: reshape copies
    result = counter.result()
    assert result["views"].bytes == 0
    assert result["copy"].bytes == 2 * FP32_BYTES * x.numel()


def test_count_cost_is_cached_per_key():
    calls = []

    def work():
        calls.append(1)
        timer = StageTimer("cpu")
        with timer.stage("x"):
            torch.ones(4) + 1

    key = ("test-cache", 1)
    cost.clear_cache()
    first = count_cost(key, work)
    second = count_cost(key, work)
    assert calls == [1] and first == second and first["x"].ops == 2  # ones, add


# -- roofline ---------------------------------------------------------------------------------
PEAK_FLOPS = 100e12  # 100 TFLOP/s
PEAK_BW = 1000e9  # 1000 GB/s -> ridge at 100 FLOP/byte


def test_compute_bound():
    r = roofline(1e12, 1e9, 20.0, PEAK_FLOPS, PEAK_BW)  # intensity 1000 > ridge 100; 50 TFLOP/s achieved
    assert r.bound == "compute"
    assert r.achieved_tflops == pytest.approx(50.0)
    assert r.pct_of_roofline == pytest.approx(50.0)
    assert r.ridge == pytest.approx(100.0)


def test_memory_bound():
    r = roofline(1e9, 1e9, 2.0, PEAK_FLOPS, PEAK_BW)  # intensity 1; 500 GB/s achieved
    assert r.bound == "memory"
    assert r.achieved_gbps == pytest.approx(500.0)
    assert r.pct_of_roofline == pytest.approx(50.0)


def test_latency_bound_below_the_threshold_of_both_roofs():
    r = roofline(1e9, 1e9, 100.0, PEAK_FLOPS, PEAK_BW)  # 10 GB/s = 1 % of the bandwidth roof
    assert r.bound == "latency"
    # just above the threshold on the memory roof: memory bound again
    ms = 1e9 / (PEAK_BW * LATENCY_FRACTION * 1.05) * 1e3
    assert roofline(1e9, 1e9, ms, PEAK_FLOPS, PEAK_BW).bound == "memory"


def test_host_and_unknown():
    assert roofline(0, 0, 5.0, PEAK_FLOPS, PEAK_BW).bound == "host"
    unknown = roofline(1e9, 1e9, 5.0, math.nan, PEAK_BW)
    assert unknown.bound == "unknown" and unknown.achieved_gbps == pytest.approx(200.0)
    only_bytes = roofline(0, 1e9, 2.0, PEAK_FLOPS, PEAK_BW)  # a copy stage: flops 0, memory bound
    assert only_bytes.bound == "memory"


def test_report_cost_on_cpu_uses_the_cpu_pseudo_spec():
    data = {"format": "trackscope-report", "version": 2, "environment": capture_environment("cpu"),
            "config": {"device": "cpu"}, "stages": [], "runs": [],
            "totals": {"stage_ms": {"backbone": 1.0, "head": 1.0, "decode": 0.1}}}
    report = Report.from_dict(data)
    section = report_cost(dataclasses.replace(report, work=run_counted()))
    assert section.spec.kind == "cpu" and section.spec.estimated
    assert section.to_dict()["peak"]["kind"] == "cpu"
    assert section.stages["decode"].bound == "host"
    assert section.stages["backbone"].roofline_ms > 0
    assert section.latency_fraction == LATENCY_FRACTION
    assert report_cost(report) is None  # nothing counted: no roofline


def test_card_not_in_the_table_gets_its_bandwidth_estimated_from_the_recorded_nvml_facts(monkeypatch):
    import engine.telemetry.environment as environment

    monkeypatch.setattr(environment, "gpu_info", lambda device: {
        "name": "Mystery GPU", "compute_capability": [8, 0], "memory_total_bytes": 80e9,
        "multiprocessor_count": 108, "index": 0})
    static = {"driver": "1.0", "max_sm_clock_mhz": 1410, "max_mem_clock_mhz": 1593, "memory_bus_width_bits": 5120}
    spec = device_spec(Environment.from_dict(capture_environment("cuda", static)))
    assert spec.estimated and spec.name == "Mystery GPU"
    assert spec.bandwidth_gbps == pytest.approx(1593 * 5120 / 8 * 2 / 1e3)  # MHz x bytes x DDR -> GB/s


def test_gathers_count_what_they_pick_and_inplace_ops_read_and_write():
    timer = StageTimer("cpu")
    source = torch.randn(100, 1000)
    rows = torch.tensor([1, 2, 3])
    with torch.inference_mode(), CostCounter() as counter:
        with timer.stage("gather"):
            torch.index_select(source, 0, rows)
        with timer.stage("inplace"):
            source.add_(1.0)
    result = counter.result()
    picked = 3 * 1000 * FP32_BYTES
    assert result["gather"].bytes == picked + rows.numel() * 8 + picked  # source part, indices, output
    assert result["inplace"].bytes == 2 * source.numel() * FP32_BYTES


def test_the_counted_pass_takes_queries_in_the_videos_pixels_like_the_timed_runs():
    """A video shrunk on reading: queries stay in the source's pixels, the session maps them."""
    import numpy as np

    from engine.core.config import RunConfig
    from engine.trackers.lk import LKTracker

    cost.clear_cache()
    frames = (np.random.default_rng(0).random((4, 64, 64, 3)) * 255).astype(np.uint8)
    queries = np.array([[0, 100.0, 100.0]], np.float32)  # inside the 128 x 128 source, not the 64 x 64 frames
    config = RunConfig(tracker="lk", device="cpu")
    info = {"width": 128, "height": 128, "num_frames": 4}
    costs = cost.count_session_cost(frames, queries, config, tracker=LKTracker(), video_info=info)
    assert isinstance(costs, dict)  # the counted pass finished (it raised before video_info reached it)
    cost.clear_cache()
    with pytest.raises(Exception, match="outside"):
        cost.count_session_cost(frames, queries, config, tracker=LKTracker())


def test_quantised_gemms_are_counted_at_their_precision():
    """torch's FLOP counter has no formula for _int_mm: the counter books 2*m*k*n of int8 work for it."""
    from engine.analysis.cost import CostCounter

    a = torch.randint(-8, 8, (32, 64), dtype=torch.int8)
    b = torch.randint(-8, 8, (64, 16), dtype=torch.int8)
    with CostCounter() as counter:
        counter.open_stage("refine")
        torch._int_mm(a, b)
    work = counter.result()
    total = sum(w.flops for w in work.values())
    assert total == 2 * 32 * 64 * 16
    assert any(w.precision == "int8" for w in work.values() if w.flops)
