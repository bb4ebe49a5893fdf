"""Shared test setup: offscreen Qt, tiny inputs, and checks for leaked threads."""

from __future__ import annotations

import os
import threading

import pytest

from engine.telemetry.sampler import THREAD_NAME as SAMPLER_THREAD

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


@pytest.fixture(autouse=True)
def no_leaked_threads():
    """Fail a test that leaves a thread of ours running."""
    before = {t.ident for t in threading.enumerate()}
    yield
    leaked = []
    for t in threading.enumerate():
        if t.ident in before or not t.is_alive() or isinstance(t, threading._DummyThread):
            continue  # a QThread running Python shows up as a dummy thread: Qt tests check QThreads themselves
        t.join(timeout=2.0)
        if t.is_alive() and (not t.daemon or t.name == SAMPLER_THREAD):  # the sampler thread is a daemon
            leaked.append(t.name)
    assert not leaked, f"threads left running: {leaked}"


@pytest.fixture
def release_hung_plugins():
    """Each test starts with tests.plugins.misbehaving's hung plugins hanging; at its end every hung call and
    left thread returns."""
    from tests.plugins import misbehaving

    misbehaving.RELEASE.clear()
    misbehaving.ENTERED.clear()
    yield
    misbehaving.RELEASE.set()
