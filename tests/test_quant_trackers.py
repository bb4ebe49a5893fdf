"""int8/fp8 through the trackers on the CPU: CorrTrack's quantised copy (the float model untouched, the
recipe in describe), accuracy of the shipped weights, and the plugin path with its refusals."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from engine.core.config import RunConfig
from engine.core.errors import UserError
from engine.run.session import Failed, Finished, Session
from engine.trackers import load_tracker
from engine.trackers import quant as Q
from engine.trackers.corrtrack import CorrTrackNet, CorrTrackTracker
from engine.trackers.corrtrack.model import CorrTrackConfig
from engine.trackers.corrtrack.tracker import KEEP_FLOAT
from engine.trackers.plugin import wrap_plugin
from tests.helpers import moving_square_video
from tests.plugins import mlp_refine
from tests.test_corrtrack import _shifting_texture

TINY = CorrTrackConfig(feature_dim=16, widths=(16, 16, 16), hidden_dim=32, mixer_dilations=(1, 2), num_iters=2)
MLP = "tests.plugins.mlp_refine:factory"


def _run(tracker, frames, queries, precision, name="corrtrack"):
    config = RunConfig(tracker=name, device="cpu", precision=precision)
    return Session(frames, queries, config, tracker=tracker).run()


def test_corrtrack_quantised_copy_leaves_the_float_model_and_fp32_tracks_unchanged():
    torch.manual_seed(0)
    tracker = CorrTrackTracker(model=CorrTrackNet(TINY), polish=False)
    before = {k: v.clone() for k, v in tracker.model.state_dict().items()}
    frames = np.random.default_rng(0).integers(0, 256, (4, 64, 64, 3), dtype=np.uint8)
    queries = np.array([[0, 3.0, 4.0], [2, 39.0, 29.0], [3, 20.5, 10.25]], np.float32)
    plan = tracker.describe_precision("int8", "cpu")["quantisation"]  # before any run: a dry run
    first = _run(tracker, frames, queries, "fp32")
    ends = {mode: _run(tracker, frames, queries, mode) for mode in Q.QUANT_MODES}
    again = _run(tracker, frames, queries, "fp32")
    assert isinstance(first, Finished) and isinstance(again, Finished)
    np.testing.assert_array_equal(first.tracks, again.tracks)
    for end in ends.values():
        assert isinstance(end, Finished), getattr(end, "message", end)
        assert np.isfinite(end.tracks).all() and not np.array_equal(end.tracks, first.tracks)
    assert isinstance(tracker.model.corr_in, nn.Linear) and tracker.model.corr_recipe is None
    assert all(torch.equal(v, before[k]) for k, v in tracker.model.state_dict().items())
    info = tracker.describe()["quantisation"]
    assert set(info) == {"int8", "fp8"}
    assert info["int8"]["recipe"]["mode"] == "int8" and info["int8"]["quantised_layers"] >= 8
    assert any("cost_volume matmul" in q for q in info["int8"]["quantised"])
    assert any("corr_in" in q for q in info["int8"]["quantised"])
    assert any(s.startswith("corr_in") and "kept in fp32" in s for s in info["fp8"]["not_quantised"])
    assert any("3x3" in s for s in info["int8"]["not_quantised"])
    assert any("polish" in s for s in info["int8"]["not_quantised"])
    assert any("init_logits" in s and "smaller than 16" in s for s in info["int8"]["not_quantised"])
    assert plan["quantised"] == info["int8"]["quantised"]
    assert info["int8"]["kernel_check"]["operand_layout"] == "column-major" and not plan["kernel_check"]
    assert tracker.describe_precision("bf16", "cpu") == {}
    assert set(KEEP_FLOAT) == set(Q.QUANT_MODES)


@pytest.mark.parametrize("mode", Q.QUANT_MODES)
def test_shipped_weights_track_a_moving_texture_in_int8_and_fp8(mode):
    frames = _shifting_texture(6, 3.0)
    rng = np.random.default_rng(1)
    queries = np.concatenate([np.zeros((12, 1)), rng.uniform(60, 180, (12, 2))], axis=1).astype(np.float32)
    expected = queries[:, None, 1:] + np.stack([3.0 * np.arange(6), np.zeros(6)], axis=1)[None]
    end = _run(CorrTrackTracker(polish=False), frames, queries, mode)
    assert isinstance(end, Finished)
    assert np.median(np.linalg.norm(end.tracks - expected, axis=-1)) < 2.0  # fp32: 1.14 px
    assert end.visible.mean() > 0.9


def test_plugin_int8_fp8_quantise_a_copy_and_keep_its_stages():
    tracker = load_tracker(MLP)
    frames = moving_square_video(6, 64)
    queries = np.array([[0, 10.0, 10.0], [2, 30.0, 20.0], [1, 5.0, 50.0]], np.float32)
    ref = _run(tracker, frames, queries, "fp32", MLP)
    assert isinstance(ref, Finished)
    for mode in Q.QUANT_MODES:
        events = list(Session(frames, queries, RunConfig(tracker=MLP, device="cpu", precision=mode),
                              tracker=tracker).events())
        end = events[-1]
        assert isinstance(end, Finished), getattr(end, "message", end)
        stages = {k for e in events if hasattr(e, "stage_ms") for k in e.stage_ms}
        assert {"embed", "mlp", "head"} <= stages  # the stage hooks survive the swap
        d = np.linalg.norm(end.tracks - ref.tracks, axis=-1)
        assert 0 < d.max() < 3.0, (mode, d.max())
    assert isinstance(tracker.plugin.embed, nn.Linear)  # the fp32 reference stays
    again = _run(tracker, frames, queries, "fp32", MLP)
    np.testing.assert_array_equal(again.tracks, ref.tracks)
    info = tracker.describe()["quantisation"]["int8"]
    assert info["quantised_layers"] == 1 + mlp_refine.DEPTH and any("head" in s for s in info["not_quantised"])
    assert tracker.describe_precision("fp8", "cpu")["quantisation"]["recipe"]["mode"] == "fp8"


def test_plugins_that_cannot_be_quantised_are_refused_with_the_reason():
    frames = moving_square_video(4, 32)
    queries = np.array([[0, 8.0, 12.0]], np.float32)
    name = "tests.plugins.mlp_refine:callable_factory"
    tracker = load_tracker(name)
    end = _run(tracker, frames, queries, "int8", name)
    assert isinstance(end, Failed) and "cannot quantise a plugin that is not an nn.Module" in end.message
    with pytest.raises(UserError, match="not an nn.Module"):
        tracker.describe_precision("int8", "cpu")
    assert isinstance(_run(tracker, frames, queries, "fp32", name), Finished)  # float modes still run

    class NoLinear(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3)

        def forward(self, frames, queries):
            return queries[:, None, 1:].expand(-1, frames.shape[0], -1), torch.ones(len(queries), frames.shape[0])

    plain = wrap_plugin("nolinear", NoLinear)
    end = _run(plain, frames, queries, "fp8", "nolinear")
    assert isinstance(end, Failed) and "no nn.Linear or 1x1 Conv2d" in end.message and "3x3 conv" in end.message
