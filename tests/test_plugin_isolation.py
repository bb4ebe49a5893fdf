"""Plugins that hang, exit, interrupt, leave threads or write into their inputs cannot take the caller with them."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from engine.core.config import RunConfig
from engine.core.errors import TrackerError
from engine.io.video import write_video
from engine.run.session import Failed, Finished, Session
from engine.trackers.guard import ABANDON_AFTER_S, PluginAbandoned, call_plugin, cancel_scope
from engine.trackers.registry import TrackerCache, load_tracker
from tests.helpers import moving_square_video
from tests.plugins import misbehaving

ROOT = Path(__file__).resolve().parent.parent
MISBEHAVING = "tests.plugins.misbehaving:"
QUERIES = np.array([[0, 8.0, 12.0], [2, 20.0, 10.0]], np.float32)
#: how long a test waits for something that, fixed, takes about ABANDON_AFTER_S (generous: a loaded machine)
WATCHDOG_S = 30.0
CLI_TIMEOUT_S = 120


pytestmark = pytest.mark.usefixtures("release_hung_plugins")


def events_of(name: str, frames: np.ndarray | None = None, **kwargs) -> list:
    frames = moving_square_video(6, 32) if frames is None else frames
    return list(Session(frames, QUERIES, RunConfig(tracker=MISBEHAVING + name, device="cpu"), **kwargs).events())


def test_plugin_calling_sys_exit_fails_the_run_naming_it():
    last = events_of("exits")[-1]  # before: SystemExit(3) escaped the session (and ended the app with code 3)
    assert isinstance(last, Failed) and last.kind == "tracker"
    assert "exits" in last.message and "sys.exit(3)" in last.message
    assert isinstance(Session(moving_square_video(6, 32), QUERIES, RunConfig(tracker="lk")).run(), Finished)


def test_a_tracker_plugin_exiting_in_describe_fails_the_run_naming_it():
    last = events_of("exits_describing")[-1]  # before: describe() ran outside the guard and SystemExit escaped
    assert isinstance(last, Failed) and last.kind == "tracker"
    assert "sys.exit(4)" in last.message and "describe()" in last.message


def test_plugin_raising_keyboard_interrupt_fails_the_run_naming_it():
    last = events_of("interrupts")[-1]  # before: the KeyboardInterrupt escaped and the run vanished
    assert isinstance(last, Failed) and last.kind == "tracker" and "KeyboardInterrupt" in last.message


def _cancel_once_entered(session: Session) -> threading.Thread:
    def cancel() -> None:
        if misbehaving.ENTERED.wait(WATCHDOG_S):
            session.cancel()

    thread = threading.Thread(target=cancel, daemon=True)
    thread.start()
    return thread


def _drive(session: Session) -> list:
    """The session's events, driven in a thread so that a session that never returns fails the test."""
    events: list = []
    driver = threading.Thread(target=lambda: events.extend(session.events()), daemon=True)
    driver.start()
    driver.join(WATCHDOG_S)
    assert not driver.is_alive(), "the session did not return after cancel"
    return events


