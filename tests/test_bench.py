"""`trackscope bench`: the sweep table, skipped modes, reports and bench file, overhead mode."""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np
import pytest

from engine.analysis.analyse import analyse_many
from engine.cli import main
from engine.core.config import RunConfig
from engine.io.trackio import write_queries_csv
from engine.report.files import load_bench, load_report, load_reports
from engine.workflows.bench import Bench, BenchInput, format_table
from tests.helpers import moving_square_video

FRAMES, SIZE, STEP = 8, 32, 1


@pytest.fixture(scope="module")
def video(tmp_path_factory) -> Path:
    """A tiny MJPG video with a queries sidecar and exact ground truth (the square moves STEP px/frame)."""
    folder = tmp_path_factory.mktemp("bench_video")
    path = folder / "square.avi"
    frames = moving_square_video(FRAMES, SIZE, STEP)
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), 10, (SIZE, SIZE))
    for frame in frames:
        writer.write(cv2.cvtColor(frame, cv2.COLOR_RGB2BGR))
    writer.release()
    queries = np.array([[0, 6, 10], [0, 9, 13], [0, 7, 12], [0, 10, 11]], np.float32)  # on the square
    write_queries_csv(folder / "square.queries.csv", queries)
    t = np.arange(FRAMES, dtype=np.float32)
    tracks = np.stack([queries[:, 1:2] + STEP * t, np.repeat(queries[:, 2:3], FRAMES, axis=1)], axis=-1)
    np.savez(folder / "square.gt.npz", tracks=tracks, visible=np.ones((4, FRAMES), bool),
             query_t=np.zeros(4, np.int64))
    return path


def test_bench_cli_writes_table_reports_and_bench_file(video, tmp_path, capsys):
    out = tmp_path / "bench"
    code = main(["bench", str(video), "--tracker", "lk", "--device", "cpu", "--precisions", "fp32,fp16,bf16",
                 "--points-per-batch", "2,4", "--warmup", "1", "--repeat", "2", "--out", str(out), "--diagnose"])
    assert code == 0
    text = capsys.readouterr().out
    lines = [line for line in text.splitlines() if line.startswith("lk ")]
    assert [line.split(" | ")[0].strip() for line in lines] == [
        "lk fp32 p2 f16", "lk fp16 p2 f16", "lk bf16 p2 f16", "lk fp32 p4 f16", "lk fp16 p4 f16", "lk bf16 p4 f16"]
    fp16 = next(line for line in lines if line.startswith("lk fp16 p2"))
    assert "skipped: fp16 on the CPU is refused" in fp16
    fp32 = next(line for line in lines if line.startswith("lk fp32 p2"))
    assert "1.00x" in fp32 and "AJ " in fp32  # ground truth from the sidecar
    assert "findings:" in text
    reports = load_reports(out / "bench.json")
    assert [r.label for r in reports] == ["lk fp32 p2 f16", "lk bf16 p2 f16", "lk fp32 p4 f16", "lk bf16 p4 f16"]
    for r in reports:
        assert len(r.warm_runs) == 2 and r.totals.warm_ms_median > 0
        assert r.accuracy.vs == "ground truth" and 0.0 <= r.accuracy.aj <= 1.0
        assert r.telemetry is not None and "process_cpu_pct" in r.telemetry.metrics
        assert r.work and r.queries_source and r.video.geometry is not None
    bench = json.loads((out / "bench.json").read_text())
    assert bench["format"] == "trackscope-bench" and bench["version"] == 2 and len(bench["table"]) == 6
    assert "findings" not in bench and bench["recorded_findings"] == []  # measurements only
    analysis = analyse_many(load_bench(out / "bench.json").reports)  # the findings are derived on load
    assert len(analysis.costs) == 4 and all(c is not None for c in analysis.costs)
    row = bench["table"][0]
    assert row["report_file"] and load_report(out / row["report_file"]).label == "lk fp32 p2 f16"
    assert row["ms_p10"] <= row["ms_median"] <= row["ms_p90"]


