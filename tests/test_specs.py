"""GPU facts: lookups by NVML/torch names, peaks per precision with fallbacks, estimates for unknown cards."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest

from engine.core.errors import UserError
from engine.telemetry import specs

H200_LOADS = Path(__file__).parent / "data" / "h200" / "telemetry_loads.json"


@pytest.mark.parametrize(
    "device_name, table_name",
    [
        ("NVIDIA H200", "H200"),
        ("Tesla T4", "Tesla T4"),
        ("Tesla P4", "Tesla P4"),
        ("Tesla V100-PCIE-16GB", "V100 PCIe 16GB"),
        ("NVIDIA A100-SXM4-80GB", "A100 80GB SXM"),
        ("NVIDIA A100-SXM4-40GB", "A100 40GB SXM"),
        ("NVIDIA A10", "A10"),
        ("NVIDIA L4", "L4"),
        ("NVIDIA GeForce RTX 4090", "RTX 4090"),
        ("NVIDIA H100 80GB HBM3", "H100 SXM"),
        ("  nvidia   h200 ", "H200"),
        ("A100 80GB SXM", "A100 80GB SXM"),  # table names work too (the what-if GPU list)
        ("T4", "Tesla T4"),
    ],
)
def test_lookup_by_device_and_table_names(device_name, table_name):
    spec = specs.lookup(device_name)
    assert spec is not None and spec.name == table_name


@pytest.mark.parametrize(
    "name",
    [
        "NVIDIA A10G",
        "NVIDIA A100-PCIE-40GB",
        "NVIDIA H100 PCIe",
        "NVIDIA H200 NVL",
        "NVIDIA GeForce RTX 4090 D",
        "Tesla V100-SXM2-16GB",
        "",
        None,
        "CPU",
    ],
)
def test_lookup_refuses_look_alikes(name):
    assert specs.lookup(name) is None


def test_table_is_complete_and_consistent():
    names = [s.name for s in specs.GPUS]
    assert len(names) == len(set(names)) == 10
    for spec in specs.GPUS:
        assert spec.fp32_tflops > 0 and spec.bandwidth_gbps > 0 and spec.memory_gb > 0
        assert specs.lookup(spec.name) is spec
        if spec.tf32_tflops is not None:
            assert spec.compute_capability >= (8, 0)
    h200 = specs.lookup("NVIDIA H200")
    # the device copy rate traces to the recorded H200 load (tests/data/h200/telemetry_loads.json: read + write)
    copy = json.loads(H200_LOADS.read_text())["phases"]["copy"]["achieved_gbps_read_plus_write"]
    assert h200.measured.copy_gbps == pytest.approx(copy, rel=0.05)
    # the matmul rates have no recorded artifact here (DESIGN.md): each must lie below its datasheet peak
    for precision in ("fp32", "tf32", "fp16", "bf16"):
        measured, peak = getattr(h200.measured, f"{precision}_tflops"), getattr(h200, f"{precision}_tflops")
        assert 0.5 * peak < measured <= peak, precision
    assert specs.lookup("Tesla T4").measured is None


def test_peaks_per_precision_with_fallbacks():
    a100 = specs.lookup("NVIDIA A100-SXM4-80GB")
    assert specs.peak_flops(a100, "fp32") == 19.5e12
    assert specs.peak_flops(a100, "tf32") == 156e12
    assert specs.peak_flops(a100, "bf16") == 312e12 and specs.peak(a100, "bf16").path == "tensor"
    assert specs.peak_flops(a100, "int8") == 624e12
    t4 = specs.lookup("Tesla T4")
    assert specs.peak_flops(t4, "fp16") == 65e12
    tf32 = specs.peak(t4, "tf32")
    assert tf32.flops == 8.1e12 and tf32.path == "fp32 rate" and "TF32" in tf32.note
    bf16 = specs.peak(t4, "bf16")
    assert bf16.flops == 8.1e12 and bf16.path == "emulated" and t4.bf16_emulated
    p4 = specs.lookup("Tesla P4")
    assert specs.peak(p4, "fp16").flops == 5.5e12 and specs.peak(p4, "fp16").path == "fp32 rate"
    v100 = specs.lookup("Tesla V100-PCIE-16GB")
    assert specs.peak(v100, "bf16").path == "emulated"
    # the 170x case: A100 TF32 vs T4 fp32 is 19x on paper
    assert specs.peak_flops(a100, "tf32") / specs.peak_flops(t4, "tf32") == pytest.approx(19.26, abs=0.01)
    assert specs.peak_bandwidth(specs.lookup("H200")) == 4.8e12
    with pytest.raises(UserError, match="unknown precision"):
        specs.peak_flops(a100, "fp64")


def test_estimate_from_nvml_matches_the_datasheet_for_known_cards():
    # (name, SMs, max SM MHz, max mem MHz as NVML reports it, bus bits, CC) -> datasheet figures
    t4 = specs.spec_from_nvml("T4 again", 40, 1590, 5001, 256, (7, 5))
    assert t4.estimated and t4.bandwidth_gbps == pytest.approx(320, rel=0.01)
    assert t4.fp32_tflops == pytest.approx(8.1, rel=0.01) and t4.fp16_tflops == pytest.approx(65, rel=0.01)
    assert t4.tf32_tflops is None and t4.bf16_tflops is None and t4.bf16_emulated
    assert specs.peak(t4, "bf16").path == "emulated"
    a100 = specs.spec_from_nvml("A100 again", 108, 1410, 1593, 5120, (8, 0))
    assert a100.bandwidth_gbps == pytest.approx(2039, rel=0.01)
    assert a100.fp32_tflops == pytest.approx(19.5, rel=0.01)
    assert a100.tf32_tflops == pytest.approx(156, rel=0.01) and a100.bf16_tflops == pytest.approx(312, rel=0.01)
    assert a100.int8_tops == pytest.approx(624, rel=0.01)
    h100 = specs.spec_from_nvml("H100 again", 132, 1980, 2619, 5120, (9, 0))
    assert h100.fp32_tflops == pytest.approx(67, rel=0.01) and h100.bandwidth_gbps == pytest.approx(3352, rel=0.01)
    p4 = specs.spec_from_nvml("P4 again", 20, 1114, 3003, 256, (6, 1))
    assert p4.fp32_tflops == pytest.approx(5.7, rel=0.05) and p4.int8_tops == pytest.approx(4 * p4.fp32_tflops)


def test_estimate_with_missing_facts_is_unknown_not_wrong():
    spec = specs.spec_from_nvml("mystery", None, None, 1000, 128, None)
    assert spec.fp32_tflops is None and spec.bandwidth_gbps == pytest.approx(32.0)
    assert math.isnan(specs.peak_flops(spec, "fp32")) and math.isnan(specs.peak_flops(spec, "bf16"))
    assert math.isnan(specs.peak_bandwidth(specs.spec_from_nvml("x", 1, 1, None, None, (8, 0))))


def test_cpu_pseudo_spec_is_estimated():
    fake_psutil = SimpleNamespace(
        cpu_count=lambda logical=True: 2,
        cpu_freq=lambda: SimpleNamespace(max=3000.0, current=2000.0),
        virtual_memory=lambda: SimpleNamespace(total=8e9),
    )
    cpu = specs.cpu_spec(psutil_mod=fake_psutil)
    assert cpu.kind == "cpu" and cpu.estimated and "estimated" in cpu.source
    assert cpu.memory_gb == 8.0
    # 2 cores x 3 GHz x 32 or 64 FLOP/cycle (AVX2 / AVX-512)
    assert cpu.fp32_tflops in (pytest.approx(0.192), pytest.approx(0.384))
    assert specs.peak(cpu, "tf32").flops == cpu.fp32_tflops * 1e12
    assert specs.cpu_spec(cores=4, clock_mhz=1000.0).fp32_tflops > 0


def test_specs_fp8_peaks_and_projection_for_cards_without_fp8():
    assert specs.peak_flops(specs.lookup("H200"), "fp8") == 1979e12
    assert specs.peak_flops(specs.lookup("H100"), "fp8") == 1979e12
    assert specs.peak_flops(specs.lookup("L4"), "fp8") == 242e12
    assert specs.peak_flops(specs.lookup("RTX 4090"), "fp8") == pytest.approx(330.3e12)  # dense, fp32 accumulate
    for name in ("A100", "T4", "A10"):
        p = specs.peak(specs.lookup(name), "fp8")
        assert p.path == "int8 instead" and p.flops == specs.lookup(name).int8_tops * 1e12 and "no fp8" in p.note
    v100 = specs.peak(specs.lookup("V100"), "fp8")
    assert v100.path == "fp16 instead" and v100.flops == 112e12
    for spec in specs.GPUS:
        assert (spec.fp8_tflops is None) == (spec.compute_capability < (8, 9)), spec.name
    est = specs.spec_from_nvml("future", 100, 2000.0, 2000.0, 4096, (8, 9))
    assert est.fp8_tflops == pytest.approx(2 * est.fp16_tflops)
    assert specs.PRECISIONS.count("int8") == 1 and "fp8" in specs.PRECISIONS
