"""Plugins whose results or side effects are hostile (tests.plugins.hostile): each ends in a message naming
the plugin, never an internal error, a traceback or a silently accepted value."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from engine.cli.entry import main
from engine.core.config import RunConfig
from engine.core.errors import MAX_MESSAGE_CHARS, TrackerError, UserError, capped
from engine.io.video import write_video
from engine.run.session import MAX_DETAILS_CHARS, TRACK_BOUND_FRAME_SIZES, Failed, Session
from engine.trackers.base import TrackResult
from tests.helpers import moving_square_video
from tests.plugins.hostile import HUGE_MESSAGE_CHARS

ROOT = Path(__file__).resolve().parent.parent
HOSTILE = "tests.plugins.hostile:"
QUERIES = np.array([[0, 8.0, 12.0], [2, 20.0, 10.0]], np.float32)
CLI_TIMEOUT_S = 120


def _failed(name: str) -> Failed:
    last = Session(moving_square_video(6, 32), QUERIES, RunConfig(tracker=HOSTILE + name, device="cpu")).run()
    assert isinstance(last, Failed), last
    return last


def test_a_tracker_whose_track_returns_a_str_is_named():
    last = _failed("returns_str")  # before: "internal error: AttributeError: 'str' object has no attribute ..."
    assert last.kind == "tracker"
    assert last.message.startswith(f"tracker '{HOSTILE}returns_str': track() returned a str, not a TrackResult")


@pytest.mark.parametrize("name, words", [
    ("complex_tracks", "tracks must be real floating point (float16/32/64), got complex64"),
    ("int_tracks", "tracks must be real floating point (float16/32/64), got int64; cast them with .float()"),
    ("nan_visible", "visible holds 1 NaN value(s)"),
])
def test_plugin_outputs_of_the_wrong_type_are_refused_naming_the_plugin(name, words):
    last = _failed(name)  # before: all three ran to Finished (complex cut to its real part, NaN read as hidden)
    assert last.kind == "tracker" and f"'{HOSTILE}{name}'" in last.message
    assert words in last.message


def test_tracks_far_outside_the_frame_are_refused():
    last = _failed("far_tracks")  # before: 1e38 accepted as a position; 2 points x 6 frames
    assert last.kind == "tracker"
    assert (f"returned 12 track position(s) more than {TRACK_BOUND_FRAME_SIZES} frame sizes outside the 32x32 frame"
            in last.message)


def test_track_result_types():
    tracks, visible = np.zeros((2, 3, 2)), np.ones((2, 3))
    assert TrackResult(tracks.astype(np.float16), visible).tracks.dtype == np.float32
    assert TrackResult(tracks, visible.astype(np.int8)).visible.dtype == bool
    with pytest.raises(ValueError, match="got int32"):
        TrackResult(tracks.astype(np.int32), visible)
    with pytest.raises(ValueError, match="visible must be bool or real numbers, got complex128"):
        TrackResult(tracks, visible.astype(complex))
    with pytest.raises(ValueError, match="got object"):
        TrackResult(np.array([[["a", "b"]]], dtype=object), np.ones((1, 1)))


def test_a_huge_plugin_message_is_cut_in_the_event_and_on_stderr(tmp_path, capsys):
    last = _failed("huge_message")  # before: 20 MiB in the message, the details and stderr
    assert last.kind == "tracker"
    assert len(last.message) < MAX_MESSAGE_CHARS + 100
    cut = int(last.message.rsplit("[", 1)[1].split()[0])
    assert MAX_MESSAGE_CHARS + cut > HUGE_MESSAGE_CHARS  # everything not kept is counted as cut
    assert len(last.details) < MAX_DETAILS_CHARS + 100
    video = tmp_path / "clip.mp4"
    write_video(video, moving_square_video(6, 32), fps=10)
    code = main(["track", str(video), "--grid", "2", "--tracker", HOSTILE + "huge_message", "--device", "cpu",
                 "--out", str(tmp_path / "out.npz")])
    err = capsys.readouterr().err
    assert code == 2 and "more characters cut" in err
    assert len(err) < 4 * MAX_MESSAGE_CHARS


def test_capped():
    assert capped("abc", 5) == "abc"
    assert capped("abcdefgh", 5) == "abcde… [3 more characters cut]"
    assert len(UserError("y" * 10**6, "z" * 10**6).message) < MAX_MESSAGE_CHARS + 50
    assert "more characters cut" in TrackerError("m", "s" * (MAX_MESSAGE_CHARS + 1)).suggestion


def test_a_plugin_closing_stdout_ends_in_one_line_not_a_traceback(tmp_path):
    video = tmp_path / "clip.mp4"
    write_video(video, moving_square_video(6, 32), fps=10)
    env = {**os.environ, "PYTHONPATH": ".", "TRACKSCOPE_NO_NVML": "1"}
    out = subprocess.run([sys.executable, "-m", "engine.cli", "bench", str(video), "--grid", "2", "--tracker",
                          HOSTILE + "closes_stdout", "--device", "cpu", "--precisions", "fp32", "--warmup", "0",
                          "--repeat", "1", "--no-telemetry", "--no-cost"], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=CLI_TIMEOUT_S)
    assert out.returncode == 2, out.stderr[-2000:]  # before: exit 1 with "ValueError: I/O operation on closed file"
    assert "Traceback" not in out.stderr
    assert "trackscope bench: error: standard output was closed while the command ran" in out.stderr
