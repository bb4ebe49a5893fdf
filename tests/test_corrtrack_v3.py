"""CorrTrack v3: attention across tracks (TrackAttention), support points in the tracker and in training, warm
start from v2 weights, selection by name."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from engine.cli import main as cli_main
from engine.core.config import RunConfig
from engine.core.errors import UserError
from engine.core.stages import StageTimer
from engine.run.session import Finished, Session
from engine.trackers.base import RunContext
from engine.trackers.corrtrack import CorrTrackNet, CorrTrackTracker
from engine.trackers.corrtrack.model import MODEL_SIZE, CorrTrackConfig, layer_norm
from engine.trackers.corrtrack.support import SUPPORT_GRID, TrackAttention, support_queries, with_support
from engine.trackers.corrtrack.weights import V2_WEIGHTS, load_model, manifest_path, save_model, warm_start
from engine.training import corrtrack as T
from engine.training.losses import track_losses
from tests.corrtrack_nets import TINY_V2, TINY_V3, assert_same_outputs, saved_net, tiny_inputs

SUPPORT = SUPPORT_GRID * SUPPORT_GRID


def _v2_file(tmp_path, seed: int = 3):
    path = tmp_path / "v2.safetensors"
    return saved_net(path, TINY_V2, {"note": "v2", "training": {"total_steps": 5}}, seed), path


def _live_v3(tmp_path) -> CorrTrackNet:
    """A v3 net warm-started from random-ish v2 weights, its track attention's projection made non-zero."""
    _, path = _v2_file(tmp_path)
    model, _ = warm_start(path, 0, track_attention_layers=1)
    torch.manual_seed(11)
    torch.nn.init.normal_(model.track_attention[0].proj.weight, std=0.2)
    return model.eval()


_inputs = tiny_inputs


def _layer(seed: int = 0) -> TrackAttention:
    torch.manual_seed(seed)
    layer = TrackAttention(16, 4, MODEL_SIZE, layer_norm)
    torch.nn.init.normal_(layer.proj.weight, std=0.3)
    return layer


def _layer_inputs(b: int, n: int, t: int, seed: int = 1):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(b * n, t, 16, generator=gen)
    pos = torch.rand(b, n, t, 2, generator=gen) * MODEL_SIZE
    vis = torch.randn(b, n, t, generator=gen) * 3
    acc = torch.randn(b, n, t, generator=gen) * 3
    return x, pos, vis, acc


# -- config and manifests ------------------------------------------------------------------------------------
def test_config_version_manifest_round_trip_and_old_manifests(tmp_path) -> None:
    assert TINY_V3.version == "v3" and TINY_V2.version == "v2"
    assert CorrTrackConfig(track_attention_layers=1).version == "v3"  # straight from v1 is v3 too
    assert CorrTrackConfig.from_dict(TINY_V3.to_dict()) == TINY_V3
    v1_manifest = {k: v for k, v in TINY_V2.to_dict().items() if not k.startswith(("attention", "track_"))}
    v2_manifest = {k: v for k, v in TINY_V2.to_dict().items() if k != "track_attention_layers"}
    assert CorrTrackConfig.from_dict(v1_manifest).version == "v1"
    assert CorrTrackConfig.from_dict(v2_manifest) == TINY_V2
    with pytest.raises(ValueError, match="track_attention_layers"):
        CorrTrackConfig(track_attention_layers=-1)
    assert not any(name.startswith("track_attention") for name in CorrTrackNet(TINY_V2).state_dict())
    path = tmp_path / "v3.safetensors"
    save_model(CorrTrackNet(TINY_V3), path)
    loaded, manifest = load_model(path)
    assert loaded.cfg == TINY_V3 and manifest["config"]["track_attention_layers"] == 1
    shipped = json.loads(manifest_path(V2_WEIGHTS).read_text())["config"]  # a real v2 manifest, without the field
    assert "track_attention_layers" not in shipped and CorrTrackConfig.from_dict(shipped).version == "v2"


# -- warm start ----------------------------------------------------------------------------------------------
def test_v2_weights_in_a_v3_net_give_exactly_v2_outputs(tmp_path) -> None:
    v2, path = _v2_file(tmp_path)
    v3, manifest = warm_start(path, 0, track_attention_layers=1)
    assert v3.cfg == TINY_V3 and manifest["note"] == "v2"
    for name, tensor in v2.state_dict().items():
        assert torch.equal(v3.state_dict()[name], tensor), name
    assert not v3.track_attention[0].proj.weight.any() and not v3.track_attention[0].proj.bias.any()
    assert_same_outputs(v2, v3, *_inputs(videos=2))


