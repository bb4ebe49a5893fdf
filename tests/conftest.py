"""Shared test setup: offscreen Qt, tiny inputs, and checks for leaked threads."""

from __future__ import annotations

import os
import threading

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("TRACKSCOPE_NO_NVML", "")


@pytest.fixture(autouse=True)
def no_leaked_threads():
    """Fail a test that leaves a thread of ours running."""
    before = {t.ident for t in threading.enumerate()}
    yield
    leaked = []
    for t in threading.enumerate():
        if t.ident in before or not t.is_alive():
            continue
        t.join(timeout=2.0)
        if t.is_alive() and not t.daemon:
            leaked.append(t.name)
    assert not leaked, f"threads left running: {leaked}"
