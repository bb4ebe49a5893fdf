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


# -- reports, bench files, traces, compare --json: the same guarantees ---------------------------------------
#: a child that makes every atomic write stop half way (after some bytes reach the temp file), says so on
#: stdout and waits for the signal; WRITE is the write to run
PAUSED_ATOMIC = """
    import signal, sys, time
    signal.signal(signal.SIGINT, signal.default_int_handler)
    import engine.core.atomic as atomic

    class Paused:
        def __init__(self, fh):
            self.fh = fh
        def write(self, data):
            self.fh.write(data[: max(1, len(data) // 2)])
            self.fh.flush()
            print("writing", flush=True)
            time.sleep(60)
        def __getattr__(self, name):
            return getattr(self.fh, name)
        def __enter__(self):
            return self
        def __exit__(self, *exc):
            self.fh.close()

    atomic.open = lambda *a, **k: Paused(open(*a, **k))
    {write}
"""
WRITES = {
    "report": ("r.json", "from engine.report.files import save; save({{'big': 'x' * 100000}}, '{path}')"),
    "bench file": ("bench.json", "from engine.report.files import save; "
                                 "from engine.report.schema import BenchFile; save(BenchFile(reports=()), '{path}')"),
    "trace": ("t.trace.json.gz", "from engine.capture.export import write_trace; "
                                 "write_trace({{'traceEvents': [{{'name': 'x' * 1000}}] * 200}}, '{path}')"),
}


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
@pytest.mark.parametrize("kind", list(WRITES))
def test_signal_mid_write_of_a_report_bench_file_or_trace_keeps_the_previous_file(tmp_path, sig, kind):
    name, write = WRITES[kind]
    path = tmp_path / name
    path.write_bytes(b"previous good file")
    child = _child(PAUSED_ATOMIC.replace("{write}", write.format(path=path)))
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "writing", child.communicate()
    assert _temp_files(tmp_path)
    child.send_signal(sig)
    _, err = child.communicate(timeout=60)
    assert child.returncode == -sig, err
    assert path.read_bytes() == b"previous good file"
    assert _temp_files(tmp_path) == []


def test_report_under_a_file_size_limit_is_a_user_error_and_keeps_the_previous_file(tmp_path):
    path = tmp_path / "r.json"
    path.write_text('{"previous": true}')
    script = f"""
        import resource, sys
        from engine.core.errors import UserError
        from engine.report.files import save
        resource.setrlimit(resource.RLIMIT_FSIZE, ({FSIZE_LIMIT_BYTES}, {FSIZE_LIMIT_BYTES}))
        try:
            save({{"big": "x" * {4 * FSIZE_LIMIT_BYTES}}}, "{path}")
        except UserError as exc:
            print(exc)
            sys.exit(2)
    """
    child = _child(script)
    out, err = child.communicate(timeout=120)
    assert child.returncode == 2, (out, err)
    assert out.startswith(f"{path}: cannot write the report: File too large"), out
    assert path.read_text() == '{"previous": true}'
    assert _temp_files(tmp_path) == []


def test_trace_under_a_file_size_limit_keeps_the_previous_file(tmp_path):
    path = tmp_path / "t.trace.json.gz"
    path.write_bytes(b"previous")
    script = f"""
        import resource, sys
        import numpy as np
        from engine.capture.export import write_trace
        rng = np.random.default_rng(0)
        events = [{{"name": str(v), "ts": float(v)}} for v in rng.random(200000)]  # does not compress away
        resource.setrlimit(resource.RLIMIT_FSIZE, ({FSIZE_LIMIT_BYTES}, {FSIZE_LIMIT_BYTES}))
        try:
            write_trace({{"traceEvents": events}}, "{path}")
        except OSError as exc:
            print(exc.strerror)
            sys.exit(2)
    """
    child = _child(script)
    out, err = child.communicate(timeout=120)
    assert child.returncode == 2 and out.strip() == "File too large", (out, err)
    assert path.read_bytes() == b"previous"
    assert _temp_files(tmp_path) == []


#: a bench child whose second configuration waits for the signal (the first is written by then)
PAUSED_BENCH = """
    import signal, sys, time
    signal.signal(signal.SIGINT, signal.default_int_handler)
    import engine.workflows.bench as wb
    from engine.cli.entry import main
    real = wb.Bench.run_config
    done = []

    def run_config(self, config, warmup, repeat):
        if done:
            print("second", flush=True)
            time.sleep(60)
        done.append(1)
        return real(self, config, warmup, repeat)

    wb.Bench.run_config = run_config
    sys.exit(main(["bench", "{video}", "--tracker", "lk", "--device", "cpu", "--precisions", "fp32", "--grid", "2",
                   "--points-per-batch", "1,2,3", "--warmup", "0", "--repeat", "1", "--no-telemetry", "--no-cost",
                   "--out", "{out}"]))
"""


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, -signal.SIGTERM)])
def test_bench_keeps_its_finished_configurations_on_a_signal(tmp_path, sig, code):
    from engine.io.video import write_video
    from engine.report.files import load_bench

    video = tmp_path / "v.mp4"
    write_video(video, np.zeros((4, 32, 32, 3), np.uint8))
    out = tmp_path / "bench"
    child = _child(PAUSED_BENCH.replace("{video}", str(video)).replace("{out}", str(out)))
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "second", child.communicate()
    child.send_signal(sig)
    _, err = child.communicate(timeout=60)
    assert child.returncode == code, err
    kept = load_bench(out / "bench.json")
    assert [r.label for r in kept.reports] == ["lk fp32 p1 f16"] and kept.extra["complete"] is False
    assert "Traceback" not in err
    assert _temp_files(out) == []


def test_atomic_write_never_replaces_a_device_or_a_folder(tmp_path):
    """Renaming over /dev/full as root would swap the device for a file: refused before any temp file."""
    import stat as stat_module

    for target in (Path("/dev/full"), tmp_path):
        with pytest.raises(OSError, match="exists and is"), atomic_open(target / "" if target == tmp_path else target):
            pass
    assert stat_module.S_ISCHR(os.stat("/dev/full").st_mode)
    assert list(tmp_path.iterdir()) == []
