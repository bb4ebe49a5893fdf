"""autocast_disabled_region: the matmul-heavy feature refinement wrapped in ``autocast(enabled=False)``.

Run in bf16: the MLP over every feature cell (the bulk of the FLOPs) runs as float32 GEMMs because the
user turned autocast off around it "for stability" and cast its input to float32.
"""

from __future__ import annotations

import torch
from torch import nn

from tests.plugins.field.common import Backbone, CellMlp, frames_to_float, refine_cells, seeded, track


def refine_in_float32(mlp: nn.Module, feats: torch.Tensor) -> torch.Tensor:
    """feats [T, C, h, w] -> refined [T, C, h, w] float32."""
    # planted: autocast disabled around the GEMMs, inputs cast to float32 (fp32 GEMMs in a bf16 run)
    with torch.autocast(device_type=feats.device.type, enabled=False):
        return refine_cells(mlp, feats.float())


class AutocastDisabledTracker(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = Backbone()
        self.refine = CellMlp()

    def forward(self, frames: torch.Tensor, queries: torch.Tensor):
        feats = refine_in_float32(self.refine, self.backbone(frames_to_float(frames)))
        return track(feats, queries)


def make() -> nn.Module:
    return seeded(AutocastDisabledTracker(), seed=111)
