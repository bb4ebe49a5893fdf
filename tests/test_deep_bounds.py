"""`--deep` bounded (issue 20 item 10): a capture stops at a stated limit and says so, honours Ctrl-C at the next
op, leaves nothing in the temp folder, survives a plugin's own profiler, and never costs the timed run's report."""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from engine.capture.profile import CaptureLimits, capture_run, profiler_active
from engine.cli import main
from engine.core.config import RunConfig
from engine.core.paths import SAMPLE_VIDEO
from engine.run.session import Session
from engine.trackers.plugin import PluginTracker
from engine.workflows import deep as deep_module
from engine.workflows.deep import DEEP_FAILED_EXIT, deep_capture, trace_path_for
from tests.helpers import moving_square_video
from tests.plugins import capture_hostile

ROOT = Path(__file__).resolve().parents[1]
QUERIES = np.array([[0, 5, 5], [0, 10, 10]], np.float32)


def _session_maker(factory):
    video = moving_square_video(num_frames=6, size=32)
    tracker = PluginTracker("hostile", factory())
    config = RunConfig(tracker="hostile", device="cpu", points_per_batch=len(QUERIES))
    return lambda: Session(video, QUERIES, config, tracker=tracker)


def test_a_long_capture_stops_at_its_op_limit_keeps_the_trace_and_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr(capture_hostile, "MANY_OPS", 5_000)
    limits = CaptureLimits(max_ops=400, max_seconds=600)
    deep = deep_capture(_session_maker(capture_hostile.many_ops), precision="fp32", typical_wall_ms=None,
                        trace_path=tmp_path / "r.trace.json.gz", limits=limits)
    assert deep.error is None and deep.trace_path is not None and deep.trace_path.is_file()
    assert deep.stopped == "stopped recording at the limit of 400 ops" and deep.ops == 400
    assert deep.summary.counts.cpu_ops < 5_000  # the 5,000 adds were not all recorded
    section = deep.to_dict()
    assert section["stopped"] == deep.stopped and section["limits"] == {"max_ops": 400, "max_seconds": 600}
    text = deep_module.format_capture(deep)
    assert "the capture covers the run's first 400 ops" in text and "overhead not comparable" in text


def test_a_capture_stops_at_its_time_limit():
    calls = []

    def run_once() -> None:
        import torch

        x = torch.zeros(2)
        for _ in range(100_000):  # far more than fits in no time at all
            x = x + 1
        calls.append(1)

    result = capture_run(run_once, device="cpu", limits=CaptureLimits(max_ops=10**9, max_seconds=0.0))
    assert result.ok and result.stopped == "stopped recording at the limit of 0 s"
    assert result.ops < 100_000


def test_ctrl_c_stops_the_profiled_run_at_the_next_op_and_restores_the_handler(monkeypatch):
    monkeypatch.setattr(capture_hostile, "MANY_OPS", 50_000)
    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt):
        capture_run(_plugin_call(capture_hostile.interrupts_itself()), device="cpu")
    assert signal.getsignal(signal.SIGINT) is before
    assert not profiler_active()


def _plugin_call(module):
    import torch

    frames, queries = torch.zeros(4, 8, 8, 3, dtype=torch.uint8), torch.tensor(QUERIES)
    return lambda: module(frames, queries)  # signals itself only under the profiler


def test_ctrl_c_counts_no_more_ops_once_it_came(monkeypatch):
    monkeypatch.setattr(capture_hostile, "MANY_OPS", 50_000)
    seen = {}
    real = capture_run.__globals__["_OpBudget"].__torch_function__

    def spy(self, func, types, args=(), kwargs=None):
        seen["budget"] = self
        return real(self, func, types, args, kwargs)

    monkeypatch.setattr(capture_run.__globals__["_OpBudget"], "__torch_function__", spy)
    with pytest.raises(KeyboardInterrupt):
        capture_run(_plugin_call(capture_hostile.interrupts_itself()), device="cpu")
    budget = seen["budget"]
    assert budget.stopped == "stopped by Ctrl-C"
    assert budget.ops <= capture_hostile.INTERRUPT_AT_OP + 2  # the op after the signal was the last one


def _left_in(folder: Path) -> list[Path]:
    """What a run left in its temp folder (torch's own inductor cache folder, made on import, is not ours)."""
    return [p for p in folder.iterdir() if not p.name.startswith("torchinductor_")]


