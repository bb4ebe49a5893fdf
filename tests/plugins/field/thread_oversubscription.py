"""thread_oversubscription: four torch threads per core, and CPU-heavy torch work in every call.

``make()`` calls ``torch.set_num_threads(4 * os.cpu_count())`` (a "more threads, more speed" habit) and
forward says it again before building a CPU-side smoothing filter bank with torch; the intra-op pool then
runs 4x more threads than cores on the CPU ops.

Global state: the thread count is process-wide (and per OpenMP thread); ``release()`` restores the count
``make()`` found.
"""

from __future__ import annotations

import os

import torch
from torch import nn

from tests.plugins.field.common import Backbone, frames_to_float, seeded, track

THREADS_PER_CORE = 4
FILTERS = 16  # Gaussian filters in the bank
FILTER_SIZE = 21  # taps per side of each filter
_saved_threads: list[int] = []


def use_all_threads() -> None:
    # planted: 4x more intra-op threads than cores
    torch.set_num_threads(THREADS_PER_CORE * (os.cpu_count() or 1))


def filter_bank_on_cpu(height: int, width: int) -> torch.Tensor:
    """[FILTERS, H, W]: each filter's response to a full-resolution ramp, computed with CPU torch ops."""
    r = torch.arange(FILTER_SIZE, dtype=torch.float32) - FILTER_SIZE // 2
    sigmas = torch.linspace(1.0, FILTER_SIZE / 4, FILTERS)
    g = torch.exp(-(r[None] ** 2) / (2 * sigmas[:, None] ** 2))
    kernels = (g[:, :, None] * g[:, None, :]) / (g.sum(-1)[:, None, None] ** 2)  # [F, K, K]
    ramp = torch.linspace(0.0, 1.0, width).expand(1, 1, height, width)
    return nn.functional.conv2d(ramp, kernels[:, None], padding=FILTER_SIZE // 2)[0]  # [F, H, W]


class ThreadOversubscriptionTracker(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = Backbone()
        self.mix = nn.Conv2d(FILTERS, 16, 1)

    def forward(self, frames: torch.Tensor, queries: torch.Tensor):
        use_all_threads()
        bank = filter_bank_on_cpu(frames.shape[1], frames.shape[2]).to(frames.device)
        feats = self.backbone(frames_to_float(frames))
        prior = nn.functional.adaptive_avg_pool2d(self.mix(bank[None]), feats.shape[-2:])
        return track(nn.functional.normalize(feats + 0.1 * prior, dim=1), queries)


def make() -> nn.Module:
    _saved_threads.append(torch.get_num_threads())
    use_all_threads()
    return seeded(ThreadOversubscriptionTracker(), seed=122)


def release() -> None:
    """Put torch's intra-op thread count back to what make() found."""
    while _saved_threads:
        torch.set_num_threads(_saved_threads.pop())
