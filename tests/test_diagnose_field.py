"""scripts/diagnose_field.py on the CPU: the deep bench of field plugins, its table, its time limit."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from engine.capture.summary import CaptureSummary
from engine.report.files import load_report
from tests.helpers import moving_square_video
from tests.plugins import misbehaving
from tests.plugins.field.torch_state import TorchState

ROOT = Path(__file__).resolve().parents[1]
HANG_LIMIT_S = 2  # the hanging plugin waits until the test releases it: any limit is reached


def _script():
    spec = importlib.util.spec_from_file_location("diagnose_field", ROOT / "scripts" / "diagnose_field.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def script():
    return _script()


@pytest.fixture
def tiny_video(tmp_path):
    import cv2

    path = tmp_path / "tiny.mp4"
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), 10, (48, 48))
    for frame in moving_square_video(num_frames=6, size=48):
        writer.write(frame[..., ::-1].copy())
    writer.release()
    return path


def _finding(rule, severity, ms, **kw):
    return {"rule": rule, "severity": severity, "share": None, "ms_at_stake": ms, "call_site": None,
            "module": None, "stage": None, "title": "", "source": "capture", **kw}


def test_findings_rank_by_severity_then_time_and_trackscope_code_is_recognised(script):
    found = script.ranked([_finding("a", "info", 50.0), _finding("b", "warning", 1.0),
                           _finding("c", "critical", 0.5), _finding("d", "warning", 3.0)])
    assert [f["rule"] for f in found] == ["c", "d", "b", "a"]
    assert script.names_trackscope(_finding("host_sync", "warning", 1.0,
                                            call_site="engine/trackers/plugin.py:103 _to_numpy"))
    assert script.names_trackscope(_finding("host_sync", "warning", 1.0, module="download"))
    assert not script.names_trackscope(_finding("host_sync", "warning", 1.0,
                                                call_site="tests/plugins/field/sync_item.py:16 visibility_per_point",
                                                module="(forward body of SyncItemTracker)"))
    assert not script.names_trackscope(_finding("x", "warning", 1.0, title="my_engine/thing.py"))


def test_diagnose_field_writes_a_report_and_a_row_per_plugin_and_restores_torch_state(script, tiny_video, tmp_path):
    out = tmp_path / "out"
    before = TorchState.save()
    argv = ["--out", str(out), "--device", "cpu", "--video", str(tiny_video), "--grid", "3", "--repeat", "2",
            "--no-cost"]
    assert script.main([*argv, "clean", "thread_oversubscription"]) == 0
    assert TorchState.save() == before  # the plugin's 4 threads per core were put back
    table = json.loads((out / "table.json").read_text())
    rows = {r["plugin"]: r for r in table["rows"]}
    assert set(rows) == {"clean", "thread_oversubscription"}
    assert table["environment"]["device"] == "cpu"
    for row in rows.values():
        assert "error" not in row, row
        report = load_report(out / row["report"])
        assert report.capture and not report.capture.get("error")
        CaptureSummary.from_dict(report.capture)  # the deep bench's capture summary is in the report
        assert row["precision"] == report.precision
        assert isinstance(row["findings"], list) and isinstance(row["names_trackscope"], list)
    assert rows["clean"]["expected"] is None
    assert rows["thread_oversubscription"]["expected"] == "thread_oversubscription"
    assert rows["clean"]["top_is_expected"] == (not rows["clean"]["findings"])
    md = (out / "table.md").read_text()
    assert "| clean | (none) |" in md and "| thread_oversubscription | thread_oversubscription |" in md

    # --resume keeps the rows and adds the new plugin
    assert script.main([*argv, "--resume", "clean", "float64_path"]) == 0
    table = json.loads((out / "table.json").read_text())
    assert [r["plugin"] for r in table["rows"]] == ["clean", "thread_oversubscription", "float64_path"]


def test_a_plugin_past_its_time_limit_gets_a_row_saying_so_and_the_run_goes_on(script, tiny_video, tmp_path):
    out = tmp_path / "out"
    misbehaving.RELEASE.clear()
    try:
        assert script.main(["--out", str(out), "--device", "cpu", "--video", str(tiny_video), "--grid", "2",
                            "--no-cost", "--time-limit-s", str(HANG_LIMIT_S), "tests.plugins.misbehaving:hangs"]) == 0
    finally:
        misbehaving.RELEASE.set()  # the abandoned call returns
        misbehaving.ENTERED.clear()
    row = json.loads((out / "table.json").read_text())["rows"][0]
    assert row["plugin"] == "tests.plugins.misbehaving:hangs" and row["expected"] is None
    assert "time limit" in row["error"]
    assert "time limit" in (out / "table.md").read_text()
