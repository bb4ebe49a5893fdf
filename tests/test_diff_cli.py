"""`trackscope diff` on the command line: inputs of every kind, --what-if, --json, and bad inputs (exit 2)."""

from __future__ import annotations

import json

import pytest

from engine import cli
from engine.analysis.diff import Diff
from engine.report.files import save
from engine.report.schema import BenchFile
from tests.test_diff import cross_device_pair


@pytest.fixture
def pair(tmp_path):
    a, b = cross_device_pair()
    return save(a, tmp_path / "a.json"), save(b, tmp_path / "b.json")


def test_two_reports_print_the_split_and_write_json(pair, tmp_path, capsys):
    a, b = pair
    out_json = tmp_path / "out" / "diff.json"
    out_json.parent.mkdir()
    assert cli.main(["diff", str(a), str(b), "--top", "2", "--json", str(out_json)]) == 0
    out = capsys.readouterr().out
    assert "B/A 4.65x: specs explain" in out and "refine" in out
    d = Diff.from_dict(json.loads(out_json.read_text()))
    assert d.split.total_ratio == pytest.approx(79.0 / 17.0) and len(d.rows) == 4  # the total and three stages


def test_what_if_and_a_saved_projection_read_the_same(pair, tmp_path, capsys):
    a, _ = pair
    assert cli.main(["diff", str(a), "--what-if", "Tesla T4", "--json", str(tmp_path / "w.json")]) == 0
    out = capsys.readouterr().out
    assert "(projection)" in out and "nothing beyond them" in out
    projection = tmp_path / "p.json"
    assert cli.main(["compare", str(a), "--what-if", "Tesla T4", "--json", str(projection)]) == 0
    assert json.loads(projection.read_text())["format"] == "trackscope-projection"
    capsys.readouterr()
    assert cli.main(["diff", str(a), str(projection), "--json", str(tmp_path / "s.json")]) == 0
    saved = json.loads((tmp_path / "s.json").read_text())
    assert saved == json.loads((tmp_path / "w.json").read_text())
    assert saved["b_is_projection"] is True


def test_a_bench_file_with_one_report_and_a_pick(pair, tmp_path, capsys):
    a, b = cross_device_pair()
    save(BenchFile(reports=(a,)), tmp_path / "one.json")
    save(BenchFile(reports=(a, b)), tmp_path / "two.json")
    assert cli.main(["diff", str(tmp_path / "one.json"), str(tmp_path / "two.json#1")]) == 0
    assert "B/A 4.65x" in capsys.readouterr().out


@pytest.mark.parametrize("args, message", [
    (["missing.json", "{b}"], "missing.json does not exist"),
    (["{bad}", "{b}"], "is not valid JSON"),
    (["{two}", "{b}"], "holds 2 reports; pick one as"),
    (["{two}#5", "{b}"], "holds 2 reports, there is no #5"),
    (["{two}#x", "{b}"], "N must be a whole number"),
    (["{a}", "{b}#0"], "is one report: drop #0"),
    (["{a}", "--what-if", "Tesla X9"], "unknown GPU 'Tesla X9'"),
    (["{a}", "{b}", "--what-if", "Tesla T4"], "--what-if takes one run"),
    (["{a}"], "diff needs two runs (got 1)"),
    (["{a}", "{b}", "--top", "0"], "--top must be at least 1"),
    (["{a}", "{notreport}"], "format"),
])
def test_bad_inputs_exit_2_with_one_line(pair, tmp_path, capsys, args, message):
    a, b = pair
    a_, b_ = cross_device_pair()
    (tmp_path / "bad.json").write_text('{"format": ')
    save(BenchFile(reports=(a_, b_)), tmp_path / "two.json")
    (tmp_path / "other.json").write_text(json.dumps({"format": "something-else", "version": 1}))
    paths = {"a": a, "b": b, "bad": tmp_path / "bad.json", "two": tmp_path / "two.json",
             "notreport": tmp_path / "other.json"}
    argv = ["diff", *(x.format(**paths) if x.startswith("{") else x for x in args)]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and "Traceback" not in err


def test_what_if_of_a_deep_capture_without_a_cost_model(tmp_path, capsys):
    from tests.test_diff import H200, capture, report

    a = report(H200, "bf16", {"backbone": (12.0, 0, 0)}, capture=capture("bf16", {"gemm tc bf16 sm90": 4.0}))
    path = save(a, tmp_path / "deep.json")
    assert cli.main(["diff", str(path), "--what-if", "Tesla T4"]) == 0
    out = capsys.readouterr().out
    assert "emulated on Tesla T4" in out and "deep capture" in out
    bare = save(report(H200, "bf16", {"backbone": (12.0, 0, 0)}), tmp_path / "bare.json")
    assert cli.main(["diff", str(bare), "--what-if", "Tesla T4"]) == 2
    assert "no cost model" in capsys.readouterr().err
