"""Output paths checked before the work (exit 2 with the reason), bench kept as it goes, one-line errors."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import cv2
import numpy as np
import pytest

from engine.cli import bench as bench_cli
from engine.cli import compare as compare_cli
from engine.cli import entry
from engine.cli.entry import main
from engine.core.errors import UserError
from engine.io.trackio import write_queries_csv
from engine.report.files import load_bench, save
from engine.workflows import bench as bench_workflow
from tests.helpers import moving_square_video

DATA = Path(__file__).parent / "data" / "h200"
FRAMES, SIZE = 6, 32


@pytest.fixture(scope="module")
def video(tmp_path_factory) -> Path:
    """A tiny MJPG video with a queries sidecar."""
    folder = tmp_path_factory.mktemp("outputs_video")
    path = folder / "square.avi"
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), 10, (SIZE, SIZE))
    for frame in moving_square_video(FRAMES, SIZE):
        writer.write(cv2.cvtColor(frame, cv2.COLOR_RGB2BGR))
    writer.release()
    write_queries_csv(folder / "square.queries.csv", np.array([[0, 6, 10], [0, 9, 13]], np.float32))
    return path


@pytest.fixture
def no_work(monkeypatch):
    """Fail the test if a verb decodes its input (the output check must come first)."""
    def refuse(*a, **k):
        raise AssertionError("the work started before the output path was checked")

    monkeypatch.setattr(bench_cli, "load_input", refuse)
    monkeypatch.setattr(compare_cli, "_select", refuse)


def _one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def _bench(video: Path, *extra: str) -> list[str]:
    return ["bench", str(video), "--tracker", "lk", "--device", "cpu", "--precisions", "fp32", "--warmup", "0",
            "--repeat", "1", "--no-telemetry", "--no-cost", *extra]


def test_bench_out_is_a_file_exit_2_before_the_sweep(video, tmp_path, capsys, no_work):
    out = tmp_path / "taken"
    out.write_text("keep me")
    assert main(_bench(video, "--out", str(out))) == 2
    assert "exists and is not a folder" in _one_line(capsys.readouterr().err)
    assert out.read_text() == "keep me"


@pytest.mark.parametrize("make, message", [
    (lambda d: Path("/dev/full"), "exists and is not a folder"),
    (lambda d: (d / "bench").mkdir() or (d / "bench" / "bench.json").mkdir() or d / "bench", "is a folder"),
])
def test_bench_out_refused_before_the_sweep(video, tmp_path, capsys, no_work, make, message):
    assert main(_bench(video, "--out", str(make(tmp_path)))) == 2
    assert message in _one_line(capsys.readouterr().err)


@pytest.mark.parametrize("make, message", [
    (lambda d: d, "is a folder, not a file name"),
    (lambda d: Path("/dev/full"), "not a regular file"),
    (lambda d: d / "missing" / "c.json", "does not exist"),
])
def test_compare_json_refused_before_reading(tmp_path, capsys, no_work, make, message):
    report = str(DATA / "corrtrack_fp32_p256_sample.json")
    assert main(["compare", report, report, "--json", str(make(tmp_path))]) == 2
    assert message in _one_line(capsys.readouterr().err)


def test_compare_json_is_written_atomically_with_the_umask_mode(tmp_path, capsys):
    report = str(DATA / "corrtrack_fp32_p256_sample.json")
    out = tmp_path / "c.json"
    old = os.umask(0o022)
    try:
        assert main(["compare", report, report, "--json", str(out)]) == 0
    finally:
        os.umask(old)
    assert json.loads(out.read_text()) and out.stat().st_mode & 0o777 == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["c.json"]


def test_report_is_saved_with_the_umask_mode(tmp_path):
    """Reports used to be 0600 (mkstemp's mode): now what open() would give, 0644 under umask 022."""
    old = os.umask(0o022)
    try:
        save({"format": "x"}, tmp_path / "r.json")
        os.umask(0o027)
        save({"format": "y"}, tmp_path / "s.json")
    finally:
        os.umask(old)
    assert (tmp_path / "r.json").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "s.json").stat().st_mode & 0o777 == 0o640


def test_bench_writes_each_configuration_as_it_goes_and_keeps_them_on_ctrl_c(video, tmp_path, capsys,
                                                                             monkeypatch):
    out = tmp_path / "bench"
    real = bench_workflow.Bench.run_config
    seen: list[str] = []

    def second_is_interrupted(self, config, warmup, repeat):
        if seen:  # the first configuration is on disk before the second starts
            kept = load_bench(out / "bench.json")
            assert [r.label for r in kept.reports] == seen and kept.extra["complete"] is False
            raise KeyboardInterrupt
        seen.append(config.label())
        return real(self, config, warmup, repeat)

    monkeypatch.setattr(bench_workflow.Bench, "run_config", second_is_interrupted)
    assert main(_bench(video, "--points-per-batch", "1,2,3", "--out", str(out))) == 130
    captured = capsys.readouterr()
    assert "lk fp32 p1 f16" in captured.out  # the table so far
    assert "interrupted; 1 finished configuration(s) kept in" in captured.err
    kept = load_bench(out / "bench.json")
    assert [r.label for r in kept.reports] == ["lk fp32 p1 f16"]
    assert kept.extra == {"complete": False, "configurations_planned": 3}
    assert (out / "lk_fp32_p1_f16.json").is_file()
    assert not [p for p in out.iterdir() if ".tmp" in p.name]


