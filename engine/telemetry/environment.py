"""The machine a run happened on: GPU, driver, CUDA, torch, compute capability, CPU.

Captured once per report so that a report read on another machine still says where it was made.
Nothing here raises: a fact that cannot be read is left out or set to None.
"""

from __future__ import annotations

import os
import platform
import socket
import sys
from typing import Any

import torch

from engine.telemetry import nvml, specs


def cpu_info() -> dict[str, Any]:
    """CPU model name and core counts."""
    try:
        import psutil

        physical = psutil.cpu_count(logical=False)
    except Exception:  # psutil missing or unable to read: leave it out
        physical = None
    return {"model": specs.cpu_model(), "cores": os.cpu_count() or 1, "physical_cores": physical,
            "torch_threads": torch.get_num_threads()}


def _nvml_driver() -> str | None:
    """The NVIDIA driver version through NVML, or None when NVML is unavailable or disabled."""
    if nvml.nvml_disabled_by_env():
        return None
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            version = pynvml.nvmlSystemGetDriverVersion()
        finally:
            pynvml.nvmlShutdown()
        return version.decode() if isinstance(version, bytes) else str(version)
    except Exception:  # no driver, no library: not available
        return None


def gpu_info(device: torch.device | str) -> dict[str, Any] | None:
    """Name, compute capability, memory and SM count of a CUDA device; None for the CPU."""
    device = torch.device(device)
    if device.type != "cuda" or not torch.cuda.is_available():
        return None
    try:
        props = torch.cuda.get_device_properties(device)
    except Exception:
        return None
    return {
        "name": props.name,
        "compute_capability": [int(props.major), int(props.minor)],
        "memory_total_bytes": int(props.total_memory),
        "multiprocessor_count": int(props.multi_processor_count),
        "index": device.index or 0,
    }


def capture_environment(device: torch.device | str = "cpu", static_info: dict[str, Any] | None = None
                        ) -> dict[str, Any]:
    """The environment block of a run report. ``static_info``: a telemetry sampler's static facts."""
    static_info = dict(static_info or {})
    gpu = gpu_info(device)
    driver = static_info.get("driver")
    if gpu is not None:
        if driver is None:
            driver = _nvml_driver()
        for key in ("uuid", "max_sm_clock_mhz", "max_mem_clock_mhz", "memory_bus_width_bits", "power_limit_w",
                    "pcie_max_gen", "pcie_max_width", "peak_bandwidth_gbps", "gpm_supported"):
            if static_info.get(key) is not None:
                gpu[key] = static_info[key]
    return {
        "hostname": socket.gethostname(),
        "os": platform.platform(),
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "driver": driver,
        "cuda_driver_version": static_info.get("cuda_driver_version"),
        "device": str(torch.device(device)),
        "gpu": gpu,
        "cpu": cpu_info(),
    }


def environment_device_name(environment: dict[str, Any]) -> str:
    """The GPU name of an environment block, or "CPU"."""
    gpu = environment.get("gpu") if isinstance(environment, dict) else None
    return str(gpu.get("name")) if isinstance(gpu, dict) and gpu.get("name") else "CPU"


def environment_capability(environment: dict[str, Any]) -> tuple[int, int] | None:
    """The compute capability of an environment block's GPU, or None."""
    gpu = environment.get("gpu") if isinstance(environment, dict) else None
    cc = gpu.get("compute_capability") if isinstance(gpu, dict) else None
    if isinstance(cc, (list, tuple)) and len(cc) == 2:
        return int(cc[0]), int(cc[1])
    return None
