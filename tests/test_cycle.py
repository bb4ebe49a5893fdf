"""Forward-backward cycle error (engine.analysis.cycle, engine.workflows.cycle, ``trackscope cycle``): the metric
on constructed tracks, then real sessions of trackers whose cycle is known, then the verb on a written video."""

from __future__ import annotations

import json

import numpy as np
import pytest

from engine.analysis.cycle import backward_queries, cycle_scores, shared_medians
from engine.cli.entry import main
from engine.core.config import RunConfig
from engine.core.errors import UserError
from engine.io.video import write_video
from engine.trackers.base import PreparedVideo, RunContext, Tracker, TrackResult
from engine.workflows.cycle import cycle_error
from tests.helpers import ConstantVelocityTracker, moving_square_video


class StillTracker(Tracker):
    """Every point stays at its query; visible everywhere except left of ``blind_x`` (dropped there)."""

    name = "still"
    stages = ("compute",)

    def __init__(self, blind_x: float = -1.0):
        self.blind_x = blind_x

    def prepare(self, frames: np.ndarray, ctx: RunContext) -> PreparedVideo:
        return PreparedVideo(frames.shape[0], frames.shape[1], frames.shape[2], {})

    def track(self, prepared: PreparedVideo, queries: np.ndarray, ctx: RunContext) -> TrackResult:
        with ctx.timer.stage("compute"):
            tracks = np.repeat(queries[:, None, 1:3], prepared.num_frames, axis=1).astype(np.float32)
        visible = np.repeat((queries[:, 1] >= self.blind_x)[:, None], prepared.num_frames, axis=1)
        return TrackResult(tracks, visible)


def test_the_metric_on_constructed_tracks_counts_only_points_kept_both_ways():
    queries = np.array([[0, 10, 10], [0, 20, 20], [0, 30, 30]], dtype=np.float32)
    fwd = np.zeros((3, 4, 2))
    fwd[:, -1] = [[13, 10], [24, 20], [0, 0]]
    fwd_vis = np.ones((3, 4), dtype=bool)
    fwd_vis[2, -1] = False  # lost at the end: not continued
    back_q, index = backward_queries(fwd, fwd_vis)
    assert index.tolist() == [0, 1] and back_q[:, 0].tolist() == [0, 0] and back_q[1, 1:].tolist() == [24, 20]
    back = np.zeros((2, 4, 2))
    back[:, -1] = [[10, 13], [20, 20]]  # point 0 returns 3 px off, point 1 exactly
    back_vis = np.ones((2, 4), dtype=bool)
    s = cycle_scores(queries, index, back, back_vis)
    assert s.kept == 2 and s.errors_px[0] == pytest.approx(3.0) and s.errors_px[1] == 0 and np.isnan(s.errors_px[2])
    assert s.median_px == pytest.approx(1.5) and s.within(1.0) == pytest.approx(0.5)
    back_vis[0, -1] = False  # not seen at frame 0 on the way back: dropped too
    assert cycle_scores(queries, index, back, back_vis).kept == 1
    with pytest.raises(ValueError, match="frame 0"):
        cycle_scores(queries + [[1, 0, 0]], index, back, back_vis)


def test_shared_medians_compare_two_trackers_on_the_points_both_kept():
    a = cycle_scores(np.zeros((3, 3)), np.array([0, 1]), np.array([[[0, 0], [1, 0]], [[0, 0], [9, 0]]]),
                     np.ones((2, 2), dtype=bool))
    b = cycle_scores(np.zeros((3, 3)), np.array([1, 2]), np.array([[[0, 0], [2, 0]], [[0, 0], [5, 0]]]),
                     np.ones((2, 2), dtype=bool))
    assert shared_medians(a, b) == (1, 9.0, 2.0)  # only point 1 is kept by both


def test_a_session_of_a_tracker_that_drifts_reads_its_drift_both_ways():
    """+1 px per frame whatever the direction: after 4 frames out and 4 back, 8 px from the start."""
    frames = moving_square_video(num_frames=5, size=128)
    res = cycle_error(frames, RunConfig(tracker="constvel", device="cpu"), ConstantVelocityTracker(), grid=3)
    assert res.scores.kept == 9 and np.allclose(res.scores.errors_px, 8.0)


def test_a_still_tracker_reads_zero_and_its_dropped_points_are_not_counted():
    frames = moving_square_video(num_frames=6, size=32)
    res = cycle_error(frames, RunConfig(tracker="still", device="cpu"), StillTracker(blind_x=12.0), grid=3)
    assert res.scores.num_points == 9 and res.scores.kept == 6 and res.scores.median_px == 0.0


def test_lk_on_a_textured_translation_comes_back_close():
    """Real OpenCV LK on noise texture shifted 1 px per frame: the cycle closes within a pixel."""
    rng = np.random.default_rng(3)
    base = rng.integers(0, 255, (64, 96, 3), dtype=np.uint8)
    frames = np.stack([np.roll(base, t, axis=1) for t in range(10)])
    from engine.trackers import load_tracker

    res = cycle_error(frames, RunConfig(tracker="lk", device="cpu"), load_tracker("lk"), grid=4)
    assert res.scores.kept >= 12 and res.scores.median_px < 1.0


def test_one_frame_is_a_clear_message():
    with pytest.raises(UserError, match="at least 2"):
        cycle_error(moving_square_video(num_frames=1), RunConfig(tracker="still", device="cpu"), StillTracker())


def test_the_cycle_verb_prints_the_table_with_lk_beside_and_writes_json(tmp_path, capsys):
    video = tmp_path / "clip.mp4"
    write_video(video, moving_square_video(num_frames=6, size=32))
    out = tmp_path / "cycle.json"
    assert main(["cycle", str(video), "--tracker", "lk", "--grid", "3", "--device", "cpu", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "| clip.mp4 | lk | 6 |" in text
    data = json.loads(out.read_text())
    assert data["results"][0]["tracker"] == "lk" and data["results"][0]["points"] == 9


def test_the_cycle_verb_refuses_a_missing_or_corrupt_video_with_a_message(tmp_path, capsys):
    assert main(["cycle", str(tmp_path / "none.mp4"), "--device", "cpu"]) == 2
    assert "video not found" in capsys.readouterr().err
    bad = tmp_path / "bad.mp4"
    bad.write_bytes(b"not a video at all")
    assert main(["cycle", str(bad), "--tracker", "lk", "--device", "cpu"]) == 2
    assert "Traceback" not in capsys.readouterr().err
