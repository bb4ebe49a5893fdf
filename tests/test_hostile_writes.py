"""Tracks writers under signals and a full disk: the previous file survives, no temp file is left."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from engine.core.atomic import TEMP_MARK, atomic_open, atomic_write
from engine.io.trackio import load_tracks, save_tracks

REPO = Path(__file__).resolve().parents[1]
BIG_POINTS, BIG_FRAMES = 4000, 2500  # random float32 tracks: ~80 MB, a few seconds of zlib
SMALL_POINTS, SMALL_FRAMES = 3, 4
FSIZE_LIMIT_BYTES = 256 * 1024  # RLIMIT_FSIZE for the full-disk-like write


def _small(path: Path) -> bytes:
    """Write a small good tracks file at path; -> its bytes."""
    save_tracks(path, np.ones((SMALL_POINTS, SMALL_FRAMES, 2), np.float32), np.ones((SMALL_POINTS, SMALL_FRAMES), bool),
                np.zeros((SMALL_POINTS, 3), np.float32))
    return path.read_bytes()


def _child(script: str, **kwargs) -> subprocess.Popen:
    """A Python child running script from the repo root."""
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(script)], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kwargs)


BIG_WRITE = f"""
    import sys
    import numpy as np
    from engine.io.trackio import save_tracks
    rng = np.random.default_rng(0)
    tracks = rng.random(({BIG_POINTS}, {BIG_FRAMES}, 2), dtype=np.float32)
    save_tracks(sys.argv[1] if len(sys.argv) > 1 else "{{path}}", tracks,
                np.ones(tracks.shape[:2], bool), np.zeros(({BIG_POINTS}, 3), np.float32))
"""


def _temp_files(folder: Path) -> list[Path]:
    return [p for p in folder.iterdir() if TEMP_MARK in p.name]


#: a child that writes part of the NPZ, says so on stdout, then waits mid-write for the signal: no race with
#: the machine's speed (sleeping "well inside the write" lost on a loaded machine: the write finished first)
PAUSED_WRITE = """
    import signal, sys, time
    import numpy as np
    # Ctrl-C as at a terminal: a test run started in the background inherits SIGINT ignored
    signal.signal(signal.SIGINT, signal.default_int_handler)
    from engine.io.trackio import save_tracks

    def paused(file, **arrays):
        with open(file, "wb") as fh:
            fh.write(b"PK partial")
            fh.flush()
            print("writing", flush=True)
            time.sleep(60)

    np.savez_compressed = paused
    save_tracks("{path}", np.ones((3, 4, 2), np.float32), np.ones((3, 4), bool), np.zeros((3, 3), np.float32))
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_mid_write_keeps_the_previous_file(tmp_path, sig):
    path = tmp_path / "tracks.npz"
    before = _small(path)
    child = _child(PAUSED_WRITE.replace("{path}", str(path)))
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "writing", child.communicate()  # blocks until mid-write
    assert _temp_files(tmp_path)  # the partial file is the temp one, beside the good file
    child.send_signal(sig)
    _, err = child.communicate(timeout=60)
    assert child.returncode == -sig, err
    assert path.read_bytes() == before
    assert _temp_files(tmp_path) == []
    assert load_tracks(path)["tracks"].shape == (SMALL_POINTS, SMALL_FRAMES, 2)


def test_file_size_limit_mid_write_keeps_the_previous_file(tmp_path):
    """RLIMIT_FSIZE (as `ulimit -f`): the write fails like a full disk, with a UserError naming the file."""
    path = tmp_path / "tracks.npz"
    before = _small(path)

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (FSIZE_LIMIT_BYTES, FSIZE_LIMIT_BYTES))

    script = BIG_WRITE.replace("{path}", str(path)).replace(
        "    save_tracks(", "    from engine.core.errors import UserError\n    try:\n        save_tracks(", 1)
    script = script.rstrip() + "\n    except UserError as exc:\n        print(exc)\n        sys.exit(2)\n"
    child = _child(script, preexec_fn=limit)
    out, err = child.communicate(timeout=120)
    assert child.returncode == 2, err
    assert out.startswith(f"{path}: cannot write the tracks file: File too large"), out
    assert path.read_bytes() == before
    assert _temp_files(tmp_path) == []


def test_csv_keyboard_interrupt_half_way(tmp_path):
    """A writer that raises KeyboardInterrupt after writing half its rows leaves nothing of itself."""
    path = tmp_path / "tracks.csv"
    before = _small(path)
    with pytest.raises(KeyboardInterrupt), atomic_open(path, "w") as f:
        for i in range(100):
            f.write(f"row {i}\n")
            if i == 50:
                f.flush()
                raise KeyboardInterrupt
    assert path.read_bytes() == before
    assert _temp_files(tmp_path) == []


def test_atomic_write_calls_the_writer_with_a_temp_path(tmp_path):
    seen = []

    def writer(tmp: Path) -> None:
        seen.append(tmp)
        assert tmp.parent == tmp_path and tmp.suffix == ".json" and TEMP_MARK in tmp.name
        tmp.write_text("{}")

    assert atomic_write(tmp_path / "a.json", writer) == tmp_path / "a.json"
    assert (tmp_path / "a.json").read_text() == "{}" and not seen[0].exists()


def test_sigterm_handler_is_restored(tmp_path):
    before = signal.getsignal(signal.SIGTERM)
    with atomic_open(tmp_path / "x.txt") as f:
        assert signal.getsignal(signal.SIGTERM) is not before or before is not signal.SIG_DFL
        f.write("x")
    assert signal.getsignal(signal.SIGTERM) is before
    assert os.listdir(tmp_path) == ["x.txt"]


@pytest.mark.parametrize("ext", [".mp4", ".avi"])
def test_video_write_under_a_file_size_limit_keeps_the_previous_file(tmp_path, ext):
    """A video cut short by the disk is a VideoError (not 'saved'), the previous file stays, no temp file."""
    path = tmp_path / f"clip{ext}"
    script = f"""
        import resource, sys
        import numpy as np
        from engine.core.errors import VideoError
        from engine.io.video import write_video
        rng = np.random.default_rng(0)
        write_video("{path}", rng.integers(0, 255, (4, 48, 64, 3), dtype=np.uint8))
        resource.setrlimit(resource.RLIMIT_FSIZE, ({FSIZE_LIMIT_BYTES}, {FSIZE_LIMIT_BYTES}))
        try:
            write_video("{path}", rng.integers(0, 255, (60, 240, 320, 3), dtype=np.uint8))
        except VideoError as exc:
            print(exc)
            sys.exit(2)
    """
    child = _child(script)
    out, err = child.communicate(timeout=120)
    assert child.returncode == 2, (out, err)
    assert out.startswith(f"{path}: the written video "), out
    from engine.io.video import open_video

    with open_video(path) as reader:
        assert reader.info.num_frames == 4
    assert _temp_files(tmp_path) == []