def _track(tmp_path: Path, tracker: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    tmp = tmp_path / "tmp"
    tmp.mkdir(exist_ok=True)
    return subprocess.Popen(
        [sys.executable, "-m", "engine.cli", "track", str(SAMPLE_VIDEO), "--grid", "2", "--max-frames", "6",
         "--tracker", tracker, "--device", "cpu", "--out", str(tmp_path / "t.npz"), "--report",
         str(tmp_path / "r.json"), "--deep"],
        cwd=ROOT, env={**os.environ, "TMPDIR": str(tmp), **(env or {})}, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)


def test_a_plugin_with_its_own_profiler_is_a_failed_capture_not_a_crash(tmp_path):
    proc = _track(tmp_path, "tests.plugins.capture_hostile:uses_profiler")
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == DEEP_FAILED_EXIT, err[-2000:]  # was -11 (SIGSEGV) exporting the ended session
    assert "ended the capture's" in err and "the deep capture failed" in err
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["capture"]["error"] and report["runs"]
    assert not trace_path_for(tmp_path / "r.json").exists()
    assert not _left_in(tmp_path / "tmp")  # no temp file left


def test_ctrl_c_during_the_capture_keeps_the_timed_report_and_no_temp_files(tmp_path):
    proc = _track(tmp_path, "tests.plugins.capture_hostile:interrupts_itself", {"TRACKSCOPE_TEST_MANY_OPS": "50000"})
    _, err = proc.communicate(timeout=600)  # a Ctrl-C at op 100 of the profiled run (the plugin sends it)
    assert proc.returncode == 130, err[-2000:]  # was: the report was written after the capture, so lost
    report = json.loads((tmp_path / "r.json").read_text())  # the timed run's report, whole
    assert report["runs"] and report.get("capture") is None
    assert not trace_path_for(tmp_path / "r.json").exists()
    assert not _left_in(tmp_path / "tmp")
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_a_failed_capture_exits_non_zero_after_writing_the_report(tmp_path, capsys):
    code = main(["track", str(SAMPLE_VIDEO), "--grid", "2", "--max-frames", "4", "--tracker",
                 "tests.plugins.capture_hostile:fails_when_profiled", "--device", "cpu", "--out",
                 str(tmp_path / "t.npz"), "--report", str(tmp_path / "r.json"), "--deep"])
    assert code == DEEP_FAILED_EXIT  # was 0
    err = capsys.readouterr().err
    assert "refuses to be profiled" in err and "the deep capture failed" in err
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["runs"] and "refuses to be profiled" in report["capture"]["error"]
    assert (tmp_path / "t.npz").is_file()


def test_bench_keeps_a_configurations_timed_report_when_its_capture_is_interrupted(tmp_path, monkeypatch):
    """Ctrl-C during `bench --deep`'s capture: the configuration's report of its timed runs is already on disk."""
    from engine.io.video import write_video
    from engine.workflows import bench as bench_module

    video = tmp_path / "clip.mp4"
    write_video(video, moving_square_video(6, 32), fps=10)

    def interrupted(self, config, report):
        raise KeyboardInterrupt

    monkeypatch.setattr(bench_module.Bench, "_capture", interrupted)
    out = tmp_path / "bench"
    code = main(["bench", str(video), "--tracker", "lk", "--device", "cpu", "--precisions", "fp32", "--points", "4",
                 "--warmup", "0", "--repeat", "1", "--no-cost", "--deep", "--out", str(out)])
    assert code == 130
    reports = [p for p in out.glob("*.json") if p.name != "bench.json"]
    assert len(reports) == 1
    data = json.loads(reports[0].read_text())
    assert data["runs"] and not data.get("capture")  # the timed run, without the capture it never got


def test_bench_deep_gives_each_trace_its_rank_and_exits_non_zero_when_a_capture_fails(tmp_path):
    out = tmp_path / "bench"
    args = ["bench", str(SAMPLE_VIDEO), "--device", "cpu", "--precisions", "fp32", "--points-per-batch", "2,4",
            "--grid", "2", "--warmup", "0", "--repeat", "1", "--no-cost", "--no-telemetry", "--deep"]
    assert main([*args, "--tracker", "tests.plugins.planted_capture:deep_nested", "--out", str(out)]) == 0
    reports = json.loads((out / "bench.json").read_text())["reports"]
    ranks = []
    for report in reports:
        trace = json.loads(gzip.decompress((out / report["capture"]["trace_file"]).read_bytes()))
        ranks.append(trace["distributedInfo"]["rank"])
    assert sorted(ranks) == [0, 1]  # HolisticTraceAnalysis reads the folder as two ranks, not one
    code = main([*args, "--tracker", "tests.plugins.capture_hostile:fails_when_profiled", "--out",
                 str(tmp_path / "failing")])
    assert code == DEEP_FAILED_EXIT  # was 0
    assert json.loads((tmp_path / "failing" / "bench.json").read_text())["reports"]  # the timed runs are kept
