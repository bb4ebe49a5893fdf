"""CorrTrack: sampling maths against grid_sample, coordinates, the tracker on CPU, weights checks, losses."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from engine.core.config import RunConfig
from engine.core.errors import TrackerError
from engine.core.stages import BUILTIN_STAGES
from engine.run.session import Failed, Finished, Session
from engine.trackers.corrtrack import CorrTrackNet, CorrTrackTracker
from engine.trackers.corrtrack.model import CorrTrackConfig, local_windows, sample_points
from engine.trackers.corrtrack.polish import (
    PolishConfig,
    _window_sums,
    grey_frames,
    ncc_polish,
    region_patches,
    sample_patches,
)
from engine.trackers.corrtrack.tracker import COMPILE_ENV, POLISH_ENV, from_model_xy, to_model_xy
from engine.trackers.corrtrack.weights import DEFAULT_WEIGHTS, load_model, manifest_path, save_model, sha256_file
from engine.training.losses import match_loss, track_losses

MAX_WEIGHTS_BYTES = 20 * 2**20
TINY = CorrTrackConfig(feature_dim=8, widths=(8, 8, 8), hidden_dim=16, mixer_dilations=(1, 2), num_iters=2)


def _grid_sample_points(maps: torch.Tensor, xy: torch.Tensor) -> torch.Tensor:
    """Reference: maps [M, C, s, s], xy [M, K, 2] cells -> [M, K, C] (zeros outside, align_corners)."""
    s = maps.shape[-1]
    grid = (2 * xy / (s - 1) - 1).unsqueeze(1)  # [M, 1, K, 2]
    out = F.grid_sample(maps, grid, mode="bilinear", padding_mode="zeros", align_corners=True)
    return out[:, :, 0].permute(0, 2, 1)


def test_local_windows_match_grid_sample() -> None:
    gen = torch.Generator().manual_seed(1)
    m, s, r = 50, 9, 2
    vol = torch.randn(m, s * s, generator=gen)
    centre = torch.rand(m, 2, generator=gen) * (s + 6) - 3  # some windows hang over the edge
    got = local_windows(vol, s, centre, r).view(m, 2 * r + 1, 2 * r + 1)
    offs = torch.arange(-r, r + 1, dtype=torch.float32)
    oy, ox = torch.meshgrid(offs, offs, indexing="ij")
    xy = centre[:, None, :] + torch.stack([ox.reshape(-1), oy.reshape(-1)], dim=1)[None]
    ref = _grid_sample_points(vol.view(m, 1, s, s), xy)[..., 0].view(m, 2 * r + 1, 2 * r + 1)
    assert torch.allclose(got, ref, atol=1e-5)


def test_sample_points_match_grid_sample() -> None:
    gen = torch.Generator().manual_seed(2)
    b, t, s, c, n = 2, 3, 7, 5, 11
    feats = torch.randn(b, t, s * s, c, generator=gen)
    frame = torch.randint(0, t, (b, n), generator=gen)
    xy = torch.rand(b, n, 2, generator=gen) * (s + 2) - 1
    got = sample_points(feats, s, frame, xy)
    maps = feats.view(b, t, s, s, c).permute(0, 1, 4, 2, 3)  # [B, T, C, s, s]
    picked = maps[torch.arange(b)[:, None], frame]  # [B, N, C, s, s]
    ref = _grid_sample_points(picked.reshape(b * n, c, s, s), xy.reshape(b * n, 1, 2))[:, 0].view(b, n, c)
    assert torch.allclose(got, ref, atol=1e-5)


def test_coordinates_round_trip_and_keep_pixel_edges() -> None:
    xy = torch.tensor([[-0.5, -0.5], [639.5, 359.5], [10.0, 20.0]])
    model_xy = to_model_xy(xy, 640, 360)
    assert torch.allclose(model_xy[0], torch.tensor([-0.5, -0.5]))
    assert torch.allclose(model_xy[1], torch.tensor([255.5, 255.5]))
    assert torch.allclose(from_model_xy(model_xy, 640, 360), xy, atol=1e-4)


def _run(tracker: CorrTrackTracker, frames: np.ndarray, queries: np.ndarray, precision: str = "fp32"):
    config = RunConfig(tracker="corrtrack", device="cpu", precision=precision, points_per_batch=3, frames_per_batch=2)
    return Session(frames, queries, config, tracker=tracker).run()


def test_tracker_any_size_all_frames_cpu_fp32_and_bf16() -> None:
    torch.manual_seed(0)
    tracker = CorrTrackTracker(model=CorrTrackNet(TINY))
    frames = np.random.default_rng(0).integers(0, 256, (5, 30, 40, 3), dtype=np.uint8)
    queries = np.array([[0, 3.0, 4.0], [2, 39.0, 29.0], [4, 20.5, 10.25], [1, 0.0, 0.0]], np.float32)
    for precision in ("fp32", "bf16"):
        end = _run(tracker, frames, queries, precision)
        assert isinstance(end, Finished), getattr(end, "message", end)
        assert end.tracks.shape == (4, 5, 2) and np.isfinite(end.tracks).all()
        rows = np.arange(4)
        t = queries[:, 0].astype(int)
        np.testing.assert_allclose(end.tracks[rows, t], queries[:, 1:], atol=1e-5)
        assert end.visible[rows, t].all()
    assert tuple(tracker.stages) == BUILTIN_STAGES


def test_fp16_on_cpu_is_refused_with_a_reason() -> None:
    tracker = CorrTrackTracker(model=CorrTrackNet(TINY))
    frames = np.zeros((2, 16, 16, 3), np.uint8)
    end = _run(tracker, frames, np.array([[0, 1.0, 1.0]], np.float32), "fp16")
    assert isinstance(end, Failed) and "fp16" in end.message


def _shifting_texture(num_frames: int, shift: float) -> np.ndarray:
    """A smooth random texture moving right by ``shift`` px per frame: uint8 [T, 256, 256, 3]."""
    rng = np.random.default_rng(5)
    big = rng.random((96, 96, 3)).astype(np.float32)
    import cv2

    big = cv2.resize(big, (512, 512), interpolation=cv2.INTER_CUBIC)
    frames = []
    for t in range(num_frames):
        m = np.float32([[1, 0, -64 + shift * t], [0, 1, -64]])
        frames.append(cv2.warpAffine(big, m, (256, 256), flags=cv2.INTER_LINEAR))
    return (np.clip(np.stack(frames), 0, 1) * 255).astype(np.uint8)


@pytest.mark.slow
def test_shipped_weights_track_a_moving_texture(monkeypatch) -> None:
    monkeypatch.delenv(POLISH_ENV, raising=False)
    frames = _shifting_texture(6, 3.0)
    rng = np.random.default_rng(1)
    queries = np.concatenate([np.zeros((12, 1)), rng.uniform(60, 180, (12, 2))], axis=1).astype(np.float32)
    expected = queries[:, None, 1:] + np.stack([3.0 * np.arange(6), np.zeros(6)], axis=1)[None]
    medians = {}
    for polish in (False, True):
        end = _run(CorrTrackTracker(polish=polish), frames, queries)
        assert isinstance(end, Finished)
        medians[polish] = np.median(np.linalg.norm(end.tracks - expected, axis=-1))
        assert end.visible.mean() > 0.9
    assert medians[False] < 2.0, medians  # 1.14 px with the weights of 2026-11-30
    assert medians[True] < 0.5 and medians[True] < medians[False], medians


def _polish_case(shift: float = 1.37, num_frames: int = 5, n: int = 16, noise: float = 2.0, seed: int = 7):
    """Grey frames of a texture moving right by ``shift`` px per frame, queries on frame 0, true tracks and
    estimates off by up to ``noise`` px: (grey [T, S, S], queries [1, N, 3], truth, estimates [1, N, T, 2])."""
    video = torch.from_numpy(_shifting_texture(num_frames, shift))
    grey = grey_frames(CorrTrackNet.normalise(video.permute(0, 3, 1, 2)))
    gen = torch.Generator().manual_seed(seed)
    xy = torch.rand(n, 2, generator=gen) * 120 + 60
    queries = torch.cat([torch.zeros(n, 1), xy], dim=1).unsqueeze(0)
    motion = torch.stack([shift * torch.arange(num_frames, dtype=torch.float32), torch.zeros(num_frames)], dim=1)
    truth = (xy[:, None, :] + motion[None]).unsqueeze(0)
    estimate = truth + (torch.rand(truth.shape, generator=gen) * 2 - 1) * noise
    return grey, queries, truth, estimate


def test_sample_patches_match_grid_sample_inside() -> None:
    gen = torch.Generator().manual_seed(9)
    grey = torch.randn(3, 20, 20, generator=gen)
    centre = torch.rand(6, 2, generator=gen) * 8 + 6  # patches wholly inside: no edge repeat
    frame = torch.tensor([0, 1, 2, 2, 1, 0])
    got = sample_patches(grey, frame, centre, 5)
    offs = torch.arange(-2, 3, dtype=torch.float32)
    oy, ox = torch.meshgrid(offs, offs, indexing="ij")
    xy = centre[:, None, :] + torch.stack([ox.reshape(-1), oy.reshape(-1)], dim=1)[None]
    ref = _grid_sample_points(grey[frame].unsqueeze(1), xy)[..., 0].view(6, 5, 5)
    assert torch.allclose(got, ref, atol=1e-5)


def test_region_patches_agree_with_the_gather_path_also_beyond_the_border() -> None:
    gen = torch.Generator().manual_seed(11)
    grey = torch.randn(3, 24, 24, generator=gen)
    centre = torch.rand(3, 5, 2, generator=gen) * 40 - 8  # many patches reach past the edge
    got = region_patches(grey, centre, 7)  # frames first: [T, N, 7, 7]
    frame = torch.arange(3).repeat_interleave(5)
    ref = sample_patches(grey, frame, centre.reshape(15, 2), 7).view(3, 5, 7, 7)
    assert got.shape == (3, 5, 7, 7)
    assert torch.allclose(got, ref, atol=1e-4)


def test_window_sums_match_brute_force() -> None:
    gen = torch.Generator().manual_seed(12)
    region = torch.randn(2, 3, 9, 9, generator=gen)
    got = _window_sums(region, 4)  # [T, N, 2, 6, 6]
    windows = region.unfold(2, 4, 1).unfold(3, 4, 1)  # [T, N, 6, 6, 4, 4]
    assert torch.allclose(got[:, :, 0], windows.sum(dim=(-1, -2)), atol=1e-4)
    assert torch.allclose(got[:, :, 1], windows.square().sum(dim=(-1, -2)), atol=1e-4)


def test_polish_recovers_a_subpixel_translation_and_keeps_shapes() -> None:
    grey, queries, truth, estimate = _polish_case()
    visible = torch.ones(truth.shape[:3], dtype=torch.bool)
    polished, peak = ncc_polish(grey, queries, estimate, visible)
    assert polished.shape == estimate.shape and polished.dtype == torch.float32
    assert peak.shape == visible.shape and peak.dtype == torch.float32
    before = (estimate - truth).norm(dim=-1)[..., 1:]
    after = (polished - truth).norm(dim=-1)[..., 1:]
    assert after.median() < 0.25, after.median()  # from about 1.5 px
    assert after.mean() < 0.5 * before.mean(), (after.mean(), before.mean())
    assert (peak[..., 1:] > 0.9).float().mean() > 0.9


def test_polish_keeps_occluded_far_and_flat_estimates() -> None:
    grey, queries, truth, estimate = _polish_case(noise=1.0)
    visible = torch.ones(truth.shape[:3], dtype=torch.bool)
    visible[:, :5] = False  # occluded: never moved
    cfg = PolishConfig()
    far = estimate.clone()
    far[:, 5:10, :, 0] = truth[:, 5:10, :, 0] + cfg.radius  # true peak on the border of the search
    polished, peak = ncc_polish(grey, queries, far, visible, cfg)
    assert torch.equal(polished[:, :10], far[:, :10])
    assert (peak[:, :10] == 0).all()
    assert not torch.equal(polished[:, 10:], far[:, 10:])
    flat = torch.full_like(grey, 0.3)
    polished, peak = ncc_polish(flat, queries, estimate, visible, cfg)
    assert torch.equal(polished, estimate) and (peak == 0).all()


def test_polish_under_bf16_autocast_on_cpu_matches_fp32() -> None:
    grey, queries, truth, estimate = _polish_case(num_frames=3, n=8)
    visible = torch.ones(truth.shape[:3], dtype=torch.bool)
    ref, _ = ncc_polish(grey, queries, estimate, visible)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got, peak = ncc_polish(grey, queries, estimate, visible)
    assert got.dtype == torch.float32 and peak.dtype == torch.float32
    assert torch.allclose(got, ref, atol=1e-4)


def test_polish_option_env_and_describe(monkeypatch) -> None:
    monkeypatch.delenv(POLISH_ENV, raising=False)
    model = CorrTrackNet(TINY)
    assert CorrTrackTracker(model=model).describe()["polish"] is True
    assert CorrTrackTracker(model=model).describe()["polish_config"]["radius_px"] == PolishConfig().radius
    assert CorrTrackTracker(model=model, polish=False).describe()["polish"] is False
    monkeypatch.setenv(POLISH_ENV, "0")
    tracker = CorrTrackTracker(model=model)
    assert tracker.describe()["polish"] is False and "polish_config" not in tracker.describe()
    assert CorrTrackTracker(model=model, polish=True).polish is True


def test_compile_is_opt_in_and_cuda_only(monkeypatch) -> None:
    monkeypatch.delenv(COMPILE_ENV, raising=False)
    model = CorrTrackNet(TINY)
    assert CorrTrackTracker(model=model).describe()["compile"] == "eager"
    monkeypatch.setenv(COMPILE_ENV, "1")
    tracker = CorrTrackTracker(model=model)
    assert tracker.compile is True
    # on the CPU the plain functions run (compiling would cost tens of seconds per shape for little),
    # and the report says so
    assert tracker._fn("refine_step", model.refine_step, torch.device("cpu")) == model.refine_step
    assert tracker._compiled == {} and tracker.describe()["compile"] == "eager"
    assert tracker._compiling(torch.device("cuda")) is True


class _InductorFailure(RuntimeError):
    """Stands for an error raised inside torch.compile (the fallback tells them apart by module)."""


_InductorFailure.__module__ = "torch._inductor.exc"


def test_a_failing_compile_falls_back_to_the_plain_code_and_says_why() -> None:
    tracker = CorrTrackTracker(model=CorrTrackNet(TINY), compile=True, compile_backend="dynamo")
    tracker._compiled["refine_step"] = object()  # as if a compiled function had been made
    calls = []

    def body() -> str:
        calls.append(tracker._compiled.copy())
        if tracker._compiled:
            raise RuntimeError("while running the compiled graph") from _InductorFailure("triton: no compiler")
        return "ran"

    assert tracker._with_fallback(body) == "ran"
    assert len(calls) == 2 and tracker._compiled == {}
    assert tracker._compiling(torch.device("cuda")) is False
    assert "RuntimeError: while running the compiled graph" in tracker.describe()["compile_error"]
    # anything else, and out-of-memory errors, still reach the caller
    with pytest.raises(ValueError):
        tracker._with_fallback(lambda: (_ for _ in ()).throw(ValueError("bad queries")))
    oom = CorrTrackTracker(model=CorrTrackNet(TINY), compile=True, compile_backend="dynamo")
    oom._compiled["x"] = object()

    def out_of_memory() -> None:
        raise RuntimeError("CUDA out of memory") from _InductorFailure("x")

    with pytest.raises(RuntimeError, match="out of memory"):
        oom._with_fallback(out_of_memory)
    assert oom.compile_error == ""


def test_grey_frames_are_kept_only_for_the_polish() -> None:
    from engine.core.stages import StageTimer
    from engine.trackers.base import RunContext

    frames = _shifting_texture(3, 1.0)
    queries = np.array([[0, 128.0, 128.0]], np.float32)
    ctx = RunContext(torch.device("cpu"), "fp32", 16, StageTimer(torch.device("cpu"), enabled=False))
    model = CorrTrackNet(TINY)
    with torch.inference_mode():  # as the session runs trackers
        plain = CorrTrackTracker(model=model, polish=False)
        prepared = plain.prepare(frames, ctx)
        assert "grey" not in prepared.data
        assert plain.track(prepared, queries, ctx).tracks.shape == (1, 3, 2)
        polished = CorrTrackTracker(model=model, polish=True)
        prepared = polished.prepare(frames, ctx)
        assert prepared.data["grey"].shape == (3, 256, 256)
        assert polished.track(prepared, queries, ctx).tracks.shape == (1, 3, 2)


def test_registry_offers_corrtrack_with_and_without_polish(monkeypatch) -> None:
    monkeypatch.delenv(POLISH_ENV, raising=False)
    from engine.trackers import load_tracker
    from engine.trackers.registry import available_trackers

    assert {"corrtrack", "corrtrack-nopolish"} <= set(available_trackers())
    plain = load_tracker("corrtrack-nopolish")
    assert plain.name == "corrtrack-nopolish" and plain.polish is False
    assert plain.describe()["polish"] is False and plain.describe()["name"] == "corrtrack-nopolish"
    assert load_tracker("corrtrack").polish is True


def test_shipped_manifest_matches_the_file() -> None:
    manifest = json.loads(manifest_path(DEFAULT_WEIGHTS).read_text())
    assert manifest["sha256"] == sha256_file(DEFAULT_WEIGHTS)
    assert DEFAULT_WEIGHTS.stat().st_size < MAX_WEIGHTS_BYTES
    model, _ = load_model()
    assert sum(p.numel() for p in model.parameters()) == manifest["parameters"]
    for key in ("aj", "delta_avg", "oa"):
        assert 0.0 <= manifest["validation"][key] <= 1.0
    assert manifest["training"]["command"].startswith("trackscope train")


def test_weights_round_trip_and_clear_errors(tmp_path) -> None:
    torch.manual_seed(3)
    model = CorrTrackNet(TINY)
    path = tmp_path / "w.safetensors"
    save_model(model, path, {"note": "test"})
    loaded, manifest = load_model(path)
    for (name, a), b in zip(model.state_dict().items(), loaded.state_dict().values()):
        assert torch.equal(a, b), name
    assert manifest["note"] == "test"

    with pytest.raises(TrackerError, match="missing"):
        load_model(tmp_path / "nope.safetensors")
    corrupt = tmp_path / "c.safetensors"
    shutil.copy(path, corrupt)
    shutil.copy(manifest_path(path), manifest_path(corrupt))
    data = bytearray(corrupt.read_bytes())
    data[-5] ^= 0xFF
    corrupt.write_bytes(bytes(data))
    with pytest.raises(TrackerError, match="corrupt"):
        load_model(corrupt)
    truncated = tmp_path / "t.safetensors"
    truncated.write_bytes(path.read_bytes()[:100])
    meta = json.loads(manifest_path(path).read_text())
    manifest_path(truncated).write_text(json.dumps({**meta, "sha256": sha256_file(truncated)}))
    with pytest.raises(TrackerError, match="safetensors"):
        load_model(truncated)
    wrong = tmp_path / "x.safetensors"
    shutil.copy(path, wrong)
    manifest_path(wrong).write_text(json.dumps({**meta, "config": {**meta["config"], "hidden_dim": 32}}))
    with pytest.raises(TrackerError, match="do not fit|shape"):
        load_model(wrong)
    no_manifest = tmp_path / "m.safetensors"
    shutil.copy(path, no_manifest)
    with pytest.raises(TrackerError, match="manifest"):
        load_model(no_manifest)


def test_match_loss_prefers_the_true_cell() -> None:
    s = 8
    gt = torch.tensor([[[[43.5, 20.0]]]])  # [1, 1, 1, 2] model pixels -> cell (5, ~2) at stride 8
    visible = torch.ones(1, 1, 1, dtype=torch.bool)
    flat = torch.zeros(1, 1, 1, s, s)
    right = flat.clone()
    right[..., 2, 5] = 10.0
    wrong = flat.clone()
    wrong[..., 6, 1] = 10.0
    assert match_loss(right, gt, visible) < match_loss(flat, gt, visible) < match_loss(wrong, gt, visible)


def test_training_step_lowers_the_loss() -> None:
    torch.manual_seed(4)
    model = CorrTrackNet(TINY)
    video = torch.from_numpy(_shifting_texture(2, 4.0)).unsqueeze(0)  # [1, 2, 256, 256, 3]
    xy = torch.rand(1, 6, 2) * 120 + 60
    queries = torch.cat([torch.zeros(1, 6, 1), xy], dim=-1)
    tracks = xy[:, :, None, :] + torch.tensor([[4.0, 0.0]]) * torch.arange(2.0)[:, None]
    visible = torch.ones(1, 6, 2, dtype=torch.bool)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
    losses = []
    for _ in range(4):
        outputs, match_logits = model(video, queries)
        terms = track_losses(outputs, match_logits, tracks, visible)
        opt.zero_grad()
        terms.total.backward()
        opt.step()
        losses.append(terms.total.item())
    assert np.isfinite(losses).all()
    assert losses[-1] < losses[0]


def test_counting_mode_runs_eagerly_so_the_cost_model_sees_every_op() -> None:
    """CUDA graph replays bypass torch's dispatcher: the counted pass must run without them."""
    from engine.analysis.cost import clear_cache, count_session_cost
    from engine.core.config import RunConfig

    tracker = CorrTrackTracker(model=CorrTrackNet(TINY), cuda_graphs=True)
    with tracker.counting_mode():
        assert tracker.cuda_graphs is False
    assert tracker.cuda_graphs is True
    clear_cache()
    frames = _shifting_texture(6, 1.0)
    queries = np.array([[0, 20.0, 20.0], [2, 30.0, 40.0]], np.float32)
    graphs_seen = []
    track = tracker.track

    def spy(*args, **kwargs):
        graphs_seen.append(tracker.cuda_graphs)  # on the CPU graphs never run: check the flag the pass saw
        return track(*args, **kwargs)

    tracker.track = spy
    costs = count_session_cost(frames, queries, RunConfig(tracker="corrtrack", device="cpu"), tracker=tracker)
    for stage in ("backbone", "cost_volume", "refine"):
        assert costs[stage].flops > 0 and costs[stage].bytes > 0
    assert graphs_seen and not any(graphs_seen)
    assert tracker.cuda_graphs is True


