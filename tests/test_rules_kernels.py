"""Kernel and precision rules on constructed summaries: layout transposes, contiguous copies, launches (GPU
and CPU), elementwise chains, cudnn.benchmark, float64, fp32 under autocast, tf32_off, misaligned GEMMs."""

from __future__ import annotations

import dataclasses

import pytest

from engine.capture.evidence import GemmShape, KernelGroup
from engine.capture.summary import KernelRow
from tests.rules_cases import (
    SITE,
    above_info,
    as_trackscope,
    by_rule,
    clean_cpu,
    clean_gpu,
    findings,
    planted,
    row,
)


def group(kind, count=40, ms=6.0, names=("k",), nbytes=0, length=0, site=SITE):
    return (KernelGroup(kind, count, ms, names, nbytes, length, site=site, layer="user", stage="refine",
                        module="refine.mlp"),)


TRANSPOSE = "void cudnn::ops::nchwToNhwcKernel<float, float, float, false, true, (cudnnKernelDataType_t)2>"


def test_layout_transposes_around_convs():
    top = findings(planted(clean_gpu(), kernel_groups=group("layout_transpose", names=(TRANSPOSE,))))[0]
    assert top["rule"] == "layout_transpose" and top["call_site"] == SITE and TRANSPOSE in top["evidence"]["names"]
    assert top["evidence"]["share"] == pytest.approx(6.0 * 39 / 40 / 20, abs=1e-4)  # all but the input's one
    assert "channels_last" in top["suggestion"]


def test_copies_where_layouts_mix_are_named_by_the_layout_and_a_chain_of_copies_by_the_copies():
    mixed = (*group("layout_transpose", count=10, ms=2.0, names=(TRANSPOSE,)), *group("contiguous_copy", ms=4.0))
    found = findings(planted(clean_gpu(), kernel_groups=mixed))
    assert [f["rule"] for f in above_info(found)] == ["layout_transpose"]
    assert found[0]["evidence"]["share"] == 0.1 and "contiguous_copy_share" in found[0]["evidence"]
    copies = (*group("contiguous_copy", ms=4.0), *chain())
    found = findings(planted(clean_gpu(), kernel_groups=copies))
    assert [f["rule"] for f in above_info(found)] == ["contiguous_copy"]
    assert found[0]["evidence"]["share"] == 0.2 and found[0]["severity"] == "warning"  # the chain's, larger


def test_contiguous_copies_on_the_hot_path():
    top = findings(planted(clean_gpu(), kernel_groups=group("contiguous_copy", count=30, ms=4.0)))[0]
    assert top["rule"] == "contiguous_copy" and top["evidence"]["share"] == 0.1 and top["severity"] == "warning"
    assert ".contiguous()" in top["suggestion"]


@pytest.mark.parametrize("kind", ["layout_transpose", "contiguous_copy", "fp64", "elementwise_chain", "fp32_gemm"])
def test_kernel_groups_of_trackscope_are_no_finding(kind):
    rows = group(kind, nbytes=18 * 10**9, length=6)
    assert above_info(findings(planted(clean_gpu(), kernel_groups=as_trackscope(rows)))) == []
    assert above_info(findings(planted(clean_gpu(), kernel_groups=rows))) != []  # the same rows, the user's


def test_launch_bound_on_the_cpu_from_op_count_and_time_per_op():
    loop = row("refine", "refine.loop", wall_ms=60.0, cpu_ops=5000)  # 12 us per op
    s = clean_cpu(cells=(loop, row("refine", "refine.mlp", wall_ms=20.0, cpu_ops=50)))
    top = findings(s)[0]
    assert top["rule"] == "launch_bound_capture" and top["module"] == "refine.loop"
    assert top["evidence"]["share"] == pytest.approx(5000 * 0.005 / 82, abs=1e-4) and top["severity"] == "critical"
    few = clean_cpu(cells=(row("refine", "refine.loop", wall_ms=6.0, cpu_ops=500),))
    heavy = clean_cpu(cells=(row("refine", "refine.loop", wall_ms=600.0, cpu_ops=5000),))  # 120 us per op: work
    adapter = clean_cpu(cells=(row("download", "(stage body)", wall_ms=60.0, cpu_ops=5000),))
    for quiet in (few, heavy, adapter):
        assert "launch_bound_capture" not in by_rule(findings(quiet))


