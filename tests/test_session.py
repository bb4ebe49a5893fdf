"""The session: batching, events, live config changes, cancel, and failures kept as events."""

from __future__ import annotations

import numpy as np
import pytest

from engine.core.config import RunConfig
from engine.run.session import BatchDone, Failed, Finished, Session, Started
from tests.helpers import ConstantVelocityTracker, moving_square_video


def _queries(n: int) -> np.ndarray:
    return np.stack([np.zeros(n), np.linspace(2, 20, n), np.full(n, 10.0)], axis=1).astype(np.float32)


def test_events_cover_all_points_in_batches():
    tracker = ConstantVelocityTracker()
    s = Session(moving_square_video(), _queries(10), RunConfig(tracker="constvel", device="cpu",
                points_per_batch=4), tracker=tracker)
    events = list(s.events())
    assert isinstance(events[0], Started) and events[0].num_batches == 3
    batches = [e for e in events if isinstance(e, BatchDone)]
    assert [(b.start, b.stop) for b in batches] == [(0, 4), (4, 8), (8, 10)]
    assert batches[0].prepared and not batches[1].prepared
    assert tracker.prepare_calls == 1
    assert "upload" in batches[0].stage_ms and "compute" in batches[1].stage_ms
    done = events[-1]
    assert isinstance(done, Finished) and not done.cancelled
    np.testing.assert_allclose(done.tracks[3, 5], [done.queries[3, 1] + 5, 10.0])


def test_config_change_applies_from_next_batch_and_reprepares():
    tracker = ConstantVelocityTracker()
    s = Session(moving_square_video(), _queries(9), RunConfig(tracker="constvel", device="cpu",
                points_per_batch=3), tracker=tracker)
    seen = []
    for e in s.events():
        if isinstance(e, BatchDone):
            seen.append(e.config.precision)
            if e.index == 0:
                s.update_config(precision="bf16")
    assert seen == ["fp32", "bf16", "bf16"]
    assert tracker.seen_precisions == ["fp32", "bf16", "bf16"]
    assert tracker.prepare_calls == 2  # precision changes the per-video work


def test_invalid_live_change_is_refused_in_the_caller():
    s = Session(moving_square_video(), _queries(2), RunConfig(tracker="constvel", device="cpu"),
                tracker=ConstantVelocityTracker())
    with pytest.raises(ValueError):
        s.update_config(precision="fp64")


def test_cancel_between_batches_keeps_done_work():
    s = Session(moving_square_video(), _queries(8), RunConfig(tracker="constvel", device="cpu",
                points_per_batch=2), tracker=ConstantVelocityTracker())
    events = []
    for e in s.events():
        events.append(e)
        if isinstance(e, BatchDone) and e.index == 1:
            s.cancel()
    done = events[-1]
    assert isinstance(done, Finished) and done.cancelled
    assert np.isfinite(done.tracks[:4]).all() and np.isnan(done.tracks[4:]).all()


def test_tracker_failure_is_an_event_with_partial_results():
    tracker = ConstantVelocityTracker(fail_on_batch=1, exc=ValueError("bad shapes"))
    s = Session(moving_square_video(), _queries(4), RunConfig(tracker="constvel", device="cpu",
                points_per_batch=2), tracker=tracker)
    last = s.run()
    assert isinstance(last, Failed) and last.kind == "tracker"
    assert "constvel" in last.message and "bad shapes" in last.message
    assert np.isfinite(last.tracks[:2]).all()


def test_out_of_memory_names_batch_sizes_to_lower():
    tracker = ConstantVelocityTracker(fail_on_batch=0, exc=RuntimeError("CUDA out of memory. Tried to allocate"))
    s = Session(moving_square_video(), _queries(4), RunConfig(tracker="constvel", device="cpu",
                points_per_batch=64, frames_per_batch=8), tracker=tracker)
    last = s.run()
    assert isinstance(last, Failed) and last.kind == "oom"
    assert "--points-per-batch 32" in last.suggestion and "--frames-per-batch 4" in last.suggestion


