"""The command line: routing, exit codes, and `track` / `eval` end to end on small real inputs."""

from __future__ import annotations

import numpy as np
import pytest

from engine import cli
from engine.cli.common import SAMPLE_VIDEO
from engine.io.trackio import load_tracks


@pytest.fixture
def gui_calls(monkeypatch):
    import gui.app

    calls = []
    monkeypatch.setattr(gui.app, "run", lambda args: calls.append(args) or 0)
    return calls


@pytest.mark.parametrize("argv", [[], ["--run"], ["some_video.mp4"]])
def test_no_subcommand_opens_the_app(gui_calls, argv):
    assert cli.main(argv) == 0
    assert len(gui_calls) == 1 and gui_calls[0].command == "gui"


def test_help_prints_subcommands(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["--help"])
    assert exc.value.code == 0 and "bench" in capsys.readouterr().out


def test_track_sample_with_lk_writes_npz_and_csv(tmp_path, capsys):
    out = tmp_path / "t.npz"
    assert cli.main(["track", str(SAMPLE_VIDEO), "--grid", "3", "--tracker", "lk", "--out", str(out)]) == 0
    d = load_tracks(out)
    assert d["tracks"].shape == (9, 47, 2) and np.isfinite(d["tracks"]).all()
    csv = tmp_path / "t.csv"
    assert cli.main(["track", str(SAMPLE_VIDEO), "--grid", "2", "--tracker", "lk", "--out", str(csv)]) == 0
    assert csv.read_text().startswith("point,t,x,y,visible")


@pytest.mark.parametrize(
    "make, words",
    [
        (lambda p: p.write_bytes(b"not a video at all"), "not a video"),
        (lambda p: p.write_bytes(b""), "empty"),
    ],
)
def test_track_bad_video_exits_2_with_one_line(tmp_path, capsys, make, words):
    bad = tmp_path / "bad.mp4"
    make(bad)
    assert cli.main(["track", str(bad), "--grid", "2", "--tracker", "lk", "--out", str(tmp_path / "o.npz")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(bad) in err[0] and words in err[0]


def test_track_bad_queries_and_unknown_tracker_exit_2(tmp_path, capsys):
    q = tmp_path / "q.csv"
    q.write_text("t,x,y\n0,10,10\n99,5,5\n")
    assert cli.main(["track", str(SAMPLE_VIDEO), "--queries", str(q), "--tracker", "lk",
                     "--out", str(tmp_path / "o.npz")]) == 2
    assert "frame index 99" in capsys.readouterr().err
    assert cli.main(["track", str(SAMPLE_VIDEO), "--grid", "2", "--tracker", "nope",
                     "--out", str(tmp_path / "o.npz")]) == 2
    assert "unknown tracker 'nope'" in capsys.readouterr().err


def test_eval_on_a_written_set(tmp_path, capsys):
    assert cli.main(["sample", str(tmp_path / "set"), "--count", "2", "--frames", "8", "--size", "64",
                     "--points", "8"]) == 0
    assert cli.main(["eval", str(tmp_path / "set"), "--tracker", "lk"]) == 0
    out = capsys.readouterr().out
    assert "synth_000" in out and "mean" in out and "lk AJ" in out


def test_mistyped_command_is_named_not_opened_as_a_video(capsys, gui_calls):
    assert cli.main(["trak", "x.mp4"]) == 2
    assert "unknown command 'trak'" in capsys.readouterr().err and not gui_calls