def chain(nbytes=18 * 10**9, ms=6.0, length=6):
    return group("elementwise_chain", count=12, ms=ms, names=("vectorized_elementwise_kernel<mul>",),
                 nbytes=nbytes, length=length)


def test_elementwise_chain_memory_bound_against_the_cards_peak():
    s = planted(clean_gpu(), kernel_groups=chain())
    top = findings(s)[0]
    assert top["rule"] == "elementwise_chain" and top["call_site"] == SITE
    ev = top["evidence"]
    assert ev["achieved_gbps"] == 3000.0 and ev["peak_gbps"] == 4800.0 and ev["bound"] == "memory-bound"
    assert ev["share"] == pytest.approx(6.0 * (1 - 2 / 6) / 20, abs=1e-4)
    assert "torch.compile" in top["suggestion"] and SITE in top["suggestion"]
    # a card not in the table: the stated default peak
    unknown = dataclasses.replace(s, evidence=dataclasses.replace(s.evidence, settings={}))
    assert by_rule(findings(unknown))["elementwise_chain"]["evidence"]["peak_gbps"] == 1500.0
    assert by_rule(findings(s, device_name="Tesla T4"))["elementwise_chain"]["evidence"]["peak_gbps"] == 320.0
    # small tensors: still fusable, but latency-bound
    small = by_rule(findings(planted(clean_gpu(), kernel_groups=chain(nbytes=6 * 10**6))))["elementwise_chain"]
    assert small["evidence"]["bound"] == "latency-bound" and small["severity"] == "info"  # launches: not its time
    # kernels with no op shapes behind them (a CUDA graph replay, CorrTrack's on the H200): traffic unknown
    assert "elementwise_chain" not in by_rule(findings(planted(clean_gpu(), kernel_groups=chain(nbytes=0))))
    assert "elementwise_chain" not in by_rule(findings(planted(clean_gpu(), kernel_groups=chain(length=2))))


def test_elementwise_chain_on_the_cpu():
    top = findings(planted(clean_cpu(), kernel_groups=chain(nbytes=10**9, ms=60.0)))[0]
    assert top["rule"] == "elementwise_chain" and top["evidence"]["peak_gbps"] == 20.0
    assert "ops" in top["title"]


def conv_shapes():
    return (GemmShape("aten::convolution", (8, 64, 64), "c10::BFloat16", 40, 12.0, site=SITE, layer="user",
                      module="features.conv"),)


def test_cudnn_benchmark_off_with_fixed_conv_shapes():
    s = planted(clean_gpu(kernel_class_ms={"conv tc bf16 sm90": 14.0, "other bf16": 2.0}), gemm_shapes=conv_shapes())
    top = findings(s)[0]
    assert top["rule"] == "cudnn_benchmark_off" and top["call_site"] == SITE
    assert top["evidence"]["share"] == pytest.approx(0.1 * 14 / 20, abs=1e-4) and top["severity"] == "warning"
    assert "cudnn.benchmark = True" in top["suggestion"] and "unknown" in top["suggestion"]
    some = planted(clean_gpu(kernel_class_ms={"conv tc bf16 sm90": 8.0}), gemm_shapes=conv_shapes())
    assert by_rule(findings(some))["cudnn_benchmark_off"]["severity"] == "info"  # convs not most of the run
    few = planted(clean_gpu(kernel_class_ms={"conv tc bf16 sm90": 1.0}), gemm_shapes=conv_shapes())
    assert "cudnn_benchmark_off" not in by_rule(findings(few))  # a tenth of 5 % of the run: under 1 %
    on = dataclasses.replace(s, evidence=dataclasses.replace(s.evidence, settings={"cudnn_benchmark": "True"}))
    assert "cudnn_benchmark_off" not in by_rule(findings(on))
    no_shapes = clean_gpu(kernel_class_ms={"conv tc bf16 sm90": 14.0})
    assert "cudnn_benchmark_off" not in by_rule(findings(no_shapes))