def test_warm_start_the_shipped_v2_weights() -> None:
    v3, manifest = warm_start(V2_WEIGHTS, 0, track_attention_layers=1)
    assert v3.cfg.version == "v3" and v3.cfg.attention_layers == 1 and manifest["config"]["attention_layers"] == 1
    assert v3.training and not v3.track_attention[0].proj.weight.any()
    with pytest.raises(UserError, match="heads"):  # the track attention reuses the file's attention heads
        warm_start(V2_WEIGHTS, 0, attention_heads=8, track_attention_layers=1)


# -- the layer -----------------------------------------------------------------------------------------------
def test_track_attention_starts_at_zero_and_is_equivariant_to_track_order() -> None:
    x, pos, vis, acc = _layer_inputs(2, 7, 4)
    fresh = TrackAttention(16, 4, MODEL_SIZE, layer_norm)
    assert torch.equal(fresh(x, pos, vis, acc), x)
    layer = _layer()
    y = layer(x, pos, vis, acc)
    assert not torch.allclose(y, x)
    perm = torch.tensor([3, 0, 6, 1, 5, 2, 4])
    rows = (torch.arange(2).view(2, 1) * 7 + perm).reshape(-1)  # the same permutation within each video
    y_perm = layer(x[rows], pos[:, perm], vis[:, perm], acc[:, perm])
    torch.testing.assert_close(y_perm, y[rows], rtol=1e-5, atol=1e-5)


def test_track_attention_mixes_tracks_of_a_video_never_videos() -> None:
    layer = _layer()
    x, pos, vis, acc = _layer_inputs(2, 5, 3)
    y = layer(x, pos, vis, acc)
    x2 = x.clone()
    x2[1] += torch.randn(3, 16, generator=torch.Generator().manual_seed(5))  # video 0, track 1 (not a constant:
    # the LayerNorm would take that away)
    y2 = layer(x2, pos, vis, acc).view(2, 5, 3, 16)
    y = y.view(2, 5, 3, 16)
    others = [0, 2, 3, 4]
    assert (y2[0, others] - y[0, others]).abs().amax(dim=(1, 2)).min() > 1e-4  # every other track of video 0 moved
    assert torch.equal(y2[1], y[1])  # video 1 did not
    moved = pos.clone()
    moved[0, 1] += 40.0  # where a track is matters to the others (the position features reach q and k)
    assert not torch.allclose(layer(x, moved, vis, acc).view(2, 5, 3, 16)[0, 0], y[0, 0])
    doubted = vis.clone()
    doubted[0, 1] = -20.0  # a track predicted occluded is listened to less
    assert not torch.allclose(layer(x, pos, doubted, acc).view(2, 5, 3, 16)[0, 0], y[0, 0])


def test_track_attention_under_bf16_any_count_and_gradients() -> None:
    layer = _layer()
    for b, n, t in ((1, 1, 1), (2, 3, 5), (1, 70, 2)):
        x, pos, vis, acc = _layer_inputs(b, n, t)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = layer(x, pos, vis, acc)
        assert y.shape == x.shape and torch.isfinite(y).all()
    x, pos, vis, acc = _layer_inputs(2, 4, 3)
    pos.requires_grad_(True)
    layer(x, pos, vis, acc).square().sum().backward()
    assert pos.grad is None  # positions are detached
    for name in ("qkv.weight", "where.weight", "key_weights", "proj.weight", "norm.weight"):
        assert dict(layer.named_parameters())[name].grad.abs().sum() > 0, name


def test_in_the_net_videos_of_a_batch_never_mix_and_v2_never_mixes_tracks(tmp_path) -> None:
    v3 = _live_v3(tmp_path)
    v2, _ = _v2_file(tmp_path)
    v2.eval()
    video, queries = _inputs(videos=2)
    other = queries.clone()
    other[1, :, 1:] += 17.0  # video 1's queries moved
    moved = queries.clone()
    moved[0, 0, 1:] += 23.0  # video 0's first query moved
    with torch.no_grad():
        base = v3(video, queries)[0][-1][0]
        assert torch.equal(v3(video, other)[0][-1][0][0], base[0])  # video 0 untouched by video 1's tracks
        assert not torch.allclose(v3(video, moved)[0][-1][0][0, 1:], base[0, 1:])  # its own tracks listen
        base2 = v2(video, queries)[0][-1][0]
        assert torch.equal(v2(video, moved)[0][-1][0][0, 1:], base2[0, 1:])  # v2: each track alone


