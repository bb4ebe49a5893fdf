"""Code layers, user call sites and the gathered evidence, on constructed traces (no GPU needed).

The traces are built the way torch's profiler writes them: python_function frames nested per thread
(``file(line): function``, the line a function starts on), cpu_op events, CUDA runtime calls and the
kernels/copies they launched (same correlation id), trackscope's stage and module ranges.
"""

from __future__ import annotations

import os

import pytest
import torch

from engine.capture.attribution import attribute
from engine.capture.evidence import TRACKSCOPE, USER
from engine.capture.gather import gather
from engine.capture.sites import CodeLayers
from engine.capture.trace import parse_events

USER_FILE = "/home/me/mytracker/model.py"
TORCH_SYNC_FILE = "torch/cuda/__init__.py"  # a slimmed trace's relative path, as reports keep them
ADAPTER_FILE = "/srv/trackscope/engine/trackers/plugin.py"  # trackscope on the machine that recorded it
SESSION_FILE = "/srv/trackscope/engine/run/session.py"
TID = 1


class TraceBuilder:
    """Chrome trace events for one thread, built inside-out with explicit times (us)."""

    def __init__(self) -> None:
        self.events: list[dict] = []
        self._id = 0
        self._corr = 0

    def frame(self, name: str, start: float, dur: float) -> None:
        self._id += 1
        self.events.append({"ph": "X", "cat": "python_function", "name": name, "ts": start, "dur": dur,
                            "tid": TID, "args": {"Python id": self._id}})

    def op(self, name: str, start: float, dur: float, dims: list | None = None, types: list | None = None) -> None:
        self.events.append({"ph": "X", "cat": "cpu_op", "name": name, "ts": start, "dur": dur, "tid": TID,
                            "args": {"Input Dims": dims or [], "Input type": types or []}})

    def annotation(self, name: str, start: float, dur: float) -> None:
        self.events.append({"ph": "X", "cat": "user_annotation", "name": name, "ts": start, "dur": dur, "tid": TID})

    def runtime(self, name: str, start: float, dur: float) -> int:
        self._corr += 1
        self.events.append({"ph": "X", "cat": "cuda_runtime", "name": name, "ts": start, "dur": dur, "tid": TID,
                            "args": {"correlation": self._corr}})
        return self._corr

    def kernel(self, name: str, corr: int, start: float, dur: float) -> None:
        self.events.append({"ph": "X", "cat": "kernel", "name": name, "ts": start, "dur": dur, "tid": 7,
                            "args": {"stream": 7, "device": 0, "correlation": corr}})

    def copy(self, name: str, corr: int, start: float, dur: float, nbytes: int) -> None:
        self.events.append({"ph": "X", "cat": "gpu_memcpy", "name": name, "ts": start, "dur": dur, "tid": 7,
                            "args": {"stream": 7, "device": 0, "correlation": corr, "bytes": nbytes}})

    def evidence(self, precision: str = "fp32", opaque: frozenset[str] = frozenset(),
                 parents: frozenset[str] = frozenset()):
        trace = parse_events(self.events)
        att = attribute(trace, parents, CodeLayers())
        return gather(trace, att, precision=precision, settings={}, opaque=opaque)[:2]


def _run_window(b: TraceBuilder, dur: float = 1000.0) -> None:
    b.annotation("trackscope.run", 0.0, dur)


# -- layers -------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("path", "layer"), [
    (USER_FILE, USER),
    ("/home/me/tapnet/tapnet/torch/tapir_model.py", USER),  # a user's folder named torch
    (os.path.join(os.path.dirname(torch.__file__), "cuda", "__init__.py"), "library"),
    ("torch/cuda/__init__.py", "library"),  # slimmed, relative
    ("contextlib.py", "library"),
    (os.path.join(os.path.dirname(os.__file__), "threading.py"), "library"),
    ("/opt/venv/lib/python3.12/site-packages/einops/einops.py", "library"),
    (ADAPTER_FILE, TRACKSCOPE),
    (SESSION_FILE, TRACKSCOPE),
    (os.path.abspath("engine/core/stages.py"), TRACKSCOPE),
    ("/srv/trackscope/engine/trackers/corrtrack/tracker.py", USER),  # the built-in tracker is the tracker
])
def test_code_layers(path: str, layer: str) -> None:
    assert CodeLayers().layer(path) == layer


def test_installed_plugin_package_is_the_users_when_its_modules_are_captured() -> None:
    pkg = "/opt/venv/lib/python3.12/site-packages/cotracker/"
    assert CodeLayers().layer(pkg + "models/blocks.py") == "library"
    assert CodeLayers((pkg,)).layer(pkg + "models/blocks.py") == USER