@pytest.mark.slow
def test_bench_plugin_divergence_vs_fp32_and_table():
    frames = moving_square_video(FRAMES, SIZE, STEP)
    queries = np.array([[0, 8, 12], [1, 20, 20], [0, 5, 5]], np.float32)
    data = BenchInput(frames, queries, {"name": "square", "num_frames": FRAMES, "width": SIZE, "height": SIZE},
                      None, "test")
    name = "tests.plugins.pathological:tf32_off"
    bench = Bench(data, name, "cpu", telemetry=False, cost=False)
    rows = bench.sweep(["fp32", "bf16", "tf32"], [2], [16], warmup=1, repeat=2)
    bench.close()
    fp32, bf16, tf32 = rows
    assert fp32.speedup == 1.0 and bf16.speedup is not None and bf16.speedup > 0
    assert "px vs fp32" in bf16.accuracy and "px vs fp32" in tf32.accuracy
    assert "IEEE fp32" in tf32.note  # the gate's reason shows in the table
    assert bench.reports[1].accuracy.vs == "fp32"
    assert bench.reports[0].tracker.details["plugin"] is True
    table = format_table(rows)
    assert table.splitlines()[0].startswith("config") and len(table.splitlines()) == 2 + 3
    assert bench.reports[2].config == RunConfig.from_dict(bench.reports[2].to_dict()["config"])
    assert bench.reports[2].precision == "tf32"


def test_bench_overhead_mode(video, tmp_path, capsys):
    code = main(["bench", str(video), "--tracker", "lk", "--device", "cpu", "--precisions", "fp32", "--grid", "3",
                 "--points-per-batch", "16", "--warmup", "1", "--repeat", "3", "--overhead", "--out", str(tmp_path)])
    assert code == 0
    text = capsys.readouterr().out
    assert "instrumentation overhead" in text and "ratio" in text
    overhead = json.loads((tmp_path / "bench.json").read_text())["overhead"]
    assert overhead["runs_each"] == 3 and overhead["sets"] == 3 and len(overhead["set_ratios"]) == 3
    assert overhead["ratio"] == pytest.approx(sorted(overhead["set_ratios"])[1])  # the median of the sets
    assert "median of 3 alternating sets" in text


def test_overhead_alternates_sets_and_takes_the_median_set_ratio(monkeypatch):
    """Constructed wall times: instrumented runs 3 % slower, and one set hit by a slow stretch of the machine on its
    plain runs; the median of the set ratios is the 3 %."""
    from types import SimpleNamespace

    frames = moving_square_video(FRAMES, SIZE, STEP)
    data = BenchInput(frames, np.array([[0, 8, 12]], np.float32),
                      {"name": "square", "num_frames": FRAMES, "width": SIZE, "height": SIZE}, None, "test")
    bench = Bench(data, "lk", "cpu", telemetry=False, cost=False)
    flags: list[bool] = []
    plain_ms = iter([100.0] * 5 + [150.0] * 5 + [100.0] * 5)  # set 2's plain runs in a slow stretch
    monkeypatch.setattr("engine.workflows.bench.time.sleep", lambda s: flags.append("pause"))

    def session(config, timing=None):
        flags.append(bool(timing))
        ms = 103.0 if timing else next(plain_ms)
        return SimpleNamespace(run=lambda: SimpleNamespace(wall_ms=ms))

    monkeypatch.setattr(bench, "_session", session)
    overhead = bench.overhead(RunConfig(tracker="lk", device="cpu"), warmup=1, repeat=4)
    on, off = ["pause"] + [True] * 5, ["pause"] + [False] * 5  # every block: the pause, one untimed run, 4 timed
    assert flags == [True] + on + off + off + on + on + off  # warm-up; the sets alternate which kind goes first
    assert overhead["set_ratios"] == pytest.approx([1.03, 103 / 150, 1.03])
    assert overhead["ratio"] == pytest.approx(1.03)


@pytest.mark.parametrize("args, message", [
    (["--precisions", "fp64"], "unknown fp64"),
    (["--points-per-batch", "0"], "at least 1"),
    (["--points-per-batch", "a,b"], "whole numbers"),
    (["--repeat", "0"], "--repeat"),
])
def test_bench_bad_arguments_exit_2(video, args, message, capsys):
    assert main(["bench", str(video), "--tracker", "lk", "--device", "cpu", *args]) == 2
    assert message in capsys.readouterr().err
