"""GPU peak numbers (datasheet, dense) for the roofline and what-if, with estimates for unknown cards.

Units: TFLOP/s (1e12) and GB/s (1e9) in the table; ``peak_flops`` returns FLOP/s.
``lookup`` accepts NVML/torch device names ("NVIDIA A100-SXM4-80GB", "Tesla T4") and table names
("A100 80GB SXM", "T4"). A card that is not in the table gets an estimate from NVML facts
(``spec_from_nvml``); the CPU gets a rough pseudo-spec (``cpu_spec``). Both are marked estimated.
"""

from __future__ import annotations

import math
import os
import platform
import re
from dataclasses import dataclass, field

from engine.core.config import PRECISIONS as RUN_PRECISIONS
from engine.core.errors import UserError

PRECISIONS = tuple(dict.fromkeys((*RUN_PRECISIONS, "int8", "fp8")))  # the peak table's: the run precisions

# NVML reports memory clocks such that bytes/s = clock x (bus width / 8) x 2 for GDDR5/6/6X and HBM2/3/3e
# (T4: 5001 MHz x 256 bit -> 320 GB/s; A100 80GB: 1593 MHz x 5120 bit -> 2039 GB/s).
NVML_MEM_DATA_RATE = 2.0
FLOPS_PER_FMA = 2

# FP32 cores per SM by compute capability (major, minor); majors not listed use FP32_CORES_DEFAULT.
FP32_CORES_PER_SM = {(6, 0): 64, (6, 1): 128, (6, 2): 128, (7, 0): 64, (7, 2): 64, (7, 5): 64, (8, 0): 64}
FP32_CORES_DEFAULT = 128
# Dense FP16 tensor-core FLOP per clock per SM (fp32 accumulate) by compute capability.
TENSOR_FP16_FLOPS_PER_SM_CLOCK = {
    (7, 0): 1024,
    (7, 2): 1024,
    (7, 5): 1024,
    (8, 0): 2048,
    (8, 6): 1024,
    (8, 7): 1024,
    (8, 9): 1024,
    (9, 0): 4096,
}
TENSOR_FP16_DEFAULT = 4096  # for majors >= 10 (Blackwell and later), a conservative Hopper-like rate
DP4A_INT8_PER_FP32 = 4  # Pascal int8 via DP4A: 4x the fp32 rate

# CPU pseudo-spec: AVX2 = 2 FMA units x 8 fp32 lanes; AVX-512 doubles the lanes.
CPU_FP32_FLOPS_PER_CYCLE_AVX2 = 2 * 8 * FLOPS_PER_FMA
CPU_FP32_FLOPS_PER_CYCLE_AVX512 = 2 * 16 * FLOPS_PER_FMA
CPU_DEFAULT_CLOCK_MHZ = 2500.0
CPU_DEFAULT_BANDWIDTH_GBPS = 20.0  # dual-channel DDR4 order of magnitude; a guess, marked estimated


@dataclass(frozen=True)
class Measured:
    """Peaks measured on a real card here (torch, CUDA events), beside the datasheet numbers."""

    copy_gbps: float | None = None
    fp32_tflops: float | None = None
    tf32_tflops: float | None = None
    fp16_tflops: float | None = None
    bf16_tflops: float | None = None
    note: str = ""


@dataclass(frozen=True)
class GPUSpec:
    """Peak numbers of one device; ``None`` where the card lacks the unit (or it is unknown)."""

    name: str
    compute_capability: tuple[int, int] | None
    fp32_tflops: float | None
    tf32_tflops: float | None
    fp16_tflops: float | None
    bf16_tflops: float | None
    int8_tops: float | None
    memory_gb: float | None
    bandwidth_gbps: float | None
    aliases: tuple[str, ...] = ()
    patterns: tuple[str, ...] = ()  # regexes searched in the normalised device name
    bf16_emulated: bool = False
    measured: Measured | None = None
    estimated: bool = False
    source: str = "datasheet"
    kind: str = "gpu"  # "gpu" | "cpu"
    sm_count: int | None = None
    notes: tuple[str, ...] = field(default=())
    fp8_tflops: float | None = None  # dense e4m3 tensor-core peak, fp32 accumulate (None: no fp8 units)


