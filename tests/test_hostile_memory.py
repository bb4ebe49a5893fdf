"""The host memory estimate before a run, and its refusal with how many frames would fit."""

from __future__ import annotations

import pytest

from engine.core.errors import UserError
from engine.run.memory import (
    HOST_MEMORY_FRACTION,
    TRACKER_HOST_BYTES_PER_FRAME,
    available_host_bytes,
    check_host_memory,
    estimate_host_bytes,
    tracker_bytes_per_frame,
)

GIB = 2**30


def test_estimate_counts_frames_tracker_and_tracks():
    est = estimate_host_bytes(1000, 64, 64, num_queries=10, tracker="corrtrack")
    assert est.frames_bytes == 1000 * 64 * 64 * 3
    assert est.working_bytes == 1000 * TRACKER_HOST_BYTES_PER_FRAME["corrtrack"]
    assert est.total_bytes == est.frames_bytes + est.working_bytes + est.tracks_bytes
    assert 1.6 < est.working_bytes / GIB < 1.8  # 1.8 MB a frame (issue 13 measured 2.0 GiB at 1k frames in all)


def test_tracker_may_state_its_own_working_memory():
    class Plugin:
        name = "mine"
        host_bytes_per_frame = 123

    assert tracker_bytes_per_frame(Plugin()) == 123
    assert tracker_bytes_per_frame("some-plugin") == 0


def test_refusal_names_the_need_and_the_frames_that_fit():
    est = estimate_host_bytes(20_000, 64, 64, tracker="corrtrack")  # the 23.7 GB OOM-killer case of issue 13
    with pytest.raises(UserError) as err:
        check_host_memory(est, "long.mp4", available=8 * GIB)
    fit = int(8 * GIB * HOST_MEMORY_FRACTION // est.bytes_per_frame)
    assert str(err.value).startswith("long.mp4: 20000 frames need about 3")
    assert f"--max-frames {fit}" in err.value.suggestion
    check_host_memory(estimate_host_bytes(fit, 64, 64, tracker="corrtrack"), "long.mp4", available=8 * GIB)


def test_frames_already_held_are_not_counted_twice():
    est = estimate_host_bytes(100, 1920, 1080, tracker="lk")  # 0.58 GiB of frames, no working memory
    with pytest.raises(UserError):
        check_host_memory(est, "v.mp4", available=GIB // 2)
    check_host_memory(est, "v.mp4", frames_held=True, available=GIB // 2)


def test_available_memory_is_known_here():
    assert available_host_bytes() > 0
