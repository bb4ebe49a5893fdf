"""`track --deep` and `bench --deep` on the CPU: the capture lands in the report, the trace beside it."""

from __future__ import annotations

import gzip
import json

from engine.cli import main
from engine.core.paths import SAMPLE_VIDEO
from engine.workflows.deep import trace_path_for

DEEP_NESTED = "tests.plugins.planted_capture:deep_nested"


def _names(capture: dict) -> set[str]:
    return {row["module"] for row in capture["modules"]}


def test_track_deep_puts_a_module_table_in_the_report_and_a_trace_beside_it(tmp_path, capsys):
    report_path = tmp_path / "run.json"
    code = main(["track", str(SAMPLE_VIDEO), "--grid", "2", "--tracker", DEEP_NESTED, "--device", "cpu",
                 "--out", str(tmp_path / "t.npz"), "--report", str(report_path), "--deep"])
    assert code == 0
    capture = json.loads(report_path.read_text())["capture"]
    assert capture["error"] is None
    names = _names(capture)
    assert any(n.startswith("updater.blocks.") for n in names)  # nested module paths, not only top level
    assert any(n.startswith("(forward body of") for n in names)  # work between a module's children
    assert capture["unprofiled_wall_ms"] > 0 and capture["profiled_wall_ms"] > 0  # overhead stated
    trace = trace_path_for(report_path)
    assert capture["trace_file"] == trace.name
    events = json.loads(gzip.decompress(trace.read_bytes()))
    events = events["traceEvents"] if isinstance(events, dict) else events
    assert any(str(e.get("name", "")).startswith("trackscope.stage:") for e in events)
    assert "deep capture" in capsys.readouterr().err


def test_bench_deep_captures_each_configuration_after_its_timed_runs(tmp_path):
    out = tmp_path / "bench"
    code = main(["bench", str(SAMPLE_VIDEO), "--tracker", DEEP_NESTED, "--device", "cpu", "--precisions", "fp32",
                 "--points-per-batch", "8", "--grid", "2", "--warmup", "0", "--repeat", "1", "--no-cost",
                 "--no-telemetry", "--out", str(out), "--deep"])
    assert code == 0
    bench = json.loads((out / "bench.json").read_text())
    (report,) = bench["reports"]
    assert report["capture"]["error"] is None and _names(report["capture"])
    assert len(report["runs"]) >= 1  # the timed runs are the report's runs; the captured one is not among them
    assert (out / report["capture"]["trace_file"]).is_file()
