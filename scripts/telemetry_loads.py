"""Check the telemetry sampler on a GPU under three known loads; write the samples as JSON.

Usage (repo root, GPU machine):  python3 scripts/telemetry_loads.py OUT.json [--seconds 3]

Loads: idle baseline; a memory-bound device copy (2 GiB tensors); a bf16 8192^3 matmul; a loop of
tiny kernels. For each it prints the medians of the telemetry (DRAM GB/s and %, SM active, tensor
active, GPU busy, SM clock, power), the clock-limit reasons seen, and what the load achieved by CUDA
events (copy GB/s counting read + write, matmul TFLOP/s, tiny kernels per second).
Needs torch with CUDA and engine/ (no Qt).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from engine.telemetry.sampler import METRICS, TelemetrySampler, decode_clock_reasons  # noqa: E402

COPY_BYTES = 2 * 1024**3  # per tensor
MATMUL_N = 8192
TINY_SYNC_EVERY = 1000  # launches between syncs in the tiny-kernel loop
RAMP_S = 0.3  # skip this much of each phase: GPM differences over the previous >= 100 ms
SUMMARY_KEYS = (
    "dram_bw_gbps",
    "dram_bw_util_pct",
    "sm_active_pct",
    "sm_occupancy_pct",
    "tensor_active_pct",
    "gpu_busy_pct",
    "mem_busy_pct",
    "sm_clock_mhz",
    "power_w",
    "temperature_c",
    "pcie_gen",
)
SAMPLER_RATE_HZ = 10.0


def run_for(seconds: float, step, chunk: int, torch) -> tuple[int, float]:
    """Repeat ``step`` in chunks until ``seconds`` pass; (iterations, GPU ms by CUDA events)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    iterations = 0
    t0 = time.perf_counter()
    start.record()
    while time.perf_counter() - t0 < seconds:
        for _ in range(chunk):
            step()
        iterations += chunk
        torch.cuda.synchronize()
    end.record()
    end.synchronize()
    return iterations, start.elapsed_time(end)


def summarize(sampler: TelemetrySampler, t0: float, t1: float) -> dict:
    """Medians of the summary metrics over [t0 + RAMP_S, t1], and the clock reasons seen."""
    snap = sampler.snapshot(since=t0 + RAMP_S)
    inside = snap["t"] <= t1
    out: dict = {"samples": int(inside.sum())}
    for key in SUMMARY_KEYS:
        values = snap[key][inside]
        values = values[~np.isnan(values)]
        out[key] = float(np.median(values)) if values.size else None
    reasons: set[str] = set()
    for mask in snap["clock_reasons"][inside]:
        reasons.update(decode_clock_reasons(mask))
    out["clock_reasons"] = sorted(reasons)
    cpu = snap["cpu_pct"][inside]
    out["cpu_pct"] = float(np.nanmedian(cpu)) if np.isfinite(cpu).any() else None
    return out


def fmt(value: float | None, digits: int = 1) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def print_phase(name: str, s: dict, achieved: str) -> None:
    print(f"\n== {name}: {achieved}  ({s['samples']} samples)")
    print(
        f"   DRAM {fmt(s['dram_bw_gbps'], 0)} GB/s ({fmt(s['dram_bw_util_pct'])} %)  "
        f"SM active {fmt(s['sm_active_pct'])} %  occupancy {fmt(s['sm_occupancy_pct'])} %  "
        f"tensor {fmt(s['tensor_active_pct'])} %"
    )
    print(
        f"   GPU busy {fmt(s['gpu_busy_pct'])} %  mem-controller busy {fmt(s['mem_busy_pct'])} %  "
        f"SM clock {fmt(s['sm_clock_mhz'], 0)} MHz  power {fmt(s['power_w'], 0)} W  "
        f"temp {fmt(s['temperature_c'], 0)} C  PCIe gen {fmt(s['pcie_gen'], 0)}"
    )
    print(f"   clock reasons: {', '.join(s['clock_reasons']) or 'none'}")


