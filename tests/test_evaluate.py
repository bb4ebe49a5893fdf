"""Grading trackers on a tiny two-video evaluation set written to tmp_path."""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np
import pytest

from engine.core.config import RunConfig
from engine.core.errors import UserError
from engine.io.trackio import write_queries_csv
from engine.io.video import write_video
from engine.trackers.base import PreparedVideo, RunContext, Tracker, TrackResult
from engine.workflows.evaluate import evaluate_set, find_set, format_table

SIZE = 96
FRAMES = 8
VELOCITIES = {"pan_right": (1.5, 0.5), "pan_up": (-0.5, -1.25)}  # px per frame, per video
NUM_POINTS = 6
CONFIG = RunConfig(tracker="lk", device="cpu", points_per_batch=4)


def _texture(seed: int, side: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    noise = rng.uniform(0, 255, (side, side, 3)).astype(np.float32)
    return np.clip(cv2.GaussianBlur(noise, (0, 0), 2.5) * 3 - 255, 0, 255).astype(np.uint8)


def _write_set(folder: Path) -> dict[str, np.ndarray]:
    """Two translating-texture videos with exact ground truth; returns the gt tracks per video."""
    folder.mkdir(parents=True, exist_ok=True)
    out = {}
    for seed, (name, (vx, vy)) in enumerate(VELOCITIES.items()):
        big = _texture(seed, SIZE * 2)
        frames = np.stack([
            cv2.warpAffine(big, np.float32([[1, 0, t * vx - SIZE / 2], [0, 1, t * vy - SIZE / 2]]),
                           (SIZE, SIZE), flags=cv2.INTER_CUBIC)
            for t in range(FRAMES)
        ])
        write_video(folder / f"{name}.mp4", frames)
        rng = np.random.default_rng(10 + seed)
        start = rng.uniform(25, 70, (NUM_POINTS, 2))
        query_t = rng.integers(0, FRAMES // 2, NUM_POINTS)
        tracks = start[:, None] + np.arange(FRAMES)[None, :, None] * np.array([vx, vy])  # [N, T, 2]
        visible = np.ones((NUM_POINTS, FRAMES), dtype=bool)
        visible[0, -2:] = False  # one point "occluded" at the end, to give OA something to grade
        queries = np.concatenate([query_t[:, None], tracks[np.arange(NUM_POINTS), query_t]], axis=1)
        write_queries_csv(folder / f"{name}.queries.csv", queries)
        np.savez(folder / f"{name}.gt.npz", tracks=tracks.astype(np.float32), visible=visible, query_t=query_t)
        out[name] = tracks
    return out


class OracleTracker(Tracker):
    """Moves every query by a fixed velocity: exact on the video that moves that way."""

    name = "oracle"

    def __init__(self, velocity):
        self.velocity = np.array(velocity)

    def prepare(self, frames: np.ndarray, ctx: RunContext) -> PreparedVideo:
        return PreparedVideo(*frames.shape[:3])

    def track(self, prepared: PreparedVideo, queries: np.ndarray, ctx: RunContext) -> TrackResult:
        t = np.arange(prepared.num_frames)[None, :, None]
        tracks = queries[:, None, 1:] + (t - queries[:, None, :1]) * self.velocity
        return TrackResult(tracks, np.ones(tracks.shape[:2], dtype=bool))


@pytest.fixture(scope="module")
def eval_set(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("evalset")
    _write_set(folder)
    return folder


def test_lk_scores_high_on_translating_textures(eval_set):
    seen = []
    result = evaluate_set(eval_set, "lk", CONFIG, progress=lambda d, n, name: seen.append((d, n, name)))
    assert list(result.videos) == ["pan_right", "pan_up"]
    assert seen == [(1, 2, "pan_right"), (2, 2, "pan_up")]
    for video in result.videos.values():
        assert video.num_queries == NUM_POINTS and video.num_frames == FRAMES
        assert video.scores.delta_avg > 0.85, video.scores
    assert result.mean["delta_avg"] > 0.85
    # LK calls every tracked point visible; gt hides point 0 on the last two frames of each video
    assert result.mean["oa"] < 1.0
    assert result.mean["aj"] > 0.7
    json.dumps(result.to_dict())  # JSON-ready


def test_oracle_scores_one_per_video_and_table(eval_set):
    results = {}
    for name, velocity in VELOCITIES.items():
        oracle = OracleTracker(velocity)
        results[f"oracle_{name}"] = evaluate_set(eval_set, "oracle", CONFIG, tracker=oracle)
    right = results["oracle_pan_right"].videos
    # exact tracks: full position accuracy; visibility wrong only on point 0's two hidden frames
    assert right["pan_right"].scores.delta_avg == pytest.approx(1.0)
    assert right["pan_up"].scores.delta_avg < 0.5  # wrong velocity on the other video
    table = format_table(results)
    lines = table.splitlines()
    assert "oracle_pan_right AJ" in lines[0] and "oracle_pan_up OA" in lines[0]
    assert any(line.startswith("pan_right") for line in lines)
    assert lines[-1].startswith("mean") and str(2 * NUM_POINTS) in lines[-1]
    assert format_table({}) == "(no results)"


def test_strided_mode_samples_queries_from_ground_truth(eval_set):
    oracle = OracleTracker(VELOCITIES["pan_right"])
    result = evaluate_set(eval_set, "oracle", CONFIG, query_mode="strided", tracker=oracle)
    video = result.videos["pan_right"]
    # frames 0 and 5 are strided query frames; every point is visible on both
    assert video.num_queries == 2 * NUM_POINTS
    assert video.scores.delta_avg == pytest.approx(1.0)
    with pytest.raises(UserError, match="query mode"):
        evaluate_set(eval_set, "oracle", CONFIG, query_mode="middle", tracker=oracle)


def _copy_set(src: Path, dst: Path) -> Path:
    dst.mkdir()
    for p in src.iterdir():
        (dst / p.name).write_bytes(p.read_bytes())
    return dst


def test_bad_layouts_name_the_file(eval_set, tmp_path):
    with pytest.raises(UserError, match="not found"):
        find_set(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="no .mp4 videos"):
        find_set(tmp_path / "empty")

    missing = _copy_set(eval_set, tmp_path / "missing")
    (missing / "pan_up.gt.npz").unlink()
    with pytest.raises(UserError, match=r"pan_up\.gt\.npz: ground truth file missing"):
        find_set(missing)

    oracle = OracleTracker((0, 0))
    fewer = _copy_set(eval_set, tmp_path / "fewer")
    lines = (fewer / "pan_right.queries.csv").read_text().splitlines()
    (fewer / "pan_right.queries.csv").write_text("\n".join(lines[:-1]) + "\n")
    with pytest.raises(UserError, match=rf"pan_right\.queries\.csv: {NUM_POINTS - 1} queries but"):
        evaluate_set(fewer, "oracle", CONFIG, tracker=oracle)

    shifted = _copy_set(eval_set, tmp_path / "shifted")
    gt = dict(np.load(shifted / "pan_up.gt.npz"))
    np.savez(shifted / "pan_up.gt.npz", **{**gt, "query_t": gt["query_t"] + 1})
    with pytest.raises(UserError, match=r"pan_up\.queries\.csv: query 0 is on frame"):
        evaluate_set(shifted, "oracle", CONFIG, tracker=oracle)

    short = _copy_set(eval_set, tmp_path / "short")
    gt = dict(np.load(short / "pan_right.gt.npz"))
    np.savez(short / "pan_right.gt.npz", **{**gt, "tracks": gt["tracks"][:, :-1], "visible": gt["visible"][:, :-1]})
    with pytest.raises(UserError, match=r"pan_right\.gt\.npz: ground truth has 7 frames"):
        evaluate_set(short, "oracle", CONFIG, tracker=oracle)

    broken = _copy_set(eval_set, tmp_path / "broken")
    (broken / "pan_right.gt.npz").write_bytes(b"not an npz")
    with pytest.raises(UserError, match=r"pan_right\.gt\.npz"):
        evaluate_set(broken, "oracle", CONFIG, tracker=oracle)
