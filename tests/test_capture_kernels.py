"""The kernel-name classification table, against real kernel names (DESIGN.md; H200 captures when present)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.capture.kernels import classify, is_legacy_arch, stays_fp32

KERNEL_NAMES = Path(__file__).parent / "data" / "capture" / "kernel_names.json"
#: the two H200 calls' kernel names (the second call's planted sampler runs ATen's kernel, not cuDNN's)
RECORDED = (KERNEL_NAMES, KERNEL_NAMES.parent / "call1" / "kernel_names.json")

# (name, kind, tensor_core, precision, arch): names seen in real captures (DESIGN.md, cuBLAS/cuDNN/CUTLASS)
CASES = [
    ("sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize32x32x8_stage3_warpsize1x2x1_ffma_aligna4_alignc4_execute_"
     "kernel__51a_cublas", "gemm", False, "fp32", 80),
    ("sm80_xmma_gemm_cf32cf32_cf32cf32_cf32_nn_n_tilesize32x32x8_stage3_warpsize1x2x1_ffma_aligna8_alignc8_"
     "execute_kernel__51a_cublas", "gemm", False, "fp32", 80),
    ("void cutlass::Kernel2<cutlass_75_tensorop_bf16_s1688gemm_bf16_128x256_32x2_nn_align8>"
     "(cutlass_75_tensorop_bf16_s1688gemm_bf16_128x256_32x2_nn_align8::Params)", "gemm", True, "bf16", 75),
    ("cutlass_75_tensorop_bf16_s1688gemm_bf16_128x256_32x2_nn_align8", "gemm", True, "bf16", 75),
    ("void at::native::(anonymous namespace)::grid_sampler_2d_kernel<float, long>(long, "
     "at::cuda::detail::TensorInfo<float, long>)", "other", None, "fp32", None),
    ("void at::native::(anonymous namespace)::grid_sampler_3d_kernel<float, int>(int)", "other", None, "fp32", None),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_"
     "kernel__5x_cublas", "gemm", True, "bf16", 90),
    ("sm80_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x16_stage4_warpsize2x2x1_tensor16x8x8_kernel",
     "gemm", True, "tf32", 80),
    ("ampere_sgemm_128x64_nn", "gemm", False, "fp32", 80),
    ("volta_h884gemm_64x64_ldg8_nn", "gemm", True, "fp16", 70),
    ("volta_sgemm_128x64_nn", "gemm", False, "fp32", 70),
    ("turing_fp16_s1688gemm_fp16_128x128_ldg8_f2f_nn", "gemm", True, "fp16", 75),
    ("ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_stages_64x4_tn", "gemm", True, "bf16", 80),
    ("maxwell_sgemm_128x64_nn", "gemm", False, "fp32", 50),
    ("void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_64x64_16x6_tn_align4>(Params)", "gemm", True, "tf32", 80),
    ("void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_16x16_128x2_tn_align8>(Params)",
     "gemm", True, "bf16", 80),
    ("void at::native::conv_depthwise2d_forward_kernel<1, c10::BFloat16, int>(Params)", "conv", False, "bf16", None),
    ("void at::native::conv_depthwise2d_forward_kernel<3, float, int>(Params)", "conv", False, "fp32", None),
    ("sm86_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize64x64x64_stage4_warpsize2x2x1_g1_"
     "tensor16x8x16_kernel", "conv", True, "bf16", 86),
    ("cudnn_infer_ampere_scudnn_winograd_128x128_ldg1_ldg4_relu_tile148t_nt_v1", "conv", False, "fp32", 80),
    ("void implicit_convolve_sgemm<float, float, 128, 5, 5, 3, 3, 3, 1, false, false, true>(int)",
     "conv", False, "fp32", None),
    ("void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 4, 4, false, false>(Params)",
     "gemm", False, "fp32", None),
    ("void gemmSN_TN_kernel<float, 128, 16, 2, 4, 4, 4, true>(Params)", "gemm", False, "fp32", None),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ul> >"
     "(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)", "other", None, "fp32", None),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, "
     "std::array<char*, 3ul> >(int)", "other", None, "bf16", None),
    ("void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl<c10::Half>>(int)",
     "other", None, "fp16", None),
    ("sm90_xmma_gemm_e4m3e4m3_e4m3f32_f32_tn_n_tilesize128x128x128_warpgroupsize1x1x1_kernel", "gemm", True, "fp8",
     90),
    ("sm80_xmma_gemm_i8i8_i8i32_f32_tn_n_tilesize128x128x64_stage4_warpsize2x2x1_tensor16x8x32_kernel",
     "gemm", True, "int8", 80),
    ("triton_poi_fused_add_mul_0", "other", None, None, None),
]


@pytest.mark.parametrize("name, kind, tensor_core, precision, arch", CASES)
def test_classify_real_kernel_names(name, kind, tensor_core, precision, arch):
    k = classify(name)
    assert (k.kind, k.tensor_core, k.precision, k.arch) == (kind, tensor_core, precision, arch)


def test_legacy_arch_is_an_older_tensor_core_generation():
    assert is_legacy_arch(75, (9, 0))  # cutlass_75 on an H200
    assert is_legacy_arch(80, (9, 0))  # Ampere kernels on Hopper lack wgmma
    assert not is_legacy_arch(80, (8, 6)) and not is_legacy_arch(86, (8, 9))  # the same generation
    assert not is_legacy_arch(90, (9, 0)) and not is_legacy_arch(None, (9, 0)) and not is_legacy_arch(75, None)
    assert is_legacy_arch(70, (7, 5))


def test_ops_that_stay_fp32():
    assert stays_fp32("aten::grid_sampler", ("float", "float", "Scalar", "Scalar", "Scalar"))
    assert not stays_fp32("aten::grid_sampler", ("c10::BFloat16", "c10::BFloat16", "Scalar"))
    assert not stays_fp32("aten::add", ("float", "float", "Scalar"))  # elementwise glue is not reported
    assert stays_fp32("aten::linear", ("float", "float", "float"))


# Real names from the H200 capture (tests/data/capture/kernel_names.json, torch 2.11 + CUDA 13.0), each given by
# a prefix that matches exactly one recorded name, with its hand-verified class (kind, tensor_core, precision,
# arch). No TF32 kernel was seen there (fp32 runs had TF32 off): CASES above covers TF32 from DESIGN.md.
EXPECTED = [
    # cuBLAS nvjet (Hopper): "tst" = bf16 inputs, fp32 accumulate, bf16 out -> bf16 tensor cores, sm90
    ("nvjet_sm90_tst_128x256_64x4_2x1_v_bz_coopA_bias_TNN", "gemm", True, "bf16", 90),
    ("nvjet_sm90_tst_64x8_64x16_2x4_h_bz_bias_TNT", "gemm", True, "bf16", 90),
    # cuDNN Hopper implicit-GEMM conv, bf16 in, fp32 accumulate (warpgroup = wgmma)
    ("sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize64x128x64", "conv", True, "bf16", 90),
    # CUTLASS tensor-op GEMMs built for older generations (legacy on a CC 9.0 card)
    ("void cutlass::Kernel2<cutlass_75_tensorop_bf16_s1688gemm_bf16_128x128_tn_align1>", "gemm", True, "bf16", 75),
    ("void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_32x1_tn_align2>",
     "gemm", True, "bf16", 80),
    ("void cutlass::Kernel2<cutlass_75_wmma_tensorop_bf16_s161616gemm_bf16_32x32_32x1_nn_align1>",
     "gemm", True, "bf16", 75),
    # SIMT fp32 GEMMs: cuBLAS xmma with ffma, complex fp32, classic sgemm
    ("sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8", "gemm", False, "fp32", 80),
    ("sm80_xmma_gemm_cf32cf32_f32f32_cf32_tn_n_tilesize32x64x8", "gemm", False, "fp32", 80),
    ("void sgemm_largek_lds64<", "gemm", False, "fp32", None),
    # convolutions: cuDNN fp32 implicit GEMM on CUDA cores (ffma), cuDNN direct convs, ATen depthwise
    ("sm80_xmma_fprop_implicit_gemm_f32f32_f32f32_f32_nchwkcrs_nchw_tilesize128x32x8", "conv", False, "fp32", 80),
    ("void convolve_common_engine_float_NHWC<float", "conv", False, "fp32", None),
    ("void convolve_common_engine_float_NHWC<__nv_bfloat16", "conv", False, "bf16", None),
    ("void at::native::(anonymous namespace)::conv_depthwise2d_forward_kernel_generic<float", "conv", False, "fp32",
     None),
    # grid samplers: ATen's and cuDNN's (no convolution, though cuDNN's)
    ("void at::native::(anonymous namespace)::grid_sampler_2d_kernel<float", "other", None, "fp32", None),
    ("void cudnn::bilinear_sampler_fw_4d<float", "other", None, "fp32", None),
    # cuDNN layout transposes around an NHWC conv: memory movement, no convolution
    ("void cudnn::engines_precompiled::nchwToNhwcKernel<float", "other", None, "fp32", None),
    ("void cudnn::engines_precompiled::nhwcToNchwKernel<float", "other", None, "fp32", None),
    # elementwise / reduction / softmax / FFT / cuBLASLt epilogue
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_t<float, "
     "at::native::MaxNanFunctor", "other", None, "fp32", None),
    ("void at::native::vectorized_elementwise_kernel<8, at::native::bfloat16_copy_kernel_cuda", "other", None, "bf16",
     None),
    ("void (anonymous namespace)::softmax_warp_forward<float, float, float, 6", "other", None, "fp32", None),
    ("void DSE::vector_fft<0, 1, 128, 8, 8, 1, float", "other", None, "fp32", None),
    ("void cublasLt::epilogue::impl::globalKernel<8, 32, float", "other", None, "fp32", None),
    # memcpy-like: concatenation and gather of opaque bytes have no precision
    ("void at::native::(anonymous namespace)::CatArrayBatchedCopy<at::native::(anonymous namespace)::OpaqueType<4u>, "
     "unsigned int, 4, 64, 64>", "other", None, None, None),
    ("void at::native::vectorized_gather_kernel<16, long>", "other", None, None, None),
]


def _recorded() -> list[dict]:
    """Every distinct recorded kernel name, once."""
    rows: dict[str, dict] = {}
    for path in RECORDED:
        data = json.loads(path.read_text())
        for row in data["kernels"] if isinstance(data, dict) else data:
            rows.setdefault(row["name"], row)
    return list(rows.values())


def test_every_recorded_kernel_name_classifies():
    rows = _recorded()
    assert len(rows) > 100
    for row in rows:
        k = classify(row["name"])
        assert k.kind in ("gemm", "conv", "other"), row["name"]
        assert (k.tensor_core is None) == (k.kind == "other"), row["name"]
        assert k.precision in (None, "fp64", "fp32", "tf32", "fp16", "bf16", "int8", "fp8"), row["name"]
        assert k.arch is None or 50 <= k.arch <= 120, row["name"]
        if k.kind != "other" and k.tensor_core:
            assert k.precision != "fp32", row["name"]  # fp32 inputs on tensor cores compute in TF32
    nvjet = [row for row in rows if row["name"].startswith("nvjet_")]
    assert nvjet and all(classify(row["name"]).precision == "bf16" for row in nvjet if "_tst_" in row["name"])
    # the letters read right: every nvjet "tst" kernel was seen in bf16 runs only
    assert all(c == "fp32_grid_sample" or "bf16" in c for row in nvjet for c in row["configs"])


@pytest.mark.parametrize("prefix, kind, tensor_core, precision, arch", EXPECTED)
def test_recorded_kernel_names_have_their_hand_verified_class(prefix, kind, tensor_core, precision, arch):
    names = [row["name"] for row in _recorded() if row["name"].startswith(prefix)]
    assert len(names) == 1, (prefix, names)
    k = classify(names[0])
    assert (k.kind, k.tensor_core, k.precision, k.arch) == (kind, tensor_core, precision, arch)


def test_nvjet_type_letters():
    assert classify("nvjet_hsh_128x128_64x4_1x2_h_bz_TNN").precision == "fp16"
    assert classify("nvjet_sm90_tst_64x8_64x16_2x4_h_bz_bias_TNT").precision == "bf16"
    assert classify("nvjet_sm90_sss_128x64_32x4_1x2_h_bz_TNN").precision == "tf32"
    assert classify("nvjet_sm90_qqtst_128x128_128x6_1x1_h_bz_coopA_NTN").precision == "fp8"
    assert classify("nvjet_sm100_tst_128x256_64x4_2x1_v_bz_TNN").arch == 100


def test_recorded_kernel_names_classify_as_recorded():
    """tests/data/capture/kernel_names.json (from a lent-GPU capture): every name keeps its recorded class."""
    if not KERNEL_NAMES.exists():
        pytest.skip("no recorded kernel names yet (scripts/device_capture.py writes them)")
    data = json.loads(KERNEL_NAMES.read_text())
    rows = data["kernels"] if isinstance(data, dict) else data
    assert rows
    for row in rows:
        expected = row.get("expected") or row["class"]
        k = classify(row["name"]).to_dict()
        assert {key: k[key] for key in expected} == expected, row["name"]
