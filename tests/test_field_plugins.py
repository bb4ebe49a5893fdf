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
from engine.capture.summary import CaptureSummary, summarize
from engine.core.config import PRECISIONS
from engine.run.session import Finished
from tests.helpers import moving_square_video
from tests.plugins.field import PLANTED, load
from tests.plugins.field.harness import GRID, NUM_FRAMES, SIZE_PX, run_and_capture
from tests.plugins.field.torch_state import TorchState

HELPERS = {"common", "compiled", "harness", "torch_state"}  # modules of the package that are not plugins
#: the diagnosis rules' ids (issue 19)
RULE_IDS = {"host_sync", "pageable_copy", "repeated_copy", "sync_copy", "layout_transpose", "contiguous_copy",
            "float64", "fp32_under_autocast", "tf32_off", "gemm_misaligned", "launch_bound_capture",
            "elementwise_chain", "legacy_arch_kernels", "cudnn_benchmark_off", "allocator_churn",
            "large_allocation", "memory_near_capacity", "recompile", "graph_break", "compile_in_warm_run",
            "host_bound", "cpu_ops_in_gpu_run", "thread_oversubscription", "gpu_idle_gaps", "cpu_round_trip"}


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


@pytest.mark.parametrize("name", sorted(PLANTED))
def test_field_plugin_tracks_in_a_session_and_its_planted_code_runs_in_the_capture(name, restored_torch_state):
    module, last, capture = run_and_capture(name)
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


class _OpCounter:
    """Counts the aten ops run inside the block (a torch dispatch mode)."""

    def __enter__(self):
        from collections import Counter

        from torch.utils._python_dispatch import TorchDispatchMode

        counts: Counter = Counter()

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                counts[func.overloadpacket.__name__] += 1
                return func(*args, **(kwargs or {}))

        self.counts = counts
        self._mode = Mode()
        self._mode.__enter__()
        return self

    def __exit__(self, *exc):
        self._mode.__exit__(*exc)


def test_planted_problems_carry_weight_at_the_gpu_sample_size():
    """At the bundled sample's size (47 frames 256x256, 256 queries: 64x64 feature cells) each problem is
    large enough to matter on a GPU, while the CPU tests' 8x64x64 stays small."""
    n, t, size = 256, 47, 256
    cells = size // 4
    with torch.inference_mode():
        with _OpCounter() as ops:
            load("launch_bound_loop").filter_tracks(torch.rand(n, t, 2) * size, float(size), float(size))
        assert sum(ops.counts.values()) >= 4000  # thousands of tiny launches per call
        with _OpCounter() as ops:
            load("sync_item").visibility_per_point(torch.rand(n, t))
        assert ops.counts["item"] == 2 * n  # .item() and float(): a sync each on a GPU
        with _OpCounter() as ops:
            load("elementwise_chain").sharpen(torch.rand(2, 3, 5))
        assert sum(ops.counts.values()) >= 12  # twelve separate kernels over the volume
    copy_constant = load("copy_constant_each_call")
    assert copy_constant.coordinate_grid(size, size).nbytes * t >= 16 * 2**20  # pageable HtoD per call
    large = load("large_alloc_per_call")
    assert large.MAX_FRAMES * size * size * 4 == 2**30  # 1 GiB per volume at 256x256: a long-video worst case
    assert large.MAX_FRAMES_CPU * SIZE_PX * SIZE_PX * 4 <= 2**20
    misaligned = load("misaligned_gemm")
    assert misaligned.candidates_for(cells, cells) == misaligned.MAX_CANDIDATES
    assert misaligned.candidates_for(SIZE_PX // 4, SIZE_PX // 4) == 1
    assert all(w % 8 for w in (misaligned.HEAD_INPUTS, *misaligned.HEAD_WIDTHS))
