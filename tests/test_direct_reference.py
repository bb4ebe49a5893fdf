"""The bench's direct-call reference: the tracker called alone beside the session runs, recorded typed in the
report, shown as session/direct in the table and the JSON; old reports still load."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from engine.cli import main
from engine.core.stages import StageTimer
from engine.report.files import load_bench, load_report, save
from engine.report.parts import DirectReference
from engine.report.schema import Report
from engine.trackers.base import RunContext
from engine.trackers.registry import load_tracker
from engine.workflows.bench import Bench, BenchInput, Row, format_table
from engine.workflows.direct import DIRECT_MAX_RUNS, DIRECT_MIN_RUNS, PLUGIN_CALLABLE, PREPARE_AND_TRACK, direct_runs
from tests.helpers import moving_square_video

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "data" / "h200" / "corrtrack_fp32_p256_sample.json"
FRAMES, SIZE = 6, 32
QUERIES = np.array([[0, 8, 12], [1, 20, 20], [0, 5, 5]], np.float32)


def _bench(tracker: str, **kwargs) -> Bench:
    data = BenchInput(moving_square_video(FRAMES, SIZE), QUERIES,
                      {"name": "square", "num_frames": FRAMES, "width": SIZE, "height": SIZE}, None, "test")
    return Bench(data, tracker, "cpu", telemetry=False, cost=False, **kwargs)


def test_direct_reference_round_trips_in_a_report_and_its_ratio_comes_from_the_samples():
    golden = load_report(GOLDEN)
    assert golden.direct is None and golden.session_vs_direct is None  # a report from before the field loads
    direct = DirectReference(samples_ms=(100.0, 98.0, 110.0), warmup=2, what=PLUGIN_CALLABLE)
    report = dataclasses.replace(golden, direct=direct)
    data = report.to_dict()
    assert data["direct"]["ms_median"] == 100.0 and data["direct"]["num_runs"] == 3
    again = Report.from_dict(json.loads(json.dumps(data)))
    assert again.direct == direct and again == report
    assert direct.ratio(102.0) == pytest.approx(1.02)
    assert again.session_vs_direct == pytest.approx(golden.typical_run_ms / 100.0)
    assert DirectReference(samples_ms=()).ratio(102.0) is None


def test_a_malformed_direct_reference_names_its_field():
    data = load_report(GOLDEN).to_dict()
    data["direct"] = {"samples_ms": [1.0, "fast"]}
    with pytest.raises(Exception, match=r"direct.samples_ms\[1\]"):
        Report.from_dict(data)


def test_the_table_shows_session_over_direct_with_the_ms_between_them():
    """The ratio, and the ms it stands for: a short tracker's large ratio is the session's fixed cost per run."""
    rows = [Row("lk fp32 p8 f16", "fp32", 8, 16, ms_median=102.0, direct_ms_median=100.0, vs_direct=1.02),
            Row("tiny fp32 p8 f16", "fp32", 8, 16, ms_median=2.9, direct_ms_median=0.86, vs_direct=3.37),
            Row("lk bf16 p8 f16", "bf16", 8, 16, ms_median=50.0)]
    header, _, with_direct, short, without = format_table(rows).splitlines()
    column = [c.strip() for c in header.split(" | ")].index("vs direct")
    assert with_direct.split(" | ")[column].strip() == "1.02x +2.0 ms"
    assert short.split(" | ")[column].strip() == "3.37x +2.0 ms"
    assert without.split(" | ")[column].strip() == "-"


def test_direct_runs_stay_between_three_and_ten():
    assert [direct_runs(n) for n in (1, 3, 4, 10, 30)] == [DIRECT_MIN_RUNS, 3, 4, 10, DIRECT_MAX_RUNS]


def test_session_runs_and_direct_calls_alternate_in_blocks(monkeypatch):
    """The bench interleaves its session runs and the direct calls (a drift of the machine moves both alike), and
    enters both kinds of block alike: a pause, then one untimed call (a pause before one side only is a bias)."""
    from engine.workflows import bench as bench_mod
    from engine.workflows import direct as direct_mod

    assert direct_mod.block_sizes(10) == [4, 3, 3] and direct_mod.block_sizes(2) == [1, 1]
    assert [direct_mod.direct_blocks(n) for n in (2, 6, 10, 30)] == [3, 3, 4, 10]  # about 3 session runs a block
    order: list[str] = []
    real_session = bench_mod.Bench._session
    real_call = direct_mod.DirectCaller.call

    def session(self, config, timing=None):
        order.append("s")
        return real_session(self, config, timing)

    def call(self, times, *, timed=True):
        order.append(f"d{times}" if timed else "w")
        return real_call(self, times, timed=timed)

    monkeypatch.setattr(bench_mod.Bench, "_session", session)
    monkeypatch.setattr(direct_mod.DirectCaller, "call", call)
    monkeypatch.setattr(bench_mod.time, "sleep", lambda s: order.append("|"))
    bench = _bench("lk")
    bench.sweep(["fp32"], [2], [16], warmup=1, repeat=6)
    bench.close()
    # warm-up session, 2 timed, the caller's warm-up call; then each block after a pause ("|") and one untimed call
    direct_block, session_block = "|" + "w" + "d2", "|" + "s" + "ss"
    assert "".join(order).startswith("s" + "ss" + "w" + direct_block + session_block + direct_block + session_block
                                     + direct_block)


@pytest.mark.parametrize("tracker, what", [("lk", PREPARE_AND_TRACK),
                                           ("tests.plugins.mlp_refine:factory", PLUGIN_CALLABLE),
                                           ("tests.plugins.misbehaving:writes_numpy", PREPARE_AND_TRACK)])
def test_a_bench_records_a_direct_reference_beside_each_configuration(tracker, what):
    bench = _bench(tracker)
    rows = bench.sweep(["fp32"], [2], [16], warmup=1, repeat=4)
    bench.close()
    (row,), (report,) = rows, bench.reports
    direct = report.direct
    assert direct is not None, row.extra  # before: no direct reference at all
    assert direct.num_runs == 4 and all(ms > 0 for ms in direct.samples_ms) and direct.what == what
    assert row.direct_ms_median == direct.ms_median
    assert row.vs_direct == pytest.approx(row.ms_median / direct.ms_median)
    assert np.all(bench.data.frames == moving_square_video(FRAMES, SIZE))  # writes_numpy wrote only its copy


def test_no_direct_skips_it():
    bench = _bench("lk", direct=False)
    (row,) = bench.sweep(["fp32"], [2], [16], warmup=0, repeat=1)
    bench.close()
    assert bench.reports[0].direct is None and row.vs_direct is None


def test_the_bench_cli_prints_and_writes_the_ratio(tmp_path, capsys):
    out = tmp_path / "bench"
    code = main(["bench", "--tracker", "lk", "--device", "cpu", "--precisions", "fp32", "--grid", "2",
                 "--points-per-batch", "4", "--warmup", "0", "--repeat", "3", "--no-cost", "--no-telemetry",
                 "--out", str(out)])
    assert code == 0
    header, _, line = capsys.readouterr().out.splitlines()[:3]
    column = [c.strip() for c in header.split(" | ")].index("vs direct")
    table = json.loads((out / "bench.json").read_text())["table"][0]
    gap = table["ms_median"] - table["direct_ms_median"]
    assert line.split(" | ")[column].strip() == f"{table['vs_direct']:.2f}x {gap:+.1f} ms"
    assert table["vs_direct"] == pytest.approx(table["ms_median"] / table["direct_ms_median"])
    report = load_bench(out / "bench.json").reports[0]
    assert report.direct is not None and report.direct.num_runs == 3
    save(report, tmp_path / "again.json")
    assert load_report(tmp_path / "again.json").direct == report.direct


class _Seen(torch.nn.Module):
    """A plugin with one submodule; records whether that submodule had forward hooks when it ran."""

    def __init__(self) -> None:
        super().__init__()
        self.head = torch.nn.Linear(2, 2)
        self.hooked: list[bool] = []

    def forward(self, frames: torch.Tensor, queries: torch.Tensor):
        self.hooked.append(bool(self.head._forward_hooks or self.head._forward_pre_hooks))
        self.head(queries[:, 1:])
        t = frames.shape[0]
        return queries[:, None, 1:].expand(-1, t, -1), torch.ones(queries.shape[0], t, dtype=torch.bool)


def test_the_direct_call_runs_the_plugin_with_the_stage_hooks_off_and_puts_them_back(monkeypatch):
    plugin = _Seen()
    monkeypatch.setattr("tests.plugins.mlp_refine.factory", lambda: plugin)
    tracker = load_tracker("tests.plugins.mlp_refine:factory")
    ctx = RunContext(torch.device("cpu"), "fp32", 16, StageTimer("cpu", enabled=True))
    prepared = tracker.prepare(moving_square_video(FRAMES, SIZE), ctx)
    before = list(plugin.head._forward_hooks)
    tracker.call_direct(prepared.data["frames"], torch.from_numpy(QUERIES), ctx)
    tracker.track(prepared, QUERIES, ctx)
    assert plugin.hooked == [False, True]  # direct: torch's hook-free path; through the adapter: timed
    assert list(plugin.head._forward_hooks) == before
    assert "head" in ctx.timer.collect()