# -- support points ------------------------------------------------------------------------------------------
def test_support_queries_cover_the_frame_with_a_margin() -> None:
    s = support_queries(SUPPORT_GRID, MODEL_SIZE, 2, "cpu")
    assert s.shape == (2, SUPPORT, 3) and (s[..., 0] == 0).all()
    half_cell = MODEL_SIZE / SUPPORT_GRID / 2
    assert s[..., 1:].min() == half_cell - 0.5 and s[..., 1:].max() == MODEL_SIZE - half_cell - 0.5
    assert len({tuple(p) for p in s[0, :, 1:].tolist()}) == SUPPORT
    q = torch.rand(2, 3, 3)
    assert torch.equal(with_support(q, 0, MODEL_SIZE), q)
    both = with_support(q, SUPPORT_GRID, MODEL_SIZE)
    assert both.shape == (2, 3 + SUPPORT, 3) and torch.equal(both[:, :3], q)


class _SeenQueries:
    """Wraps a net's query_features, noting how many queries each call got."""

    def __init__(self, model: CorrTrackNet):
        self.counts: list[int] = []
        self._inner = model.query_features
        model.query_features = self  # type: ignore[method-assign]

    def __call__(self, feats: torch.Tensor, queries: torch.Tensor) -> torch.Tensor:
        self.counts.append(queries.shape[1])
        return self._inner(feats, queries)


FRAMES = np.random.default_rng(0).integers(0, 256, (5, 48, 80, 3), dtype=np.uint8)
QUERIES = np.array([[0, 3.0, 4.0], [2, 39.0, 29.0], [4, 70.5, 10.25], [1, 12.0, 40.0]], np.float32)


def _track(tracker: CorrTrackTracker, queries: np.ndarray, precision: str = "fp32"):
    ctx = RunContext(torch.device("cpu"), precision, 8, StageTimer(torch.device("cpu"), enabled=False))
    with torch.inference_mode():
        return tracker.track(tracker.prepare(FRAMES, ctx), queries, ctx)


def test_v3_tracker_adds_support_points_and_returns_only_the_queries(tmp_path) -> None:
    model = _live_v3(tmp_path)
    seen = _SeenQueries(model)
    tracker = CorrTrackTracker(model=model)
    for queries in (QUERIES, QUERIES[2:3]):
        result = _track(tracker, queries)
        n = len(queries)
        assert seen.counts[-1] == n + SUPPORT
        assert result.tracks.shape == (n, 5, 2) and result.visible.shape == (n, 5)
        frame = queries[:, 0].astype(int)
        assert np.array_equal(result.tracks[np.arange(n), frame], queries[:, 1:])  # the query frames, exact
        assert result.visible[np.arange(n), frame].all() and np.isfinite(result.tracks).all()
    info = tracker.describe()
    assert info["model_version"] == "v3"
    assert info["support_points"] == {"count": SUPPORT, "grid": "8x8", "frame": 0, "batches_run": 2}
    # the support tracks listen to the queries and the queries to them: with them off, other numbers
    off = CorrTrackTracker(model=model, support_grid=0)
    plain = _track(off, QUERIES)
    assert seen.counts[-1] == len(QUERIES) and off.describe()["support_points"]["count"] == 0
    assert not np.allclose(plain.tracks, _track(tracker, QUERIES).tracks)
    with pytest.raises(ValueError, match="support_grid"):
        CorrTrackTracker(model=model, support_grid=-1)


def test_v3_from_v2_weights_tracks_as_v2_and_v2_gets_no_support(tmp_path) -> None:
    v2, path = _v2_file(tmp_path)
    v3, _ = warm_start(path, 0, track_attention_layers=1)  # zero projection: the support points change nothing
    seen2 = _SeenQueries(v2)
    t2 = CorrTrackTracker(model=v2)
    t3 = CorrTrackTracker(model=v3)
    r2, r3 = _track(t2, QUERIES), _track(t3, QUERIES)
    assert seen2.counts == [len(QUERIES)] and "support_points" not in t2.describe()
    np.testing.assert_allclose(r3.tracks, r2.tracks, atol=1e-3)  # not bitwise: the batch's GEMMs have more rows
    assert np.array_equal(r3.visible, r2.visible)


