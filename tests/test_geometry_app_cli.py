"""App vs CLI tracks on the same video: the CLI tracks a 1080p clip at full size; the app keeps a long video
smaller (its frame store's memory budget: 3600 frames of 1080p are kept at 364x204) and tracks those frames
through the same session job it runs in its worker. With one centre-aligned geometry the two agree with no
systematic offset. Multiplying made the app track the content (scale - 1) / 2 = 2.1 px right of and below
each query (while labelling it the query): invisible under a pure pan, where every point moves alike, and a
systematic offset wherever motion varies across the picture. The clip zooms out (and pans), so the motion
varies and the offset shows.

LK at a fifth of the size really tracks a little differently (less detail, larger pixels), so the rule is on
the mean signed difference per axis, not on each point."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import cv2
import numpy as np
import pytest

from engine.api import RunConfig
from engine.cli.entry import main
from engine.core.flags import CORRTRACK_FINE_POLISH as FINE_POLISH_ENV
from engine.io.frames import BYTES_PER_PIXEL, open_frames
from engine.io.trackio import grid_queries, load_tracks, write_queries_csv
from engine.io.video import write_video
from engine.run.session import Finished
from gui.controllers.runner import SessionJob

SOURCE_SIZE = (1920, 1080)
APP_SIZE = (364, 204)  # the app's store size for a 2-minute 1080p video (engine/io/frames.py)
NUM_FRAMES = 10
#: the scene's motion per frame: a sub-pixel pan, source px, and a zoom out about the picture's centre
PAN_PX = (0.6, -0.4)
ZOOM_PER_FRAME = 0.965
#: texture blurs, source px: fine detail for LK's 21 px window at full size, coarse detail that survives the
#: 5.3x shrink (about 2.5 px in the app's frames)
TEXTURE_SIGMAS_PX = (3.0, 13.0)
GRID = 8  # 8 x 8 queries
#: the grid keeps to the middle 40 % of the picture, where the zoom moves a point at most ~14 px a frame (LK's reach)
QUERY_MARGIN = 0.3
#: the largest systematic (mean signed) offset allowed per axis between app and CLI tracks, source px
MAX_MEAN_OFFSET_PX = 0.1
#: CorrTrack's rule is on the mean over several clips (its per-point noise on this texture is about 1 px)
CORRTRACK_SEEDS = (7, 100, 101, 102)
CORRTRACK_GRID = 16


def make_clip(folder, seed: int = 7, grid: int = GRID) -> tuple:
    """A 1080p video of a random texture zooming out and panning, its grid of queries and their true tracks."""
    rng = np.random.default_rng(seed)
    big = (SOURCE_SIZE[1] * 3 // 2, SOURCE_SIZE[0] * 3 // 2)  # room for the zoom out
    centre_out = (np.array(SOURCE_SIZE, np.float64) - 1) / 2
    centre_tex = (np.array(big[::-1], np.float64) - 1) / 2
    texture = sum(cv2.GaussianBlur(rng.uniform(0, 255, big).astype(np.float32), (0, 0), sigma)
                  for sigma in TEXTURE_SIGMAS_PX)
    texture = cv2.normalize(texture, None, 0, 255, cv2.NORM_MINMAX)
    frames = np.empty((NUM_FRAMES, SOURCE_SIZE[1], SOURCE_SIZE[0], 3), np.uint8)
    for t in range(NUM_FRAMES):
        zoom, offset = ZOOM_PER_FRAME**t, centre_out + np.array(PAN_PX) * t
        to_frame = np.array([[zoom, 0, offset[0] - zoom * centre_tex[0]], [0, zoom, offset[1] - zoom * centre_tex[1]]])
        frame = cv2.warpAffine(texture, to_frame, SOURCE_SIZE, flags=cv2.INTER_CUBIC)
        frames[t] = np.repeat(np.clip(frame, 0, 255).astype(np.uint8)[..., None], 3, axis=-1)
    video = folder / "pan.avi"
    write_video(video, frames)
    queries = grid_queries(grid, *SOURCE_SIZE, margin=QUERY_MARGIN)
    write_queries_csv(folder / "pan.queries.csv", queries)
    t = np.arange(NUM_FRAMES)[None, :, None]  # [1, T, 1]
    truth = centre_out + np.array(PAN_PX) * t + ZOOM_PER_FRAME**t * (queries[:, None, 1:] - centre_out)  # [N, T, 2]
    return video, folder / "pan.queries.csv", queries, truth


@pytest.fixture(scope="module")
def clip(tmp_path_factory) -> tuple:
    return make_clip(tmp_path_factory.mktemp("pan"))


def _cli_tracks(clip, tmp_path, tracker: str = "lk") -> np.ndarray:
    video, queries_csv = clip[:2]
    out = tmp_path / "cli.npz"
    assert main(["track", str(video), "--queries", str(queries_csv), "--out", str(out),
                 "--tracker", tracker, "--device", "cpu"]) == 0
    return load_tracks(out)["tracks"]


def _app_tracks(clip, tracker: str = "lk") -> tuple[np.ndarray, tuple[int, int]]:
    """Tracks through the app's path: its frame store at a budget that keeps APP_SIZE, its session job."""
    video, _, queries, _ = clip
    budget = NUM_FRAMES * (APP_SIZE[0] + 1) * (APP_SIZE[1] + 1) * BYTES_PER_PIXEL
    store = open_frames(video, budget_bytes=budget).decode_all()
    info = {**store.info.to_dict(), **store.geometry.to_dict()}  # as gui/controllers/files.py hands it on
    job = SessionJob(store.frames, queries, RunConfig(tracker=tracker, device="cpu"), video_info=info)
    finished = [e for e in job() if isinstance(e, Finished)]
    assert len(finished) == 1
    return finished[0].tracks, store.geometry.frame_size