def test_plugin_exiting_while_imported_is_a_tracker_error(tmp_path, monkeypatch):
    (tmp_path / "exits_on_import.py").write_text("import sys\nsys.exit(4)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(TrackerError, match=r"sys.exit\(4\) while being imported"):  # before: SystemExit escaped
        load_tracker("exits_on_import:factory")


@pytest.mark.parametrize("name, where", [("hangs", "while tracking points 0-1"),
                                         ("hangs_in_factory", "in its factory")])
def test_cancel_abandons_a_hung_plugin_call_with_a_message(name, where):
    cache = TrackerCache()
    session = Session(moving_square_video(6, 32), QUERIES, RunConfig(tracker=MISBEHAVING + name, device="cpu"),
                      tracker_loader=cache)
    _cancel_once_entered(session)
    events = _drive(session)
    last = events[-1]
    assert isinstance(last, Failed) and last.kind == "tracker"
    assert where in last.message and "after Stop: abandoned" in last.message
    assert MISBEHAVING + name not in cache._trackers  # the next run loads it afresh


def test_abandoned_tracker_is_loaded_afresh_by_the_cache():
    loads = []

    def loader(name: str):
        loads.append(name)
        return load_tracker(name)

    cache = TrackerCache(loader)
    session = Session(moving_square_video(6, 32), QUERIES, RunConfig(tracker=MISBEHAVING + "hangs", device="cpu"),
                      tracker_loader=cache)
    _cancel_once_entered(session)
    _drive(session)
    cache(MISBEHAVING + "hangs")
    assert len(loads) == 2


def test_call_plugin_returns_values_reraises_exceptions_and_abandons_only_when_cancelled():
    assert call_plugin("p", "here", lambda: 41 + 1) == 42
    with pytest.raises(ValueError, match="plain"):
        call_plugin("p", "here", lambda: (_ for _ in ()).throw(ValueError("plain")))
    with pytest.raises(TrackerError, match=r"'p' called sys.exit\('bye'\) here"):
        call_plugin("p", "here", lambda: sys.exit("bye"))
    cancel = threading.Event()
    cancel.set()
    with cancel_scope(cancel), pytest.raises(PluginAbandoned, match="1 s after Stop"):
        call_plugin("p", "here", misbehaving.RELEASE.wait)
    assert ABANDON_AFTER_S <= 1.0  # Stop and close come back within 2 s


def test_frames_and_queries_handed_to_plugins_are_their_own():
    for name in ("writes_frames", "writes_numpy"):
        frames = moving_square_video(6, 32)
        before = frames.copy()
        session = Session(frames, QUERIES.copy(), RunConfig(tracker=MISBEHAVING + name, device="cpu"))
        last = session.run()
        assert isinstance(last, Finished), getattr(last, "message", "")
        np.testing.assert_array_equal(frames, before)  # before: zeroed (the app showed a black video)
        np.testing.assert_array_equal(session.queries, QUERIES)


def _cli(tracker: str, tmp_path: Path) -> subprocess.CompletedProcess:
    video = tmp_path / "clip.mp4"
    write_video(video, moving_square_video(6, 32), fps=10)
    (tmp_path / "q.csv").write_text("t,x,y\n0,8,12\n")
    env = {**os.environ, "PYTHONPATH": ".", "TRACKSCOPE_NO_NVML": "1"}
    return subprocess.run([sys.executable, "-m", "engine.cli", "track", str(video), "--queries",
                           str(tmp_path / "q.csv"), "--tracker", MISBEHAVING + tracker, "--device", "cpu",
                           "--out", str(tmp_path / "out.npz")], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=CLI_TIMEOUT_S)


def test_cli_is_not_kept_alive_by_a_plugin_thread(tmp_path):
    out = _cli("leaves_thread", tmp_path)  # before: the process never ended (TimeoutExpired)
    assert out.returncode == 0, out.stderr[-2000:]
    assert misbehaving.LEFT_THREAD_NAME in out.stderr and "warning" in out.stderr
    assert (tmp_path / "out.npz").exists()


def test_cli_plugin_exit_is_a_one_line_error(tmp_path):
    out = _cli("exits", tmp_path)
    assert out.returncode == 2, out.stderr[-2000:]  # before: exit code 3, the plugin's
    assert "sys.exit(3)" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.parametrize("instrument", ["profiler", "flop counter"])
def test_under_instrumentation_a_plugin_call_runs_in_the_callers_thread_and_an_exit_is_still_caught(instrument):
    """A deep capture's profiler and the cost counter's dispatch mode see only their own thread: the plugin's
    ops must run there."""
    from torch.profiler import profile
    from torch.utils.flop_counter import FlopCounterMode

    with profile() if instrument == "profiler" else FlopCounterMode(display=False):
        assert call_plugin("p", "here", threading.current_thread) is threading.current_thread()
        with pytest.raises(TrackerError, match=r"sys.exit\(1\)"):
            call_plugin("p", "here", lambda: sys.exit(1))
    assert call_plugin("p", "here", threading.current_thread) is not threading.current_thread()
