"""The typed report parts diff, gate and the app read: Finding (one type for analysis, capture and recorded
findings), CapturePart (Report.capture_part) and Projection; every recorded report in the repo round-trips."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from engine.analysis.analyse import analyse
from engine.analysis.whatif import project
from engine.report.capture_part import CapturePart
from engine.report.files import read_json
from engine.report.finding import Finding
from engine.report.migrate import BENCH_FORMAT, REPORT_FORMAT, migrate
from engine.report.projection import PROJECTION_FORMAT, Projection
from engine.report.schema import BenchFile, Report
from tests.test_diff import cross_device_pair

ROOT = Path(__file__).resolve().parents[1]


def recorded_files() -> list[Path]:
    """Every report and bench file the repository holds (tests/data, docs/records, ...)."""
    listed = subprocess.run(["git", "ls-files", "*.json"], cwd=ROOT, capture_output=True, text=True, check=True)
    out = []
    for name in listed.stdout.split():
        data = read_json(ROOT / name)
        if isinstance(data, dict) and data.get("format") in (REPORT_FORMAT, BENCH_FORMAT):
            out.append(ROOT / name)
    return out


FILES = recorded_files()


def _reports(data: dict) -> list[tuple[dict, Report]]:
    """(migrated JSON, typed report) of each report in a report or bench file."""
    migrated = migrate(data)
    if migrated["format"] == BENCH_FORMAT:
        return list(zip(migrated["reports"], BenchFile.from_dict(data).reports))
    return [(migrated, Report.from_dict(data))]


def test_the_repo_holds_recorded_reports_with_captures_and_findings():
    reports = [r for path in FILES for _, r in _reports(read_json(path))]
    assert len(FILES) >= 10
    assert sum(r.capture is not None for r in reports) >= 4
    assert sum(bool(r.recorded_findings) for r in reports) >= 4


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_recorded_report_round_trips_through_the_typed_parts(path):
    for raw, report in _reports(read_json(path)):
        findings = raw.get("recorded_findings") or []
        assert [f.to_dict() for f in report.recorded_findings] == findings
        assert all(f.source == "recorded" for f in report.recorded_findings)
        assert [Finding.from_dict(f).to_dict() for f in findings] == findings
        if raw.get("capture") is not None:
            part = report.capture_part
            assert part is not None and part.summary is not None, part.read_error if part else None
            assert part.to_dict() == raw["capture"]
            assert CapturePart.from_dict(part.to_dict()).to_dict() == raw["capture"]
            assert report.capture_summary is part.summary  # read once
        assert Report.from_dict(report.to_dict()).to_dict() == report.to_dict()


def test_the_deep_capture_part_is_typed_down_to_its_pass_facts():
    report = Report.from_dict(read_json(ROOT / "docs/records/session17/tapir_bf16_deep.json"))
    part = report.capture_part
    # a capture from before the line rows (evidence.lines, shares.kernel_ms_lines) is written back as it was
    # read, not with the newer fields' defaults added
    assert part is not None and part.raw is not None and part.to_dict() == report.capture
    assert part.summary is not None and part.summary.counts.syncs == 330
    assert part.trace_file and part.trace_file.endswith(".trace.json.gz") and part.ops == 11935
    assert part.limits and "max_ops" in part.limits and part.stopped is None


def test_a_capture_this_version_cannot_read_keeps_the_report_readable():
    a, _ = cross_device_pair()
    data = a.to_dict()
    data["capture"] = {"version": 99, "device": "cuda:0", "whatever": [1, 2]}
    report = Report.from_dict(data)
    part = report.capture_part
    assert part is not None and part.summary is None and "version 99" in (part.read_error or "")
    assert part.to_dict() == data["capture"] and report.to_dict()["capture"] == data["capture"]
    assert analyse(report).capture_findings == ()


def test_capture_findings_are_typed_and_keep_the_dict_shape_the_app_reads():
    runs = json.loads((ROOT / "tests/data/capture/summaries.json").read_text())["runs"]
    found = [f for run in runs for f in run["findings"]]
    assert found
    for f in found:
        typed = Finding.from_capture(f)
        assert typed.source == "capture" and typed.to_dict() == f
        assert typed["rule"] == f["rule"] and typed.get("module") == f.get("module") and dict(typed) == f
        assert typed.share_at_stake == f["evidence"].get("share")
        if f.get("call_site"):
            assert typed.site and ":" in typed.site and f["call_site"].startswith(typed.site)
    labelled = Finding.from_capture(found[0], label="run 1")
    assert labelled.label == "run 1" and labelled.to_dict() == {**found[0], "label": "run 1"}


def test_an_analysis_finding_is_written_as_the_rules_always_wrote_it():
    f = Finding("tf32_off", "warning", "fp32 with TF32 off", {"ms": 1.234567, "n": 3, "bad": float("nan")},
                "enable TF32", stage="backbone", stake_ms=12)
    assert f.to_dict() == {"rule": "tf32_off", "severity": "warning", "title": "fp32 with TF32 off",
                           "evidence": {"ms": 1.2346, "n": 3.0, "bad": None}, "suggestion": "enable TF32",
                           "stage": "backbone", "stake_ms": 12.0}
    assert f.source == "analysis" and f.ms_at_stake == 12 and f.site is None


def test_all_findings_name_their_source(tmp_path):
    report = Report.from_dict(read_json(ROOT / "tests/data/h200/deep/item_per_point.json"))
    found = analyse(report).all_findings()
    sources = {f.source for f in found}
    assert "capture" in sources
    assert all(isinstance(f, Finding) for f in found)


def test_a_projection_round_trips_with_its_format_marker():
    a, _ = cross_device_pair()
    raw = project(a, "Tesla T4")
    typed = Projection.from_dict(raw)
    assert typed.target == "Tesla T4" and typed.projected_ms == pytest.approx(raw["projected_ms"])
    written = typed.to_dict()
    assert written["format"] == PROJECTION_FORMAT
    assert {k: v for k, v in written.items() if k not in ("format", "version")} == json.loads(json.dumps(raw))
    assert Projection.from_dict(written) == typed
    assert typed.stages["backbone"].ratio == pytest.approx(19.5 / 8.1)


@pytest.mark.parametrize("data, message", [
    ({"format": "trackscope-report"}, "format"),
    ({"source": "H200", "target": "T4"}, "lacks stages, projected_ms"),
    ({"format": "trackscope-projection", "version": 2}, "version 2"),
    ({"format": "trackscope-projection", "source": "H200", "target": "T4", "stages": {"x": {"observed_ms": "a"}},
      "projected_ms": 1.0}, "stages.x.observed_ms"),
])
def test_a_malformed_projection_is_named(data, message):
    from engine.core.errors import ReportError

    with pytest.raises(ReportError, match=message):
        Projection.from_dict(data)


def test_a_fresh_deep_capture_is_its_typed_part_and_its_findings_typed():
    from engine.capture.summary import CaptureSummary
    from engine.workflows.deep import DeepCapture

    found = {"rule": "host_sync", "severity": "warning", "title": "syncs", "evidence": {"share": 0.1},
             "suggestion": "", "stage": "refine", "module": None, "call_site": "model.py:88 sample"}
    deep = DeepCapture(summary=CaptureSummary(device="cuda:0", precision="bf16", torch_version="2.11"),
                       findings=[found], seconds=1.5, ops=10)
    part = deep.part()
    assert part.raw is None and part.to_dict() == deep.to_dict() and part.trace_file is None
    (typed,) = deep.typed_findings
    assert typed.source == "capture" and typed.site == "model.py:88" and typed.share_at_stake == 0.1
    assert typed.to_dict() == found
