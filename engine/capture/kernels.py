"""Kernel facts from kernel names: the one classification table.

Every GPU kernel name a capture sees goes through :func:`classify`, which reads from the name:

- ``kind``: ``"gemm"``, ``"conv"`` or ``"other"``;
- ``tensor_core``: True / False for GEMM and conv kernels, None for the rest;
- ``precision``: the type the kernel computes in (fp64, fp32, tf32, fp16, bf16, int8, fp8) or None;
- ``arch``: the architecture it was built for as ``major * 10 + minor`` (75 for sm_75) or None.

Names follow the libraries' conventions (cuBLAS ``sm80_xmma_gemm_...``, ``ampere_sgemm_...``,
CUTLASS ``cutlass_75_tensorop_bf16_s1688gemm...``, cuDNN ``..._scudnn_...``, ATen templates
``void at::native::...<float>``). Each pattern below has a comment saying what it matches; the tests
check the table against real names (tests/data/capture/kernel_names.json when present).
"""

from __future__ import annotations

import functools
import re
from dataclasses import asdict, dataclass
from typing import Any

# -- kind ---------------------------------------------------------------------------------------
#: convolution kernels (checked before GEMM: cuDNN's implicit-GEMM convs contain "gemm")
CONV_PATTERNS = (
    re.compile(r"conv", re.I),  # cudnn / aten convolution kernels: conv2d_*, convolve_*, depthwise conv
    re.compile(r"fprop|dgrad|wgrad"),  # cuDNN xmma forward / data-grad / weight-grad convs
    re.compile(r"implicit_?gemm", re.I),  # implicit-GEMM convolution (cuDNN, CUTLASS conv)
    re.compile(r"winograd", re.I),  # Winograd convolution (cuDNN)
    re.compile(r"scudnn|hcudnn|bcudnn|cudnn_infer|cudnn::", re.I),  # cuDNN engine kernels (all convs here)
)
#: cuDNN kernels that are no convolution (checked before CONV_PATTERNS, whose ``cudnn::`` would take them)
NOT_CONV_PATTERNS = (
    re.compile(r"cudnn::\S*(?:nchwToNhwc|nhwcToNchw)"),  # cuDNN layout transposes around an NHWC conv
    re.compile(r"cudnn::bilinear_sampler"),  # cuDNN's grid sampler (aten::cudnn_grid_sampler)
)
#: GEMM / matmul kernels
GEMM_PATTERNS = (
    re.compile(r"gemm", re.I),  # cuBLAS / CUTLASS / xmma GEMMs, sgemm, hgemm, gemmSN, gemmk1
    re.compile(r"gemv", re.I),  # matrix-vector kernels (cuBLAS gemv2T, gemvx)
    re.compile(r"^nvjet_"),  # cuBLAS Hopper/Blackwell "nvjet" GEMMs
    re.compile(r"triton_tem_fused_(?:mm|bmm|addmm)"),  # Inductor matmul templates
    re.compile(r"\bdot_kernel\b"),  # cuBLAS dot products
)

# -- tensor cores -------------------------------------------------------------------------------
#: explicit SIMT (CUDA-core) markers, checked first
SIMT_PATTERNS = (
    re.compile(r"sgemm|dgemm|cgemm|zgemm", re.I),  # classic fp32/fp64/complex SIMT GEMMs (no 'tensorop')
    re.compile(r"_ffma_|ffma"),  # cuBLAS xmma kernels running fused multiply-add on CUDA cores
    re.compile(r"scudnn|dcudnn", re.I),  # cuDNN single/double precision engines (no tensor cores)
    re.compile(r"depthwise", re.I),  # depthwise convs: elementwise per channel, never tensor cores
    re.compile(r"gemv|gemmSN|gemmk1|dot_kernel"),  # gemv / small-N / k=1 / dot kernels: CUDA cores
    re.compile(r"xmma_gemm_c?f32f32_c?f32f32_c?f32"),  # cuBLAS xmma with fp32 inputs and fp32 compute
    re.compile(r"implicit_convolve_sgemm|explicit_convolve_sgemm"),  # cuDNN SIMT conv
)
#: tensor-core markers
TENSOR_CORE_PATTERNS = (
    re.compile(r"tensorop", re.I),  # CUTLASS tensor-op kernels
    re.compile(r"[hsi]\d{3,5}gemm"),  # s1688gemm / h884gemm / s16816gemm / i8816gemm: MMA shapes
    re.compile(r"[hmiw]mma|gmma|wgmma|tcgen05", re.I),  # hmma / imma / wmma / (w)gmma / Blackwell tcgen05
    re.compile(r"tf32|bf16|(?<!b)f16|fp16|e4m3|e5m2|i8i8|int8"),  # a GEMM/conv computing in a TC type
    re.compile(r"^nvjet_"),  # cuBLAS nvjet kernels are tensor-core kernels
)