def test_float64_on_the_gpu_and_on_the_cpu():
    top = findings(planted(clean_gpu(), kernel_groups=group("fp64", count=20, names=("gemm<double>",))))[0]
    assert top["rule"] == "float64" and top["call_site"] == SITE and top["evidence"]["share"] == 0.15
    assert "float32" in top["suggestion"]
    cpu = findings(planted(clean_cpu(), kernel_groups=group("fp64", count=20, ms=30.0, names=("aten::mul",))))
    assert cpu[0]["rule"] == "float64" and cpu[0]["severity"] == "warning"


def test_fp32_gemm_kernels_under_autocast():
    s = planted(clean_gpu(), kernel_groups=group("fp32_gemm", count=50, ms=8.0,
                                                 names=("sm80_xmma_gemm_f32f32_f32f32_f32_tn_n",)))
    top = findings(s)[0]
    assert top["rule"] == "fp32_under_autocast" and top["call_site"] == SITE and top["evidence"]["share"] == 0.2
    assert "torch.autocast" in top["suggestion"]
    assert "fp32_under_autocast" not in by_rule(findings(s, precision="tf32"))


SIMT = KernelRow("sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize128x128x8_ffma_kernel", "gemm", False, "fp32", 80,
                 100, 10.0, True, "refine", "refine.mlp")
DEPTHWISE = KernelRow("void at::native::conv_depthwise2d_forward_kernel<float>", "conv", False, "fp32", None, 40,
                      6.0, False, "features", "features.dw")


def test_tf32_off_names_fp32_cuda_core_gemms_in_tf32_mode_once():
    s = clean_gpu(precision="tf32", top_kernels=(SIMT,))
    found = findings(s)
    top = found[0]
    assert top["rule"] == "tf32_off" and top["module"] == "refine.mlp" and top["evidence"]["share"] == 0.25
    assert "allow_tf32 = True" in top["suggestion"]
    assert "no_tensor_cores" not in by_rule(found)  # the same kernels, named once
    off = planted(s, settings={"allow_tf32_matmul": "False"})
    top = findings(off)[0]
    assert top["rule"] == "tf32_off" and "allow_tf32_matmul=False" in top["title"]
    assert "remove" in top["suggestion"]
    assert "tf32_off" not in by_rule(findings(clean_gpu(precision="fp32", top_kernels=(SIMT,))))  # IEEE on purpose
    # a kernel whose name reads as TF32 (cuBLAS nvjet 's' inputs) while the run's settings show TF32 off
    nvjet = KernelRow("nvjet_sm90_sss_128x128_64x4_1x2_h_bz_coopA_NNN", "gemm", True, "tf32", 90, 100, 10.0,
                      False, "refine", "refine.mlp")
    assert "tf32_off" not in by_rule(findings(clean_gpu(precision="tf32", top_kernels=(nvjet,))))
    said_off = planted(clean_gpu(precision="tf32", top_kernels=(nvjet,)), settings={"allow_tf32_matmul": "False"})
    assert findings(said_off)[0]["rule"] == "tf32_off"
    cudnn_only = planted(clean_gpu(precision="tf32", top_kernels=(nvjet,)), settings={"allow_tf32_cudnn": "False"})
    assert "tf32_off" not in by_rule(findings(cudnn_only))  # the GEMM's switch is on
    upload = dataclasses.replace(SIMT, stage="upload")
    assert above_info(findings(clean_gpu(precision="tf32", top_kernels=(upload,)))) == []


def test_depthwise_convs_stay_no_tensor_cores_in_tf32_mode():
    rules = by_rule(findings(clean_gpu(precision="tf32", top_kernels=(DEPTHWISE,))))
    assert "tf32_off" not in rules and rules["no_tensor_cores"]["module"] == "features.dw"


