"""The frame store (engine/io/frames.py) and the CLI's progress bars: bounded frames, background-style
decoding with cancel, and a bar only on a terminal."""

from __future__ import annotations

import io

import numpy as np
import pytest

from engine.cli.entry import main
from engine.io.frames import FrameStore, open_frames, store_size
from engine.io.video import load_video, write_video
from tests.helpers import moving_square_video

NUM_FRAMES = 30
SIZE = 64


@pytest.fixture
def clip(tmp_path):
    path = tmp_path / "clip.mp4"
    write_video(path, moving_square_video(NUM_FRAMES, SIZE), fps=10)
    return path, load_video(path)[0]


def test_store_size_keeps_every_frame_within_the_budget():
    budget = 768 * 2**20
    for frames in (10, 500, 3600, 100_000):
        w, h = store_size(1920, 1080, frames, budget)
        assert frames * w * h * 3 <= budget and w % 2 == 0 and h % 2 == 0
        assert abs(w / h - 1920 / 1080) < 0.05
    assert store_size(1920, 1080, 10, budget) == (1920, 1080)  # fits: unchanged
    assert store_size(640, 480, 10, None, max_side=320) == (320, 240)


def test_frame_zero_is_there_at_open_and_decoding_fills_the_rest(clip):
    path, reference = clip
    store = open_frames(path)
    assert len(store) == NUM_FRAMES and store.decoded == 1 and not store.complete
    np.testing.assert_array_equal(store.frame(0), reference[0])
    assert not store.frames[1:].any()  # black until decoded
    steps = list(store.decode())
    assert store.complete and store.progress.decoded == NUM_FRAMES
    assert all(a.decoded <= b.decoded for a, b in zip(steps, steps[1:]))
    np.testing.assert_array_equal(store.frames, reference)  # the same frames as reader.read()


def test_closing_the_decoder_keeps_the_frames_so_far(clip, monkeypatch):
    import engine.io.frames as frames_module

    monkeypatch.setattr(frames_module, "PROGRESS_INTERVAL_S", 0.0)
    path, reference = clip
    store = open_frames(path)
    gen = store.decode()
    for _ in range(5):
        next(gen)
    gen.close()  # what the worker does on cancel
    assert not store.complete and store.decoded == 6
    store.keep_decoded()
    store.close()
    assert store.complete and len(store) == 6 and store.info.num_frames == 6
    np.testing.assert_array_equal(store.frames, reference[:6])


def test_a_small_budget_keeps_smaller_frames_with_their_geometry(clip):
    path, reference = clip
    budget = NUM_FRAMES * 32 * 32 * 3
    store = open_frames(path, budget_bytes=budget).decode_all()
    assert store.frames.shape == (NUM_FRAMES, 32, 32, 3) and store.nbytes <= budget
    assert store.geometry.source_size == (SIZE, SIZE) and store.geometry.frame_size == (32, 32)
    assert store.frames.mean() == pytest.approx(reference.mean(), abs=2.0)


def test_from_array_is_complete_and_does_not_copy():
    frames = moving_square_video(4, 16)
    store = FrameStore.from_array(frames)
    assert store.complete and store.frames is frames and len(store) == 4


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _track(clip_path, tmp_path, monkeypatch, stream) -> int:
    monkeypatch.setattr("sys.stderr", stream)
    return main(["track", str(clip_path), "--grid", "2", "--tracker", "lk", "--device", "cpu",
                 "--out", str(tmp_path / "t.npz")])


def test_track_draws_decoding_and_tracking_bars_on_a_terminal(clip, tmp_path, monkeypatch):
    stream = _Terminal()
    assert _track(clip[0], tmp_path, monkeypatch, stream) == 0
    text = stream.getvalue()
    assert "decoding" in text and f"{NUM_FRAMES}/{NUM_FRAMES}" in text and "frame" in text
    assert "tracking" in text and "4/4" in text


def test_track_draws_no_bar_when_not_a_terminal(clip, tmp_path, monkeypatch):
    stream = io.StringIO()
    assert _track(clip[0], tmp_path, monkeypatch, stream) == 0
    text = stream.getvalue()
    assert "\r" not in text and "decoding" not in text and "it/s" not in text
    assert "wrote" in text
