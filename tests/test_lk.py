"""The OpenCV Lucas-Kanade baseline on tiny translating textures."""

from __future__ import annotations

import cv2
import numpy as np
import pytest
import torch

from engine.core.config import RunConfig
from engine.core.stages import StageTimer
from engine.run.session import Finished, Session
from engine.trackers import load_tracker
from engine.trackers.base import RunContext
from engine.trackers.lk import STAGES, LKTracker

SIZE = 96  # frame side, pixels
FRAMES = 10
VELOCITY = (1.5, -0.75)  # texture motion, pixels per frame (x, y)


def _texture(seed: int, side: int) -> np.ndarray:
    """Smooth random RGB texture, uint8 [side, side, 3]."""
    rng = np.random.default_rng(seed)
    noise = rng.uniform(0, 255, (side, side, 3)).astype(np.float32)
    return np.clip(cv2.GaussianBlur(noise, (0, 0), 2.0) * 3 - 255, 0, 255).astype(np.uint8)


def translating_video(velocity=VELOCITY, frames=FRAMES, size=SIZE, seed=0) -> np.ndarray:
    """A texture shifted by ``velocity`` px per frame: uint8 [T, H, W, 3]; the point at p on frame 0 is at
    p + t * velocity on frame t."""
    big = _texture(seed, size * 2)
    out = []
    for t in range(frames):
        shift = np.array([[1, 0, t * velocity[0] - size / 2], [0, 1, t * velocity[1] - size / 2]], np.float32)
        out.append(cv2.warpAffine(big, shift, (size, size), flags=cv2.INTER_CUBIC))
    return np.stack(out)


def _ctx(device: str = "cpu") -> RunContext:
    return RunContext(torch.device(device), "fp32", 16, StageTimer("cpu"))


def test_tracks_translation_forward_and_backward():
    frames = translating_video()
    tracker = LKTracker()
    ctx = _ctx()
    prepared = tracker.prepare(frames, ctx)
    # queries at frame 0, a middle frame and the last frame, away from the borders
    query_t = np.array([0, 5, 9, 5])
    start = np.array([[30.0, 40.0], [50.0, 50.0], [60.0, 45.0], [44.3, 52.7]])
    velocity = np.array(VELOCITY)
    q_xy = start + query_t[:, None] * velocity
    queries = np.concatenate([query_t[:, None], q_xy], axis=1).astype(np.float32)
    result = tracker.track(prepared, queries, ctx)
    expected = start[:, None, :] + np.arange(FRAMES)[None, :, None] * velocity  # [N, T, 2]
    assert result.tracks.shape == (4, FRAMES, 2) and result.visible.shape == (4, FRAMES)
    err = np.linalg.norm(result.tracks - expected, axis=-1)
    assert result.visible.all()
    assert err.max() < 0.3, err.max()
    # the query frame holds the query itself
    np.testing.assert_allclose(result.tracks[np.arange(4), query_t], q_xy, atol=1e-5)
    stage_ms = ctx.timer.collect()
    assert set(stage_ms) == set(STAGES)
    assert all(v >= 0 for v in stage_ms.values())


def test_point_leaving_the_frame_becomes_not_visible_and_holds():
    frames = translating_video(velocity=(6.0, 0.0))
    tracker = LKTracker()
    ctx = _ctx()
    prepared = tracker.prepare(frames, ctx)
    queries = np.array([[0, 70.0, 48.0]], dtype=np.float32)  # reaches x = 94 at t=4, leaves at t=5
    result = tracker.track(prepared, queries, ctx)
    vis = result.visible[0]
    assert vis[:4].all()
    assert not vis[6:].any()  # out of the frame from t=5 on (at the latest one frame after)
    lost_at = int(np.argmin(vis))
    # the held position is the last accepted one, repeated for every later frame
    held = result.tracks[0, lost_at - 1]
    np.testing.assert_allclose(result.tracks[0, lost_at:], np.repeat(held[None], FRAMES - lost_at, 0))
    assert np.isfinite(result.tracks).all()