@dataclass(frozen=True)
class Peak:
    """A peak rate and how it is reached: 'tensor', 'native', 'fp32 rate' (no unit) or 'emulated'."""

    flops: float
    path: str
    note: str = ""


# Positional fields: name, CC, fp32, tf32, fp16 tensor, bf16 (TFLOP/s), int8 (TOPS), memory GB, GB/s;
# fp8_tflops by keyword (dense, fp32 accumulate, as torch._scaled_mm runs: Ada datasheets: L4 485 and RTX 4090
# 660.6 with sparsity -> 242 and 330 dense (the 4090's 660.6 dense is fp16 accumulate); H100/H200 3958 sparse
# -> 1979 dense). Cards without fp8 units (P4, T4, V100, A100, A10) leave it None.
# fmt: off
GPUS: list[GPUSpec] = [
    GPUSpec("Tesla P4", (6, 1), 5.5, None, None, None, 22.0, 8.0, 192.0,
            aliases=("p4",), patterns=(r"^p4$",)),
    GPUSpec("Tesla T4", (7, 5), 8.1, None, 65.0, None, 130.0, 16.0, 320.0,
            aliases=("t4",), patterns=(r"^t4$",), bf16_emulated=True),
    GPUSpec("V100 PCIe 16GB", (7, 0), 14.0, None, 112.0, None, None, 16.0, 900.0,
            aliases=("v100", "v100 pcie"), patterns=(r"^v100[- ]pcie[- ]16gb$",)),
    GPUSpec("A100 40GB SXM", (8, 0), 19.5, 156.0, 312.0, 312.0, 624.0, 40.0, 1555.0,
            aliases=("a100 sxm 40gb", "a100 40gb"), patterns=(r"^a100[- ]sxm4?[- ]40gb$",)),
    GPUSpec("A100 80GB SXM", (8, 0), 19.5, 156.0, 312.0, 312.0, 624.0, 80.0, 2039.0,
            aliases=("a100", "a100 sxm 80gb", "a100 80gb"), patterns=(r"^a100[- ]sxm4?[- ]80gb$",)),
    GPUSpec("A10", (8, 6), 31.2, 62.5, 125.0, 125.0, 250.0, 24.0, 600.0,
            patterns=(r"^a10$",)),
    GPUSpec("L4", (8, 9), 30.3, 60.0, 121.0, 121.0, 242.0, 24.0, 300.0,
            patterns=(r"^l4$",), fp8_tflops=242.0),
    GPUSpec("RTX 4090", (8, 9), 82.6, 82.6, 165.0, 165.0, 661.0, 24.0, 1008.0,
            aliases=("4090",), patterns=(r"^rtx 4090$",), fp8_tflops=330.3),
    GPUSpec("H100 SXM", (9, 0), 67.0, 495.0, 989.0, 989.0, 1979.0, 80.0, 3350.0,
            aliases=("h100", "h100 sxm5"), patterns=(r"^h100 80gb hbm3$", r"^h100[- ]sxm"), fp8_tflops=1979.0),
    GPUSpec("H200", (9, 0), 67.0, 495.0, 989.0, 989.0, 1979.0, 141.0, 4800.0,
            aliases=("h200 sxm",), patterns=(r"^h200$", r"^h200[- ]sxm"), fp8_tflops=1979.0,
            measured=Measured(copy_gbps=4200.0, fp32_tflops=51.0, tf32_tflops=411.0, fp16_tflops=761.0,
                              bf16_tflops=791.0, note="torch 2.11, device copy and 8192^3 matmul")),
]
# fmt: on

_VENDOR_PREFIXES = ("nvidia ", "tesla ", "geforce ", "quadro ")


def normalize_name(name: str) -> str:
    """Lower case, vendor/brand words dropped, separators collapsed: 'NVIDIA GeForce RTX 4090' -> 'rtx 4090'."""
    text = re.sub(r"[\s_]+", " ", name.strip().lower())
    changed = True
    while changed:
        changed = False
        for prefix in _VENDOR_PREFIXES:
            if text.startswith(prefix):
                text = text[len(prefix) :]
                changed = True
    return text.strip()


def lookup(name: str | None) -> GPUSpec | None:
    """The table entry for a device or table name, or None when the card is not in the table."""
    if not name:
        return None
    key = normalize_name(name)
    for spec in GPUS:
        if key == normalize_name(spec.name) or key in spec.aliases:
            return spec
    for spec in GPUS:
        if any(re.search(p, key) for p in spec.patterns):
            return spec
    return None


