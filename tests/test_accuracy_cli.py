"""`trackscope eval` and `trackscope cycle` over several precisions (--precisions) writing accuracy files (--json),
on a one-video synthetic set: CorrTrack at fp32 and bf16 on the CPU, LK once beside it."""

from __future__ import annotations

import json

import pytest

from engine.cli.entry import main
from engine.core.config import PRECISION_UNUSED
from engine.report.accuracy_file import CYCLE_KIND, EVAL_KIND, EvalScores, load_accuracy_file


@pytest.fixture(scope="module")
def sample_set(tmp_path_factory):
    folder = tmp_path_factory.mktemp("acc") / "tinyset"
    assert main(["sample", str(folder), "--count", "1", "--frames", "6", "--points", "8"]) == 0
    return folder


def test_eval_runs_each_precision_once_lk_once_and_writes_an_accuracy_file(sample_set, tmp_path, capsys):
    out = tmp_path / "eval.json"
    assert main(["eval", str(sample_set), "--tracker", "corrtrack", "--device", "cpu", "--precisions", "bf16,fp32",
                 "--json", str(out)]) == 0
    captured = capsys.readouterr()
    header = captured.out.splitlines()[0]
    assert "corrtrack fp32 AJ" in header and "corrtrack bf16 AJ" in header and "lk AJ" in header
    assert header.index("corrtrack fp32") < header.index("corrtrack bf16")  # fp32 first: the reference
    assert captured.err.count("lk done") == 1  # LK has no precision: one run, not one per precision
    acc = load_accuracy_file(out)
    assert acc.kind == EVAL_KIND and acc.machine == "CPU" and acc.tracker == "corrtrack" and acc.baseline == "lk"
    assert acc.source_name == "tinyset" and acc.videos == ("synth_000",)
    assert acc.weights_sha256 and len(acc.weights_sha256) == 64  # the bundled weights' manifest has it
    assert acc.settings["precisions"] == ["fp32", "bf16"] and acc.settings["query_mode"] == "first"
    assert [(e.tracker, e.precision) for e in acc.entries] == [("corrtrack", "fp32"), ("corrtrack", "bf16"),
                                                               ("lk", PRECISION_UNUSED)]
    for entry in acc.entries:
        assert isinstance(entry.summary, EvalScores) and entry.summary.num_points == 8
        assert entry.summary.aj is not None and 0 <= entry.summary.aj <= 1
        assert len(entry.videos) == 1 and entry.videos[0].name == "synth_000"
        assert entry.videos[0].scores.aj == pytest.approx(entry.summary.aj)  # one video: its mean


def test_eval_with_one_precision_keeps_its_table_and_lk_alone_runs_once(sample_set, tmp_path, capsys):
    assert main(["eval", str(sample_set), "--tracker", "lk", "--precision", "bf16"]) == 0
    assert "lk AJ" in capsys.readouterr().out
    out = tmp_path / "lk.json"
    assert main(["eval", str(sample_set), "--tracker", "lk", "--precisions", "fp32,bf16", "--json", str(out)]) == 0
    assert capsys.readouterr().out.splitlines()[0].count("AJ") == 1
    (entry,) = load_accuracy_file(out).entries
    assert entry.precision == PRECISION_UNUSED and load_accuracy_file(out).baseline is None


def test_cycle_runs_each_precision_with_lk_beside_and_keeps_its_older_json(sample_set, tmp_path, capsys):
    out = tmp_path / "cycle.json"
    video = sample_set / "synth_000.mp4"
    assert main(["cycle", str(video), "--tracker", "corrtrack", "--device", "cpu", "--grid", "3",
                 "--precisions", "fp32,bf16", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "| synth_000.mp4 | corrtrack fp32 |" in text and "| synth_000.mp4 | corrtrack bf16 |" in text
    assert text.count("| lk |") == 1
    data = json.loads(out.read_text())
    assert data["grid"] == 3 and data["frames"] == 48 and data["config"]["tracker"] == "corrtrack"
    assert [(r["tracker"], r["precision"]) for r in data["results"]] == [
        ("corrtrack", "fp32"), ("corrtrack", "bf16"), ("lk", PRECISION_UNUSED)]
    acc = load_accuracy_file(out)
    assert acc.kind == CYCLE_KIND and acc.source_name == "synth_000.mp4" and acc.settings["grid"] == 3
    by = {(e.tracker, e.precision): e for e in acc.entries}
    corr, lk = by[("corrtrack", "bf16")], by[("lk", PRECISION_UNUSED)]
    assert corr.summary.points == 9 and 0 <= corr.summary.kept <= 9
    assert corr.summary.shared_points is not None  # compared with LK on the points both kept
    assert lk.summary.shared_points is None  # the baseline itself
    assert corr.videos[0].video == "synth_000.mp4" and corr.videos[0].frames == 6
    assert corr.summary == corr.videos[0].summary  # one clip: the pooled summary is its own


@pytest.mark.parametrize("verb", ["eval", "cycle"])
def test_unknown_or_refused_precisions_are_one_line_messages_before_any_run(sample_set, tmp_path, capsys, verb):
    target = str(sample_set if verb == "eval" else sample_set / "synth_000.mp4")
    out = tmp_path / "never.json"
    assert main([verb, target, "--tracker", "lk", "--precisions", "fp32,fp64", "--json", str(out)]) == 2
    err = capsys.readouterr().err
    assert "--precisions: unknown fp64" in err and "Traceback" not in err
    assert main([verb, target, "--tracker", "lk", "--precisions", " , "]) == 2
    assert "empty list" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:  # argparse's own refusal: exclusive options
        main([verb, target, "--precision", "fp32", "--precisions", "bf16"])
    assert exited.value.code == 2 and "not allowed with" in capsys.readouterr().err
    assert main([verb, target, "--tracker", "corrtrack", "--device", "cpu", "--precisions", "fp32,fp16"]) == 2
    err = capsys.readouterr().err
    assert "fp16" in err and "leave it out of --precisions" in err and "done" not in err
    assert not out.exists()


def test_eval_json_refuses_a_bad_output_path_before_the_work(sample_set, tmp_path, capsys):
    assert main(["eval", str(sample_set), "--tracker", "lk", "--json", str(tmp_path / "out.txt")]) == 2
    err = capsys.readouterr().err
    assert "--json" in err and "done" not in err


def test_a_cpu_only_baseline_runs_on_the_cpu_beside_a_gpu_run(monkeypatch) -> None:
    """LK (OpenCV, CPU only) beside ``--device cuda``: the baseline runs on the CPU, the tracker where asked (a
    GPU call found ``cycle --device cuda`` failing on LK after every CorrTrack run was done)."""
    import torch

    from engine.core.config import RunConfig
    from engine.workflows import precision_runs

    class _Tracker:
        def __init__(self, types: tuple[str, ...]) -> None:
            self.device_types = types

    monkeypatch.setattr(precision_runs, "resolve_device", lambda name: torch.device("cuda", 0))
    config = RunConfig(device="cuda")
    assert precision_runs.baseline_config(config, _Tracker(("cpu",))).device == "cpu"
    assert precision_runs.baseline_config(config, _Tracker(("cpu", "cuda"))).device == "cuda"
    assert precision_runs.baseline_config(config, _Tracker(("cuda",))).device == "cuda"  # its session says why
    monkeypatch.setattr(precision_runs, "resolve_device", lambda name: torch.device("cpu"))
    assert precision_runs.baseline_config(RunConfig(device="cpu"), _Tracker(("cpu",))).device == "cpu"