@pytest.mark.parametrize(
    "queries, words",
    [
        (np.array([[99, 5, 5]], np.float32), "frame index 99"),
        (np.array([[0, 500, 5]], np.float32), "outside"),
        (np.array([[0, np.nan, 5]], np.float32), "NaN"),
        (np.zeros((0, 3), np.float32), "no query points"),
    ],
)
def test_bad_queries_fail_clearly(queries, words):
    s = Session(moving_square_video(), queries, RunConfig(tracker="constvel", device="cpu"),
                tracker=ConstantVelocityTracker())
    last = s.run()
    assert isinstance(last, Failed) and last.kind == "input" and words in last.message


def test_no_gpu_gives_a_clear_message(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    s = Session(moving_square_video(), _queries(2), RunConfig(tracker="constvel", device="cuda"),
                tracker=ConstantVelocityTracker())
    last = s.run()
    assert isinstance(last, Failed) and "no CUDA GPU" in last.message and "--device cpu" in last.suggestion


def test_cold_then_warm():
    cfg = RunConfig(tracker="constvel", device="cpu", points_per_batch=5, frames_per_batch=7)
    first = [e for e in Session(moving_square_video(), _queries(5), cfg,
                                tracker=ConstantVelocityTracker()).events() if isinstance(e, BatchDone)]
    second = [e for e in Session(moving_square_video(), _queries(5), cfg,
                                 tracker=ConstantVelocityTracker()).events() if isinstance(e, BatchDone)]
    assert first[0].cold and not second[0].cold


def test_tracker_cache_reuses_loaded_trackers_across_sessions():
    from engine.trackers import TrackerCache

    loads = []

    def loader(name):
        loads.append(name)
        if name == "broken":
            raise RuntimeError("cannot load")
        return ConstantVelocityTracker()

    cache = TrackerCache(loader)
    cfg = RunConfig(tracker="constvel", device="cpu")
    first = Session(moving_square_video(), _queries(2), cfg, tracker_loader=cache).run()
    second = Session(moving_square_video(), _queries(2), cfg, tracker_loader=cache).run()
    assert isinstance(first, Finished) and isinstance(second, Finished)
    assert loads == ["constvel"] and cache("constvel") is cache("constvel")
    for _ in range(2):
        with pytest.raises(RuntimeError):
            cache("broken")
    assert loads == ["constvel", "broken", "broken"]  # a failed load is not kept


def test_shrunk_frames_track_in_frame_pixels_and_report_in_video_pixels():
    """A reader shrinks frames over its max side: the session converts queries in and tracks out."""
    frames = moving_square_video(num_frames=6, size=32)  # as decoded from a 64x64 video
    queries = np.array([[0, 20.0, 30.0], [2, 40.0, 10.0]], np.float32)  # the video's own pixels
    last = Session(frames, queries, RunConfig(tracker="constvel", device="cpu"),
                   tracker=ConstantVelocityTracker(), video_info={"width": 64, "height": 64}).run()
    assert isinstance(last, Finished)
    # the tracker moves +1 frame pixel per frame, i.e. +2 video pixels
    np.testing.assert_allclose(last.tracks[0, :, 0], 20.0 + 2 * np.arange(6))
    np.testing.assert_allclose(last.tracks[1, 2], [40.0, 10.0])
    bad = Session(frames, np.array([[0, 50.0, 5.0]], np.float32), RunConfig(tracker="constvel", device="cpu"),
                  tracker=ConstantVelocityTracker(), video_info={"width": 48, "height": 48}).run()
    assert isinstance(bad, Failed) and "48x48" in bad.message


def test_an_explicit_warm_cache_decides_cold_runs():
    from engine.run.warm import PROCESS_WARM, WarmCache

    cfg = RunConfig(tracker="constvel", device="cpu", points_per_batch=3, frames_per_batch=5)
    warm = WarmCache()
    before = len(PROCESS_WARM)

    def first_batch(cache: WarmCache) -> BatchDone:
        events = Session(moving_square_video(), _queries(3), cfg, tracker=ConstantVelocityTracker(),
                         warm=cache).events()
        return next(e for e in events if isinstance(e, BatchDone))

    assert first_batch(warm).cold and not first_batch(warm).cold
    assert len(warm) == 1 and len(PROCESS_WARM) == before  # the process's cache was not used
    warm.clear()
    assert first_batch(warm).cold


class _CpuOnlyTracker(ConstantVelocityTracker):
    device_types = ("cpu",)


@pytest.fixture
def fake_gpu(monkeypatch):
    """torch believes a CUDA device exists (nothing runs on it in these tests)."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)


def test_a_cpu_only_tracker_asked_for_cuda_is_refused_by_name(fake_gpu):
    last = Session(moving_square_video(), _queries(2), RunConfig(tracker="constvel", device="cuda"),
                   tracker=_CpuOnlyTracker()).run()
    assert isinstance(last, Failed) and last.kind == "input"
    assert "'constvel'" in last.message and "cuda:0" in last.message and "cpu" in last.message
    assert "--device cpu" in last.suggestion


def test_device_auto_runs_a_cpu_only_tracker_on_the_cpu_and_says_so(fake_gpu):
    events = list(Session(moving_square_video(), _queries(2), RunConfig(tracker="constvel", device="auto"),
                          tracker=_CpuOnlyTracker()).events())
    started = events[0]
    assert isinstance(started, Started) and started.device == "cpu" and started.device_name == "CPU"
    assert "constvel" in started.device_note and "CPU" in started.device_note
    assert isinstance(events[-1], Finished)


def test_sessions_take_decoded_frames_only():
    last = Session(np.zeros((4, 8, 8), np.uint8), _queries(1), RunConfig(tracker="constvel", device="cpu"),
                   tracker=ConstantVelocityTracker()).run()
    assert isinstance(last, Failed) and "[T, H, W, 3]" in last.message


def test_the_device_note_reaches_the_report(fake_gpu):
    from engine.report.recorder import RunRecorder

    recorder = RunRecorder()
    for event in Session(moving_square_video(), _queries(2), RunConfig(tracker="constvel", device="auto"),
                         tracker=_CpuOnlyTracker()).events():
        recorder.add(event)
    report = recorder.build()
    assert report.runs[0].device == "cpu" and "constvel" in report.runs[0].extra["device_note"]


@pytest.mark.parametrize("exc", [MemoryError(), RuntimeError(
    "[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can't allocate memory: you tried to allocate "
    "8000000000 bytes. Error code 12 (Cannot allocate memory)")])
def test_host_out_of_memory_is_recognised(exc):
    tracker = ConstantVelocityTracker(fail_on_batch=0, exc=exc)
    s = Session(moving_square_video(), _queries(4), RunConfig(tracker="constvel", device="cpu",
                points_per_batch=64, frames_per_batch=8), tracker=tracker)
    last = s.run()
    assert isinstance(last, Failed) and last.kind == "oom"
    assert last.message.startswith("host memory (RAM) ran out of memory with 64 points per batch")
    assert "--points-per-batch 32" in last.suggestion and "--max-frames" in last.suggestion
    assert "tracker's code" not in (last.suggestion or "")


class _NanTracker(ConstantVelocityTracker):
    name = "nanny"

    def track(self, prepared, queries, ctx):
        result = super().track(prepared, queries, ctx)
        result.tracks[0, 1:4, 0] = np.nan
        result.tracks[-1, 0, 1] = np.inf
        return result


def test_nan_tracks_from_a_tracker_are_reported():
    s = Session(moving_square_video(), _queries(4), RunConfig(tracker="nanny", device="cpu",
                points_per_batch=4), tracker=_NanTracker())
    last = s.run()
    assert isinstance(last, Failed) and last.kind == "tracker"
    assert last.message.startswith("tracker 'nanny' returned 4 NaN or infinite track value(s)")


def test_int8_on_a_tracker_without_a_recipe_is_refused_not_run_in_float():
    """A tracker that uses precision but quantises nothing: an int8 run of it would be fp32 under an int8
    label. (LK uses no precision at all: it is not refused for one, issue 20 item 6.)"""
    from engine.core.config import RunConfig
    from engine.run.session import Failed, Session

    frames = np.zeros((3, 32, 32, 3), np.uint8)
    queries = np.array([[0, 10, 10]], np.float32)
    last = Session(frames, queries, RunConfig(tracker=ConstantVelocityTracker.name, device="cpu", precision="int8"),
                   tracker=ConstantVelocityTracker()).run()
    assert isinstance(last, Failed) and last.kind == "tracker"
    assert "no int8 recipe" in last.message
    lk = Session(frames, queries, RunConfig(tracker="lk", device="cpu", precision="int8")).run()
    assert isinstance(lk, Finished)
