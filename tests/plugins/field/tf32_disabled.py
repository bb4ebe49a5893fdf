"""tf32_disabled: forward turns TF32 off for matmuls and convolutions (a "reproducibility" habit).

Run in tf32 mode: the session enables TF32, the plugin's first lines disable it again, so the MLP over
every feature cell runs as IEEE float32 GEMMs on a card with TF32 tensor cores. (The session restores
the flags when the run ends.)
"""

from __future__ import annotations

import torch
from torch import nn

from tests.plugins.field.common import Backbone, CellMlp, frames_to_float, refine_cells, seeded, track


def disable_tf32() -> None:
    # planted: TF32 off for cuBLAS and cuDNN inside forward
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False


class Tf32DisabledTracker(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = Backbone()
        self.refine = CellMlp()

    def forward(self, frames: torch.Tensor, queries: torch.Tensor):
        disable_tf32()
        feats = refine_cells(self.refine, self.backbone(frames_to_float(frames)))
        return track(feats, queries)


def make() -> nn.Module:
    return seeded(Tf32DisabledTracker(), seed=112)
