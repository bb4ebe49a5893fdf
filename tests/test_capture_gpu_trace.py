"""Attribution of GPU events on a hand-written Chrome trace shaped like torch 2.11's (CUDA), so the GPU paths
(correlation, syncs and their call sites, copies, idle gaps and their causes, round trips) are tested on the CPU."""

from __future__ import annotations

from engine.capture.attribution import attribute, forward_body
from engine.capture.profile import CaptureResult
from engine.capture.rules import diagnose_capture
from engine.capture.summary import summarize
from engine.capture.trace import parse_chrome_trace

TID, PID = 100, 1
SITE = "tests/plugins/planted.py:40 forward (.item)"


def x(cat, name, ts, dur, tid=TID, pid=PID, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def gpu(cat, name, ts, dur, corr, **args):
    return x(cat, name, ts, dur, tid=7, pid=0, device=0, stream=7, correlation=corr, **args)


EVENTS = [
    {"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "GPU 0"}},
    x("user_annotation", "trackscope.run", 0, 1000),
    x("user_annotation", "trackscope.module:match", 8, 894),
    x("user_annotation", "trackscope.stage:match", 10, 890),
    x("user_annotation", "trackscope.module:match.scorer", 100, 700),
    x("python_function", "tests/plugins/planted.py(40): forward", 90, 720, **{"Python id": 1,
                                                                               "Python parent id": None}),
    x("python_function", "<built-in method item of Tensor object at 0x7f>", 199, 62,
      **{"Python id": 2, "Python parent id": 1}),
    # a reduction kernel, then .item(): DtoH copy + stream sync
    x("cpu_op", "aten::amax", 140, 20, **{"Input type": ["float", "ScalarList", "Scalar"]}),
    x("cuda_runtime", "cudaLaunchKernel", 150, 5, correlation=10),
    gpu("kernel", "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float>>(float)", 156, 94, 10),
    x("cpu_op", "aten::item", 200, 60, **{"Input type": ["float"]}),
    x("cpu_op", "aten::_local_scalar_dense", 201, 58, **{"Input type": ["float"]}),
    x("cuda_runtime", "cudaMemcpyAsync", 205, 5, correlation=11),
    gpu("gpu_memcpy", "Memcpy DtoH (Device -> Pageable)", 251, 3, 11, bytes=4),
    x("cuda_runtime", "cudaStreamSynchronize_v3020", 211, 47, correlation=12),
    # the GPU idles from 254 (sync returned) to 400: the next launch comes late
    x("cpu_op", "aten::mm", 385, 13, **{"Input type": ["float", "float"]}),
    x("cuda_runtime", "cudaLaunchKernelExC_v11060", 390, 5, correlation=30),
    gpu("kernel", "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize32x32x8_ffma_kernel__51a_cublas", 400, 50, 30),
    {"ph": "s", "cat": "ac2g", "id": 30, "pid": PID, "tid": TID, "ts": 390, "name": "ac2g"},
    {"ph": "f", "cat": "ac2g", "id": 30, "pid": 0, "tid": 7, "ts": 400, "name": "ac2g", "bp": "e"},
    # a host round trip: 1 MiB down, an FFT on the CPU, 1 MiB up
    x("cuda_runtime", "cudaMemcpyAsync", 500, 20, correlation=20),
    gpu("gpu_memcpy", "Memcpy DtoH (Device -> Pageable)", 505, 14, 20, bytes=1 << 20),
    x("cpu_op", "aten::fft_r2c", 530, 70, **{"Input type": ["float"]}),
    x("cuda_runtime", "cudaMemcpyAsync", 610, 10, correlation=21),
    gpu("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", 611, 8, 21, bytes=1 << 20),
    # after the module: the match module's own forward body launches one kernel
    x("cuda_runtime", "cudaLaunchKernel", 850, 5, correlation=40),
    gpu("kernel", "void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>>(int)",
        860, 20, 40),
    # outside the run: not counted
    x("cuda_runtime", "cudaDeviceSynchronize", 1100, 10, correlation=50),
    x("gpu_user_annotation", "trackscope.stage:match", 12, 880, tid=7, pid=0),
]


def parsed():
    return parse_chrome_trace({"schemaVersion": 1, "traceEvents": EVENTS})


def test_gpu_events_attributed_through_their_launches():
    trace = parsed()
    assert len(trace.kernels) == 3 and len(trace.copies) == 3 and len(trace.runtime) == 8
    att = attribute(trace, frozenset({"match"}))
    scorer = att.buckets[("match", "match.scorer")]
    assert (scorer.kernels, scorer.launches, scorer.syncs, scorer.copies) == (2, 2, 1, 3)
    assert scorer.copy_bytes == 4 + (2 << 20) and scorer.pageable_copies == 3
    assert scorer.copies_by_direction["DtoH"][:2] == [2, 4 + (1 << 20)]
    body = att.buckets[("match", forward_body("match"))]
    assert body.kernels == 1 and body.kernel_us == 20
    assert sum(b.syncs for b in att.buckets.values()) == 1  # the sync after the run is outside the window
    assert att.sync_sites == {SITE: [1, 47]}
    assert att.busy_us == 94 + 3 + 50 + 14 + 8 + 20 and att.idle_us == 1000 - att.busy_us
    after_sync = next(g for g in att.gaps if g.start == 254)
    assert after_sync.cause == "sync" and after_sync.call_site == SITE and after_sync.module == "match.scorer"
    assert [(r.dtoh_bytes, r.htod_bytes, r.ops) for r in att.round_trips] == [(1 << 20, 1 << 20, ["aten::fft_r2c"])]
    assert sum(b.wall_us for b in att.buckets.values()) == 1000


def test_summary_and_rules_from_a_gpu_trace():
    result = CaptureResult(device="cuda:0", trace=parsed(), module_parents=frozenset({"match"}),
                           unprofiled_wall_ms=0.8, profiled_wall_ms=1.0, capability=(9, 0))
    s = summarize(result, precision="tf32")
    assert s.has_gpu and s.counts.kernels == 3 and s.counts.launches == 3 and s.counts.syncs == 1
    assert s.counts.dtoh == 2 and s.counts.htod == 1 and s.counts.pageable == 3
    assert s.shares.kernel_named == 1.0
    gemm = next(k for k in s.top_kernels if k.kind == "gemm")
    assert (gemm.tensor_core, gemm.precision, gemm.module, gemm.legacy) == (False, "fp32", "match.scorer", True)
    assert s.sync_sites[0].call_site == SITE and s.gaps[0].cause in ("sync", "host")
    rules = {f["rule"]: f for f in diagnose_capture(s)}
    assert rules["cpu_round_trip"]["module"] == "match.scorer"
    assert rules["tf32_off"]["evidence"]["ms"] == 0.05  # SIMT fp32 GEMM in a tf32 run: TF32 off for it
    assert "no_tensor_cores" not in rules  # the same kernels, named once
    assert "host_sync" not in rules  # one sync is no finding
    assert "legacy_arch_kernels" not in rules  # an sm80 SIMT kernel on 9.0: older, but no tensor-core path lost


def test_call_sites_skip_torch_and_the_standard_library_only():
    import os

    import torch

    from engine.capture.attribution import is_library_file

    assert is_library_file(torch.__file__) and is_library_file(os.__file__)
    assert not is_library_file("/home/me/tapnet/tapnet/torch/tapir_model.py")  # a user's folder named torch
    assert not is_library_file(os.path.join(os.path.dirname(os.__file__), "site-packages", "cotracker", "m.py"))