@pytest.mark.parametrize("occluder", ["flat", "inverted"])
def test_occluded_point_is_lost(occluder):
    """A flat grey patch (no texture: OpenCV status 0) or the negative of the texture (window no longer
    matches) covers the centre from t=6: that point is lost and holds its position, the other stays."""
    frames = translating_video(velocity=(0.0, 0.0)).copy()
    if occluder == "flat":
        frames[6:, 30:66, 30:66] = 128
    else:
        frames[6:, 30:66, 30:66] = 255 - frames[6:, 30:66, 30:66]
    tracker = LKTracker()
    ctx = _ctx()
    queries = np.array([[0, 48.0, 48.0], [0, 12.0, 80.0]], dtype=np.float32)
    result = tracker.track(tracker.prepare(frames, ctx), queries, ctx)
    assert result.visible[0, :6].all() and not result.visible[0, 6:].any()
    assert result.visible[1].all()  # the uncovered point stays tracked
    np.testing.assert_allclose(result.tracks[0, 6:], np.full((4, 2), 48.0), atol=0.3)


def test_patch_error_threshold_flags_an_appearance_change():
    """A lighting change (contrast halved from t=6) with no motion: the forward-backward check passes,
    so only the window's grey-level difference can flag it, and only when the threshold is strict."""
    frames = translating_video(velocity=(0.0, 0.0)).copy()
    frames[6:] = (frames[6:].astype(np.float32) * 0.5 + 40).astype(np.uint8)
    queries = np.array([[0, 48.0, 48.0]], dtype=np.float32)
    strict, blind = LKTracker(max_patch_error=10.0), LKTracker(max_patch_error=float("inf"))
    ctx = _ctx()
    assert not strict.track(strict.prepare(frames, ctx), queries, ctx).visible[0, 6:].any()
    assert blind.track(blind.prepare(frames, ctx), queries, ctx).visible[0].all()


def test_runs_on_cpu_when_the_run_asks_for_cuda():
    tracker = LKTracker()
    assert tracker.device_types == ("cpu",)
    ctx = _ctx("cuda")  # a cuda device object: LK must not touch it
    frames = translating_video(frames=3)
    result = tracker.track(tracker.prepare(frames, ctx), np.array([[1, 40.0, 40.0]], np.float32), ctx)
    assert result.visible.all()


def test_empty_batch_and_bad_frames():
    tracker = LKTracker()
    ctx = _ctx()
    prepared = tracker.prepare(translating_video(frames=2), ctx)
    result = tracker.track(prepared, np.zeros((0, 3), np.float32), ctx)
    assert result.tracks.shape == (0, 2, 2)
    with pytest.raises(ValueError, match="frames"):
        tracker.prepare(np.zeros((2, 8, 8), np.uint8), ctx)


def test_through_session_and_registry():
    tracker = load_tracker("lk")
    assert isinstance(tracker, LKTracker) and tracker.describe()["name"] == "lk"
    frames = translating_video()
    rng = np.random.default_rng(1)
    xy = rng.uniform(20, 70, (7, 2))
    queries = np.concatenate([rng.integers(0, FRAMES, (7, 1)), xy], axis=1).astype(np.float32)
    config = RunConfig(tracker="lk", device="cpu", points_per_batch=3)
    events = list(Session(frames, queries, config).events())
    last = events[-1]
    assert isinstance(last, Finished), last
    assert sum(1 for e in events if type(e).__name__ == "BatchDone") == 3
    assert last.tracks.shape == (7, FRAMES, 2) and np.isfinite(last.tracks).all()
    expected = (queries[:, None, 1:] + (np.arange(FRAMES)[None, :, None] - queries[:, None, :1])
                * np.array(VELOCITY))
    vis = last.visible
    assert vis.mean() > 0.8
    assert np.abs(last.tracks - expected)[vis].max() < 0.5
