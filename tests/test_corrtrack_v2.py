"""CorrTrack v2: temporal attention in the refinement, warm start from v1 weights, selection by name."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch

from engine.core.config import RunConfig
from engine.core.errors import TrackerError, UserError
from engine.run.session import Finished, Session
from engine.trackers.corrtrack import CorrTrackNet, CorrTrackTracker
from engine.trackers.corrtrack.model import CorrTrackConfig, TemporalAttention
from engine.trackers.corrtrack.weights import load_model, manifest_path, save_model, warm_start
from engine.training.losses import track_losses
from tests.corrtrack_nets import TINY, TINY_V2, assert_same_outputs, saved_net, tiny_inputs


def _inputs(seed: int = 0, frames: int = 6) -> tuple[torch.Tensor, torch.Tensor]:
    return tiny_inputs(seed, frames=frames, points=5)


def _v1_file(tmp_path, seed: int = 3):
    path = tmp_path / "v1.safetensors"
    return saved_net(path, TINY, {"note": "v1"}, seed), path


def test_v1_manifests_without_the_new_fields_still_load() -> None:
    old = {k: v for k, v in TINY.to_dict().items() if not k.startswith("attention")}
    cfg = CorrTrackConfig.from_dict(old)
    assert cfg == TINY and cfg.attention_layers == 0 and cfg.version == "v1"
    assert CorrTrackConfig.from_dict(TINY_V2.to_dict()) == TINY_V2 and TINY_V2.version == "v2"
    assert not any(name.startswith("attention") for name in CorrTrackNet(TINY).state_dict())
    with pytest.raises(ValueError, match="heads"):
        CorrTrackConfig(hidden_dim=16, attention_layers=1, attention_heads=3)


def test_warm_start_from_v1_weights_gives_v1_outputs(tmp_path) -> None:
    v1, path = _v1_file(tmp_path)
    v2, manifest = warm_start(path, attention_layers=1)
    assert v2.cfg.attention_layers == 1 and manifest["note"] == "v1"
    for name, tensor in v1.state_dict().items():  # every v1 tensor arrived
        assert torch.equal(v2.state_dict()[name], tensor), name
    assert_same_outputs(v1, v2, *_inputs(), atol=1e-6)


def test_warm_start_is_strict_on_the_v1_names(tmp_path) -> None:
    from safetensors.torch import load_file, save_file

    from engine.trackers.corrtrack.weights import sha256_file

    _, path = _v1_file(tmp_path)
    state = load_file(str(path))
    del state["corr_in.weight"]
    broken = tmp_path / "broken.safetensors"
    save_file(state, str(broken))
    meta = json.loads(manifest_path(path).read_text())
    manifest_path(broken).write_text(json.dumps({**meta, "sha256": sha256_file(broken)}))
    with pytest.raises(TrackerError, match="corr_in.weight"):
        warm_start(broken, attention_layers=1)
    with pytest.raises(TrackerError, match="missing"):
        warm_start(tmp_path / "nope.safetensors", attention_layers=1)


def test_v2_weights_round_trip_and_load_by_manifest(tmp_path) -> None:
    _, path = _v1_file(tmp_path)
    v2, _ = warm_start(path, attention_layers=1)
    out = tmp_path / "v2.safetensors"
    save_model(v2, out)
    loaded, manifest = load_model(out)
    assert loaded.cfg == v2.cfg and manifest["config"]["attention_layers"] == 1
    with pytest.raises(TrackerError, match="do not fit"):  # v2 weights are not v1 weights
        bad = json.loads(manifest_path(out).read_text())
        manifest_path(out).write_text(json.dumps({**bad, "config": {**bad["config"], "attention_layers": 0}}))
        load_model(out)


def test_attention_learns_and_its_output_starts_at_zero(tmp_path) -> None:
    layer = TemporalAttention(16, 4)
    x = torch.randn(3, 7, 16)
    logits = torch.randn(3, 7, 2)
    assert torch.equal(layer(x, logits), x)
    _, path = _v1_file(tmp_path)  # trained-like weights: a fresh net's zero update head passes no gradient back
    model, _ = warm_start(path, attention_layers=1)
    video, queries = _inputs(1, 4)
    tracks = queries[:, :, None, 1:].expand(1, 5, 4, 2).clone()
    visible = torch.ones(1, 5, 4, dtype=torch.bool)
    outputs, match = model(video, queries)
    track_losses(outputs, match, tracks, visible).total.backward()
    grads = {n: p.grad for n, p in model.named_parameters() if n.startswith("attention.")}
    assert grads["attention.0.proj.weight"].abs().sum() > 0  # the zero projection gets a gradient at once
    assert grads["attention.0.qkv.weight"].abs().sum() == 0  # the rest once the projection has moved


def test_attention_on_any_length_and_under_bf16() -> None:
    layer = TemporalAttention(16, 4)
    torch.nn.init.normal_(layer.proj.weight, std=0.1)
    for t in (1, 5, 48):
        x = torch.randn(2, t, 16)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = layer(x, torch.randn(2, t, 2))
        assert y.shape == x.shape and torch.isfinite(y).all()
    # an occluded key frame weighs less: the same frame copied, once trusted and once not
    x = torch.randn(1, 3, 16)
    trusted = layer(x, torch.tensor([[[5.0, 5.0], [5.0, 5.0], [-8.0, -8.0]]]))
    assert not torch.allclose(trusted, layer(x, torch.full((1, 3, 2), 5.0)))


def _run(tracker, frames, queries, precision):
    return Session(frames, queries, RunConfig(tracker="corrtrack", device="cpu", precision=precision),
                   tracker=tracker).run()


def test_v2_tracker_runs_every_cpu_precision_and_quantises_the_attention() -> None:
    torch.manual_seed(0)
    model = CorrTrackNet(dataclasses.replace(TINY_V2, feature_dim=16, widths=(16, 16, 16), hidden_dim=32))
    torch.nn.init.normal_(model.attention[0].proj.weight, std=0.05)
    tracker = CorrTrackTracker(model=model, polish=False)
    frames = np.random.default_rng(0).integers(0, 256, (4, 64, 64, 3), dtype=np.uint8)
    queries = np.array([[0, 3.0, 4.0], [2, 39.0, 29.0], [3, 20.5, 10.25]], np.float32)
    ends = {p: _run(tracker, frames, queries, p) for p in ("fp32", "bf16", "int8", "fp8")}
    for precision, end in ends.items():
        assert isinstance(end, Finished), (precision, getattr(end, "message", end))
        assert np.isfinite(end.tracks).all()
    quantised = tracker.describe()["quantisation"]["int8"]["quantised"]
    assert any("attention.0.qkv" in q for q in quantised) and any("attention.0.proj" in q for q in quantised)
    info = tracker.describe()
    assert info["model_version"] == "v2" and info["config"]["attention_layers"] == 1


def test_registry_names_v1_and_v2(tmp_path, monkeypatch) -> None:
    from engine.trackers import load_tracker, registry
    from engine.trackers.corrtrack import weights as W

    assert {"corrtrack", "corrtrack-v1", "corrtrack-v2"} <= set(registry.available_trackers())
    v1 = load_tracker("corrtrack-v1")
    info = v1.describe()
    assert info["name"] == "corrtrack-v1" and info["model_version"] == "v1"
    assert info["sha256"] == json.loads(manifest_path(W.DEFAULT_WEIGHTS).read_text())["sha256"]
    assert load_tracker("corrtrack").describe()["sha256"] == info["sha256"]  # the default stays v1 for now
    missing = tmp_path / "corrtrack_v2.safetensors"
    monkeypatch.setattr(W, "V2_WEIGHTS", missing)
    with pytest.raises(UserError, match="corrtrack_v2.safetensors"):
        load_tracker("corrtrack-v2")
    _, path = _v1_file(tmp_path)
    v2_model, _ = warm_start(path, attention_layers=1)
    save_model(v2_model, missing)
    v2 = load_tracker("corrtrack-v2")
    assert v2.name == "corrtrack-v2" and v2.describe()["model_version"] == "v2"
    assert v2.describe()["weights"] == str(missing)