# -- precision (first match wins; order matters) ------------------------------------------------
PRECISION_PATTERNS = (
    ("fp8", re.compile(r"e4m3|e5m2|fp8|f8f8|Float8", re.I)),  # fp8 GEMMs (torch._scaled_mm)
    ("int8", re.compile(r"i8i8|int8|imma|i8816|s8s8|_i8_|<signed char\b")),  # int8 GEMMs, int8_t templates
    ("bf16", re.compile(r"bf16|BFloat16|bfloat16", re.I)),  # bf16 kernels, c10::BFloat16 templates
    ("fp16", re.compile(r"(?<!b)f16|fp16|(?<![a-z])half|c10::Half|__half|hgemm|h\d{3,5}gemm|hcudnn", re.I)),
    ("tf32", re.compile(r"tf32", re.I)),  # TF32 tensor-core kernels
    ("fp64", re.compile(r"dgemm|<double|\bdouble\b|f64|dcudnn", re.I)),  # double precision
    ("tf32", re.compile(r"tensorop_s\d{3,5}gemm|tensorop.*_s\d{3,5}gemm_\d|s1688gemm_\d")),  # fp32-in TC = TF32
    ("fp32", re.compile(r"f32|fp32|float|sgemm|cgemm|scudnn|ffma", re.I)),  # fp32 (and complex fp32)
)
#: cuBLAS(Lt) "nvjet" GEMMs (Hopper and newer) spell their types as one letter each after the prefix and
#: an optional architecture: ``nvjet_sm90_tst_128x256_...`` (H200, bf16 autocast), ``nvjet_hsh_...``.
#: Three letters are <A/B inputs><compute/accumulate><D output>: ``tst`` = bf16 in, fp32 accumulate, bf16
#: out; ``hsh`` = fp16 in, fp32 accumulate, fp16 out; five (fp8) are <A><B><C><compute><D>, e.g. ``qqtst``.
#: The precision a GEMM computes in is its inputs', so the FIRST letter decides: h = fp16, t = bf16,
#: s = fp32 inputs on tensor cores = TF32, d = fp64, q/e/o = fp8 (e4m3/e5m2), i = int8. The accumulate
#: letter (s almost always) is not the compute precision. Verified on the H200: ``tst`` in bf16 runs only.
NVJET = re.compile(r"^nvjet_(?:sm\d{2,3}[a-z]?_)?(?P<types>[a-z]{3,5})_")
NVJET_PRECISION = {"h": "fp16", "t": "bf16", "s": "tf32", "d": "fp64", "q": "fp8", "e": "fp8", "o": "fp8",
                   "i": "int8"}

# -- architecture -------------------------------------------------------------------------------
ARCH_PATTERNS = (
    re.compile(r"(?:^|[^a-z0-9])sm_?(\d{2,3})[a-z]?_"),  # sm80_xmma_..., sm90_xmma_..., cutlass3x_sm90_
    re.compile(r"cutlass_(\d{2,3})_"),  # cutlass_75_tensorop_..., cutlass_80_wmma_...
    re.compile(r"cutlass::arch::Sm(\d{2,3})"),  # CUTLASS template arguments
)
#: cuBLAS / cuDNN generation prefixes
ARCH_WORDS = (
    (re.compile(r"(?:^|[^a-z])maxwell_"), 50),
    (re.compile(r"(?:^|[^a-z])pascal_"), 60),
    (re.compile(r"(?:^|[^a-z])volta_"), 70),
    (re.compile(r"(?:^|[^a-z])turing_"), 75),
    (re.compile(r"(?:^|[^a-z])ampere_"), 80),
    (re.compile(r"(?:^|[^a-z])ada_"), 89),
    (re.compile(r"(?:^|[^a-z])hopper_"), 90),
    (re.compile(r"(?:^|[^a-z])blackwell_"), 100),
)
#: tensor-core generations: an older one lacks the newer MMA instructions (wgmma on 9.0, tcgen05 on 10.0)
GENERATIONS = ((100, 100), (90, 90), (80, 80), (75, 75), (70, 70), (0, 0))


