"""Field plugins: one planted performance problem per module, as users write them, plus a clean control.

Each module's ``make()`` returns an ``nn.Module`` plugin (frames uint8 [T, H, W, 3], queries [N, 3]) ->
(tracks [N, T, 2] px, visible [N, T]) built on ``common``'s small tracker (conv features, correlation,
argmax), with the planted problem in its own function marked ``# planted:``. Use as
``--tracker tests.plugins.field.sync_item:make``. Sizes follow the input: the bundled sample (47 frames
256x256, 256 queries) on a GPU is what they are sized for; 8 frames 64x64 with 16 queries runs on a CPU
in well under a second each. Modules with a ``release()`` change process-wide state in ``make()``;
call it when done (``scripts/diagnose_field.py`` does).

| module | planted problem | rule |
|---|---|---|
| sync_item | ``float(t)`` and ``.item()`` per point in a Python loop | host_sync |
| sync_tolist | ``.tolist()`` of each frame's scores in a loop | host_sync |
| sync_branch | ``if weak.any():`` per frame and pass | host_sync |
| sync_mask | boolean-mask indexing and ``nonzero()`` per frame | host_sync |
| sync_print | a tensor formatted into a ``log.debug`` f-string per frame | host_sync |
| sync_synchronize | ``torch.cuda.synchronize()`` after every frame | host_sync |
| to_host_per_frame | ``.cpu().numpy()`` of each frame's result, smoothed in numpy | host_sync |
| copy_constant_each_call | numpy grid / kernel ``torch.from_numpy(...).to(device)`` per frame | repeated_copy |
| channels_last_mismatch | half the convs channels_last, NCHW input, ``.contiguous()`` after each | layout_transpose |
| contiguous_hot_loop | ``.permute().contiguous()`` of the correlation volume per iteration | contiguous_copy |
| float64_path | soft-argmax in float64 | float64 |
| autocast_disabled_region | ``autocast(enabled=False)`` around the cell MLP, input ``.float()`` | fp32_under_autocast |
| tf32_disabled | ``allow_tf32 = False`` (cuBLAS, cuDNN) at the start of forward | tf32_off |
| misaligned_gemm | a rescoring head of widths 19, 1001, 257, 1023, 1023 in bf16 | gemm_misaligned |
| launch_bound_loop | a filter of ~10 tiny ops x 10 steps per frame | launch_bound_capture |
| elementwise_chain | 12 unfused elementwise ops over the correlation volume | elementwise_chain |
| allocator_churn | a float32 scratch copy per chunk of frames, ``empty_cache()`` after each | allocator_churn |
| large_alloc_per_call | 4096 x H x W float32 vote volumes made every call (1 GiB at 256^2) | large_allocation |
| recompile_each_call | a compiled helper given the call counter (an int guard) | recompile |
| graph_break | ``.item()`` inside a compiled function | graph_break |
| host_python_loop | pure-Python weight table per point and frame | host_bound |
| cpu_ops_in_gpu_run | a positional encoding built with CPU torch ops every call | cpu_ops_in_gpu_run |
| thread_oversubscription | ``set_num_threads(4 * os.cpu_count())``, CPU ops per call | thread_oversubscription |
| cudnn_benchmark_off | 1-D token mixers (kernels 13, 15), fixed shapes, cudnn.benchmark False | cudnn_benchmark_off |
| clean | nothing: batched, vectorised, no syncs or host work (negative control) | (none) |

``PLANTED`` says, per module, the rule that should name it (None for the control), the precision to
run it in, and whether the problem shows on a CPU capture at all (syncs, copies, cuDNN, TF32, tensor
cores and the CUDA allocator exist on a GPU only).
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import NamedTuple


class Planted(NamedTuple):
    """What a field module plants: the rule id that should be its top finding, its run precision, and
    whether a CPU capture can show it."""

    rule: str | None
    precision: str
    cpu: bool


PLANTED: dict[str, Planted] = {
    "sync_item": Planted("host_sync", "bf16", False),
    "sync_tolist": Planted("host_sync", "bf16", False),
    "sync_branch": Planted("host_sync", "bf16", False),
    "sync_mask": Planted("host_sync", "bf16", False),
    "sync_print": Planted("host_sync", "bf16", False),
    "sync_synchronize": Planted("host_sync", "bf16", False),
    "to_host_per_frame": Planted("host_sync", "bf16", False),
    "copy_constant_each_call": Planted("repeated_copy", "bf16", False),
    "channels_last_mismatch": Planted("layout_transpose", "bf16", False),
    "contiguous_hot_loop": Planted("contiguous_copy", "bf16", True),
    "float64_path": Planted("float64", "bf16", True),
    "autocast_disabled_region": Planted("fp32_under_autocast", "bf16", True),
    "tf32_disabled": Planted("tf32_off", "tf32", False),
    "misaligned_gemm": Planted("gemm_misaligned", "bf16", False),
    "launch_bound_loop": Planted("launch_bound_capture", "bf16", True),
    "elementwise_chain": Planted("elementwise_chain", "tf32", True),
    "allocator_churn": Planted("allocator_churn", "bf16", False),
    "large_alloc_per_call": Planted("large_allocation", "bf16", False),
    "recompile_each_call": Planted("recompile", "bf16", True),
    "graph_break": Planted("graph_break", "bf16", True),
    "host_python_loop": Planted("host_bound", "bf16", True),
    "cpu_ops_in_gpu_run": Planted("cpu_ops_in_gpu_run", "bf16", False),
    "thread_oversubscription": Planted("thread_oversubscription", "bf16", True),
    "cudnn_benchmark_off": Planted("cudnn_benchmark_off", "tf32", False),
    "clean": Planted(None, "bf16", True),
}


def tracker_name(module: str) -> str:
    """The ``--tracker`` spec of a field module: ``tests.plugins.field.NAME:make``."""
    return f"{__name__}.{module}:make"


def load(module: str) -> ModuleType:
    """Import a field module by its PLANTED name."""
    if module not in PLANTED:
        raise KeyError(f"no field plugin {module!r}; known: {', '.join(PLANTED)}")
    return importlib.import_module(f"{__name__}.{module}")