def test_v3_tracker_runs_every_cpu_precision(tmp_path) -> None:
    tracker = CorrTrackTracker(model=_live_v3(tmp_path), polish=False)
    for precision in ("fp32", "bf16", "int8", "fp8"):
        end = Session(FRAMES, QUERIES, RunConfig(tracker="corrtrack", device="cpu", precision=precision,
                                                 points_per_batch=3), tracker=tracker).run()
        assert isinstance(end, Finished), (precision, getattr(end, "message", end))
        assert end.tracks.shape == (len(QUERIES), 5, 2) and np.isfinite(end.tracks).all()
    quantised = tracker.describe()["quantisation"]["int8"]["quantised"]
    assert any("track_attention.0.qkv" in q for q in quantised)


def test_registry_corrtrack_v3(tmp_path, monkeypatch) -> None:
    from engine.trackers import load_tracker, registry
    from engine.trackers.corrtrack import weights as W

    assert "corrtrack-v3" in registry.available_trackers()
    missing = tmp_path / "corrtrack_v3.safetensors"
    monkeypatch.setattr(W, "V3_WEIGHTS", missing)
    with pytest.raises(UserError, match="corrtrack_v3.safetensors"):
        load_tracker("corrtrack-v3")
    save_model(_live_v3(tmp_path), missing)
    v3 = load_tracker("corrtrack-v3")
    info = v3.describe()
    assert v3.name == "corrtrack-v3" and info["model_version"] == "v3" and info["weights"] == str(missing)
    assert info["support_points"]["count"] == SUPPORT


# -- training ------------------------------------------------------------------------------------------------
def test_training_step_drops_the_support_rows(tmp_path) -> None:
    model = _live_v3(tmp_path).train()
    seen = _SeenQueries(model)
    video, queries = _inputs(videos=2, frames=4, points=3)
    outputs, match = T.run_with_support(model, video, queries, SUPPORT_GRID)
    assert seen.counts == [3 + SUPPORT]
    assert all(p.shape == (2, 3, 4, 2) and v.shape == a.shape == (2, 3, 4) for p, v, a in outputs)
    assert match.shape[:3] == (2, 3, 4)
    tracks = queries[:, :, None, 1:].expand(2, 3, 4, 2).clone()
    terms = track_losses(outputs, match, tracks, torch.ones(2, 3, 4, dtype=torch.bool))
    assert torch.isfinite(terms.total)
    terms.total.backward()
    assert model.track_attention[0].qkv.weight.grad.abs().sum() > 0  # the queries' loss reaches the mixing
    assert T.support_grid_for(TINY_V2, SUPPORT_GRID) == 0 and T.support_grid_for(TINY_V3, 4) == 4


SMALL_RUN = ["--steps", "2", "--batch-size", "1", "--num-frames", "4", "--num-points", "4", "--val-videos", "1",
             "--hard-val-videos", "1", "--hard-val-frames", "4", "--val-frames", "4", "--texture-size", "64",
             "--device", "cpu", "--warmup-steps", "1", "--precision", "fp32", "--support-grid", "2"]


def test_train_v3_warm_start_then_resume(tmp_path, capsys) -> None:
    _, v2_path = _v2_file(tmp_path)
    out1 = tmp_path / "piece1"
    assert cli_main(["train", "--out", str(out1), "--init-from", str(v2_path), "--track-attention-layers", "1",
                     *SMALL_RUN]) == 0
    text = capsys.readouterr().out
    assert "CorrTrack v3, 1 attention layer(s), 1 track attention layer(s), 4 support points" in text
    model, manifest = load_model(out1 / "last.safetensors")
    assert model.cfg == TINY_V3 and manifest["training"]["support_grid"] == 2
    assert manifest["training"]["total_steps"] == 5 + 2 and manifest["training"]["data"] == T.V2_DATA_DEFAULTS
    assert all(np.isfinite(p["aj"]) for p in manifest["curve"])
    out2 = tmp_path / "piece2"
    assert cli_main(["train", "--out", str(out2), "--resume", str(out1 / "last.safetensors"), *SMALL_RUN]) == 0
    model2, manifest2 = load_model(out2 / "last.safetensors")
    assert model2.cfg == TINY_V3 and manifest2["training"]["total_steps"] == 9
    capsys.readouterr()
    assert cli_main(["train", "--out", str(tmp_path / "o"), "--resume", str(out1 / "last.safetensors"),
                     "--track-attention-layers", "2", *SMALL_RUN]) == 2
    assert "--init-from" in capsys.readouterr().err