def peak(spec: GPUSpec, precision: str) -> Peak:
    """The peak rate of ``precision`` on ``spec``, falling back to the fp32 rate where the unit is missing.

    A card without fp8 units is projected at what a quantised run would really use there: int8 tensor
    cores where it has them, else the fp16 tensor rate, else fp32 (path "int8 instead" / "fp16 instead").
    """
    if precision not in PRECISIONS:
        raise UserError(f"unknown precision {precision!r}", f"use one of {', '.join(PRECISIONS)}")
    fp32 = spec.fp32_tflops
    fp32_flops = fp32 * 1e12 if fp32 is not None else math.nan
    if precision == "fp32":
        return Peak(fp32_flops, "native")
    if precision == "fp8" and spec.fp8_tflops is None:
        if spec.int8_tops is not None:
            return Peak(spec.int8_tops * 1e12, "int8 instead",
                        f"{spec.name} has no fp8 units (CC 8.9 needed): projected at int8, the quantised mode it runs")
        if spec.fp16_tflops is not None:
            return Peak(spec.fp16_tflops * 1e12, "fp16 instead",
                        f"{spec.name} has neither fp8 nor int8 tensor cores: projected at fp16")
        return Peak(fp32_flops, "fp32 rate", f"{spec.name} has no fp8 units: fp32 rate at best")
    value = {"tf32": spec.tf32_tflops, "fp16": spec.fp16_tflops, "bf16": spec.bf16_tflops, "int8": spec.int8_tops,
             "fp8": spec.fp8_tflops}[precision]
    if value is not None:
        return Peak(value * 1e12, "tensor" if spec.kind == "gpu" else "native")
    if precision == "bf16" and (spec.bf16_emulated or spec.kind == "gpu"):
        return Peak(fp32_flops, "emulated", f"{spec.name} has no bf16 units: bf16 is emulated through fp32")
    if precision == "tf32":
        return Peak(fp32_flops, "fp32 rate", f"{spec.name} has no TF32: it silently runs IEEE fp32")
    return Peak(fp32_flops, "fp32 rate", f"{spec.name} has no {precision} units: fp32 rate at best")


def peak_flops(spec: GPUSpec, precision: str) -> float:
    """Peak FLOP/s (OP/s for int8) of ``precision`` on ``spec``; NaN when unknown."""
    return peak(spec, precision).flops


def peak_bandwidth(spec: GPUSpec) -> float:
    """Peak memory bandwidth in bytes/s; NaN when unknown."""
    return spec.bandwidth_gbps * 1e9 if spec.bandwidth_gbps is not None else math.nan


def _per_cc(table: dict[tuple[int, int], int], cc: tuple[int, int], default: int) -> int:
    """The entry for ``cc``, else the last of the same major, else ``default``."""
    if cc in table:
        return table[cc]
    same_major = [v for k, v in table.items() if k[0] == cc[0]]
    return same_major[-1] if same_major else default


def fp32_cores_per_sm(cc: tuple[int, int]) -> int:
    """FP32 cores per SM for a compute capability."""
    return _per_cc(FP32_CORES_PER_SM, cc, FP32_CORES_DEFAULT)


