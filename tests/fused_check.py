"""Run by tests/test_corrtrack_fused.py in a subprocess under TRITON_INTERPRET=1 (Triton's CPU interpreter: the
kernels' own code, on numpy): fused.py's kernels against the eager code they replace. Prints one JSON object of
the largest differences seen."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from corrtrack_nets import TINY_V2, tiny_inputs  # noqa: E402

from engine.trackers.corrtrack import CorrTrackNet, fused  # noqa: E402
from engine.trackers.corrtrack.model import TemporalBlock, layer_norm  # noqa: E402

UNIT = {torch.float16: 2.0 ** -11, torch.bfloat16: 2.0 ** -8}  # unit roundoff: one rounding's relative error


def moved_block(dim: int, dilation: int, seed: int) -> TemporalBlock:
    torch.manual_seed(seed)
    block = TemporalBlock(dim, dilation)
    with torch.no_grad():
        for p in block.parameters():
            p.normal_()
    return block


def eager(fn, *args):
    with fused.disabled():
        return fn(*args)


def one_rounding_reference(block: TemporalBlock, x: torch.Tensor, dtype: torch.dtype
                           ) -> tuple[torch.Tensor, torch.Tensor]:
    """The taps of the block's rounded LayerNorm output in float64, as the kernel means to compute them, and the
    sum of the terms' magnitudes (what the rounding of each term is relative to)."""
    d = block.dilation
    w, b = (p.to(dtype).double() for p in (block.norm.weight, block.norm.bias))
    xr = x.to(dtype).double()
    mean = xr.mean(-1, keepdim=True)
    var = ((xr - mean) ** 2).mean(-1, keepdim=True)
    y = ((xr - mean) / torch.sqrt(var + block.norm.eps) * w + b).to(dtype).double()
    taps, bias = block.taps.to(dtype).double(), block.tap_bias.to(dtype).double()
    out, scale = bias + y * taps[1], bias.abs() + (y * taps[1]).abs()
    out[:, d:] += y[:, :-d] * taps[0]
    scale[:, d:] += (y[:, :-d] * taps[0]).abs()
    out[:, :-d] += y[:, d:] * taps[2]
    scale[:, :-d] += (y[:, d:] * taps[2]).abs()
    return out, scale


def main() -> int:
    assert fused.triton_version() is not None, "Triton is not importable"
    # fp32_block: relative to the largest output; *_block_units: in units of the dtype's roundoff, relative to
    # the terms' magnitudes (a LayerNorm output that rounds the other way near a tie counts as one). The
    # interpreter converts to bf16 by truncation (a GPU rounds to nearest), so bf16 is checked loosely.
    result: dict[str, float] = {"fp32_block": 0.0, "fp32_norm": 0.0, "net_px": 0.0}
    with torch.no_grad():
        for dilation, frames in ((1, 5), (2, 11), (8, 5), (8, 19)):
            block = moved_block(32, dilation, seed=dilation * 100 + frames)
            x = torch.randn(3, frames, 32)
            assert fused.usable(x)
            got, want = block(x), eager(block, x)
            result["fp32_block"] = max(result["fp32_block"], float((got - want).abs().max() / want.abs().max()))
            norm_got, norm_want = layer_norm(block.norm, x), eager(layer_norm, block.norm, x)
            result["fp32_norm"] = max(result["fp32_norm"], float((norm_got - norm_want).abs().max()))
            for dtype in (torch.float16, torch.bfloat16):
                mixed = fused.ln_taps(x, block.norm, block.taps, block.tap_bias, dilation, dtype)
                assert mixed.dtype == dtype
                ref, scale = one_rounding_reference(block, x, dtype)
                units = float(((mixed.double() - ref).abs() / scale).max()) / UNIT[dtype]
                key = f"{str(dtype).split('.')[-1]}_block_units"
                result[key] = max(result.get(key, 0.0), units)
        net = CorrTrackNet(TINY_V2).eval()  # every layer norm of a v2 net (blocks, attention, output)
        torch.manual_seed(7)
        for p in net.parameters():
            p.add_(0.05 * torch.randn_like(p))
        video, queries = tiny_inputs(seed=2)
        got = net(video, queries)[0][-1][0]
        want = eager(net, video, queries)[0][-1][0]
        result["net_px"] = float((got - want).abs().max())
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