def misaligned(dtype="c10::BFloat16"):
    return (GemmShape("aten::mm", (1000, 250, 130), dtype, 40, 6.0, misaligned=("N", "K"), tensor_core=False,
                      site=SITE, layer="user", module="refine.mlp"),)


def test_gemm_misaligned_in_tensor_core_modes():
    top = findings(planted(clean_gpu(), gemm_shapes=misaligned()))[0]
    assert top["rule"] == "gemm_misaligned" and top["call_site"] == SITE and top["evidence"]["share"] == 0.15
    assert "1000x250x130" in top["title"] and "multiple of 8" in top["suggestion"]
    assert "gemm_misaligned" not in by_rule(findings(planted(clean_gpu(precision="fp32"), gemm_shapes=misaligned())))
    # the CUDA-core kernels of those shapes are the misalignment's finding, not a second one
    gemv = KernelRow("void gemv2T_kernel_val<int, int, __nv_bfloat16, float, float, 128, 16, 4, 4>", "gemm", False,
                     "bf16", None, 40, 6.0, False, "refine", "refine.mlp")
    found = findings(planted(clean_gpu(top_kernels=(gemv,)), gemm_shapes=misaligned()))
    assert [f["rule"] for f in above_info(found)] == ["gemm_misaligned"]
    assert "no_tensor_cores" in by_rule(findings(clean_gpu(top_kernels=(gemv,))))
    aligned = tuple(dataclasses.replace(g, misaligned=()) for g in misaligned())
    assert "gemm_misaligned" not in by_rule(findings(planted(clean_gpu(), gemm_shapes=aligned)))
    assert above_info(findings(planted(clean_gpu(), gemm_shapes=as_trackscope(misaligned())))) == []


# -- cudnn.benchmark measured: the capture's A/B (engine.capture.settings_ab) --------------------------------
def _benchmark_off(s, **ab: str):
    settings = {"cudnn_benchmark": "False", **ab}
    return dataclasses.replace(s, evidence=dataclasses.replace(s.evidence, settings=settings))


def _conv_run(conv_ms: float = 8.0):
    return planted(clean_gpu(kernel_class_ms={"conv tc bf16 sm90": conv_ms, "other bf16": 2.0}),
                   gemm_shapes=conv_shapes())


def test_a_measured_benchmark_gain_is_the_time_at_stake_and_its_share_sets_the_severity():
    """Convs under half the run (the assumption's info cap) but benchmark on measured 1.6 ms faster in 20 ms."""
    s = _benchmark_off(_conv_run(), cudnn_ab_on_ms="18.4", cudnn_ab_off_ms="20.0", cudnn_ab_runs="5")
    top = findings(s)[0]
    assert top["rule"] == "cudnn_benchmark_off" and top["severity"] == "warning" and top["call_site"] == SITE
    assert top["evidence"]["share"] == pytest.approx(1.6 / 20.0, abs=1e-4) and top["evidence"]["measured"]
    assert top["evidence"]["ms_at_stake"] == pytest.approx(0.08 * 20.0, abs=1e-3)
    assert "cudnn.benchmark on: 18.40 ms vs 20.00 ms off, 8.0 % of the run (medians of 5 each" in top["title"]
    assert top["evidence"]["run_ms_benchmark_on"] == 18.4 and top["evidence"]["run_ms_benchmark_off"] == 20.0
    assert "unknown" not in top["suggestion"] and "assumed" not in top["title"]
    big = _benchmark_off(_conv_run(), cudnn_ab_on_ms="12.0", cudnn_ab_off_ms="20.0", cudnn_ab_runs="5")
    assert by_rule(findings(big))["cudnn_benchmark_off"]["severity"] == "critical"  # 40 %: no cap when measured


