"""The field plugins (tests/plugins/field) on the CPU: each tracks through a real session and captures.

No assertion on the diagnosis here (the rules' tests judge the captures); these check that every planted
plugin is a working tracker whose planted code runs in the captured warm run, that the package's table
and PLANTED agree, and that a plugin's process-wide changes are put back by its release().
"""

from __future__ import annotations

import ast
import inspect
import pkgutil
from pathlib import Path

import numpy as np
import pytest
import torch

import tests.plugins.field as field
from engine.capture.profile import capture_session
from engine.capture.summary import CaptureSummary, summarize
from engine.core.config import PRECISIONS, RunConfig
from engine.run.session import Finished, Session
from engine.trackers import load_tracker
from tests.helpers import moving_square_video
from tests.plugins.field import PLANTED, load, tracker_name
from tests.plugins.field.torch_state import TorchState

NUM_FRAMES = 8
SIZE_PX = 64
GRID = 4  # a 4x4 grid of queries: 16
HELPERS = {"common", "compiled", "torch_state"}  # modules of the package that are not plugins
#: CPU rules of thumb the rules helper relies on (see PLANTED's "cpu" column)
RULE_IDS = {"host_sync", "pageable_copy", "repeated_copy", "sync_copy", "layout_transpose", "contiguous_copy",
            "float64", "fp32_under_autocast", "tf32_off", "gemm_misaligned", "launch_bound_capture",
            "elementwise_chain", "legacy_arch_kernels", "cudnn_benchmark_off", "allocator_churn",
            "large_allocation", "memory_near_capacity", "recompile", "graph_break", "compile_in_warm_run",
            "host_bound", "cpu_ops_in_gpu_run", "thread_oversubscription", "gpu_idle_gaps", "cpu_round_trip"}


def _queries() -> np.ndarray:
    """GRID x GRID queries spread over the frame, their query frames spread over the video."""
    ticks = (np.arange(GRID) + 0.5) * SIZE_PX / GRID
    xs, ys = np.meshgrid(ticks, ticks)
    ts = np.arange(GRID * GRID) % NUM_FRAMES
    return np.stack([ts, xs.ravel(), ys.ravel()], axis=1).astype(np.float32)


@pytest.fixture
def restored_torch_state():
    saved = TorchState.save()
    yield saved
    saved.restore()


def _planted_functions(module) -> set[str]:
    """Names of the functions whose body holds a ``# planted:`` comment."""
    source = inspect.getsource(module)
    lines = source.splitlines()
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            body = lines[node.lineno - 1:node.end_lineno]
            if any("# planted:" in line for line in body):
                names.add(node.name)
    return names


def _run_and_capture(name: str):
    module = load(name)
    spec = PLANTED[name]
    video = moving_square_video(num_frames=NUM_FRAMES, size=SIZE_PX)
    queries = _queries()
    tracker = load_tracker(tracker_name(name))  # the plugin path a user's --tracker takes
    config = RunConfig(tracker=tracker_name(name), device="cpu", precision=spec.precision,
                       points_per_batch=len(queries))
    try:
        last = Session(video, queries, config, tracker=tracker).run()
        capture = capture_session(lambda: Session(video, queries, config, tracker=tracker), device="cpu")
    finally:
        release = getattr(module, "release", None)
        if release is not None:
            release()
    return module, last, capture


@pytest.mark.parametrize("name", sorted(PLANTED))
def test_field_plugin_tracks_in_a_session_and_its_planted_code_runs_in_the_capture(name, restored_torch_state):
    module, last, capture = _run_and_capture(name)
    assert isinstance(last, Finished), getattr(last, "message", last)
    n = GRID * GRID
    assert last.tracks.shape == (n, NUM_FRAMES, 2) and last.visible.shape == (n, NUM_FRAMES)
    assert last.visible.dtype == bool and np.isfinite(last.tracks).all()
    assert last.tracks.min() >= -1.0 and last.tracks.max() <= SIZE_PX  # inside the frame (pixel centres)
    assert last.visible.any()

    assert capture.error is None, capture.error
    summary = summarize(capture, precision=PLANTED[name].precision)
    assert summary.wall_ms > 0 and summary.counts.cpu_ops > 0
    assert CaptureSummary.from_dict(summary.to_dict()).to_dict() == summary.to_dict()  # the report part parses
    planted = _planted_functions(module)
    if name == "clean":
        assert planted == set()
        return
    source = f"field/{Path(module.__file__).name}("  # frames read "tests/plugins/field/NAME.py(LINE): FUNCTION"
    ran = {frame.name.rsplit(": ", 1)[-1] for frame in capture.trace.python if source in frame.name}
    assert planted & ran, f"none of {sorted(planted)} ran in the captured run (saw {sorted(ran)[:12]})"


def test_every_field_module_is_planted_and_listed_in_the_table():
    modules = {m.name for m in pkgutil.iter_modules(field.__path__)} - HELPERS
    assert modules == set(PLANTED)
    table = {}
    for line in (field.__doc__ or "").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0] in PLANTED:
            table[cells[0]] = cells[2]
    assert set(table) == set(PLANTED)
    for name, spec in PLANTED.items():
        assert table[name] == (spec.rule or "(none)"), name
        assert spec.rule is None or spec.rule in RULE_IDS, name
        assert spec.precision in PRECISIONS and spec.precision in ("fp32", "tf32", "bf16"), name
        assert callable(load(name).make)
        if name != "clean":
            assert _planted_functions(load(name)), f"{name}: no '# planted:' comment in a function"


def test_thread_oversubscription_sets_four_threads_per_core_and_release_restores(restored_torch_state):
    import os

    module = load("thread_oversubscription")
    before = torch.get_num_threads()
    module.make()
    try:
        assert torch.get_num_threads() == module.THREADS_PER_CORE * (os.cpu_count() or 1)
    finally:
        module.release()
    assert torch.get_num_threads() == before


def test_recompile_each_call_compiles_again_on_every_warm_call_and_release_restores(restored_torch_state):
    import torch._dynamo
    from torch._dynamo.utils import counters

    module = load("recompile_each_call")
    limit = torch._dynamo.config.recompile_limit
    tracker = module.make()
    frames = torch.from_numpy(moving_square_video(num_frames=4, size=32))
    queries = torch.tensor([[0.0, 8.0, 8.0], [1.0, 20.0, 12.0]])
    try:
        with torch.inference_mode():
            tracker(frames, queries)
            graphs = counters["stats"]["unique_graphs"]
            for _ in range(3):
                tracker(frames, queries)
        assert counters["stats"]["unique_graphs"] == graphs + 3  # one more graph per warm call
    finally:
        module.release()
    assert torch._dynamo.config.recompile_limit == limit


def test_torch_state_restores_what_a_plugin_changed(restored_torch_state):
    saved = TorchState.save()
    torch.backends.cudnn.benchmark = not saved.cudnn_benchmark
    torch.backends.cuda.matmul.allow_tf32 = not saved.matmul_allow_tf32
    torch.set_num_threads(saved.num_threads + 1)
    changed = TorchState.save().changes(saved)
    assert set(changed) == {"cudnn_benchmark", "matmul_allow_tf32", "num_threads"}
    saved.restore()
    assert TorchState.save() == saved