def test_app_and_cli_tracks_have_no_systematic_offset(clip, tmp_path):
    cli = _cli_tracks(clip, tmp_path)
    app, kept = _app_tracks(clip)
    assert kept == APP_SIZE
    assert cli.shape == app.shape == (GRID * GRID, NUM_FRAMES, 2)
    later = slice(1, None)  # frame 0 is the query itself in both
    diff = (app - cli)[:, later].reshape(-1, 2).astype(np.float64)  # [N * (T - 1), 2] source px
    diff = diff[np.isfinite(diff).all(axis=1)]
    mean_signed = diff.mean(axis=0)
    mean_abs = np.abs(diff).mean(axis=0)
    print(f"app - cli, source px: mean signed {mean_signed.round(3)}, mean absolute {mean_abs.round(3)}")
    assert len(diff) > 0.9 * GRID * GRID * (NUM_FRAMES - 1)
    assert np.all(np.abs(mean_signed) < MAX_MEAN_OFFSET_PX), mean_signed
    truth = clip[3]  # both follow the scene: the CLI closely, the app within its larger pixels
    assert np.abs(cli - truth).mean() < 0.5 and np.abs(app - truth).mean() < 1.0  # measured: 0.29 and 0.59 px


@pytest.mark.slow
def test_corrtrack_tracks_agree_at_either_size(tmp_path, monkeypatch):
    """CorrTrack resizes every frame to its model's 256 x 256, so the two runs differ only in that resize's input.

    This texture is far from CorrTrack's training data (about 2 px from the truth at either size, 1 px apart per
    point), so one clip's mean signed difference is mostly noise: over 256 points, per clip (x, y) = (0.09, -0.02),
    (-0.09, -0.02), (0.01, 0.07), (-0.11, 0.04) px with a standard error of 0.04-0.05 px in x (session 18; with 64
    points the first read (0.19, 0.06)). Their signs change from clip to clip: no offset is systematic. The rule is on
    the mean over CORRTRACK_CLIPS clips of CORRTRACK_GRID^2 points (standard error about 0.02 px), where the
    multiplying geometry's offset, (-0.35, -0.32) px on one clip, would stand out.

    The polish's fine stage (session 23) runs at the CLI's 1080p (capped at 1280 px) and not at the app's 364 x 204
    (below its 384 px): it is off for this rule, which is about the geometry, and checked on its own below."""
    monkeypatch.setenv(FINE_POLISH_ENV, "0")
    diffs = []
    for seed in CORRTRACK_SEEDS:
        folder = tmp_path / f"clip{seed}"
        folder.mkdir()
        clip = make_clip(folder, seed, CORRTRACK_GRID)
        cli = _cli_tracks(clip, folder, "corrtrack")
        app, _ = _app_tracks(clip, "corrtrack")
        diffs.append((app - cli)[:, 1:].reshape(-1, 2).astype(np.float64))
    diff = np.concatenate(diffs)
    mean_signed, mean_abs = diff.mean(axis=0), np.abs(diff).mean(axis=0)
    print(f"corrtrack app - cli over {len(CORRTRACK_SEEDS)} clips, source px: mean signed {mean_signed.round(3)}, "
          f"mean absolute {mean_abs.round(3)}")
    assert np.all(np.abs(mean_signed) < MAX_MEAN_OFFSET_PX), mean_signed
    assert np.all(mean_abs < 1.5), mean_abs  # measured 0.64-0.76 px in x, 0.38-0.47 in y per clip


