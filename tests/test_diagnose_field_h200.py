"""Field reports recorded on the H200 (2026-12-01, torch 2.11, one deep capture each; tracks left out), diagnosed
with today's rules, and scripts/rediagnose_field.py over a folder of them."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from engine.analysis.analyse import _defer_to_captures, analyse_many
from engine.analysis.facts import Finding
from engine.report.files import load_report

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "field_h200"


def _ranked(name: str):
    """(capture findings, report findings) of a recorded field report by today's rules."""
    analysis = analyse_many([load_report(DATA / f"{name}.json")])
    return list(analysis.capture_findings), list(analysis.findings)


def test_the_cpu_ops_of_the_first_thread_plugin_are_named_and_the_telemetry_guess_gives_way():
    """The H200 capture of thread_oversubscription as first planted (one 16-filter conv on the CPU per call, 64
    threads on 16 cores, recorded before the probe existed): the CPU ops the GPU waited for are the top finding at
    the plugin's function; the telemetry's host_bound (98.6 % 'the host is the bottleneck') is the same GPU wait,
    answered by the capture, so it is gone; the threads' loss, 5 ops at the stated floor, is info."""
    captured, report = _ranked("thread_oversubscription")
    top = captured[0]
    assert top["rule"] == "cpu_ops_in_gpu_run" and top["severity"] == "warning"
    assert top["call_site"] == "tests/plugins/field/thread_oversubscription.py:31 filter_bank_on_cpu"
    assert top["evidence"]["share"] == pytest.approx(0.25, abs=0.01)
    threads = next(f for f in captured if f["rule"] == "thread_oversubscription")
    assert threads["severity"] == "info" and not threads["evidence"]["probed"]
    assert threads["evidence"]["num_threads"] == 64 and threads["evidence"]["cores"] == 16
    assert [x.rule for x in report if x.severity != "info"] == []  # host_bound superseded by the capture


def test_the_clean_control_recorded_on_the_h200_has_nothing_above_info():
    captured, report = _ranked("clean")
    assert [f["rule"] for f in captured if f["severity"] != "info"] == []
    assert [x.rule for x in report if x.severity != "info"] == []


def test_a_capture_naming_cpu_ops_or_threads_answers_the_telemetry_host_bound():
    guess = Finding("host_bound", "warning", "the host is the bottleneck", {}, "", label="r")
    for rule in ("cpu_ops_in_gpu_run", "thread_oversubscription", "host_bound"):
        assert _defer_to_captures([guess], [{"rule": rule, "severity": "warning", "label": "r"}]) == ()
    assert _defer_to_captures([guess], [{"rule": "thread_oversubscription", "severity": "info", "label": "r"}]) \
        == (guess,)  # an info finding explains nothing


def _script():
    spec = importlib.util.spec_from_file_location("rediagnose_field", ROOT / "scripts" / "rediagnose_field.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_rediagnose_field_prints_the_table_of_a_folder_with_todays_rules(capsys, tmp_path):
    script = _script()
    assert script.main([str(DATA), "--findings"]) == 0
    out = capsys.readouterr().out
    assert "| thread_oversubscription | thread_oversubscription | cpu_ops_in_gpu_run | warning |" in out
    assert "| clean | (none) |" in out and "1 of 2 named by their expected rule" in out
    assert script.main([str(tmp_path)]) == 2  # no reports: a message, no traceback
    assert "no reports" in capsys.readouterr().err
