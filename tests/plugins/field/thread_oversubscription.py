"""thread_oversubscription: four torch threads per core, and a bank of CPU-side priors built op by op every call.

``make()`` calls ``torch.set_num_threads(4 * os.cpu_count())`` (a "more threads, more speed" habit) and
forward says it again before building a bank of Gaussian position priors with torch on the CPU: a handful of
elementwise ops over a full-resolution grid per filter, each op one parallel region of an intra-op team 4x
larger than the cores. Such mid-size ops are where oversubscription costs most (on the H200 machine's 16 cores,
an ``exp`` over 1 M floats took 0.27-0.30 ms at 64 threads against 0.04-0.05 at 16, and this bank 28.5-29.0 ms
against 6.0).

Global state: the thread count is process-wide (and per OpenMP thread); ``release()`` restores the count
``make()`` found.
"""

from __future__ import annotations

import os

import torch
from torch import nn

from tests.plugins.field.common import Backbone, frames_to_float, seeded, track

THREADS_PER_CORE = 4
FILTERS = 16  # Gaussian priors in the bank
SIGMA_MIN, SIGMA_MAX = 0.1, 1.0  # their widths, in half-frames
_saved_threads: list[int] = []


def use_all_threads() -> None:
    # planted: 4x more intra-op threads than cores
    torch.set_num_threads(THREADS_PER_CORE * (os.cpu_count() or 1))


def filter_bank_on_cpu(height: int, width: int) -> torch.Tensor:
    """[FILTERS, H, W]: Gaussian position priors of growing width around the frame centre, unit mean each, built
    filter by filter with CPU torch ops."""
    ys = torch.linspace(-1.0, 1.0, height)[:, None].expand(height, width)
    xs = torch.linspace(-1.0, 1.0, width)[None, :].expand(height, width)
    radius2 = xs * xs + ys * ys  # [H, W]
    bank = []
    for sigma in torch.linspace(SIGMA_MIN, SIGMA_MAX, FILTERS).tolist():
        prior = torch.exp(radius2 * (-0.5 / sigma**2))
        prior = prior / prior.mean()
        bank.append(torch.sqrt(prior + 1.0) - 1.0)
    return torch.stack(bank)


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
