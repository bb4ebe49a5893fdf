"""Diffs built from engine.analysis.diff's dataclasses (the contract), for the app's diff view tests and its
screenshot: no diff_runs needed. Numbers after the H200 reports in tests/data/h200 (CorrTrack, 256 points,
fp32 vs bf16); the rows below the stages and the split are made up to look like a real diff."""

from __future__ import annotations

from engine.analysis.diff import Diff, DiffRow, SpecSplit, WaterfallStep

A_MS, B_MS = 12.12, 5.44
SPEC_MS = -5.90  # what the datasheets explain (compute-bound stages at bf16's peak)
NAMED = (("backbone", -0.75), ("upload", -0.15), ("download", 0.07), ("refine", 0.02))


def sample_rows() -> tuple[DiffRow, ...]:
    """Rows of every level: stages, modules, a function, kernel classes."""
    return (
        DiffRow("total", "run", A_MS, B_MS, "bf16 tensor cores in the backbone", {"runs": [5, 5]}),
        DiffRow("stage", "backbone", 8.12, 1.47, "fp32 SIMT convolutions on A, bf16 tensor cores on B",
                {"kernels": {"a": 212, "b": 236}, "precision": {"a": "fp32", "b": "bf16"},
                 "top_kernel": {"a": "sm90_xmma_fprop_implicit_gemm_f32f32", "b": "sm90_xmma_fprop_bf16"}}),
        DiffRow("stage", "refine", 2.45, 2.47, "grid_sample stays fp32 under bf16 autocast",
                {"grid_sample_ms": {"a": 0.42, "b": 0.42}}),
        DiffRow("stage", "upload", 0.71, 0.56, "one fewer host-to-device copy", {"copies": {"a": 3, "b": 2}}),
        DiffRow("stage", "download", 0.14, 0.21, "", {}),
        DiffRow("stage", "cost_volume", 0.17, 0.10, "bf16 matmul", {}),
        DiffRow("stage", "init_head", 0.21, 0.24, "", {}),
        DiffRow("module", "backbone.layer1", 3.10, 0.52, "bf16 tensor cores", {}, parent="backbone"),
        DiffRow("module", "backbone.layer2", 2.90, 0.55, "bf16 tensor cores", {}, parent="backbone"),
        DiffRow("module", "backbone.stem", 2.12, 0.40, "bf16 tensor cores", {}, parent="backbone"),
        DiffRow("module", "refine.update_block", 1.90, 1.95, "casts to and from bf16", {}, parent="refine"),
        DiffRow("function", "corrtrack/model.py:88 bilinear_sample", 0.40, 0.41,
                "float32 grid_sample kernel on both", {"kernel": "grid_sampler_2d_kernel<float>"}, parent="refine"),
        DiffRow("kernel_class", "conv fp32 (SIMT)", 7.60, None, "absent in B: autocast runs the convs in bf16", {}),
        DiffRow("kernel_class", "conv bf16 (tensor cores)", None, 1.21, "new in B", {"kernels": 118}),
        DiffRow("kernel_class", "elementwise", 1.10, 1.31, "42 cast kernels more in B", {"kernels": {"a": 510,
                                                                                                     "b": 552}}),
        DiffRow("kernel_class", "grid_sample fp32", 0.42, 0.42, "the same kernel", {}),
    )


def sample_steps() -> tuple[WaterfallStep, ...]:
    """start, spec, the named deltas, the rest that makes the sum B's time, end."""
    rest = B_MS - (A_MS + SPEC_MS + sum(ms for _, ms in NAMED))
    return (WaterfallStep("start", "A fp32", A_MS), WaterfallStep("spec", "specs", SPEC_MS),
            *(WaterfallStep("named", name, ms) for name, ms in NAMED), WaterfallStep("rest", "rest", rest),
            WaterfallStep("end", "B bf16", B_MS))


def sample_diff(b_is_projection: bool = False) -> Diff:
    spec_ratio = (A_MS + SPEC_MS) / A_MS
    split = SpecSplit(total_ratio=B_MS / A_MS, spec_ratio=spec_ratio, explained_ms=SPEC_MS,
                      rest_ms=(B_MS - A_MS) - SPEC_MS,
                      basis="peak FLOP/s per precision on the NVIDIA H200 (fp32 67, bf16 989 TFLOP/s) for the "
                            "compute-bound stages, bandwidth (4.8 TB/s) for the rest",
                      steps=sample_steps())
    return Diff("corrtrack fp32 p256 (NVIDIA H200)", "corrtrack bf16 p256 (NVIDIA H200)", A_MS, B_MS,
                sample_rows(), split, b_is_projection=b_is_projection,
                notes=("A and B ran on the same device: the specs' part is the precisions' peaks",
                       "the refine stage is bound by float32 grid_sample and does not gain from bf16"))