@pytest.mark.parametrize("on_ms", ["20.0", "20.6", "19.9"])
def test_a_measured_benchmark_that_does_not_help_is_an_info_saying_so(on_ms: str):
    s = _benchmark_off(_conv_run(14.0), cudnn_ab_on_ms=on_ms, cudnn_ab_off_ms="20.0", cudnn_ab_runs="5")
    f = by_rule(findings(s))["cudnn_benchmark_off"]
    assert f["severity"] == "info" and f["evidence"]["share"] == 0.0 and f["evidence"]["measured"]
    assert "measured" in f["title"] and "on this card" in f["title"] and "nothing to change" in f["suggestion"]
    # convs most of the run: the assumption alone would have said warning; the measurement says no
    assert by_rule(findings(_benchmark_off(_conv_run(14.0))))["cudnn_benchmark_off"]["severity"] == "warning"
    # a few convs (1 ms of 20) that benchmarking does not speed up: no line at all, as without the A/B
    few = _benchmark_off(_conv_run(1.0), cudnn_ab_on_ms=on_ms, cudnn_ab_off_ms="20.0", cudnn_ab_runs="5")
    assert "cudnn_benchmark_off" not in by_rule(findings(few))


def test_a_measured_benchmark_gain_counts_only_beyond_the_jitter_and_never_beyond_the_conv_time():
    """Session 19 on the H200: a clean plugin with 0.1 ms of convs read 5.72 vs 6.69 ms (fresh threads' noise)."""
    from engine.capture.settings_ab import separated

    apart = {"cudnn_ab_on_runs_ms": "18.3,18.4,18.5,18.4,18.6", "cudnn_ab_off_runs_ms": "19.9,20.0,20.1,20.2,19.8"}
    s = _benchmark_off(_conv_run(), cudnn_ab_on_ms="18.4", cudnn_ab_off_ms="20.0", cudnn_ab_runs="5", **apart)
    f = by_rule(findings(s))["cudnn_benchmark_off"]
    assert f["severity"] == "warning" and f["evidence"]["beyond_jitter"]
    assert f["evidence"]["runs_ms_benchmark_on"].split()[0] == "18.30"
    # the same medians from runs that overlap: no gain beyond the jitter, an info (convs are 40 % of the run)
    mixed = {"cudnn_ab_on_runs_ms": "16.0,18.4,21.0,18.0,20.5", "cudnn_ab_off_runs_ms": "17.0,20.0,22.0,19.0,20.9"}
    s = _benchmark_off(_conv_run(), cudnn_ab_on_ms="18.4", cudnn_ab_off_ms="20.0", cudnn_ab_runs="5", **mixed)
    f = by_rule(findings(s))["cudnn_benchmark_off"]
    assert f["severity"] == "info" and f["evidence"]["share"] == 0.0 and "jitter" in f["title"]
    # 4 ms faster with 0.5 ms of convs: counted up to the conv time (2.5 % of the run), not the whole gap
    s = _benchmark_off(_conv_run(0.5), cudnn_ab_on_ms="16.0", cudnn_ab_off_ms="20.0", cudnn_ab_runs="5",
                       cudnn_ab_on_runs_ms="15.9,16.0,16.1,16.0,16.2", cudnn_ab_off_runs_ms="19.9,20.0,20.1,20.0,20.2")
    f = by_rule(findings(s))["cudnn_benchmark_off"]
    assert f["evidence"]["share"] == pytest.approx(0.5 / 20.0, abs=1e-4) and f["evidence"]["capped_at_conv_ms"]
    assert f["severity"] == "info" and "counted up to the 0.50 ms the convs take" in f["title"]
    assert separated([1.0, 1.1, 1.0], [2.0, 2.1, 2.2]) and not separated([1.0, 2.5, 1.2], [2.0, 2.1, 2.2])
    assert not separated([1.0], [2.0])


def test_without_the_ab_the_benchmark_gain_is_a_stated_assumption_capped_at_info():
    f = by_rule(findings(_benchmark_off(_conv_run(8.0))))["cudnn_benchmark_off"]
    assert f["severity"] == "info" and not f["evidence"]["measured"]
    assert f["evidence"]["share"] == pytest.approx(0.1 * 8 / 20, abs=1e-4)
    assert "assumed" in f["title"] and "not measured" in f["title"] and "assumed 10 %" in f["suggestion"]
    overridden = _benchmark_off(_conv_run(8.0), cudnn_ab_overridden="True")
    f = by_rule(findings(overridden))["cudnn_benchmark_off"]
    assert f["evidence"]["tracker_sets_flag"] and "switched it off again" in f["title"]
    assert "sets the flag itself" in f["suggestion"] and f["severity"] == "info"
    # a CPU capture: no cuDNN, no finding, whatever the keys say
    cpu = _benchmark_off(planted(clean_cpu(), gemm_shapes=conv_shapes()), cudnn_ab_on_ms="1", cudnn_ab_off_ms="20")
    assert "cudnn_benchmark_off" not in by_rule(findings(cpu))