@pytest.mark.parametrize("tracker", ["lk", "corrtrack"])
def test_app_and_cli_tracks_are_identical_when_the_app_keeps_full_size(tmp_path, tracker):
    """A clip small enough for the app's frame store to keep as it is: the app's path (its store, its session job)
    and the CLI's give the same tracks, bit for bit up to the NPZ's float32."""
    rng = np.random.default_rng(3)
    size, frames_n = (320, 240), 8
    texture = cv2.GaussianBlur(rng.uniform(0, 255, (size[1] + 40, size[0] + 40)).astype(np.float32), (0, 0), 2.5)
    texture = cv2.normalize(texture, None, 0, 255, cv2.NORM_MINMAX).astype(np.uint8)
    frames = np.stack([np.repeat(texture[2 * t:2 * t + size[1], 3 * t:3 * t + size[0], None], 3, axis=-1)
                       for t in range(frames_n)])
    video = tmp_path / "small.avi"
    write_video(video, frames)
    queries = grid_queries(6, *size, margin=0.2)
    write_queries_csv(tmp_path / "small.queries.csv", queries)
    out = tmp_path / "cli.npz"
    assert main(["track", str(video), "--queries", str(tmp_path / "small.queries.csv"), "--out", str(out),
                 "--tracker", tracker, "--device", "cpu"]) == 0
    store = open_frames(video, budget_bytes=10 * frames.nbytes).decode_all()
    assert store.geometry.frame_size == size  # kept at full size
    info = {**store.info.to_dict(), **store.geometry.to_dict()}
    job = SessionJob(store.frames, queries, RunConfig(tracker=tracker, device="cpu"), video_info=info)
    (finished,) = [e for e in job() if isinstance(e, Finished)]
    cli = load_tracks(out)
    np.testing.assert_array_equal(finished.tracks, cli["tracks"])
    np.testing.assert_array_equal(finished.visible, cli["visible"])


def test_the_fine_polish_brings_the_full_size_cli_run_closer_to_the_truth(tmp_path, monkeypatch):
    """The CLI's 1080p run with the polish's fine stage (video resolution) against the same run without it, on the
    pan-and-zoom clip with known motion: measured 0.53 / 0.41 px mean error (x / y) against 1.78 / 1.03 (seed 7)."""
    clip = make_clip(tmp_path, CORRTRACK_SEEDS[0], CORRTRACK_GRID)
    truth = clip[3][:, 1:]
    errors = {}
    for fine in ("1", "0"):
        monkeypatch.setenv(FINE_POLISH_ENV, fine)
        errors[fine] = np.abs(_cli_tracks(clip, tmp_path, "corrtrack")[:, 1:] - truth).reshape(-1, 2).mean(axis=0)
    assert np.all(errors["1"] < 0.8), errors
    assert np.all(errors["1"] < 0.6 * errors["0"]), errors