# -- syncs: the user's call site, trackscope's own work apart --------------------------------------------
def test_synchronize_in_the_users_loop_names_the_users_function_not_torchs() -> None:
    b = TraceBuilder()
    _run_window(b)
    b.annotation("trackscope.stage:refine", 10, 900)
    for i in range(5):
        t = 20 + 150 * i
        b.frame(f"{USER_FILE}(40): refine_loop", t, 120)
        b.frame(f"{TORCH_SYNC_FILE}(1152): synchronize", t + 10, 60)
        b.frame("<built-in function _cuda_synchronize>", t + 20, 40)
        b.runtime("cudaDeviceSynchronize", t + 25, 30)
    evidence, _ = b.evidence()
    (row,) = evidence.syncs
    assert row.kind == "synchronize" and row.count == 5
    assert row.layer == USER
    assert row.site.endswith("mytracker/model.py:40 refine_loop")
    assert "torch/cuda" not in row.site


def test_item_and_mask_syncs_are_told_apart_by_the_op_that_synced() -> None:
    b = TraceBuilder()
    _run_window(b)
    b.annotation("trackscope.stage:track", 5, 990)
    b.frame(f"{USER_FILE}(10): forward", 10, 900)
    b.op("aten::item", 20, 50)
    b.op("aten::_local_scalar_dense", 22, 45)
    corr = b.runtime("cudaMemcpyAsync", 25, 10)
    b.copy("Memcpy DtoH (Device -> Pageable)", corr, 30, 2, 4)
    b.runtime("cudaStreamSynchronize", 40, 20)
    b.op("aten::index", 100, 80)
    b.op("aten::nonzero", 105, 70)
    b.runtime("cudaStreamSynchronize", 120, 30)
    evidence, _ = b.evidence()
    kinds = {r.kind: r for r in evidence.syncs}
    assert kinds["item"].op == "aten::_local_scalar_dense"
    assert kinds["nonzero"].op == "aten::nonzero"
    assert all(r.site and r.site.endswith("model.py:10 forward") for r in evidence.syncs)


def test_trackscopes_own_download_is_its_own_layer() -> None:
    """The plugin adapter's ``_to_numpy`` (.cpu) download: a sync, but trackscope's work, never the user's."""
    b = TraceBuilder()
    _run_window(b)
    b.annotation("trackscope.stage:download", 600, 200)
    b.frame(f"{SESSION_FILE}(263): _step", 0, 1000)
    b.frame(f"{ADAPTER_FILE}(103): _to_numpy", 610, 150)
    b.frame("<built-in method cpu of Tensor object at 0x7f>", 620, 120)
    b.op("aten::to", 625, 110)
    b.op("aten::_to_copy", 626, 108)
    b.op("aten::copy_", 628, 105)
    corr = b.runtime("cudaMemcpyAsync", 630, 20)
    b.copy("Memcpy DtoH (Device -> Pageable)", corr, 640, 5, 1 << 20)
    b.runtime("cudaStreamSynchronize", 655, 60)
    evidence, _ = b.evidence()
    (sync,) = evidence.syncs
    assert sync.kind == "to_host" and sync.layer == TRACKSCOPE
    assert sync.site.endswith("plugin.py:103 _to_numpy")
    (copy,) = evidence.copies
    assert copy.layer == TRACKSCOPE and copy.src == "Device" and copy.dst == "Pageable" and copy.blocking == 1


# -- functions below the top-level forward ------------------------------------------------------------------
def test_kernels_in_a_forward_body_go_to_the_user_function_that_launched_them() -> None:
    b = TraceBuilder()
    _run_window(b)
    b.annotation("trackscope.stage:track", 5, 990)
    b.annotation("trackscope.module:MyTracker", 10, 900)
    b.frame(f"{USER_FILE}(50): forward", 12, 890)
    b.frame(f"{USER_FILE}(80): correlate", 100, 300)
    b.op("aten::bmm", 110, 100, [[4, 64, 256], [4, 256, 64]], ["float", "float"])
    corr = b.runtime("cudaLaunchKernel", 120, 10)
    b.kernel("sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32", corr, 130, 500)
    b.op("aten::add", 450, 20, [[4, 64]], ["float"])
    corr2 = b.runtime("cudaLaunchKernel", 455, 5)  # launched by forward itself
    b.kernel("void at::native::vectorized_elementwise_kernel<4, add>", corr2, 640, 20)
    evidence, below = b.evidence(opaque=frozenset({"(forward body of MyTracker)"}), parents=frozenset({"MyTracker"}))
    rows = {r.function.split(" ")[0]: r for r in evidence.functions if r.kernels}
    assert rows["correlate"].kernel_ms == pytest.approx(0.5)
    assert rows["correlate"].module == "(forward body of MyTracker)"
    assert rows["forward"].kernel_ms == pytest.approx(0.02)
    assert below == pytest.approx(500.0)  # correlate is below the entry; forward's own kernel is not


def test_gemm_shapes_flag_dims_off_the_tensor_core_granule() -> None:
    b = TraceBuilder()
    _run_window(b)
    b.annotation("trackscope.stage:track", 5, 990)
    b.frame(f"{USER_FILE}(90): head", 10, 900)
    b.op("aten::linear", 20, 100, [[256, 1001], [257, 1001], [257]], ["float", "float", "float"])
    b.op("aten::addmm", 25, 90, [[257], [256, 1001], [1001, 257]], ["float", "float", "float"])
    corr = b.runtime("cudaLaunchKernel", 30, 10)
    b.kernel("cutlass_80_tensorop_bf16_s16816gemm_bf16_128x64_64x3_tn_align1", corr, 40, 200)
    evidence, _ = b.evidence(precision="bf16")
    (shape,) = evidence.gemm_shapes
    assert shape.op == "aten::linear" and shape.dims == (256, 257, 1001)
    assert shape.dtype == "bf16" and set(shape.misaligned) == {"N", "K"}


