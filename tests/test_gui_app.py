"""`trackscope gui ...` end to end in a subprocess (offscreen): open a report, run, screenshot, exit."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from engine.api import RunRecorder, save
from engine.core.config import RunConfig
from engine.io.video import write_video
from engine.run.session import Session
from tests.helpers import moving_square_video

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT_S = 120


def _gui(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "XDG_CONFIG_HOME": str(tmp_path / "config"),
           "HOME": str(tmp_path), "PYTHONPATH": str(ROOT), "TRACKSCOPE_NO_NVML": "1"}
    return subprocess.run([sys.executable, "-m", "engine.cli", "gui", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=TIMEOUT_S)


@pytest.mark.slow
def test_cli_runs_video_and_saves_screenshot(tmp_path):
    video = tmp_path / "clip.mp4"
    write_video(video, moving_square_video(6, 32), fps=10)
    shot = tmp_path / "shot.png"
    out = _gui([str(video), "--tracker", "lk", "--run", "--screenshot", str(shot), "--size", "900x600"], tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert shot.stat().st_size > 1000
    assert (tmp_path / "config" / "trackscope" / "trackscope.conf").exists()  # settings persisted


@pytest.mark.slow
def test_cli_replays_report(tmp_path):
    video = tmp_path / "clip.mp4"
    write_video(video, moving_square_video(6, 32), fps=10)
    recorder = RunRecorder()
    for event in Session(video, np.array([[0, 8, 12]], np.float32), RunConfig(tracker="lk")).events():
        recorder.add(event)
    report = save(recorder.build(), tmp_path / "run.json")
    shot = tmp_path / "replay.png"
    out = _gui([str(report), "--screenshot", str(shot), "--size", "900x600"], tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert shot.stat().st_size > 1000


@pytest.mark.slow
def test_cli_missing_file_is_a_usage_error(tmp_path):
    out = _gui([str(tmp_path / "nope.mp4")], tmp_path)
    assert out.returncode == 2 and "nope.mp4" in out.stderr


def _clean_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """What a login without a desktop has: no DISPLAY, no WAYLAND_DISPLAY, no QT_QPA_PLATFORM."""
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path), "PYTHONPATH": str(ROOT),
            "XDG_CONFIG_HOME": str(tmp_path / "config"), "TRACKSCOPE_NO_NVML": "1", **extra}


@pytest.mark.slow
def test_no_display_is_a_one_line_usage_error(tmp_path):
    out = subprocess.run([sys.executable, "-m", "engine.cli"], cwd=ROOT, env=_clean_env(tmp_path),
                         capture_output=True, text=True, timeout=TIMEOUT_S)
    assert out.returncode == 2, out.stderr[-2000:]  # not a Qt abort (-6)
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "no display" in lines[0] and "xvfb-run" in lines[0], out.stderr
    assert "qt.qpa" not in out.stderr


@pytest.mark.slow
def test_display_without_x_server_is_a_usage_error(tmp_path):
    out = subprocess.run([sys.executable, "-m", "engine.cli", "gui"], cwd=ROOT,
                         env=_clean_env(tmp_path, DISPLAY=":4711"), capture_output=True, text=True,
                         timeout=TIMEOUT_S)
    assert out.returncode == 2 and ":4711" in out.stderr, out.stderr[-2000:]


def test_display_problem_rules():
    from gui.app import display_problem

    assert display_problem({}, "linux") is not None
    assert display_problem({"QT_QPA_PLATFORM": "offscreen"}, "linux") is None
    assert display_problem({"WAYLAND_DISPLAY": "wayland-0"}, "linux") is None
    assert display_problem({"QT_QPA_PLATFORM": "wayland"}, "linux") is not None
    assert display_problem({"DISPLAY": "remotehost:10.0"}, "linux") is None  # remote: Qt decides
    assert display_problem({}, "darwin") is None and display_problem({}, "win32") is None


def test_gui_help_lists_every_precision():
    """Before: the help named fp32, tf32, fp16, bf16, four of the six."""
    from engine.api import PRECISIONS
    from engine.cli.entry import build_parser

    parser = build_parser(only="gui")
    gui = next(a for a in parser._subparsers._group_actions[0].choices.items() if a[0] == "gui")[1]
    option = next(a for a in gui._actions if "--precision" in a.option_strings)
    assert option.help == f"precision to select: {', '.join(PRECISIONS)}" and len(PRECISIONS) == 6
