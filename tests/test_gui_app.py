"""`trackscope gui ...` end to end in a subprocess (offscreen): open a report, run, screenshot, exit."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from engine.config import RunConfig
from engine.report import RunRecorder, save_report
from engine.session import Session
from engine.video import write_video
from tests.helpers import moving_square_video

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT_S = 120


def _gui(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "XDG_CONFIG_HOME": str(tmp_path / "config"),
           "HOME": str(tmp_path), "PYTHONPATH": str(ROOT), "TRACKSCOPE_NO_NVML": "1"}
    return subprocess.run([sys.executable, "-m", "engine.cli", "gui", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=TIMEOUT_S)


def test_cli_runs_video_and_saves_screenshot(tmp_path):
    video = tmp_path / "clip.mp4"
    write_video(video, moving_square_video(6, 32), fps=10)
    shot = tmp_path / "shot.png"
    out = _gui([str(video), "--tracker", "lk", "--run", "--screenshot", str(shot), "--size", "900x600"], tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert shot.stat().st_size > 1000
    assert (tmp_path / "config" / "trackscope" / "trackscope.conf").exists()  # settings persisted


def test_cli_replays_report(tmp_path):
    video = tmp_path / "clip.mp4"
    write_video(video, moving_square_video(6, 32), fps=10)
    recorder = RunRecorder()
    for event in Session(video, np.array([[0, 8, 12]], np.float32), RunConfig(tracker="lk")).events():
        recorder.add(event)
    report = save_report(tmp_path / "run.json", recorder.build())
    shot = tmp_path / "replay.png"
    out = _gui([str(report), "--screenshot", str(shot), "--size", "900x600"], tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert shot.stat().st_size > 1000


def test_cli_missing_file_is_a_usage_error(tmp_path):
    out = _gui([str(tmp_path / "nope.mp4")], tmp_path)
    assert out.returncode == 2 and "nope.mp4" in out.stderr
