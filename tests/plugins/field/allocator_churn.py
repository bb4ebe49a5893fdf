"""allocator_churn: the correlation volume's running max taken a chunk of frames at a time in float32, the cache
emptied after each chunk "to keep memory low".

Each chunk copies its frames (and the window before them) out in float32 and takes a running max over them:
tens of MiB of scratch per chunk. ``torch.cuda.empty_cache()`` after the chunk hands those blocks back to the
driver, so the next chunk's scratch comes from ``cudaMalloc`` again, and every ``cudaFree`` waits for the
device. A few chunks per call, a few kernels each: the loop itself is not launch-bound; the churn is the cost
(on the H200 machine, over a [256, 47, 4096] bf16 volume: 0.91 ms per call without ``empty_cache``, 3.3 ms with
it, 14 cudaMalloc and 14 cudaFree per call).
"""

from __future__ import annotations

import torch
from torch import nn

from tests.plugins.field.common import BackboneTracker, frames_to_float, seeded, track

WINDOW_FRAMES = 8  # frames of history before a chunk that its running max sees
CHUNK_FRAMES = 8  # frames per chunk


def windowed_max(corr: torch.Tensor) -> torch.Tensor:
    """corr [N, T, P] -> each frame's running max since its chunk's window began [N, T, P], in corr's dtype."""
    out = []
    for start in range(0, corr.shape[1], CHUNK_FRAMES):
        first = max(0, start - WINDOW_FRAMES + 1)
        # planted: a float32 scratch copy per chunk, then the allocator's cache emptied
        scratch = corr[:, first:start + CHUNK_FRAMES].float()  # [N, <= WINDOW + CHUNK - 1, P]
        running = scratch.cummax(dim=1).values
        out.append(running[:, start - first:].to(corr.dtype))
        del scratch, running
        if corr.is_cuda:
            torch.cuda.empty_cache()
    return torch.cat(out, dim=1)


class AllocatorChurnTracker(BackboneTracker):
    def forward(self, frames: torch.Tensor, queries: torch.Tensor):
        return track(self.backbone(frames_to_float(frames)), queries, windowed_max)


def make() -> nn.Module:
    return seeded(AllocatorChurnTracker(), seed=116)
