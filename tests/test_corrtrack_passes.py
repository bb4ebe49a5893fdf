"""CorrTrack's fewer-passes formulations (session 21) against the plain formulas they replaced, on constructed
tensors: the numbers must stay the same (fp32) so trained weights keep their meaning."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from engine.trackers.corrtrack.model import (
    POOL_FACTORS,
    CorrTrackConfig,
    CorrTrackNet,
    TemporalBlock,
    layer_norm,
)
from engine.trackers.corrtrack.polish import _window_sums


def _padded_block(block: TemporalBlock, x: torch.Tensor) -> torch.Tensor:
    """The block as it was written before: a zero-padded copy and three shifted products."""
    d = block.dilation
    y = block.norm(x)
    t = y.shape[1]
    yp = F.pad(y, (0, 0, d, d))
    taps = block.taps
    y = yp[:, :t] * taps[0] + yp[:, d:d + t] * taps[1] + yp[:, 2 * d:2 * d + t] * taps[2] + block.tap_bias
    return x + block.fc2(F.gelu(block.fc1(y)))


@pytest.mark.parametrize("dilation,frames", [(1, 9), (4, 9), (8, 9), (12, 9)])  # 12 >= T: only frame t's tap
def test_temporal_block_matches_the_padded_formula_values_and_gradients(dilation: int, frames: int) -> None:
    torch.manual_seed(dilation)
    block = TemporalBlock(16, dilation)
    with torch.no_grad():
        block.taps.normal_()
        block.tap_bias.normal_()
    x = torch.randn(5, frames, 16, requires_grad=True)
    got = block(x)
    want = _padded_block(block, x)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    g_got = torch.autograd.grad(got.square().sum(), [x, block.taps, block.tap_bias])
    g_want = torch.autograd.grad(want.square().sum(), [x, block.taps, block.tap_bias])
    for a, b in zip(g_got, g_want):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


def test_window_sums_match_two_separable_average_pools() -> None:
    torch.manual_seed(0)
    region = torch.randn(3, 4, 23, 23) * 2.0
    k = 13
    x = torch.stack([region, region.square()], dim=2).view(3, 8, 23, 23)
    want = (F.avg_pool2d(F.avg_pool2d(x, (1, k), stride=1), (k, 1), stride=1) * (k * k)).view(3, 4, 2, 11, 11)
    got = _window_sums(region, k)
    assert got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-4)
    # a window's sum is what it says: the top-left window of the first frame and track, by hand
    torch.testing.assert_close(got[0, 0, 0, 0, 0], region[0, 0, :k, :k].sum(), rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(got[0, 0, 1, 10, 3], region[0, 0, 10:10 + k, 3:3 + k].square().sum(),
                               rtol=1e-5, atol=1e-4)


def test_coarse_levels_equal_the_pooled_stride4_volume() -> None:
    torch.manual_seed(1)
    net = CorrTrackNet(CorrTrackConfig())
    b, t, size, c = 1, 3, 64, net.cfg.feature_dim
    feats = torch.randn(b, t, size * size, c)
    qfeat = torch.randn(b, 5, c)
    levels = net.cost_volume(feats, qfeat)
    vol = torch.matmul(qfeat / math.sqrt(c), feats.reshape(b, t * size * size, c).transpose(1, 2))
    flat = vol.view(b * 5 * t, 1, size, size)
    assert [lv.shape[-1] for lv in levels] == [size // f for f in POOL_FACTORS]
    torch.testing.assert_close(levels[0], vol.view(b, 5, t, size, size))
    for level, factor in zip(levels[1:], POOL_FACTORS[1:]):
        want = F.avg_pool2d(flat, factor).view(b, 5, t, size // factor, size // factor)
        torch.testing.assert_close(level, want, rtol=1e-5, atol=1e-5)


def test_init_head_logsumexp_through_the_peak_matches_logsumexp() -> None:
    torch.manual_seed(2)
    net = CorrTrackNet(CorrTrackConfig())
    levels = [torch.randn(1, 4, 3, s, s) * 6.0 for s in (64, 32, 16)]
    pos, vis, acc = net.init_head(levels)
    flat = levels[1].reshape(12, 32 * 32)
    peak = flat.max(dim=1).values
    lse = torch.logsumexp(flat, dim=1)
    # the visibility/accuracy logits are a linear map of (peak, peak - lse, mass): recompute the first two
    w, bias = net.init_logits.weight, net.init_logits.bias
    stats_vis = vis.reshape(-1) - bias[0] - w[0, 0] * peak - w[0, 1] * (peak - lse)  # = w[0, 2] * mass
    stats_acc = acc.reshape(-1) - bias[1] - w[1, 0] * peak - w[1, 1] * (peak - lse)  # = w[1, 2] * mass
    torch.testing.assert_close(stats_vis / w[0, 2], stats_acc / w[1, 2], rtol=1e-4, atol=1e-4)


def test_layer_norm_keeps_half_precision_under_autocast_and_is_plain_otherwise() -> None:
    torch.manual_seed(3)
    norm = torch.nn.LayerNorm(32)
    with torch.no_grad():
        norm.weight.normal_()
        norm.bias.normal_()
    x = torch.randn(6, 5, 32)
    torch.testing.assert_close(layer_norm(norm, x), norm(x))  # no autocast: the module itself
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = layer_norm(norm, x)  # (CUDA's autocast would run norm(x) in float32 and return float32)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), norm(x), rtol=2e-2, atol=3e-2)  # bf16 rounding only
    with torch.autocast("cpu", dtype=torch.float16):
        assert layer_norm(norm, x).dtype == torch.float16
