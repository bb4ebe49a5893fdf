"""The test command itself: the `slow` marker is registered, and the plain command deselects nothing."""

from __future__ import annotations


def test_slow_marker_is_registered_and_the_plain_command_runs_every_test(pytestconfig):
    markers = pytestconfig.getini("markers")
    assert any(m.startswith("slow:") for m in markers), markers
    assert "-m" not in pytestconfig.getini("addopts")  # `python -m pytest` (README) runs the slow ones too
