"""The plugin guard runs a plugin's calls on one long-lived worker thread, so per-thread library state (cuDNN's
plan cache, cuBLAS handles) stays warm across calls, runs and sessions; isolation is kept."""

from __future__ import annotations

import sys
import threading

import numpy as np
import pytest

from engine.core.config import RunConfig
from engine.core.errors import TrackerError
from engine.run.session import Finished, Session
from engine.trackers.guard import (
    THREAD_PREFIX,
    PluginAbandoned,
    abandoned_threads,
    call_plugin,
    cancel_scope,
    lingering_threads,
)
from tests.helpers import moving_square_video
from tests.plugins import misbehaving, thread_state

QUERIES = np.array([[0, 8.0, 12.0], [2, 20.0, 10.0], [1, 5.0, 5.0], [3, 14.0, 9.0]], np.float32)

pytestmark = pytest.mark.usefixtures("release_hung_plugins")


def test_consecutive_calls_run_on_the_same_named_worker_thread():
    first = call_plugin("same-thread", "here", threading.current_thread)
    second = call_plugin("same-thread", "here", threading.current_thread)
    assert first is second  # before: a new thread per call
    assert first is not threading.current_thread() and first.daemon
    assert first.name == f"{THREAD_PREFIX} same-thread"
    assert call_plugin("another", "here", threading.current_thread) is not first  # one worker per plugin


def test_thread_local_state_set_in_one_call_is_seen_in_the_next():
    state = threading.local()

    def remember() -> None:
        state.plans = "built"

    call_plugin("local-state", "here", remember)
    assert call_plugin("local-state", "here", lambda: getattr(state, "plans", None)) == "built"  # before: None


def test_a_plugins_per_thread_cache_is_built_once_over_batches_and_sessions():
    thread_state.BUILDS.clear()
    config = RunConfig(tracker="tests.plugins.thread_state:plan_cache", device="cpu", points_per_batch=1)
    for _ in range(2):
        last = Session(moving_square_video(6, 32), QUERIES, config).run()
        assert isinstance(last, Finished), getattr(last, "message", "")
    assert len(thread_state.BUILDS) == 1, thread_state.BUILDS  # before: 8 builds, one per batch
    assert thread_state.BUILDS[0].startswith(THREAD_PREFIX)


def test_exits_and_exceptions_on_the_worker_leave_it_serving():
    worker = call_plugin("survives", "here", threading.current_thread)
    with pytest.raises(TrackerError, match=r"'survives' called sys.exit\(2\) here"):
        call_plugin("survives", "here", lambda: sys.exit(2))
    with pytest.raises(TrackerError, match="KeyboardInterrupt"):
        call_plugin("survives", "here", lambda: (_ for _ in ()).throw(KeyboardInterrupt()))
    with pytest.raises(ValueError, match="plain"):
        call_plugin("survives", "here", lambda: (_ for _ in ()).throw(ValueError("plain")))
    assert call_plugin("survives", "here", threading.current_thread) is worker


def test_an_abandoned_worker_is_retired_and_the_next_call_gets_a_fresh_one():
    worker = call_plugin("hung", "here", threading.current_thread)
    cancel = threading.Event()
    cancel.set()
    with cancel_scope(cancel), pytest.raises(PluginAbandoned):
        call_plugin("hung", "here", misbehaving.RELEASE.wait)
    assert worker in abandoned_threads() and worker in lingering_threads()
    fresh = call_plugin("hung", "here", threading.current_thread)
    assert fresh is not worker and fresh.is_alive()
    assert fresh not in lingering_threads()  # an idle worker is a daemon: it holds no command up
    misbehaving.RELEASE.set()
    worker.join(10.0)
    assert not worker.is_alive()  # released, the retired worker ends instead of serving again
    assert worker not in abandoned_threads()


def test_a_plugin_calling_the_guard_from_its_worker_runs_inline_instead_of_deadlocking():
    outcome: list[object] = []

    def outer() -> tuple[threading.Thread, threading.Thread]:
        return threading.current_thread(), call_plugin("reentrant", "inside", threading.current_thread)

    driver = threading.Thread(target=lambda: outcome.append(call_plugin("reentrant", "outside", outer)), daemon=True)
    driver.start()
    driver.join(30.0)
    assert not driver.is_alive(), "a call from the worker waited on its own queue"
    (outer_thread, inner_thread), = outcome
    assert inner_thread is outer_thread


def test_a_worker_inside_a_call_is_lingering_until_it_returns():
    """After a Ctrl-C the CLI stops waiting for a plugin's batch; a worker still inside torch at interpreter exit
    ended the process with rc -6, so the CLI must see it and exit past it."""
    import threading

    from engine.trackers.guard import busy_threads, call_plugin, lingering_threads

    inside, release = threading.Event(), threading.Event()

    def batch() -> str:
        inside.set()
        release.wait(10)
        return "done"

    caller = threading.Thread(target=lambda: call_plugin("busy-plugin", "in a batch", batch), daemon=True)
    caller.start()
    assert inside.wait(10)
    busy = busy_threads()
    assert len(busy) == 1 and "busy-plugin" in busy[0].name
    assert busy[0] in lingering_threads()
    release.set()
    caller.join(10)
    assert not any("busy-plugin" in t.name for t in busy_threads())