def test_a_python_float_argument_is_not_float64_work() -> None:
    b = TraceBuilder()
    _run_window(b)
    b.frame(f"{USER_FILE}(12): scale", 10, 900)
    b.op("aten::mul", 20, 100, [[1024, 1024], []], ["float", "double"])  # x * 0.5
    b.op("aten::exp", 200, 100, [[1024, 1024]], ["double"])  # a float64 tensor
    evidence, _ = b.evidence()
    fp64 = [g for g in evidence.kernel_groups if g.kind == "fp64"]
    assert [g.names for g in fp64] == [("aten::exp",)]


def test_elementwise_chain_on_the_cpu_from_one_function() -> None:
    b = TraceBuilder()
    _run_window(b, 2000)
    b.frame(f"{USER_FILE}(20): activation", 10, 1900)
    for i, name in enumerate(("aten::mul", "aten::add", "aten::exp", "aten::sigmoid", "aten::clamp")):
        b.op(name, 20 + 300 * i, 250, [[256, 1024]], ["float"])
    evidence, _ = b.evidence()
    (chain,) = [g for g in evidence.kernel_groups if g.kind == "elementwise_chain"]
    assert chain.length == 5 and chain.count == 5
    assert chain.bytes == 5 * 2 * 256 * 1024 * 4
    assert chain.site.endswith("model.py:20 activation")


def test_cpu_capture_of_a_planted_plugin_names_its_functions() -> None:
    """A real profiler capture on the CPU: the per-point scorer's work is a row of its own function, and the
    adapter's upload/download are trackscope's."""
    from engine.api import Session
    from engine.capture.profile import capture_session
    from engine.capture.summary import summarize
    from engine.core.config import RunConfig
    from engine.trackers.plugin import PluginTracker
    from tests.plugins import planted_capture

    frames = (torch.rand(6, 48, 48, 3) * 255).to(torch.uint8).numpy()
    queries = torch.tensor([[0, 10.0, 12.0], [1, 30.0, 20.0], [2, 24.0, 24.0]]).numpy()
    tracker = PluginTracker("planted", planted_capture.item_per_point())
    config = RunConfig(tracker="planted", device="cpu", points_per_batch=8)
    result = capture_session(lambda: Session(frames, queries, config, tracker=tracker), device="cpu")
    assert result.ok, result.error
    summary = summarize(result)
    user = [r for r in summary.evidence.functions if r.layer == USER]
    assert any("planted_capture.py:" in r.site for r in user)  # the plugin's own functions are rows
    assert all("engine/" not in r.site for r in user)  # trackscope's frames never pass as the user's
    own = {r.stage for r in summary.evidence.functions if r.layer == TRACKSCOPE}
    assert "upload" in own


def test_kernels_over_the_runs_largest_allocation_are_a_buffer_sweep_of_their_site() -> None:
    """The fill of a 128 MiB buffer and a pass over all of it are ``buffer_sweep`` kernels of the function that
    made it; a kernel over a small tensor of the same function is not."""
    numel = 32 << 20  # 128 MiB of float32
    b = TraceBuilder()
    _run_window(b)
    b.frame(f"{USER_FILE}(30): crowding", 10, 900)
    b.events.append({"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "ts": 15, "tid": TID,
                     "args": {"Bytes": numel * 4, "Total Allocated": numel * 4, "Total Reserved": numel * 4,
                              "Device Type": 1, "Device Id": 0}})
    b.op("aten::fill_", 20, 50, [[1024, 256, 128], []], ["float", "Scalar"])
    corr = b.runtime("cudaLaunchKernel", 25, 5)
    b.kernel("void at::native::vectorized_elementwise_kernel<4, FillFunctor<float>>", corr, 40, 30)
    b.op("aten::div", 100, 50, [[1024, 256, 128], [1024, 1, 1]], ["float", "float"])
    corr = b.runtime("cudaLaunchKernel", 105, 5)
    b.kernel("void at::native::vectorized_elementwise_kernel<4, DivFunctor<float>>", corr, 120, 60)
    b.op("aten::add", 300, 50, [[256, 47]], ["float"])
    corr = b.runtime("cudaLaunchKernel", 305, 5)
    b.kernel("void at::native::vectorized_elementwise_kernel<4, AddFunctor<float>>", corr, 320, 5)
    evidence, _ = b.evidence()
    (sweep,) = [g for g in evidence.kernel_groups if g.kind == "buffer_sweep"]
    assert sweep.count == 2 and sweep.ms == pytest.approx(0.09) and sweep.layer == USER
    assert sweep.site is not None and sweep.site.endswith("crowding")
    assert sweep.bytes >= 2 * 2 * numel * 4
    assert evidence.memory.largest_allocation_bytes == numel * 4
    assert evidence.memory.largest_allocation_site == sweep.site
