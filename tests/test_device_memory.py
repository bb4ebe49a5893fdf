"""CorrTrack's device-memory estimate: its formula against live tensor bytes measured on the CPU, and the
refusal before a run that would not fit (with the points per batch or frames that would)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from engine.cli.entry import main
from engine.core.errors import UserError
from engine.core.precision import precision_context
from engine.core.stages import StageTimer
from engine.io.video import write_video
from engine.run import device_memory
from engine.run.device_memory import (
    DEVICE_HEADROOM,
    check_device_memory,
    estimate_corrtrack_device_bytes,
    estimate_for_tracker,
)
from engine.trackers import load_tracker
from engine.trackers.base import RunContext
from tests.memory_probe import LiveTensorBytes

GIB = 2**30
H200_MEASURED = Path(__file__).parent / "data" / "h200" / "device_memory.json"
T, H, W, N, F = 8, 64, 64, 16, 4


@pytest.fixture(scope="module")
def corrtrack():
    tracker = load_tracker("corrtrack")
    tracker.cuda_graphs = False
    return tracker


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_batch_term_matches_the_live_tensor_bytes_of_a_cpu_run(corrtrack, precision):
    """The batch term is at most 10 % under and at most 40 % over what tracking one batch holds."""
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 255, (T, H, W, 3), dtype=np.uint8)
    queries = np.concatenate([np.zeros((N, 1)), rng.uniform(0, W - 1, (N, 2))], 1).astype(np.float32)
    cpu = torch.device("cpu")
    ctx = RunContext(cpu, precision, F, StageTimer(cpu))
    est = estimate_for_tracker(corrtrack, T, W, H, N, N, F, precision)
    weights = tuple(corrtrack.model.parameters())
    with torch.inference_mode(), precision_context(precision, cpu):
        prepared = corrtrack.prepare(frames, ctx)
        with LiveTensorBytes(ignore=weights + tuple(prepared.data.values())) as track:
            corrtrack.track(prepared, queries, ctx)
    assert 0.9 <= est.batch_bytes / track.peak <= 1.4, (est.batch_bytes, track.peak)


@pytest.mark.parametrize("size", [(480, 400), (960, 540)])
def test_the_fine_stage_terms_match_the_live_tensor_bytes_of_a_cpu_run(corrtrack, size):
    """A video past the fine stage's minimum: its uint8 frames are kept and its search adds to the batch term."""
    width, height = size
    rng = np.random.default_rng(1)
    frames = rng.integers(0, 255, (T, height, width, 3), dtype=np.uint8)
    queries = np.concatenate([np.zeros((N, 1)), rng.uniform(0, height - 1, (N, 2))], 1).astype(np.float32)
    cpu = torch.device("cpu")
    ctx = RunContext(cpu, "fp32", F, StageTimer(cpu))
    est = estimate_for_tracker(corrtrack, T, width, height, N, N, F, "fp32")
    small = estimate_for_tracker(corrtrack, T, 256, 256, N, N, F, "fp32")
    fine_kept, fine_work, bound = device_memory.fine_stage_bytes(T, width, height, N, corrtrack.fine_config)
    assert fine_kept == T * width * height and 0 < fine_work <= bound
    assert est.batch_bytes == small.batch_bytes + fine_work
    weights = tuple(corrtrack.model.parameters())
    with torch.inference_mode():
        prepared = corrtrack.prepare(frames, ctx)
        assert prepared.data["grey_fine"].numel() == fine_kept
        with LiveTensorBytes(ignore=weights + tuple(prepared.data.values())) as track:
            corrtrack.track(prepared, queries, ctx)
    assert 0.9 <= est.batch_bytes / track.peak <= 1.4, (est.batch_bytes, track.peak)


def test_no_fine_stage_bytes_where_it_does_not_run():
    assert device_memory.fine_stage_bytes(10, 256, 256, 64, device_memory.FineConfig()) == (0, 0, 0)
    assert device_memory.fine_stage_bytes(10, 1920, 1080, 64, None) == (0, 0, 0)
    off = estimate_corrtrack_device_bytes(10, 1920, 1080, 64, 64, 4, fine=None)
    on = estimate_corrtrack_device_bytes(10, 1920, 1080, 64, 64, 4)
    assert on.kept_bytes - off.kept_bytes == 10 * 1280 * 720 and on.batch_bytes > off.batch_bytes
    bound = device_memory.fine_stage_bytes(300, 1920, 1080, 4096, device_memory.FineConfig())[2]
    for points in (1, 7, 64, 500, 1024, 4096):  # the bound holds for every smaller batch (chunked search)
        assert device_memory.fine_stage_bytes(300, 1920, 1080, points, device_memory.FineConfig())[1] <= bound
    nopolish = estimate_corrtrack_device_bytes(10, 1920, 1080, 64, 64, 4, polish=False)
    assert nopolish.batch_bytes == off.batch_bytes


