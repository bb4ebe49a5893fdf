"""The bad-input corpus (scripts/make_bad_inputs.py) through the CLI: each case's exit code and first line.

The corpus is generated once per session into a temp folder; every case runs ``engine.cli.main`` in-process.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from engine.cli.entry import main
from engine.core.errors import TrackerError, UserError
from engine.io.trackio import MAX_GRID, MAX_QUERIES

REPO = Path(__file__).resolve().parents[1]
LK = ["--tracker", "lk", "--device", "cpu"]  # the fastest tracker: the cases are about inputs


def _script():
    spec = importlib.util.spec_from_file_location("make_bad_inputs", REPO / "scripts" / "make_bad_inputs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def corpus(tmp_path_factory) -> Path:
    """The bad-input corpus, written once."""
    folder = tmp_path_factory.mktemp("bad")
    _script().make_all(folder)
    return folder


def _run(capsys, argv: list[str]) -> tuple[int, str]:
    """-> (exit code, first line of stderr)."""
    capsys.readouterr()
    code = main(argv)
    err = capsys.readouterr().err
    return code, (err.splitlines() or [""])[0]


# (argv with {d} = corpus folder and {o} = an output folder, exit code, first line of stderr)
TRACK_CASES = {
    "empty video": (["track", "{d}/empty.avi", "--grid", "2"], 2,
                    "trackscope track: error: {d}/empty.avi: file is empty (0 bytes)"),
    "truncated video": (["track", "{d}/truncated.avi", "--grid", "2"], 2,
                        "trackscope track: error: {d}/truncated.avi: cannot be opened as a video (not a video, "
                        "an unsupported codec, or a truncated/corrupt file)"),
    "not a video": (["track", "{d}/not_a_video.mp4", "--grid", "2"], 2,
                    "trackscope track: error: {d}/not_a_video.mp4: cannot be opened as a video (not a video, "
                    "an unsupported codec, or a truncated/corrupt file)"),
    "huge claimed frame count": (["track", "{d}/huge_count.avi", "--grid", "2"], 0,
                                 "trackscope track: warning: container claims 50000000 frames in {huge_bytes} bytes; "
                                 "counted 46 frames by decoding"),
    "corrupt middle frame": (["track", "{d}/corrupt_frame.avi", "--grid", "2"], 0,
                             "trackscope track: warning: frame 23 is corrupt (does not decode); "
                             "repeated frame 22 in its place"),
    "csv wrong header": (["track", "{d}/good.avi", "--queries", "{d}/wrong_header.csv"], 2,
                         "trackscope track: error: {d}/wrong_header.csv: first line must be the header t,x,y, "
                         "found 'frame,x,y'"),
    "csv NaN": (["track", "{d}/good.avi", "--queries", "{d}/nan.csv"], 2,
                "trackscope track: error: {d}/nan.csv: line 2: NaN or infinite value"),
    "csv outside the frame": (["track", "{d}/good.avi", "--queries", "{d}/outside.csv"], 2,
                              "trackscope track: error: query 0 at (114, 10) lies outside the 64x48 frame"),
    "csv huge field": (["track", "{d}/good.avi", "--queries", "{d}/huge_field.csv"], 2,
                       "trackscope track: error: {d}/huge_field.csv: line 2: not valid CSV (field larger than "
                       "field limit (131072); fields are limited to 131072 characters)"),
    "csv binary junk": (["track", "{d}/good.avi", "--queries", "{d}/binary.csv"], 2,
                        "trackscope track: error: {d}/binary.csv: queries file holds binary data (NUL bytes), "
                        "not CSV text"),
    "csv is /dev/zero": (["track", "{d}/good.avi", "--queries", "/dev/zero"], 2,
                         "trackscope track: error: /dev/zero: queries file is not a regular file"),
    "grid 100000": (["track", "{d}/good.avi", "--grid", "100000"], 2,
                    f"trackscope track: error: grid size 100000 is too large: 100000x100000 = 10000000000 points, "
                    f"the limit is {MAX_GRID} ({MAX_QUERIES} points)"),
}

EVAL_CASES = {
    "gt missing arrays": ("missing", "{d}/set_missing/clip.gt.npz: missing array(s) visible, query_t; has tracks"),
    "gt wrong shapes": ("shapes", "{d}/set_shapes/clip.gt.npz: ground truth shapes do not match: "
                                  "tracks (2, 46, 2), visible (2, 47), query_t (2,)"),
    "gt non-npy member": ("member", "{d}/set_member/clip.gt.npz: member 'tracks' is not a .npy array"),
    "gt NaN": ("nan", "{d}/set_nan/clip.gt.npz: ground truth tracks holds 1 NaN or infinite value(s)"),
}


@pytest.mark.parametrize("case", list(TRACK_CASES))
def test_track_bad_input(corpus, tmp_path, capsys, case):
    argv, code, first = TRACK_CASES[case]
    argv = [a.format(d=corpus) for a in argv] + ["--out", str(tmp_path / "out.npz"), *LK]
    # the file's size is the encoder's (it differs between OpenCV builds), not the rule under test
    huge = corpus / "huge_count.avi"
    expected = first.format(d=corpus, huge_bytes=huge.stat().st_size if huge.exists() else 0)
    assert _run(capsys, argv) == (code, expected)
    assert (tmp_path / "out.npz").exists() == (code == 0)


@pytest.mark.parametrize("case", list(EVAL_CASES))
def test_eval_bad_ground_truth(corpus, capsys, case):
    folder, first = EVAL_CASES[case]
    argv = ["eval", str(corpus / f"set_{folder}"), "--tracker", "lk", "--no-baseline", "--device", "cpu"]
    assert _run(capsys, argv) == (2, "trackscope eval: error: " + first.format(d=corpus))


# ---------------------------------------------------------------------------------------- output paths


def _out_cases(tmp_path: Path) -> dict[str, tuple[list[str], str]]:
    """Bad --out/--report targets -> (extra argv, first line)."""
    fifo = tmp_path / "fifo.npz"
    os.mkfifo(fifo)
    (tmp_path / "folder.npz").mkdir()
    return {
        "a folder": (["--out", f"{tmp_path}/folder.npz"], f"--out {tmp_path}/folder.npz: is a folder, not a file name"),
        "a missing folder": (["--out", f"{tmp_path}/nope/t.npz"],
                             f"--out {tmp_path}/nope/t.npz: folder {tmp_path}/nope does not exist"),
        "a read-only folder": (["--out", "/proc/t.npz"], "--out /proc/t.npz: folder /proc cannot be written"),
        "/dev/full": (["--out", "/dev/full", "--report", str(tmp_path / "r.json")], "--out /dev/full: must end in "
                      ".npz or .csv"),
        "a device report": (["--out", f"{tmp_path}/t.npz", "--report", "/dev/full"],
                            "--report /dev/full: exists and is not a regular file (a device, FIFO or socket)"),
        "a FIFO": (["--out", str(fifo)], f"--out {fifo}: exists and is not a regular file (a device, FIFO or socket)"),
        "the same file twice": (["--out", f"{tmp_path}/t.csv", "--report", f"{tmp_path}/t.csv"],
                                f"--report {tmp_path}/t.csv: is the same file as --out {tmp_path}/t.csv"),
    }


@pytest.mark.parametrize("case", ["a folder", "a missing folder", "a read-only folder", "/dev/full",
                                  "a device report", "a FIFO", "the same file twice"])
def test_track_refuses_bad_outputs_before_any_work(tmp_path, capsys, case):
    extra, first = _out_cases(tmp_path)[case]
    # the video does not exist: an output error first proves the check runs before the work
    code, line = _run(capsys, ["track", str(tmp_path / "missing.avi"), "--grid", "2", *extra, *LK])
    assert code == 2
    assert line.startswith(f"trackscope track: error: {first}"), line


def test_read_only_folder_by_permissions(tmp_path, capsys):
    if os.geteuid() == 0:
        pytest.skip("root writes anywhere: the probe succeeds")
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        code, line = _run(capsys, ["track", "x.avi", "--grid", "2", "--out", str(folder / "t.npz"), *LK])
    finally:
        folder.chmod(0o755)
    assert code == 2 and "cannot be written" in line


# ---------------------------------------------------------------------------------------- memory, weights


def test_track_refuses_a_run_that_cannot_fit_in_memory(corpus, tmp_path, capsys, monkeypatch):
    from engine.run import memory

    monkeypatch.setattr(memory, "TRACKER_HOST_BYTES_PER_FRAME", {**memory.TRACKER_HOST_BYTES_PER_FRAME,
                                                                 "lk": 100_000_000})
    monkeypatch.setattr(memory, "available_host_bytes", lambda: 1_000_000_000)
    argv = ["track", str(corpus / "good.avi"), "--grid", "2", "--out", str(tmp_path / "t.npz"), *LK]
    code, line = _run(capsys, argv)
    assert code == 2
    assert line.startswith(f"trackscope track: error: {corpus}/good.avi: 46 frames need about 4.28 GiB of host memory")
    assert "--max-frames 8" in line
    argv[-len(LK):-len(LK)] = []
    assert _run(capsys, [*argv, "--max-frames", "8"])[0] == 0


def test_nan_weights_are_a_clear_error(tmp_path):
    from engine.trackers.corrtrack.model import CorrTrackConfig, CorrTrackNet
    from engine.trackers.corrtrack.weights import load_model, save_model

    model = CorrTrackNet(CorrTrackConfig())
    name, param = max(model.state_dict().items(), key=lambda kv: kv[1].numel())
    with torch.no_grad():
        param.view(-1)[:3] = float("nan")
    path = tmp_path / "w.safetensors"
    save_model(model, path)  # a consistent manifest: only the values are wrong
    with pytest.raises(TrackerError, match=rf"CorrTrack weights {path}: {name} holds 3 NaN or infinite value"):
        load_model(path)


def test_tracks_with_nan_in_a_written_file_round_trip(tmp_path):
    """NaN in *written* tracks (points not tracked after a cancel) is allowed in a tracks file."""
    from engine.io.trackio import load_tracks, save_tracks

    tracks = np.full((2, 3, 2), np.nan, np.float32)
    save_tracks(tmp_path / "t.npz", tracks, np.zeros((2, 3), bool), np.zeros((2, 3), np.float32))
    assert np.isnan(load_tracks(tmp_path / "t.npz")["tracks"]).all()
    with pytest.raises(UserError, match="cannot write the tracks file"):
        save_tracks("/proc/t.npz", tracks, np.zeros((2, 3), bool), np.zeros((2, 3), np.float32))


@pytest.mark.parametrize("target, first", [
    ("/proc/trackscope-set", "OUTDIR /proc/trackscope-set: folder /proc cannot be written"),
    ("/dev/null/set", "OUTDIR /dev/null/set: /dev/null exists and is not a folder"),
])
def test_sample_refuses_an_unwritable_folder_before_any_work(capsys, target, first):
    code, line = _run(capsys, ["sample", target, "--count", "1", "--frames", "2", "--size", "16"])
    assert code == 2 and line.startswith(f"trackscope sample: error: {first}"), line  # then the OS's reason


def test_video_read_out_of_host_memory_is_a_video_error(corpus, monkeypatch):
    from engine.core.errors import VideoError
    from engine.io import video

    real = np.empty

    def refuse(shape, dtype=float):
        if len(shape) == 4:
            raise MemoryError
        return real(shape, dtype)

    with video.open_video(corpus / "good.avi") as reader:
        monkeypatch.setattr(video.np, "empty", refuse)
        with pytest.raises(VideoError, match=r"not enough host memory for 46 frames of 64x48"):
            reader.read()


def test_sample_too_large_to_render_is_refused_before_allocating(capsys, tmp_path):
    """Before: 10000 frames of 4096x4096 tried to allocate 671 GB and ended in a traceback."""
    code, line = _run(capsys, ["sample", str(tmp_path / "set"), "--count", "1", "--frames", "10000",
                               "--size", "4096"])
    assert code == 2 and line.startswith("trackscope sample: error: 10000 frames of 4096x4096 need about "), line
    assert "of host memory to render, over the limit of" in line
    assert not (tmp_path / "set").exists()


def test_render_memory_check_against_a_stated_amount():
    from engine.cli.sample import RENDER_BYTES_PER_PIXEL_FRAME, check_render_memory

    need = 100 * 512 * 512 * RENDER_BYTES_PER_PIXEL_FRAME
    check_render_memory(100, 512, available=2 * need)  # fits
    with pytest.raises(UserError, match=r"at most (\d+) at this size"):
        check_render_memory(100, 512, available=need)  # 85 % of it does not