@dataclass(frozen=True)
class KernelClass:
    """What a kernel name says about the kernel."""

    kind: str  # gemm | conv | other
    tensor_core: bool | None  # None for kernels that are not GEMM/conv
    precision: str | None
    arch: int | None  # sm_XY as XY

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def label(self) -> str:
        """Compact class label, e.g. 'gemm tc bf16 sm75' or 'other fp32'."""
        parts = [self.kind]
        if self.tensor_core is not None:
            parts.append("tc" if self.tensor_core else "simt")
        if self.precision:
            parts.append(self.precision)
        if self.arch:
            parts.append(f"sm{self.arch}")
        return " ".join(parts)


def _kind(name: str) -> str:
    if any(p.search(name) for p in NOT_CONV_PATTERNS):
        return "other"
    if any(p.search(name) for p in CONV_PATTERNS):
        return "conv"
    if any(p.search(name) for p in GEMM_PATTERNS):
        return "gemm"
    return "other"


def kernel_arch(name: str) -> int | None:
    """The architecture a kernel was built for (80 for sm_80), or None when the name does not say."""
    for pattern in ARCH_PATTERNS:
        m = pattern.search(name)
        if m:
            return int(m.group(1))
    for pattern, arch in ARCH_WORDS:
        if pattern.search(name):
            return arch
    return None


def kernel_precision(name: str) -> str | None:
    m = NVJET.match(name)
    if m:
        return NVJET_PRECISION.get(m.group("types")[0])
    for precision, pattern in PRECISION_PATTERNS:
        if pattern.search(name):
            return precision
    return None


@functools.lru_cache(maxsize=8192)
def classify(name: str) -> KernelClass:
    """Classify one kernel by its name."""
    kind = _kind(name)
    precision = kernel_precision(name)
    tensor_core: bool | None = None
    if kind != "other":
        if any(p.search(name) for p in SIMT_PATTERNS):
            tensor_core = False
        else:
            tensor_core = any(p.search(name) for p in TENSOR_CORE_PATTERNS)
        if tensor_core and precision == "fp32":
            precision = "tf32"  # fp32 inputs on tensor cores compute in TF32
    return KernelClass(kind, tensor_core, precision, kernel_arch(name))


def generation(arch: int) -> int:
    """Tensor-core generation of an architecture (80 for 8.0/8.6/8.9, 90 for 9.0, ...)."""
    for start, gen in GENERATIONS:
        if arch >= start:
            return gen
    return 0


def is_legacy_arch(arch: int | None, capability: tuple[int, int] | None) -> bool:
    """True when a kernel built for ``arch`` is of an older tensor-core generation than the card."""
    if arch is None or capability is None:
        return False
    card = capability[0] * 10 + capability[1]
    return arch < card and generation(arch) < generation(card)


#: ops that cost less in fp16/bf16 but that autocast leaves in (or that a model keeps in) float32;
#: an op of these with float32 inputs inside an autocast run is reported with its time
FP32_SENSITIVE_OPS = re.compile(
    r"^aten::(grid_sampler\w*|_?conv\w*|cudnn_convolution\w*|linear|addmm|mm|bmm|baddbmm|matmul|einsum|"
    r"upsample_\w+|_upsample_\w+|_scaled_dot_product\w*|scaled_dot_product_attention|_fft_\w+|fft_\w+|"
    r"cdist|_cdist_forward|avg_pool\w*|max_pool\w*)$"
)
FLOAT32_TYPES = ("float",)
REDUCED_TYPES = ("c10::Half", "c10::BFloat16", "Half", "BFloat16")


def stays_fp32(op_name: str, input_types: tuple[str, ...]) -> bool:
    """True when ``op_name`` is an fp32-sensitive op whose floating inputs are all float32."""
    if not FP32_SENSITIVE_OPS.match(op_name):
        return False
    floats = [t for t in input_types if t in FLOAT32_TYPES or t in REDUCED_TYPES or t == "double"]
    return bool(floats) and all(t == "float" for t in floats)