def test_estimate_is_never_below_the_h200_allocator_peak():
    """144 run shapes measured on an H200 (scripts/device_memory.py, session 25: frames uploaded per backbone
    chunk on a side stream, the fine stage on for the 640x480 and 1080p shapes, in a CUDA graph that keeps its
    memory pool): never under, at most 1.4x over past 4 GiB."""
    rows = [r for r in json.loads(H200_MEASURED.read_text())["rows"] if "failed" not in r]
    assert len(rows) == 144
    ratios, big = [], []
    for r in rows:
        est = estimate_corrtrack_device_bytes(r["frames"], r["width"], r["height"], r["points"], r["points"],
                                              r["frames_per_batch"], r["precision"])
        peak = r["peak_allocated"] - r["allocated_before"]
        ratios.append(est.total_bytes / peak)
        if peak > 4 * GIB:
            big.append(ratios[-1])
    assert min(ratios) >= 1.0
    assert float(np.median(ratios)) < 1.35
    assert len(big) > 40 and max(big) < 1.4


def test_the_batch_term_grows_with_points_and_frames_and_halves_in_bf16():
    a = estimate_corrtrack_device_bytes(100, 64, 64, 512, 256, 16)
    b = estimate_corrtrack_device_bytes(200, 64, 64, 512, 512, 16)
    assert b.batch_bytes == 4 * a.batch_bytes
    bf16 = estimate_corrtrack_device_bytes(100, 64, 64, 512, 256, 16, precision="bf16")
    assert 0.5 < bf16.batch_bytes / a.batch_bytes < 0.75
    big = estimate_corrtrack_device_bytes(1500, 1280, 720, 1024, 1024, 16)  # issue 13's 720p x 1500 frames
    assert 40 * GIB < big.total_bytes < 70 * GIB


def test_refusal_suggests_points_per_batch_that_fit():
    est = estimate_corrtrack_device_bytes(1500, 1280, 720, 1024, 1024, 16)
    with pytest.raises(UserError) as err:
        check_device_memory(est, "long.mp4", free=16 * GIB, points_per_batch=1024)
    assert str(err.value).startswith("long.mp4: the run needs about ")
    assert est.fine_bound_bytes > 0  # 720p: the fine stage's search is set aside before points are counted
    fit = int((16 * GIB * DEVICE_HEADROOM - est.kept_bytes - est.fine_bound_bytes) // est.per_point_bytes)
    assert f"use --points-per-batch {fit} or lower" in err.value.suggestion
    small = estimate_corrtrack_device_bytes(1500, 1280, 720, 1024, fit, 16)
    check_device_memory(small, "long.mp4", free=16 * GIB, points_per_batch=fit)


def test_refusal_suggests_fewer_frames_when_even_one_point_does_not_fit():
    est = estimate_corrtrack_device_bytes(20000, 1920, 1080, 64, 64, 16)  # features, grey and fine frames: ~42 GiB kept
    with pytest.raises(UserError) as err:
        check_device_memory(est, "huge.mp4", free=8 * GIB, points_per_batch=64)
    assert "--max-frames" in err.value.suggestion


def test_no_check_off_cuda_or_for_other_trackers():
    assert device_memory.free_device_bytes("cpu") is None
    assert estimate_for_tracker("lk", 10, 64, 64, 4, 4, 4, "fp32") is None
    check_device_memory(None, "x", free=1, points_per_batch=1)


def test_track_refuses_before_the_run_when_the_device_is_short(tmp_path, monkeypatch, capsys):
    write_video(tmp_path / "v.mp4", np.zeros((4, 32, 32, 3), np.uint8))
    monkeypatch.setattr(device_memory, "free_device_bytes", lambda device: 1024)
    ran = []
    monkeypatch.setattr("engine.cli.track.Session", lambda *a, **k: ran.append(1))
    code = main(["track", str(tmp_path / "v.mp4"), "--grid", "4", "--out", str(tmp_path / "t.npz"),
                 "--device", "cpu"])
    err = capsys.readouterr().err
    assert code == 2 and not ran, err
    assert "of device memory" in err and "Traceback" not in err


def test_a_session_refuses_a_run_the_device_cannot_hold_before_any_work(monkeypatch):
    """The app's runs go through the session: it checks the estimate against the free device memory."""
    from engine.core.config import RunConfig
    from engine.run import device_memory
    from engine.run.events import Failed, Started
    from engine.run.session import Session
    from tests.helpers import moving_square_video

    monkeypatch.setattr(device_memory, "free_device_bytes", lambda device: 64 * 2**20)  # a nearly full card
    frames = moving_square_video(8, 64)
    queries = np.array([[0, 10.0, 10.0], [0, 20.0, 20.0]], np.float32)
    events = list(Session(frames, queries, RunConfig(tracker="corrtrack", device="cpu")).events())
    assert not any(isinstance(e, Started) for e in events)
    failed = events[-1]
    assert isinstance(failed, Failed) and failed.kind == "input"
    assert "of device memory" in failed.message and "only 0.06 GiB is free" in failed.message
    assert failed.suggestion and "frames" in failed.suggestion


def test_a_session_refuses_a_run_the_host_cannot_hold_before_any_work(monkeypatch):
    """The app's runs are checked against the host's available memory too (frames already decoded)."""
    from engine.core.config import RunConfig
    from engine.run import memory
    from engine.run.events import Failed, Started
    from engine.run.session import Session
    from tests.helpers import moving_square_video

    monkeypatch.setattr(memory, "available_host_bytes", lambda: 1 * 2**20)
    frames = moving_square_video(8, 64)
    queries = np.array([[0, 10.0, 10.0]], np.float32)
    events = list(Session(frames, queries, RunConfig(tracker="corrtrack", device="cpu")).events())
    assert not any(isinstance(e, Started) for e in events)
    assert isinstance(events[-1], Failed) and "of host memory" in events[-1].message