def spec_from_nvml(
    name: str,
    sm_count: int | None,
    max_sm_clock_mhz: float | None,
    max_mem_clock_mhz: float | None,
    bus_width_bits: int | None,
    cc: tuple[int, int] | None,
    memory_total_bytes: float | None = None,
) -> GPUSpec:
    """An estimate for a card not in the table, from NVML facts.

    bandwidth (B/s) = max memory clock (Hz) x bus width (bits) / 8 x NVML_MEM_DATA_RATE;
    fp32 (FLOP/s)   = SMs x FP32 cores per SM (by CC) x 2 (FMA) x max SM clock (Hz);
    fp16/bf16 tensor = SMs x tensor FLOP per SM per clock (by CC) x clock; tf32 = half of fp16 (CC >= 8.0);
    bf16 only from CC 8.0 (emulated below); int8 = 2x fp16 tensor (CC >= 7.5), 4x fp32 via DP4A on 6.1;
    fp8 = 2x fp16 tensor from CC 8.9.
    GeForce cards run fp16 with fp32 accumulate at half the rate estimated here.
    """
    bandwidth = None
    if max_mem_clock_mhz and bus_width_bits:
        bandwidth = max_mem_clock_mhz * 1e6 * bus_width_bits / 8 * NVML_MEM_DATA_RATE / 1e9
    fp32 = tf32 = fp16 = bf16 = int8 = fp8 = None
    if sm_count and max_sm_clock_mhz and cc:
        clock_hz = max_sm_clock_mhz * 1e6
        cores = fp32_cores_per_sm(cc)
        fp32 = sm_count * cores * FLOPS_PER_FMA * clock_hz / 1e12
        if cc >= (7, 0):
            per_sm = _per_cc(TENSOR_FP16_FLOPS_PER_SM_CLOCK, cc, TENSOR_FP16_DEFAULT)
            fp16 = sm_count * per_sm * clock_hz / 1e12
        if cc >= (8, 0) and fp16 is not None:
            tf32, bf16 = fp16 / 2, fp16
        if cc >= (7, 5) and fp16 is not None:
            int8 = 2 * fp16
        elif cc == (6, 1):
            int8 = DP4A_INT8_PER_FP32 * fp32
        if cc >= (8, 9) and fp16 is not None:
            fp8 = 2 * fp16
    memory_gb = memory_total_bytes / 1e9 if memory_total_bytes else None
    return GPUSpec(
        name=name,
        compute_capability=cc,
        fp32_tflops=fp32,
        tf32_tflops=tf32,
        fp16_tflops=fp16,
        bf16_tflops=bf16,
        int8_tops=int8,
        memory_gb=memory_gb,
        bandwidth_gbps=bandwidth,
        bf16_emulated=cc is not None and cc < (8, 0),
        estimated=True,
        source="estimated from NVML clocks and bus width",
        sm_count=sm_count,
        fp8_tflops=fp8,
    )


def _cpuinfo_value(prefix: str) -> str | None:
    """The value of the first /proc/cpuinfo line starting with ``prefix``; None when absent or unreadable."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith(prefix):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def cpu_model() -> str:
    """The CPU model name (/proc/cpuinfo, else platform)."""
    return _cpuinfo_value("model name") or platform.processor() or platform.machine() or "unknown CPU"


def _cpu_flags() -> set[str]:
    return set((_cpuinfo_value("flags") or "").split())


def cpu_spec(cores: int | None = None, clock_mhz: float | None = None, psutil_mod=None) -> GPUSpec:
    """A rough CPU pseudo-spec (cores x clock x SIMD FLOP/cycle); estimated, for orientation only."""
    if psutil_mod is None:
        try:
            import psutil

            psutil_mod = psutil
        except ImportError:
            psutil_mod = None
    memory_gb = None
    if psutil_mod is not None:
        if cores is None:
            cores = psutil_mod.cpu_count(logical=False) or psutil_mod.cpu_count()
        if clock_mhz is None:
            freq = psutil_mod.cpu_freq()
            clock_mhz = (freq.max or freq.current) if freq else None
        memory_gb = psutil_mod.virtual_memory().total / 1e9
    cores = cores or os.cpu_count() or 1
    clock_mhz = clock_mhz or CPU_DEFAULT_CLOCK_MHZ
    flags = _cpu_flags()
    per_cycle = CPU_FP32_FLOPS_PER_CYCLE_AVX512 if "avx512f" in flags else CPU_FP32_FLOPS_PER_CYCLE_AVX2
    fp32 = cores * clock_mhz * 1e6 * per_cycle / 1e12
    has_bf16 = bool(flags & {"avx512_bf16", "amx_bf16"})
    return GPUSpec(
        name=f"CPU ({cpu_model()}, {cores} cores)",
        compute_capability=None,
        fp32_tflops=fp32,
        tf32_tflops=None,
        fp16_tflops=None,
        bf16_tflops=2 * fp32 if has_bf16 else None,
        int8_tops=None,
        memory_gb=memory_gb,
        bandwidth_gbps=CPU_DEFAULT_BANDWIDTH_GBPS,
        bf16_emulated=not has_bf16,
        estimated=True,
        kind="cpu",
        source=f"estimated: {cores} cores x {clock_mhz:.0f} MHz x {per_cycle} FLOP/cycle",
    )