def test_bench_file_is_marked_complete_at_the_end(video, tmp_path):
    out = tmp_path / "bench"
    assert main(_bench(video, "--points-per-batch", "1,2", "--out", str(out))) == 0
    kept = load_bench(out / "bench.json")
    assert len(kept.reports) == 2 and kept.extra == {"complete": True, "configurations_planned": 2}
    assert [row["report_file"] for row in kept.table] == ["lk_fp32_p1_f16.json", "lk_fp32_p2_f16.json"]


def test_bench_refuses_ground_truth_with_nan_query_t(video, tmp_path, capsys):
    """eval refuses a NaN query_t; bench reads the same sidecar and refuses it the same way (exit 2)."""
    folder = tmp_path / "v"
    folder.mkdir()
    clip = folder / "clip.avi"
    clip.write_bytes(video.read_bytes())
    write_queries_csv(folder / "clip.queries.csv", np.array([[0, 6, 10], [0, 9, 13]], np.float32))
    np.savez(folder / "clip.gt.npz", tracks=np.zeros((2, FRAMES, 2), np.float32), visible=np.ones((2, FRAMES), bool),
             query_t=np.array([0.0, np.nan]))
    assert main(_bench(clip)) == 2
    assert "query_t holds 1 NaN or infinite value(s)" in _one_line(capsys.readouterr().err)


class _Verb:
    """A stand-in subcommand whose run() raises what the test says."""

    def __init__(self, exc: BaseException):
        self.exc = exc

    def add_arguments(self, p):
        p.add_argument("report")

    def run(self, args):
        raise self.exc


@pytest.mark.parametrize("exc, code, text", [
    (MemoryError(), 2, "the host ran out of memory"),
    (MemoryError("Unable to allocate 23.7 GiB for an array"), 2, "the host ran out of memory"),
    (OSError(errno.ENOSPC, "No space left on device", "/x/out.json"), 2, "/x/out.json: No space left on device"),
    (OSError(errno.EFBIG, "File too large"), 2, "File too large"),
])
def test_memory_and_disk_errors_are_one_line_exit_2(monkeypatch, capsys, exc, code, text):
    verb = _Verb(exc)
    monkeypatch.setattr(entry.importlib, "import_module",
                        lambda name, _real=entry.importlib.import_module: verb if name == "engine.cli.diagnose"
                        else _real(name))
    assert main(["diagnose", "x.json"]) == code
    line = _one_line(capsys.readouterr().err)
    assert line.startswith("trackscope diagnose: error: ") and text in line


def test_an_unexpected_os_error_is_still_a_bug(monkeypatch, capsys):
    verb = _Verb(OSError(errno.EBADF, "Bad file descriptor"))
    monkeypatch.setattr(entry.importlib, "import_module",
                        lambda name, _real=entry.importlib.import_module: verb if name == "engine.cli.diagnose"
                        else _real(name))
    assert main(["diagnose", "x.json"]) == 1
    assert "internal error" in capsys.readouterr().err


def test_report_write_refused_by_the_disk_is_a_user_error(tmp_path, monkeypatch):
    import engine.report.files as files

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(files, "atomic_open", full)
    with pytest.raises(UserError) as err:
        save({"a": 1}, tmp_path / "r.json")
    assert str(err.value).startswith(f"{tmp_path / 'r.json'}: cannot write the report: No space left on device")


def test_track_deep_trace_path_is_checked_before_the_run(tmp_path, capsys, monkeypatch, video):
    (tmp_path / "run.trace.json.gz").mkdir()  # where the trace would go is a folder
    monkeypatch.setattr("engine.io.video.open_video", lambda *a, **k: (_ for _ in ()).throw(AssertionError("ran")))
    code = main(["track", str(video), "--grid", "2", "--out", str(tmp_path / "t.npz"), "--report",
                 str(tmp_path / "run.json"), "--deep", "--tracker", "lk"])
    assert code == 2
    assert "--deep trace" in _one_line(capsys.readouterr().err)


def test_train_out_that_is_a_file_is_refused_before_training(tmp_path, capsys, monkeypatch):
    import engine.cli.train as train_cli

    monkeypatch.setattr(train_cli, "train", lambda args: (_ for _ in ()).throw(AssertionError("trained")))
    (tmp_path / "ckpt").write_text("a file")
    assert main(["train", "--out", str(tmp_path / "ckpt"), "--steps", "1"]) == 2
    assert "exists and is not a folder" in _one_line(capsys.readouterr().err)


def test_two_benches_writing_one_out_the_second_is_refused(video, tmp_path, capsys, monkeypatch):
    """Before: both exited 0 and bench.json listed the sweep of whichever finished last."""
    from engine.core.outputs import exclusive_folder

    out = tmp_path / "bench"
    second: list[int] = []
    sweep = bench_cli.Bench.sweep

    def sweep_then_start_another(self, *args, **kwargs):
        second.append(main(_bench(video, "--points-per-batch", "3", "--out", str(out))))  # while the first runs
        return sweep(self, *args, **kwargs)

    monkeypatch.setattr(bench_cli.Bench, "sweep", sweep_then_start_another)
    assert main(_bench(video, "--points-per-batch", "1,2", "--out", str(out))) == 0
    assert second == [2]
    err = capsys.readouterr().err
    assert f"trackscope bench: error: --out {out}: another trackscope command is writing into this folder" in err
    assert len(load_bench(out / "bench.json").reports) == 2  # the first bench's sweep, whole
    with exclusive_folder(out, "--out"):  # released at the end of the first
        pass


def test_an_output_folder_made_for_a_bench_that_failed_is_removed(tmp_path):
    from engine.core.outputs import exclusive_folder

    with pytest.raises(RuntimeError), exclusive_folder(tmp_path / "new" / "bench", "--out"):
        raise RuntimeError("the work failed")
    assert not (tmp_path / "new" / "bench").exists()
