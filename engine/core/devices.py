"""Resolving the user's device choice to a torch device, with clear errors."""

from __future__ import annotations

import torch

from engine.core.errors import UserError


def resolve_device(name: str) -> torch.device:
    """'auto' picks the first CUDA device when one is usable, else the CPU."""
    name = (name or "auto").strip().lower()
    if name == "auto":
        return torch.device("cuda:0") if torch.cuda.is_available() else torch.device("cpu")
    if name == "cpu":
        return torch.device("cpu")
    if name.startswith("cuda"):
        if not torch.cuda.is_available():
            raise UserError(
                f"device {name!r} asked for, but torch sees no CUDA GPU "
                f"(torch {torch.__version__}, built with CUDA {torch.version.cuda or 'none'})",
                "use --device cpu, or install a CUDA build of torch",
            )
        dev = torch.device(name)
        index = dev.index or 0
        if index >= torch.cuda.device_count():
            raise UserError(
                f"device {name!r} asked for, but only {torch.cuda.device_count()} CUDA device(s) exist",
                "use --device cuda:0",
            )
        return torch.device("cuda", index)
    raise UserError(f"unknown device {name!r}", "use auto, cpu, cuda or cuda:N")


def device_name(device: torch.device) -> str:
    """What a user calls the device: the GPU's marketing name, or "CPU" (the one owner of this name)."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return "CPU"


def cuda_uuid(device: torch.device) -> str | None:
    """The UUID CUDA gives a CUDA device ('GPU-...' once NVML's prefix is added), None for the CPU or when torch
    cannot say. It names the physical GPU whatever ``CUDA_VISIBLE_DEVICES`` renumbered (a Ray worker sees its
    GPU as cuda:0), so the telemetry opens that GPU's NVML handle, not NVML's GPU 0."""
    if device.type != "cuda":
        return None
    try:
        uuid = getattr(torch.cuda.get_device_properties(device), "uuid", None)
    except (RuntimeError, AssertionError, AttributeError):
        return None
    text = str(uuid).strip() if uuid is not None else ""
    if not text:
        return None
    return text if text[:4].upper() in ("GPU-", "MIG-") else f"GPU-{text}"
