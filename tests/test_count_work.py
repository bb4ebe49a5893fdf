"""The cost model counted on demand for a report without one (a live run's, a track --report file)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from engine import cli
from engine.analysis import cost
from engine.analysis.whatif import COUNTED_KEY, UNSTAGED, format_projection, project
from engine.core.config import RunConfig
from engine.core.errors import UserError
from engine.io.video import write_video
from engine.report.files import load_report, load_reports, save
from engine.report.recorder import RunRecorder
from engine.report.schema import Report
from engine.run.session import Session
from engine.workflows.count import INPUTS_CONSTRUCTED, INPUTS_VIDEO, count_work, with_counted_work
from engine.workflows.warm_runs import with_warm_runs
from tests.helpers import moving_square_video
from tests.plugins import mlp_refine

DATA = Path(__file__).parent / "data" / "h200"
MLP = "tests.plugins.mlp_refine:factory"
FRAMES, SIZE = 4, 32
QUERIES = np.array([[0, 8, 8], [0, 20, 12], [1, 16, 24]], np.float32)
#: mlp_refine's embed: every frame cut into (SIZE/PATCH)^2 patches of 3*PATCH^2 values, a Linear to DIM
GRID = mlp_refine.SIZE // mlp_refine.PATCH
EMBED_FLOPS = 2 * FRAMES * GRID * GRID * 3 * mlp_refine.PATCH ** 2 * mlp_refine.DIM


def recorded(precision: str = "fp32", video_path: str | None = None, tracker: str = MLP) -> Report:
    """A real CPU run of the linear-heavy plugin, recorded like `track --report` (no work counted)."""
    frames = moving_square_video(FRAMES, SIZE)
    recorder = RunRecorder()
    config = RunConfig(tracker=tracker, device="cpu", precision=precision)
    info = {"width": SIZE, "height": SIZE, "num_frames": FRAMES, "path": video_path}
    for event in Session(frames, QUERIES, config, video_info=info).events():
        recorder.add(event)
    report = recorder.build()
    assert not report.work and report.video.geometry is not None
    return report


@pytest.fixture(autouse=True)
def fresh_cache():
    cost.clear_cache()
    yield
    cost.clear_cache()


def test_a_report_without_work_gets_it_counted_from_a_constructed_video():
    report = recorded()
    counted = with_counted_work(with_warm_runs(report))  # the what-if needs warm times (this machine's CPU)
    assert counted.work["embed"].flops == EMBED_FLOPS  # the hand count: the pass ran at the report's shape
    assert counted.work["mlp"].flops > 0 and counted.work["mlp"].bytes > 0
    info = counted.extra[COUNTED_KEY]
    assert info["inputs"] == INPUTS_CONSTRUCTED and info["shape"] == [FRAMES, SIZE, SIZE]
    assert info["num_points"] == len(QUERIES) and info["device"] == "cpu"
    result = project(counted, "Tesla T4")
    assert result["stages"]["embed"]["kept"] is False  # projected, not kept at the observed time
    assert any("counted on demand on cpu" in a for a in result["assumptions"])
    with pytest.raises(UserError, match="no cost model"):
        project(report, "Tesla T4")  # the report itself is left as it was


def test_the_runs_own_video_is_used_when_it_is_there_and_counts_the_same(tmp_path):
    video = tmp_path / "clip.avi"
    write_video(video, moving_square_video(FRAMES, SIZE))
    from_video = count_work(recorded(video_path=str(video)))
    cost.clear_cache()
    constructed = count_work(recorded())
    assert from_video.inputs == INPUTS_VIDEO and constructed.inputs == INPUTS_CONSTRUCTED
    assert {k: w.flops for k, w in from_video.work.items()} == {k: w.flops for k, w in constructed.work.items()}


def test_fp16_is_counted_under_bf16_on_the_cpu_and_labelled_fp16():
    report = recorded("bf16")
    fp16 = dataclasses.replace(report, config=report.config.with_changes(precision="fp16"))
    counted = count_work(fp16)
    assert counted.counted_precision == "bf16"
    assert counted.work["mlp"].precision == "fp16"
    assert any("refused on the CPU" in n for n in counted.notes)


def test_a_tracker_that_cannot_be_rebuilt_gives_a_plain_message():
    report = recorded()
    missing = dataclasses.replace(report, config=report.config.with_changes(tracker="no_such_module:factory"))
    with pytest.raises(UserError, match="cannot rebuild tracker 'no_such_module:factory'"):
        count_work(missing)
    broken = dataclasses.replace(report, config=report.config.with_changes(
        tracker="tests.plugins.pathological:raises_in_track"))
    with pytest.raises(UserError, match="plugin exploded"):
        count_work(broken)


def test_a_report_without_its_video_size_says_so():
    report = recorded()
    sizeless = dataclasses.replace(report, video=dataclasses.replace(report.video, geometry=None))
    with pytest.raises(UserError, match="does not record its video's size"):
        count_work(sizeless)


def test_compare_what_if_counts_a_track_report_on_demand(tmp_path, capsys):
    """Was: exit 2, 'has no cost model'. Now one line says it counts, then the projection."""
    path = tmp_path / "run.json"
    save(recorded(), path)
    assert cli.main(["compare", str(path), "--what-if", "Tesla T4"]) == 0
    captured = capsys.readouterr()
    assert "counting the cost model" in captured.err
    assert "-> Tesla T4" in captured.out and "cost model counted on demand" in captured.out
    assert not load_report(path).work  # the file is not rewritten
    assert cli.main(["compare", str(path), "--what-if", "Voodoo 2"]) == 2  # before any counting
    assert "counting" not in capsys.readouterr().err


def test_compare_what_if_on_a_recorded_h200_track_report():
    """A deep-capture report recorded on the H200 (no work, one cold run): its planted plugin rebuilt and counted
    here, but its warm times belong to the H200: the projection is refused with the bench command to run there."""
    report = load_reports(DATA / "deep" / "fp32_grid_sample.json")[0]
    assert not report.work and report.cold_run is not None and not report.warm_runs
    counted = with_counted_work(report)
    assert sum(w.bytes for w in counted.work.values()) > 0
    with pytest.raises(UserError, match="holds only a cold run") as refused:
        project(counted, "Tesla T4")
    assert "trackscope bench resources/sample.mp4 --tracker tests.plugins.planted_capture:fp32_grid_sample" \
        in refused.value.suggestion


def test_diagnose_roofline_counts_and_prints_the_stages(tmp_path, capsys):
    path = tmp_path / "run.json"
    save(recorded(), path)
    assert cli.main(["diagnose", str(path), "--roofline"]) == 0
    out = capsys.readouterr().out
    assert "roofline on CPU" in out and "% of roofline" in out and "embed" in out
    missing = dataclasses.replace(recorded(), config=RunConfig(tracker="no_such_module:factory", device="cpu"))
    save(missing, path)
    assert cli.main(["diagnose", str(path), "--roofline"]) == 0  # the findings still stand
    assert "no roofline: cannot rebuild tracker" in capsys.readouterr().out


OUTSIDE_MS = 8.26


def unstaged_report() -> Report:
    """An H200 report whose run spent OUTSIDE_MS outside every stage, with a little work counted there."""
    from tests.test_compare import GMM, synthetic_report

    h200 = {"gpu": {"name": "NVIDIA H200", "compute_capability": [9, 0]}}
    report = synthetic_report(h200, "fp32", {"backbone": (2.0, 100 * GMM, 1e6)})  # 75 % of the fp32 roof
    work = {**report.work, UNSTAGED: dataclasses.replace(report.work["backbone"], flops=0, bytes=1000)}
    return dataclasses.replace(report, work=work, totals=dataclasses.replace(
        report.totals, warm_ms_median=2.0 + OUTSIDE_MS))


def test_unstaged_row_shows_the_time_it_keeps():
    """Was: the (unstaged) row showed '-' while its time (outside every stage) was kept in the total."""
    outside = OUTSIDE_MS
    result = project(unstaged_report(), "Tesla T4")
    row = result["stages"][UNSTAGED]
    assert row["observed_ms"] == pytest.approx(outside) and row["projected_ms"] == pytest.approx(outside)
    total = sum(r["projected_ms"] for r in result["stages"].values())
    assert result["projected_ms"] == pytest.approx(total)  # counted once, in its row
    line = next(x for x in format_projection(result).splitlines() if x.startswith(UNSTAGED))
    assert "8.3" in line and " - " not in line


def test_fp8_on_a_card_without_fp8_says_which_path_it_takes():
    fp8 = next(r for r in load_reports(DATA / "quant" / "bench.json") if r.precision == "fp8")
    result = project(fp8, "Tesla T4")
    assert result["mode_path"] == "int8 instead"
    text = format_projection(result)
    assert "(fp8 on its int8 path)" in text
    assert any("fp8 mode on Tesla T4" in a and "int8" in a for a in result["assumptions"])
    bf16_stages = [r for r in result["stages"].values() if r["precision"] == "bf16"]
    assert bf16_stages and all(r["target_path"] == "fp16 instead" for r in bf16_stages)  # fp16 autocast there
    assert project(fp8, "H100 SXM")["mode_path"] == "tensor"  # a card with fp8 units: no detour


@pytest.mark.slow
def test_the_child_process_counts_and_gives_its_reason_in_one_line():
    """The app's path: the report goes to `python -m engine.workflows.count` as JSON and comes back counted."""
    from engine.workflows.count import CountProcess

    report = recorded()
    missing = dataclasses.replace(report, config=report.config.with_changes(tracker="no_such_module:factory"))
    with pytest.raises(UserError, match="^cannot rebuild tracker 'no_such_module:factory'"):
        CountProcess().run(missing)
    stopped = CountProcess()
    stopped.stop()
    with pytest.raises(UserError, match="stopped"):
        stopped.run(report)
    assert CountProcess().run(with_counted_work(report)).work  # one with work is returned as it is, no child


def test_a_projection_of_a_cold_run_only_is_refused_until_warm_runs_are_timed():
    """A `track --report` file holds one run; in a fresh process it is cold (compilation, autotuning), and a
    projection of it kept those times (every stage 1.00x). Refused, with the bench command; timed warm runs
    here (the report's device: this CPU) make it projectable, and the assumptions say where they came from."""
    report = with_counted_work(recorded())
    cold = dataclasses.replace(report, runs=tuple(dataclasses.replace(r, cold=True) for r in report.runs),
                               totals=dataclasses.replace(report.totals, warm_ms_median=None))
    with pytest.raises(UserError, match="holds only a cold run") as refused:
        project(cold, "Tesla T4")
    assert "trackscope bench" in refused.value.suggestion and f"--tracker {MLP}" in refused.value.suggestion
    warmed = with_warm_runs(cold, runs=2)
    assert len(warmed.warm_runs) == 2 and warmed.cold_run is not None  # the recorded cold run is kept
    assumptions = project(warmed, "Tesla T4")["assumptions"]
    assert any("warm times measured now on this machine (CPU" in a for a in assumptions)