def test_key_bias_attention_is_attention_with_a_key_bias() -> None:
    """The bias carried as head channels gives softmax(q k^T / sqrt(Dh) + bias) v, in fp32 and in bf16."""
    import math

    from engine.trackers.corrtrack.support import key_bias_attention

    torch.manual_seed(5)
    q, k, v = (torch.randn(3, 4, 37, 32) for _ in range(3))
    bias = -torch.rand(3, 4, 37, 1) * 30.0  # strongly and weakly trusted keys
    logits = q @ k.transpose(-1, -2) / math.sqrt(32) + bias.transpose(-1, -2)
    want = torch.softmax(logits, dim=-1) @ v
    torch.testing.assert_close(key_bias_attention(q, k, v, bias), want, rtol=1e-4, atol=1e-4)
    got16 = key_bias_attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), bias).float()
    plain16 = torch.softmax((q.bfloat16().float() @ k.bfloat16().float().transpose(-1, -2)) / math.sqrt(32)
                            + bias.transpose(-1, -2), dim=-1) @ v.bfloat16().float()
    assert (got16 - plain16).abs().max() < 0.05  # bf16 rounding of the products, not of the bias
    assert (got16 - want).abs().max() > 0  # (it did run in bf16)


def test_shipped_v3_weights_run_every_cpu_precision_with_their_manifest() -> None:
    """The shipped corrtrack-v3: checked weights, the training command in the manifest, N rows back for N queries
    in fp32/bf16/int8/fp8 (support points dropped), the track attention quantised with the rest."""
    import json

    import numpy as np

    from engine.core.config import RunConfig
    from engine.run.session import Finished, Session
    from engine.trackers import load_tracker
    from engine.trackers.corrtrack import weights as W

    manifest = json.loads(W.manifest_path(W.V3_WEIGHTS).read_text())
    assert manifest["config"]["track_attention_layers"] == 1
    assert any("--track-attention-layers 1" in run["command"] for run in manifest["runs"])  # the piece that made v3
    tracker = load_tracker("corrtrack-v3")
    frames = np.random.default_rng(1).integers(0, 256, (3, 48, 64, 3), dtype=np.uint8)
    queries = np.array([[0, 3.0, 4.0], [2, 39.0, 29.0]], np.float32)
    for precision in ("fp32", "bf16", "int8", "fp8"):
        end = Session(frames, queries, RunConfig(tracker="corrtrack-v3", device="cpu", precision=precision),
                      tracker=tracker).run()
        assert isinstance(end, Finished), (precision, getattr(end, "message", end))
        assert end.tracks.shape == (2, 3, 2) and np.isfinite(end.tracks).all()
        np.testing.assert_allclose(end.tracks[1, 2], queries[1, 1:], atol=1e-4)  # the query frame is exact
    info = tracker.describe()
    assert info["model_version"] == "v3" and info["sha256"] == manifest["sha256"]
    assert info["support_points"]["count"] == 64
    assert any("track_attention.0.qkv" in q for q in info["quantisation"]["int8"]["quantised"])


def test_the_support_grid_comes_from_the_manifest_unless_given(tmp_path) -> None:
    import json

    from engine.trackers.corrtrack import weights as W

    assert CorrTrackTracker(W.V3_WEIGHTS).support_grid == 8  # the shipped weights were trained with 8x8
    model, _ = W.load_model(W.V3_WEIGHTS)
    path = tmp_path / "v3.safetensors"
    W.save_model(model, path, {"training": {"support_grid": 4}})
    assert json.loads(W.manifest_path(path).read_text())["training"]["support_grid"] == 4
    assert CorrTrackTracker(path).support_grid == 4
    assert CorrTrackTracker(path, support_grid=0).support_grid == 0