def jsonable(array: np.ndarray) -> list:
    """NaN -> None, so the JSON is standard."""
    return [None if isinstance(v, float) and math.isnan(v) else v for v in array.tolist()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="JSON file to write the samples and summaries to")
    parser.add_argument("--seconds", type=float, default=3.0, help="length of each load (default 3)")
    args = parser.parse_args(argv)
    try:
        import torch
    except ImportError:
        print("error: torch is not installed", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print(
            f"error: no CUDA GPU visible to torch {torch.__version__} "
            f"(built with CUDA {torch.version.cuda or 'none'}); this script needs a GPU",
            file=sys.stderr,
        )
        return 2
    device = torch.device("cuda:0")
    torch_name = torch.cuda.get_device_name(device)
    sampler = TelemetrySampler(device_index=0, rate_hz=SAMPLER_RATE_HZ, capacity=4096)
    static = sampler.static_info()
    print(
        f"torch {torch.__version__} CUDA {torch.version.cuda}; torch device: {torch_name}; "
        f"NVML device: {static['name']} ({static.get('spec_name')}, peak {static['peak_bandwidth_gbps']} GB/s, "
        f"GPM {static['gpm_supported']}, driver {static['driver']})"
    )
    unavailable = {k: r for k, r in sampler.availability().items() if r}
    if unavailable:
        print("not available:", json.dumps(unavailable, indent=1))
    if static["name"] and static["name"] != torch_name:
        print(f"warning: NVML index 0 is {static['name']!r} but torch cuda:0 is {torch_name!r}")

    src = torch.empty(COPY_BYTES, dtype=torch.uint8, device=device).random_(0, 255)
    dst = torch.empty_like(src)
    a = torch.randn(MATMUL_N, MATMUL_N, device=device, dtype=torch.bfloat16)
    b = torch.randn(MATMUL_N, MATMUL_N, device=device, dtype=torch.bfloat16)
    c = torch.empty(MATMUL_N, MATMUL_N, device=device, dtype=torch.bfloat16)
    tiny = torch.zeros(1, device=device)
    for _ in range(3):  # warm-up: cuBLAS handles, allocator, kernels loaded
        dst.copy_(src)
        torch.mm(a, b, out=c)
        tiny.add_(1.0)
    torch.cuda.synchronize()

    phases: dict[str, dict] = {}
    sampler.start()
    try:
        t0 = time.perf_counter()
        time.sleep(min(args.seconds, 1.5))
        phases["idle"] = {"t0": t0, "t1": time.perf_counter()}

        t0 = time.perf_counter()
        n, ms = run_for(args.seconds, lambda: dst.copy_(src), 20, torch)
        gbps = 2 * COPY_BYTES * n / (ms / 1e3) / 1e9
        phases["copy"] = {
            "t0": t0,
            "t1": time.perf_counter(),
            "iterations": n,
            "gpu_ms": ms,
            "achieved_gbps_read_plus_write": gbps,
        }

        t0 = time.perf_counter()
        n, ms = run_for(args.seconds, lambda: torch.mm(a, b, out=c), 20, torch)
        tflops = 2 * MATMUL_N**3 * n / (ms / 1e3) / 1e12
        phases["matmul_bf16"] = {
            "t0": t0,
            "t1": time.perf_counter(),
            "iterations": n,
            "gpu_ms": ms,
            "achieved_tflops": tflops,
        }

        t0 = time.perf_counter()
        n, ms = run_for(args.seconds, lambda: tiny.add_(1.0), TINY_SYNC_EVERY, torch)
        phases["tiny_kernels"] = {
            "t0": t0,
            "t1": time.perf_counter(),
            "iterations": n,
            "gpu_ms": ms,
            "kernels_per_s": n / (ms / 1e3),
            "us_per_kernel": ms * 1e3 / n,
        }
    finally:
        sampler.stop()

    achieved = {
        "idle": "no load",
        "copy": f"copy {phases['copy']['achieved_gbps_read_plus_write']:.0f} GB/s (read + write, CUDA events)",
        "matmul_bf16": f"bf16 {MATMUL_N}^3 matmul {phases['matmul_bf16']['achieved_tflops']:.0f} TFLOP/s",
        "tiny_kernels": f"{phases['tiny_kernels']['kernels_per_s']:.0f} tiny kernels/s "
        f"({phases['tiny_kernels']['us_per_kernel']:.2f} us each)",
    }
    for name, phase in phases.items():
        phase["telemetry"] = summarize(sampler, phase["t0"], phase["t1"])
        print_phase(name, phase["telemetry"], achieved[name])

    snap = sampler.snapshot()
    cost = sampler.sample_cost()
    print(
        f"\nsample cost: median {cost['median_s'] * 1e6:.0f} us, max {cost['max_s'] * 1e6:.0f} us "
        f"over {cost['count']} samples at {SAMPLER_RATE_HZ:g} Hz"
    )
    result = {
        "format": "trackscope-telemetry-loads",
        "version": 1,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "torch_device": torch_name,
        "static": static,
        "availability": sampler.availability(),
        "sample_cost": cost,
        "phases": phases,
        "samples": {
            "t": jsonable(snap["t"]),
            "metrics": {k: jsonable(snap[k]) for k in METRICS},
            "cpu_per_core": [jsonable(row) for row in snap["cpu_per_core"]],
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    sampler.close()
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