def test_alternate_takes_turns_leaves_each_ways_first_run_untimed_and_restores_when_a_run_raises():
    from engine.capture.settings_ab import alternate

    seen: list[str] = []
    restored: list[bool] = []

    def way(name: str, ms: list[float]):
        def run() -> float:
            seen.append(name)
            return ms[len([s for s in seen if s == name]) - 1]
        return run

    medians = alternate([way("a", [99.0, 1.0, 3.0, 2.0]), way("b", [99.0, 5.0, 5.0, 6.0])],
                        lambda: restored.append(True), repeats=3)
    assert medians == [2.0, 5.0] and seen == ["a", "b"] * 4 and restored == [True]

    def boom() -> float:
        raise RuntimeError("the tracker failed")

    with pytest.raises(RuntimeError, match="tracker failed"):
        alternate([way("c", [1.0] * 4), boom], lambda: restored.append(True), repeats=3)
    assert restored == [True, True]


def test_the_benchmark_ab_runs_each_way_in_a_fresh_thread_of_its_own_and_puts_the_flag_back():
    """cuDNN's plan cache is per thread and keyed without the flag: each way gets a thread of its own (the
    caller's thread, where the tracker ran, has the heuristic plans cached). The flag is back as it was."""
    import threading

    import torch

    from engine.capture.settings_ab import (
        CUDNN_AB_OFF_MS,
        CUDNN_AB_ON_MS,
        CUDNN_AB_RUNS,
        cudnn_ab,
        cudnn_ab_runs,
        cudnn_benchmark_ab,
    )

    before = torch.backends.cudnn.benchmark
    runs: list[tuple[bool, int]] = []

    def run_ms() -> float:
        on = torch.backends.cudnn.benchmark
        runs.append((on, threading.get_ident()))
        return 4.0 if on else 5.0

    result = cudnn_benchmark_ab(run_ms, repeats=3)
    assert [on for on, _ in runs] == [True, False] * 4  # alternating, each way's first untimed
    on_threads = {t for on, t in runs if on}
    off_threads = {t for on, t in runs if not on}
    assert len(on_threads) == len(off_threads) == 1 and on_threads != off_threads
    assert threading.get_ident() not in on_threads | off_threads
    assert float(result[CUDNN_AB_ON_MS]) == 4.0 and float(result[CUDNN_AB_OFF_MS]) == 5.0
    assert result[CUDNN_AB_RUNS] == "3" and cudnn_ab(result) == (4.0, 5.0) and cudnn_ab({}) is None
    assert cudnn_ab_runs(result) == ([4.0] * 3, [5.0] * 3) and cudnn_ab_runs({}) is None
    assert torch.backends.cudnn.benchmark == before
    assert not any(t.name.startswith("trackscope-ab") for t in threading.enumerate())  # the ways' threads ended


def test_the_benchmark_ab_puts_the_flag_back_when_the_tracker_raises_and_voids_itself_if_the_tracker_sets_it():
    import torch

    from engine.capture.settings_ab import CUDNN_AB_OVERRIDDEN, cudnn_benchmark_ab

    before = torch.backends.cudnn.benchmark
    calls = []

    def failing() -> float:
        calls.append(torch.backends.cudnn.benchmark)
        if len(calls) == 3:
            raise RuntimeError("out of memory")
        return 1.0

    with pytest.raises(RuntimeError, match="out of memory"):
        cudnn_benchmark_ab(failing, repeats=3)
    assert torch.backends.cudnn.benchmark == before and len(calls) == 3

    def sets_it_off() -> float:  # a tracker with `torch.backends.cudnn.benchmark = False` in its forward
        torch.backends.cudnn.benchmark = False
        return 1.0

    assert cudnn_benchmark_ab(sets_it_off, repeats=2) == {CUDNN_AB_OVERRIDDEN: "True"}
    assert torch.backends.cudnn.benchmark == before