def test_only_a_failed_capture_turns_cuda_graphs_off(monkeypatch) -> None:
    """A capture failure falls back to eager for good; any other CUDA error reaches the caller as it is."""
    from engine.trackers.corrtrack import graphs

    def broken_capture(fn, inputs, pool):
        raise RuntimeError("operation not permitted when stream is capturing")

    monkeypatch.setattr(graphs.torch.cuda, "graph_pool_handle", lambda: object())
    monkeypatch.setattr(graphs, "GraphedStage", broken_capture)
    cache = graphs.GraphCache()
    with pytest.raises(graphs.GraphCaptureError, match="capturing stage 'refine' failed"):
        cache.stage(("k",), "refine", lambda x: (x,), [torch.zeros(2)])

    tracker = CorrTrackTracker(model=CorrTrackNet(TINY), cuda_graphs=True)
    tracker._device = torch.device("cuda")  # as after a run on a GPU
    with pytest.raises(RuntimeError, match="illegal memory access"):
        tracker._with_fallback(lambda: (_ for _ in ()).throw(RuntimeError("an illegal memory access")))
    assert tracker.graph_error == "" and tracker.describe()["cuda_graphs"] is True
    attempts = []

    def body() -> str:
        attempts.append(tracker.graph_error)
        if not tracker.graph_error:
            cache.stage(("k",), "refine", lambda x: (x,), [torch.zeros(2)])
        return "eager"

    assert tracker._with_fallback(body) == "eager" and len(attempts) == 2
    assert tracker.describe()["cuda_graphs"] is False and "capturing stage" in tracker.describe()["cuda_graphs_error"]


def test_a_weights_save_that_fails_midway_keeps_the_previous_weights(tmp_path, monkeypatch) -> None:
    from pathlib import Path

    import safetensors.torch

    model = CorrTrackNet(TINY)
    path = tmp_path / "w.safetensors"
    save_model(model, path)
    before, manifest_before = path.read_bytes(), manifest_path(path).read_text()

    def half_then_full_disk(state, name):
        Path(name).write_bytes(b"partial")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(safetensors.torch, "save_file", half_then_full_disk)
    with pytest.raises(OSError):
        save_model(model, path)
    assert path.read_bytes() == before and manifest_path(path).read_text() == manifest_before  # before: truncated
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([path.name, manifest_path(path).name])
