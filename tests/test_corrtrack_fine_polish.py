"""CorrTrack's fine polish stage: NCC at the video's own resolution for videos larger than the model's 256x256.

Rules on constructed data: which videos get the stage and at what size, the uint8 grey frames, the gather path
against grid_sample on rectangular frames, sub-pixel recovery in the video's pixels, what it must leave alone,
and the tracker's wiring (prepared data, flags, describe, query frames exact).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from engine.core.stages import StageTimer
from engine.trackers.base import RunContext
from engine.trackers.corrtrack import CorrTrackNet, CorrTrackTracker
from engine.trackers.corrtrack.model import MODEL_SIZE, CorrTrackConfig
from engine.trackers.corrtrack.polish import (
    FINE_MIN_STD,
    MIN_STD,
    FineConfig,
    fine_chunk_frames,
    fine_grey,
    fine_polish,
    gathered_regions,
    region_patches,
    sample_patches,
)
from engine.trackers.corrtrack.tracker import FINE_POLISH_ENV, POLISH_ENV

TINY = CorrTrackConfig(feature_dim=8, widths=(8, 8, 8), hidden_dim=16, mixer_dilations=(1, 2), num_iters=2)


def _texture_video(num_frames: int, width: int, height: int, shift: tuple[float, float], seed: int = 3
                   ) -> np.ndarray:
    """A smooth random colour texture moving by ``shift`` (x, y) px per frame: uint8 [T, H, W, 3]."""
    import cv2

    rng = np.random.default_rng(seed)
    big = cv2.resize(rng.random((height // 6, width // 6, 3)).astype(np.float32), (width + 64, height + 64),
                     interpolation=cv2.INTER_CUBIC)
    frames = []
    for t in range(num_frames):
        m = np.float32([[1, 0, -32 + shift[0] * t], [0, 1, -32 + shift[1] * t]])
        frames.append(cv2.warpAffine(big, m, (width, height), flags=cv2.INTER_LINEAR))
    return (np.clip(np.stack(frames), 0, 1) * 255).astype(np.uint8)


def test_the_stage_runs_only_on_videos_larger_than_the_model_and_caps_their_size() -> None:
    cfg = FineConfig()
    assert cfg.size_for(MODEL_SIZE, MODEL_SIZE) is None  # the synthetic sets and the sample: unchanged
    assert cfg.size_for(320, 240) is None
    assert cfg.size_for(368, 480) == (368, 480)  # portrait phone clip: its own pixels
    assert cfg.size_for(854, 480) == (854, 480)
    assert cfg.size_for(1920, 1080) == (1280, 720)  # capped on the longer side, aspect kept
    assert cfg.size_for(1080, 1920) == (720, 1280)
    assert FineConfig(max_side=300).size_for(1920, 1080) is None  # capped below min_side: nothing to gain


def test_the_search_radius_follows_the_fine_frames_pixels_per_model_pixel() -> None:
    cfg = FineConfig(radius_model_px=2.0, min_radius=3, max_radius=10)
    assert cfg.ncc_for(512, 512).radius == 4  # 2 px per model px
    assert cfg.ncc_for(1024, 576).radius == 8
    assert cfg.ncc_for(1280, 720).radius == 10
    assert cfg.ncc_for(4000, 100).radius == 10  # clamped
    assert cfg.ncc_for(384, 200).radius == 3
    assert cfg.ncc_for(1024, 576).half == cfg.half and cfg.ncc_for(1024, 576).min_ncc == cfg.min_ncc


def test_fine_grey_is_the_rounded_channel_mean_and_area_averages_when_smaller() -> None:
    rng = np.random.default_rng(0)
    frames = torch.from_numpy(rng.integers(0, 256, (2, 6, 8, 3), dtype=np.uint8))
    grey = fine_grey(frames, (8, 6))
    assert grey.dtype == torch.uint8 and grey.shape == (2, 6, 8)
    expected = np.round(frames.numpy().astype(np.float64).mean(axis=-1))
    assert np.array_equal(grey.numpy(), expected.astype(np.uint8))
    half = fine_grey(frames, (4, 3))
    assert half.shape == (2, 3, 4)
    block = frames.numpy().astype(np.float64).mean(axis=-1)[:, :2, :2].mean(axis=(1, 2))
    assert np.allclose(half.numpy()[:, 0, 0], np.round(block), atol=1)


def test_region_patches_on_rectangular_frames_match_the_gather_path_and_uint8_frames() -> None:
    gen = torch.Generator().manual_seed(4)
    grey = torch.randint(0, 256, (3, 20, 33), generator=gen).to(torch.uint8)
    centre = torch.rand(3, 7, 2, generator=gen) * torch.tensor([50.0, 34.0]) - 8  # some past the border
    ref = region_patches(grey.float(), centre, 9)
    got = gathered_regions(grey, centre, 9)
    assert got.shape == (3, 7, 9, 9) and got.dtype == torch.float32
    assert torch.allclose(got, ref, atol=1e-3)
    frame = torch.arange(3).repeat_interleave(7)
    assert torch.allclose(sample_patches(grey, frame, centre.reshape(21, 2), 9).view(3, 7, 9, 9), ref, atol=1e-3)


def _fine_case(num_frames: int = 4, noise: float = 3.0, n: int = 12):
    shift = (2.3, -1.1)
    video = _texture_video(num_frames, 600, 400, shift)
    cfg = FineConfig().ncc_for(600, 400)  # radius 5 at 2.3 px per model px
    grey = fine_grey(torch.from_numpy(video), (600, 400))
    gen = torch.Generator().manual_seed(2)
    xy = torch.rand(n, 2, generator=gen) * torch.tensor([400.0, 240.0]) + torch.tensor([100.0, 80.0])
    queries = torch.cat([torch.zeros(n, 1), xy], dim=1).unsqueeze(0)
    motion = torch.tensor(shift) * torch.arange(num_frames, dtype=torch.float32)[:, None]
    truth = (xy[:, None] + motion[None]).unsqueeze(0)
    estimate = truth + (torch.rand(truth.shape, generator=gen) * 2 - 1) * noise
    return grey, queries, truth, estimate, cfg


def test_fine_polish_recovers_sub_pixel_positions_in_the_videos_pixels() -> None:
    grey, queries, truth, estimate, cfg = _fine_case()
    visible = torch.ones(truth.shape[:3], dtype=torch.bool)
    polished, peak = fine_polish(grey, queries, estimate, visible, cfg)
    assert polished.shape == estimate.shape and polished.dtype == torch.float32
    after = (polished - truth).norm(dim=-1)[..., 1:]
    before = (estimate - truth).norm(dim=-1)[..., 1:]
    assert after.median() < 0.2, after.median()  # from about 2 px (uint8 frames: rounding included)
    assert after.max() < 0.5 * before.mean()
    assert (peak[..., 1:] > 0.9).all()


def test_the_fine_search_in_chunks_of_frames_gives_the_one_pass_numbers() -> None:
    grey, queries, truth, estimate, cfg = _fine_case(num_frames=7)
    visible = torch.ones(truth.shape[:3], dtype=torch.bool)
    visible[:, 3, 2:5] = False
    size = 2 * cfg.half + 1 + 2 * cfg.radius
    per_frame = queries.shape[1] * size * size
    assert fine_chunk_frames(queries.shape[1], cfg, elements=3 * per_frame) == 3
    assert fine_chunk_frames(queries.shape[1], cfg, elements=1) == 1  # never zero frames
    whole, whole_peak = fine_polish(grey, queries, estimate, visible, cfg, chunk_elements=1 << 40)
    for frames in (1, 3, 6):  # chunks of 1, 3 (7 = 3 + 3 + 1) and 6 frames
        got, peak = fine_polish(grey, queries, estimate, visible, cfg, chunk_elements=frames * per_frame)
        assert torch.equal(got, whole) and torch.equal(peak, whole_peak)
    assert not torch.equal(whole, estimate)


def test_fine_polish_leaves_occluded_far_and_flat_points_alone() -> None:
    grey, queries, truth, estimate, cfg = _fine_case()
    visible = torch.ones(truth.shape[:3], dtype=torch.bool)
    visible[:, :4] = False
    far = estimate.clone()
    far[:, 4:8, :, 1] = truth[:, 4:8, :, 1] - cfg.radius  # the true peak on the search window's border
    polished, peak = fine_polish(grey, queries, far, visible, cfg)
    assert torch.equal(polished[:, :8], far[:, :8]) and (peak[:, :8] == 0).all()
    assert not torch.equal(polished[:, 8:], far[:, 8:])
    flat = torch.full_like(grey, 120)
    polished, peak = fine_polish(flat, queries, estimate, visible, cfg)
    assert torch.equal(polished, estimate) and (peak == 0).all()
    # the flatness threshold means the same contrast as the model-resolution polish's, in grey levels
    assert pytest.approx(MIN_STD * 255 * 0.25) == FINE_MIN_STD


def _ctx() -> RunContext:
    return RunContext(torch.device("cpu"), "fp32", 16, StageTimer(torch.device("cpu"), enabled=False))


def test_the_tracker_keeps_fine_frames_only_for_large_videos_with_the_polish_on(monkeypatch) -> None:
    monkeypatch.delenv(POLISH_ENV, raising=False)
    monkeypatch.delenv(FINE_POLISH_ENV, raising=False)
    model = CorrTrackNet(TINY)
    large = _texture_video(3, 480, 400, (1.5, 0.5))
    small = _texture_video(3, 256, 256, (1.5, 0.5))
    with torch.inference_mode():
        tracker = CorrTrackTracker(model=model)
        prepared = tracker.prepare(large, _ctx())
        assert prepared.data["grey_fine"].dtype == torch.uint8
        assert tuple(prepared.data["grey_fine"].shape) == (3, 400, 480)
        assert "grey_fine" not in tracker.prepare(small, _ctx()).data
        assert "grey_fine" not in CorrTrackTracker(model=model, fine_polish=False).prepare(large, _ctx()).data
        assert "grey_fine" not in CorrTrackTracker(model=model, polish=False).prepare(large, _ctx()).data
    monkeypatch.setenv(FINE_POLISH_ENV, "0")
    off = CorrTrackTracker(model=model)
    assert off.fine_config is None and off.describe()["fine_polish"] is None
    monkeypatch.delenv(FINE_POLISH_ENV)
    info = CorrTrackTracker(model=model).describe()["fine_polish"]
    assert info["template_px"] == 2 * FineConfig().half + 1 and info["max_side_px"] == FineConfig().max_side
    custom = CorrTrackTracker(model=model, fine_polish=FineConfig(max_side=640))
    assert custom.describe()["fine_polish"]["max_side_px"] == 640


def test_the_fine_stage_maps_model_pixels_to_the_videos_and_back() -> None:
    """Estimates in model px of a 600x400 video, off by ~2 video px, come back within 0.2 video px."""
    from engine.trackers.corrtrack.tracker import from_model_xy, to_model_xy

    grey, queries, truth, estimate, _ = _fine_case()
    tracker = CorrTrackTracker(model=CorrTrackNet(TINY))
    visible = torch.ones(truth.shape[:3], dtype=torch.bool)
    q = queries[0]  # [N, 3] in video px (the fine frames are the video's own size here)
    pos_model = to_model_xy(estimate, 600, 400)
    out = from_model_xy(tracker._fine_stage(grey, q, pos_model, visible, 600, 400), 600, 400)
    assert (out - truth).norm(dim=-1)[..., 1:].median() < 0.2
    capped = fine_grey(torch.from_numpy(_texture_video(4, 600, 400, (2.3, -1.1))), (450, 300))  # 3/4 size
    out = from_model_xy(tracker._fine_stage(capped, q, pos_model, visible, 600, 400), 600, 400)
    assert (out - truth).norm(dim=-1)[..., 1:].median() < 0.35  # measured in the capped frames' pixels


def test_a_full_run_on_a_large_video_keeps_visibility_and_the_query_frames_exact() -> None:
    model = CorrTrackNet(TINY)
    video = _texture_video(4, 640, 360, (2.0, 1.0))
    rng = np.random.default_rng(3)
    queries = np.concatenate([rng.integers(0, 4, (10, 1)), rng.uniform([80, 60], [560, 300], (10, 2))],
                             axis=1).astype(np.float32)
    out = {}
    with torch.inference_mode():
        for fine in (False, True):
            tracker = CorrTrackTracker(model=model, fine_polish=fine)
            out[fine] = tracker.track(tracker.prepare(video, _ctx()), queries, _ctx())
    assert np.array_equal(out[True].visible, out[False].visible)  # the polish never changes visibility
    assert np.isfinite(out[True].tracks).all()
    rows = np.arange(len(queries))
    frame = queries[:, 0].astype(int)
    assert np.array_equal(out[True].tracks[rows, frame], queries[:, 1:])
