"""Plugin trackers: module/callable/Tracker factories, per-submodule timing, failures that name the plugin."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch
from torch import nn

from engine.core.config import RunConfig
from engine.core.errors import TrackerError
from engine.run.session import BatchDone, Failed, Finished, Session
from engine.trackers import load_tracker
from engine.trackers.plugin import PluginTracker, wrap_plugin
from tests.helpers import ConstantVelocityTracker, moving_square_video

PLANTED = "tests.plugins.pathological:"
QUERIES = np.array([[0, 8.0, 12.0], [2, 20.0, 10.0], [1, 5.0, 5.0]], np.float32)


HEAD_SLEEP_S = 0.03


class Slow(nn.Module):
    """A submodule that takes at least ``sleep_s`` (a lower bound that machine load cannot undercut)."""

    def __init__(self, sleep_s: float):
        super().__init__()
        self.sleep_s = sleep_s

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(self.sleep_s)
        return torch.tanh(x)


class TwoStage(nn.Module):
    """Plugin without declared stages: 'encoder' (light) and 'head' (heavy) become its stages."""

    def __init__(self):
        super().__init__()
        self.encoder = Slow(0.0)
        self.head = Slow(HEAD_SLEEP_S)

    def forward(self, frames: torch.Tensor, queries: torch.Tensor):
        x = self.head(self.encoder(torch.rand(64, 64, device=frames.device)))
        t = frames.shape[0]
        tracks = queries[:, None, 1:].expand(-1, t, -1) + 0 * x.sum()
        return tracks, torch.ones(queries.shape[0], t)  # float visibility: thresholded by the adapter


def run_session(tracker_name: str, tracker=None, frames=None, queries=QUERIES):
    frames = moving_square_video(8, 32) if frames is None else frames
    session = Session(frames, queries, RunConfig(tracker=tracker_name, device="cpu"), tracker=tracker)
    return list(session.events())


def test_module_plugin_is_timed_per_top_level_submodule():
    tracker = wrap_plugin("two_stage", TwoStage)
    assert isinstance(tracker, PluginTracker)
    assert tracker.stages == ("upload", "encoder", "head", "download")
    events = run_session("two_stage", tracker)
    batch = next(e for e in events if isinstance(e, BatchDone))
    assert set(batch.stage_ms) == {"upload", "encoder", "head", "download"}
    assert batch.stage_ms["head"] >= HEAD_SLEEP_S * 1e3 and batch.stage_ms["encoder"] > 0
    assert batch.visible.dtype == bool and batch.visible.all()
    np.testing.assert_allclose(batch.tracks[:, 3], QUERIES[:, 1:])
    assert tracker.describe()["timing"] == "submodule hooks" and tracker.describe()["kind"] == "module"


def test_planted_module_loaded_by_name_and_declared_stages():
    tiny = load_tracker(PLANTED + "tiny_kernels")
    assert tiny.stages == ("upload", "features", "match", "refine", "download")
    assert isinstance(run_session(PLANTED + "tiny_kernels", tiny)[-1], Finished)
    cold = load_tracker(PLANTED + "cold_compile")
    assert cold.stages == ("upload", "features", "autotune", "match", "download")
    events = run_session(PLANTED + "cold_compile", cold)
    batch = next(e for e in events if isinstance(e, BatchDone))
    assert {"features", "autotune", "match"} <= set(batch.stage_ms)
    assert cold.describe()["timing"] == "declared"


def test_callable_plugin_with_numpy_results():
    seen = {}

    def track(frames: torch.Tensor, queries: torch.Tensor):
        seen["frames"] = (tuple(frames.shape), frames.dtype)
        seen["queries"] = (tuple(queries.shape), queries.dtype)
        n, t = queries.shape[0], frames.shape[0]
        xy = queries[:, 1:].numpy()
        return np.repeat(xy[:, None], t, axis=1), np.ones((n, t), dtype=bool)

    tracker = wrap_plugin("fn", lambda: track)
    assert tracker.stages == ("upload", "download") and tracker.describe()["kind"] == "callable"
    events = run_session("fn", tracker)
    assert isinstance(events[-1], Finished)
    assert seen == {"frames": ((8, 32, 32, 3), torch.uint8), "queries": ((3, 3), torch.float32)}
    np.testing.assert_allclose(events[-1].tracks[:, 5], QUERIES[:, 1:])


def test_tracker_instance_is_used_as_is():
    inner = ConstantVelocityTracker()
    tracker = wrap_plugin("pkg:cv", lambda: inner)
    assert tracker is inner and tracker.name == "pkg:cv"  # the Session then keeps it between batches
    assert isinstance(run_session("pkg:cv", tracker)[-1], Finished)


def test_load_failures_name_the_plugin():
    with pytest.raises(TrackerError, match="broken_factory.*weights file missing"):
        load_tracker(PLANTED + "broken_factory")
    with pytest.raises(TrackerError, match="'junk'.*expected a Tracker"):
        wrap_plugin("junk", lambda: 42)
    with pytest.raises(TrackerError, match="'notfn'.*not callable"):
        wrap_plugin("notfn", 3)
    with pytest.raises(TrackerError, match="no_such_module"):
        load_tracker("no_such_module:factory")
    bad_stages = TwoStage()
    bad_stages.stages = "head"  # a string, not a tuple of names
    with pytest.raises(TrackerError, match="'badstages'.*stages"):
        wrap_plugin("badstages", lambda: bad_stages)


def test_failing_plugin_leaves_the_process_usable():
    events = run_session(PLANTED + "broken_factory")
    assert isinstance(events[-1], Failed) and events[-1].kind == "tracker"
    assert "broken_factory" in events[-1].message
    raising = load_tracker(PLANTED + "raises_in_track")
    events = run_session(PLANTED + "raises_in_track", raising)
    assert isinstance(events[-1], Failed) and "raises_in_track" in events[-1].message
    assert "plugin exploded" in events[-1].message
    lk = run_session("lk")
    assert isinstance(lk[-1], Finished) and np.isfinite(lk[-1].tracks).all()


def test_exception_inside_a_submodule_closes_its_stage():
    class Boom(nn.Module):
        def __init__(self):
            super().__init__()
            self.calls = 0

        def forward(self, x):
            self.calls += 1
            if self.calls == 1:
                raise RuntimeError("first call fails")
            return x

    class Plugin(nn.Module):
        def __init__(self):
            super().__init__()
            self.boom = Boom()

        def forward(self, frames, queries):
            t = frames.shape[0]
            return self.boom(queries[:, None, 1:].expand(-1, t, -1)), torch.ones(queries.shape[0], t, dtype=torch.bool)

    tracker = wrap_plugin("boom", Plugin)
    first = run_session("boom", tracker)
    assert isinstance(first[-1], Failed) and "first call fails" in first[-1].message
    second = run_session("boom", tracker)  # no stage left open from the failed call
    assert isinstance(second[-1], Finished)
    assert "boom" in next(e for e in second if isinstance(e, BatchDone)).stage_ms


def test_the_current_folder_is_not_searched_for_plugins(tmp_path, monkeypatch):
    """A plugin is code: a module lying in the folder the app happens to start in is not imported."""
    import sys

    from engine.core.errors import TrackerError
    from engine.trackers.registry import load_tracker

    (tmp_path / "planted_here.py").write_text("raise SystemExit('imported from the current folder')\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    with pytest.raises(TrackerError, match="PYTHONPATH=."):
        load_tracker("planted_here:factory")