def test_a_plugin_call_inside_the_benchmark_ab_runs_in_the_ways_thread_not_on_the_plugins_worker():
    """The guard runs a plugin call inline in an instrumented thread: the way's thread (empty plan cache) is where
    the tracker's convs run, not the plugin's long-lived worker (whose cache holds the heuristic plans)."""
    import threading

    from engine.capture.settings_ab import cudnn_benchmark_ab
    from engine.trackers.guard import call_plugin

    worker = call_plugin("cudnn ab test", "start its worker", threading.get_ident)
    where: list[tuple[int, int]] = []

    def run_ms() -> float:
        where.append((threading.get_ident(), call_plugin("cudnn ab test", "a run", threading.get_ident)))
        return 1.0

    cudnn_benchmark_ab(run_ms, repeats=1)
    assert all(plugin == lane and plugin != worker for lane, plugin in where)


def test_the_capture_runs_the_benchmark_ab_only_after_a_run_with_conv_kernels_and_the_flag_off(monkeypatch):
    from types import SimpleNamespace

    from engine.capture import profile, settings_ab

    calls: list[int] = []
    monkeypatch.setattr(settings_ab, "cudnn_benchmark_ab", lambda run_ms, repeats: calls.append(repeats) or {"k": "v"})

    def result(flag: str, kernel: str, stopped: str | None = None, conv_us: float = 2000.0, region: str = ""):
        r = profile.CaptureResult(device="cuda:0")
        r.settings = {"cudnn_benchmark": flag}
        r.trace = SimpleNamespace(kernels=[SimpleNamespace(name=kernel, dur=conv_us)],  # type: ignore[assignment]
                                  annotations=[SimpleNamespace(label=region)] if region else [], cpu_ops=[])
        r.stopped = stopped
        r.unprofiled_wall_ms = 20.0
        return r

    conv = "sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x64"
    assert profile._ab_cudnn(result("False", conv), lambda: 1.0) == {"k": "v"}
    assert profile._ab_cudnn(result("True", conv), lambda: 1.0) == {}
    assert profile._ab_cudnn(result("False", "void at::native::vectorized_elementwise_kernel<4>"), lambda: 1.0) == {}
    assert profile._ab_cudnn(result("False", conv, stopped="op limit"), lambda: 1.0) == {}
    assert profile._ab_cudnn(result("False", conv, conv_us=100.0), lambda: 1.0) == {}  # 0.1 of 20 ms: under 1 %
    assert calls == [7]  # one A/B, every repeat (a 20 ms run)
    compiled = result("False", conv, region="Torch-Compiled Region: 0/0")
    assert profile._ab_cudnn(compiled, lambda: 1.0) == {}  # compiled code in the run: the mode would recompile
    assert calls == [7]
    slow = result("False", conv, conv_us=2e6)
    slow.unprofiled_wall_ms = 5000.0  # 2 x 4 runs of 5 s would not fit the A/B's budget
    assert profile._ab_cudnn(slow, lambda: 1.0) == {} and calls == [7]


def test_the_benchmark_ab_fits_its_runs_in_its_time_budget():
    from engine.capture.settings_ab import CUDNN_AB_REPEATS, ab_repeats

    assert ab_repeats(8.0) == CUDNN_AB_REPEATS  # a CorrTrack-sized run: every repeat
    assert ab_repeats(1000.0, budget_s=12.0) == 5  # 2 x 6 runs of 1 s
    assert ab_repeats(1600.0, budget_s=12.0) is None  # 2 x 4 runs would take 12.8 s: skipped, the assumption stands
    assert ab_repeats(0.0) == CUDNN_AB_REPEATS
