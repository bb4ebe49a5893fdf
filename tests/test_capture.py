"""Deep capture on the CPU: module/stage attribution, planted trackers, export, summary, degradation."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest
import torch
from torch import nn

from engine.capture import profile as capture_profile
from engine.capture.attribution import OUTSIDE_STAGES, forward_body
from engine.capture.export import write_trace
from engine.capture.profile import capture_run, capture_session
from engine.capture.rules import diagnose_capture
from engine.capture.summary import CaptureSummary, summarize
from engine.capture.trace import MODULE_PREFIX, STAGE_PREFIX, load_chrome_trace, parse_chrome_trace
from engine.core.config import RunConfig
from engine.core.errors import ReportError
from engine.core.stages import StageTimer
from engine.run.session import Session
from engine.trackers.plugin import PluginTracker
from tests.helpers import moving_square_video
from tests.plugins import planted_capture

QUERIES = np.array([[0, 8.0, 12.0], [2, 20.0, 10.0], [1, 5.0, 5.0], [3, 16.0, 16.0]], np.float32)


class Leaf(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x)


class Inner(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.leaf = Leaf()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.sigmoid(x)  # forward body of "inner"
        return self.leaf(self.lin(x))


class Outer(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = Inner()
        self.head = nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.cumsum(self.inner(x), dim=0))  # cumsum: forward body of the root


def _capture_nested():
    model = Outer()
    x = torch.randn(4, 8)

    def run_once() -> None:
        timer = StageTimer("cpu")
        with torch.no_grad():
            with timer.stage("model"):
                model(x)
            torch.exp(x)  # outside every stage

    return capture_run(run_once, device="cpu", roots={"": model})


def _ops_by_bucket(result):
    from engine.capture.attribution import _by_tid, _Locator

    trace = result.trace
    out: dict[tuple[str, str], set[str]] = {}
    for tid, ops in _by_tid(trace.cpu_ops).items():
        loc = _Locator([s for s in trace.stages if s.tid == tid], [m for m in trace.modules if m.tid == tid],
                       result.module_parents)
        for op, key in zip(ops, loc.keys([op.start + op.dur / 2 for op in ops])):
            out.setdefault(key, set()).add(op.name)
    return out


@pytest.mark.slow
def test_nested_module_ops_land_in_their_module_paths_and_forward_bodies():
    result = _capture_nested()
    assert result.error is None and result.trace is not None
    assert result.unprofiled_wall_ms > 0 and result.profiled_wall_ms > 0
    assert {m.label for m in result.trace.modules} == {"Outer", "inner", "inner.lin", "inner.leaf", "head"}
    assert [s.label for s in result.trace.stages] == ["model"]
    assert result.module_parents == {"Outer", "inner"}
    ops = _ops_by_bucket(result)
    assert "aten::sigmoid" in ops[("model", forward_body("inner"))]
    assert "aten::addmm" in ops[("model", "inner.lin")]
    assert "aten::tanh" in ops[("model", "inner.leaf")]
    assert "aten::cumsum" in ops[("model", forward_body("Outer"))]
    assert "aten::addmm" in ops[("model", "head")]
    assert "aten::exp" in ops[(OUTSIDE_STAGES, OUTSIDE_STAGES)]


def test_summary_of_nested_capture_partitions_the_wall_and_round_trips():
    result = _capture_nested()
    summary = summarize(result, precision="fp32")
    assert summary.error is None and not summary.has_gpu
    assert summary.counts.syncs == 0 and summary.counts.kernels == 0  # no syncs on the CPU
    cells = {(c.stage, c.module) for c in summary.cells}
    assert ("model", "inner.lin") in cells and ("model", forward_body("inner")) in cells
    assert sum(c.wall_ms for c in summary.cells) == pytest.approx(summary.wall_ms, rel=1e-6)
    inner = next(r for r in summary.modules if r.module == forward_body("inner"))
    assert inner.inclusive_wall_ms is not None and inner.inclusive_wall_ms >= inner.wall_ms
    assert 0.0 < summary.shares.wall_named <= 1.0
    data = json.loads(json.dumps(summary.to_dict()))
    assert CaptureSummary.from_dict(data).to_dict() == data


def test_summary_from_dict_names_the_bad_field():
    data = summarize(_capture_nested()).to_dict()
    bad = json.loads(json.dumps(data))
    bad["counts"]["syncs"] = "many"
    with pytest.raises(ReportError, match=r"capture\.counts\.syncs"):
        CaptureSummary.from_dict(bad)
    bad = json.loads(json.dumps(data))
    bad["cells"][0]["wall_ms"] = None
    with pytest.raises(ReportError, match=r"capture\.cells\[0\]\.wall_ms"):
        CaptureSummary.from_dict(bad)
    bad = json.loads(json.dumps(data))
    del bad["device"]
    with pytest.raises(ReportError, match=r"capture\.device is missing"):
        CaptureSummary.from_dict(bad)
    with pytest.raises(ReportError, match="version"):
        CaptureSummary.from_dict({**data, "version": 99})
    with pytest.raises(ReportError):
        CaptureSummary.from_dict([1, 2])


def _session_capture(factory, precision="fp32", frames=8, size=32):
    video = moving_square_video(num_frames=frames, size=size)
    tracker = PluginTracker("planted", factory())
    config = RunConfig(tracker="planted", device="cpu", precision=precision, points_per_batch=len(QUERIES))

    def make() -> Session:
        return Session(video, QUERIES, config, tracker=tracker)

    return capture_session(make, device="cpu")


@pytest.mark.slow
def test_capture_session_of_a_deep_nested_plugin_attributes_to_nested_paths():
    result = _capture_session_ok(planted_capture.deep_nested)
    labels = {m.label for m in result.trace.modules}
    assert {"updater.blocks.2.attn", "updater.blocks.2.attn.qkv", "updater.blocks.3.mlp.fc2"} <= labels
    stage_labels = {s.label for s in result.trace.stages}
    assert {"upload", "features", "updater", "download"} <= stage_labels
    summary = summarize(result)
    assert summary.shares.wall_named_of_tracker >= summary.shares.wall_named  # the adapter's stages left out
    assert summary.shares.wall_attributed >= summary.shares.wall_named
    modules = {r.module for r in summary.modules}
    assert "updater.blocks.2.attn.qkv" in modules
    assert forward_body("updater.blocks.2.attn") in modules  # softmax and the head split
    assert forward_body("updater.blocks.1") in modules  # the layer norms
    assert forward_body("DeepNested") in modules  # the root's einsum
    ops = _ops_by_bucket(result)
    assert "aten::softmax" in ops[("updater", forward_body("updater.blocks.2.attn"))]
    assert "aten::layer_norm" in ops[("updater", forward_body("updater.blocks.0"))]
    assert "aten::einsum" in ops[(OUTSIDE_STAGES, forward_body("DeepNested"))]  # the root is no stage


def _capture_session_ok(factory, **kw):
    result = _session_capture(factory, **kw)
    assert result.error is None, result.error
    return result


def test_fp32_grid_sample_is_named_under_bf16_autocast_on_the_cpu():
    result = _capture_session_ok(planted_capture.fp32_grid_sample, precision="bf16")
    summary = summarize(result, precision="bf16")
    ops = {row.op for row in summary.fp32_ops}
    assert "aten::grid_sampler" in ops
    row = next(r for r in summary.fp32_ops if r.op == "aten::grid_sampler")
    assert row.module == "sampler" and row.count == planted_capture.SAMPLE_ITERATIONS
    assert "aten::linear" not in ops  # autocast casts the projector's linears: recorded with float inputs, not fp32
    assert summarize(result, precision="fp32").fp32_ops == ()  # not an autocast run: nothing to say


def test_fp32_grid_sample_carries_weight_at_benchmark_size_and_stays_small_on_tiny_videos():
    # 47x256x256, 256 queries: 64x64 feature cells at stride 4, a 15x15 window, 16 channels, 4 iterations
    cells = 256 // planted_capture.FEATURE_STRIDE
    size = 2 * planted_capture.window_radius(cells, cells) + 1
    values = 47 * 256 * size**2 * 16 * planted_capture.SAMPLE_ITERATIONS
    assert size == 15 and values > 1.5e8  # ~2 ms of fp32 grid_sampler on the H200 at ~85 G values/s
    assert planted_capture.window_radius(8, 8) == 1  # the CPU tests' 32x32 videos: a 3x3 window
    sampler = planted_capture.Sampler()
    feats = torch.randn(3, 16, 8, 8)
    tracks = torch.full((2, 3, 2), 14.0)
    out = sampler(feats, tracks, feats[0, :, 3, 3].expand(2, 16))
    assert out.shape == (2, 3, 2) and torch.isfinite(out).all()
    assert (out - tracks).abs().max() <= planted_capture.SAMPLE_ITERATIONS * planted_capture.FEATURE_STRIDE


@pytest.mark.parametrize("name", ["item_per_point", "cpu_round_trip", "tiny_kernels"])
def test_planted_trackers_capture_on_the_cpu(name):
    result = _capture_session_ok(planted_capture.PLANTED[name])
    summary = summarize(result)
    assert summary.counts.syncs == 0 and summary.counts.copies == 0  # host syncs and copies exist on GPUs only
    assert summary.counts.cpu_ops > 0 and summary.wall_ms > 0
    # no GPU rule fires on a CPU capture of these; the tiny-op loop is overhead-bound on the CPU too
    expected = {"launch_bound_capture"} if name == "tiny_kernels" else set()
    assert {f["rule"] for f in diagnose_capture(summary)} <= expected


def test_export_is_gzipped_json_with_stage_ranges(tmp_path):
    result = _session_capture(planted_capture.deep_nested)
    path = write_trace(result.chrome, tmp_path / "sub" / "capture.trace.json.gz")
    assert path.exists() and not list(path.parent.glob(".*.tmp"))
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        data = json.load(fh)
    names = {e.get("name") for e in data["traceEvents"]}
    assert STAGE_PREFIX + "updater" in names and MODULE_PREFIX + "updater.blocks.2.attn" in names
    parsed = parse_chrome_trace(load_chrome_trace(path))
    assert {s.label for s in parsed.stages} >= {"upload", "features", "updater", "download"}
    full = sum(1 for e in result.chrome["traceEvents"] if e.get("cat") == "python_function")
    kept = sum(1 for e in data["traceEvents"] if e.get("cat") == "python_function")
    assert kept < full  # python frames slimmed


def test_capture_degrades_with_a_clear_error_when_the_profiler_raises(monkeypatch):
    import torch.profiler

    class Broken:
        def __init__(self, *args, **kwargs):
            raise RuntimeError("CUPTI_ERROR_NOT_INITIALIZED")

    monkeypatch.setattr(torch.profiler, "profile", Broken)
    calls = []
    result = capture_run(lambda: calls.append(1), device="cpu", roots=None)
    assert result.trace is None and result.unprofiled_wall_ms is not None
    assert "profiler capture failed" in result.error and "CUPTI_ERROR_NOT_INITIALIZED" in result.error
    summary = summarize(result)
    assert summary.error == result.error and diagnose_capture(summary) == []
    assert CaptureSummary.from_dict(json.loads(json.dumps(summary.to_dict()))).error == result.error
    # nothing left installed: a module call after the failed capture records no range
    assert not torch.nn.modules.module._global_forward_pre_hooks


def test_capture_reports_a_run_that_fails():
    def boom() -> None:
        raise ValueError("plugin exploded")

    result = capture_run(boom, device="cpu")
    assert result.trace is None and "plugin exploded" in result.error


def test_module_ranges_stay_balanced_when_forward_raises():
    class Raises(nn.Module):
        def __init__(self):
            super().__init__()
            self.child = nn.Linear(2, 2)

        def forward(self, x):
            self.child(x)
            raise KeyError("inside")

    model = Raises()

    def run_once() -> None:
        try:
            model(torch.zeros(1, 2))
        except KeyError:
            pass
        torch.ones(3).sum()

    result = capture_run(run_once, device="cpu", roots={"m": model})
    assert result.error is None
    labels = [m.label for m in result.trace.modules]
    assert labels == ["m", "m.child"]  # only the captured run records ranges
    outer = [m for m in result.trace.modules if m.label == "m"]
    sums = [op for op in result.trace.cpu_ops if op.name == "aten::sum"]
    assert all(not (m.start <= sums[-1].start <= m.end) for m in outer)  # the range closed at the raise
    assert capture_profile.module_paths({"m": model})[0]


def test_a_run_failing_under_the_profiler_is_told_apart_from_the_profiler():
    calls = []

    def second_run_fails() -> None:
        calls.append(1)
        if len(calls) == 2:
            raise ValueError("only under the profiler")

    result = capture_run(second_run_fails, device="cpu")
    assert result.error == "the captured run failed: ValueError: only under the profiler"
    assert not torch.nn.modules.module._global_forward_pre_hooks


@pytest.mark.skipif(not torch.cuda.is_available(), reason="host syncs exist on a CUDA device only")
def test_item_per_point_counts_a_sync_per_point_on_cuda():
    queries = np.tile(QUERIES, (8, 1))  # 32 points
    video = moving_square_video(num_frames=8, size=32)
    tracker = PluginTracker("planted", planted_capture.item_per_point())
    config = RunConfig(tracker="planted", device="cuda", points_per_batch=len(queries))
    result = capture_session(lambda: Session(video, queries, config, tracker=tracker), device="cuda")
    summary = summarize(result)
    scorer = [c for c in summary.cells if c.module == "match.scorer"]
    assert sum(c.syncs for c in scorer) >= len(queries)
    assert "planted_capture.py" in summary.sync_sites[0].call_site
    assert diagnose_capture(summary)[0]["rule"] in ("host_sync", "gpu_idle_gaps")


def test_a_malformed_profiler_trace_is_captured_again(monkeypatch):
    """The profiler once wrote a trace that was not valid JSON (a busy Qt thread beside it): one retry."""
    import json as _json

    import engine.capture.profile as profile_module

    real_export, calls = profile_module._export, []

    def flaky(prof):
        calls.append(1)
        if len(calls) == 1:
            raise _json.JSONDecodeError("Expecting ',' delimiter", "{", 0)
        return real_export(prof)

    monkeypatch.setattr(profile_module, "_export", flaky)
    module = torch.nn.Linear(4, 4)
    result = profile_module.capture_run(lambda: module(torch.ones(2, 4)), device="cpu", roots={"": module})
    assert result.error is None and len(calls) == 2


def test_the_benchmark_ab_reruns_a_real_plugin_session_with_the_plugin_in_each_ways_thread():
    """The cuDNN A/B's ways run a real session (a field plugin with convs, on the CPU): the plugin's forward runs
    in the way's own thread (not its guard worker), both medians are recorded and the flag is put back."""
    import threading

    import torch

    from engine.api import Session
    from engine.capture.profile import _timed
    from engine.capture.settings_ab import CUDNN_AB_OFF_MS, CUDNN_AB_ON_MS, cudnn_benchmark_ab
    from engine.core.config import RunConfig
    from engine.trackers.plugin import PluginTracker
    from tests.plugins.field import cudnn_benchmark_off

    frames = (torch.rand(4, 32, 32, 3) * 255).to(torch.uint8).numpy()
    queries = torch.tensor([[0, 10.0, 12.0], [1, 20.0, 20.0]]).numpy()
    plugin = cudnn_benchmark_off.make()
    threads: list[str] = []
    plugin.register_forward_pre_hook(lambda *_: threads.append(threading.current_thread().name))
    tracker = PluginTracker("cudnn field", plugin)
    config = RunConfig(tracker="cudnn field", device="cpu", points_per_batch=8)

    def run_once() -> None:
        for _event in Session(frames, queries, config, tracker=tracker).events():
            pass

    run_once()  # its worker's first call (the plugin's guard worker)
    before = torch.backends.cudnn.benchmark
    result = cudnn_benchmark_ab(lambda: _timed(run_once, torch.device("cpu")), repeats=1)
    assert float(result[CUDNN_AB_ON_MS]) > 0 and float(result[CUDNN_AB_OFF_MS]) > 0
    assert torch.backends.cudnn.benchmark == before
    assert threads[0].startswith("trackscope-plugin")
    assert set(threads[1:]) == {"trackscope-ab cudnn.benchmark on", "trackscope-ab cudnn.benchmark off"}
