"""Write a corpus of small bad inputs (videos, queries CSVs, NPZs) for the hostile-input tests.

    python scripts/make_bad_inputs.py OUTDIR

Every file is made at run time from a tiny good one (a 64x48 MJPG .avi written by OpenCV), so nothing
binary is committed. ``CASES`` says, per file, which CLI command reads it and the first line of the
error it must give (exit 2); tests/test_hostile_inputs.py runs them.
"""

from __future__ import annotations

import re
import struct
import sys
import zipfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from engine.io.trackio import MAX_CSV_FIELD_CHARS  # noqa: E402
from engine.io.video import write_video  # noqa: E402

WIDTH, HEIGHT = 64, 48  # px, the good video's frame size
NUM_FRAMES = 46  # frames of the good video
CORRUPT_FRAME = 23  # the frame whose JPEG data the corrupt video breaks
HUGE_CLAIMED_FRAMES = 50_000_000  # what the huge-count video's AVI headers claim
JPEG_SOI = b"\xff\xd8\xff"  # start of a JPEG image: one per MJPG frame
CORRUPT_SPAN = (200, 600)  # bytes after a frame's SOI that are overwritten
AVI_TOTAL_FRAMES_OFFSET = 8 + 16  # dwTotalFrames in 'avih', from the chunk id
AVI_STREAM_LENGTH_OFFSET = 8 + 32  # dwLength in 'strh', from the chunk id


def good_frames(num_frames: int = NUM_FRAMES) -> np.ndarray:
    """uint8 [T, H, W, 3]: noise (so every MJPG frame has plenty of bytes) and a moving bright square."""
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 120, (num_frames, HEIGHT, WIDTH, 3), dtype=np.uint8)
    for t in range(num_frames):
        x = t % (WIDTH - 8)
        frames[t, 20:28, x : x + 8] = 255
    return frames


def write_good_avi(path: Path, num_frames: int = NUM_FRAMES) -> Path:
    """A small good MJPG .avi."""
    write_video(path, good_frames(num_frames), fps=24.0)
    return path


def corrupt_frame(path: Path, index: int = CORRUPT_FRAME) -> Path:
    """Overwrite bytes inside the JPEG data of frame ``index`` of an MJPG .avi, in place."""
    data = bytearray(path.read_bytes())
    starts = [m.start() for m in re.finditer(re.escape(JPEG_SOI), data)]
    if index >= len(starts):
        raise ValueError(f"{path}: {len(starts)} JPEG frames, no frame {index}")
    begin = starts[index]
    for k in range(begin + CORRUPT_SPAN[0], begin + CORRUPT_SPAN[1]):
        data[k] = 0x00 if k % 2 else 0xFF
    path.write_bytes(bytes(data))
    return path


def claim_frames(path: Path, count: int = HUGE_CLAIMED_FRAMES) -> Path:
    """Make an .avi's headers (avih dwTotalFrames, strh dwLength) claim ``count`` frames, in place."""
    data = bytearray(path.read_bytes())
    for chunk, offset in ((b"avih", AVI_TOTAL_FRAMES_OFFSET), (b"strh", AVI_STREAM_LENGTH_OFFSET)):
        at = data.find(chunk)
        if at < 0:
            raise ValueError(f"{path}: no {chunk.decode()} chunk")
        struct.pack_into("<I", data, at + offset, count)
    path.write_bytes(bytes(data))
    return path


def _npz_with_member(path: Path, arrays: dict[str, np.ndarray], raw: dict[str, bytes]) -> Path:
    np.savez(path, **arrays)
    with zipfile.ZipFile(path, "a") as z:
        for name, blob in raw.items():
            z.writestr(name, blob)
    return path


def make_all(out: Path) -> dict[str, Path]:
    """Write every bad file (and the good ones they pair with) into ``out``; -> name -> path."""
    out.mkdir(parents=True, exist_ok=True)
    made: dict[str, Path] = {}

    def put(name: str, content: bytes | str) -> None:
        path = out / name
        if isinstance(content, str):
            path.write_text(content, encoding="utf-8")
        else:
            path.write_bytes(content)
        made[name] = path

    good = made["good.avi"] = write_good_avi(out / "good.avi")
    blob = good.read_bytes()
    put("empty.avi", b"")
    put("truncated.avi", blob[:1000])
    put("not_a_video.mp4", b"this is a text file, not a video\n" * 20)
    made["huge_count.avi"] = claim_frames(write_good_avi(out / "huge_count.avi"))
    made["corrupt_frame.avi"] = corrupt_frame(write_good_avi(out / "corrupt_frame.avi"))

    put("good.csv", "t,x,y\n0,10,10\n0,30,20\n")
    put("wrong_header.csv", "frame,x,y\n0,10,10\n")
    put("nan.csv", "t,x,y\n0,nan,10\n")
    put("outside.csv", f"t,x,y\n0,{WIDTH + 50},10\n")
    put("huge_field.csv", "t,x,y\n0,10," + "1" * (MAX_CSV_FIELD_CHARS + 1) + "\n")
    put("binary.csv", bytes(range(256)) * 4)

    n, t = 2, NUM_FRAMES
    tracks, visible, query_t = np.zeros((n, t, 2), np.float32), np.ones((n, t), bool), np.zeros(n, np.int64)
    np.savez(out / "missing.gt.npz", tracks=tracks)
    np.savez(out / "shapes.gt.npz", tracks=tracks, visible=np.ones((n, t + 1), bool), query_t=query_t)
    _npz_with_member(out / "member.gt.npz", {"visible": visible, "query_t": query_t}, {"tracks": b"not npy"})
    nan_tracks = tracks.copy()
    nan_tracks[0, 3, 1] = np.nan
    np.savez(out / "nan.gt.npz", tracks=nan_tracks, visible=visible, query_t=query_t)
    clip = out / "clip.mp4"
    write_video(clip, good_frames(), fps=24.0)
    for case in ("missing", "shapes", "member", "nan"):
        made[f"{case}.gt.npz"] = out / f"{case}.gt.npz"
        made[f"set_{case}"] = _eval_set(out / f"set_{case}", clip, out / f"{case}.gt.npz", made["good.csv"])
    clip.unlink()
    return made


def _eval_set(folder: Path, clip: Path, gt: Path, queries: Path) -> Path:
    """An evaluation-set folder (NAME.mp4, NAME.queries.csv, NAME.gt.npz) around one bad ground truth."""
    folder.mkdir(exist_ok=True)
    (folder / "clip.mp4").write_bytes(clip.read_bytes())
    (folder / "clip.queries.csv").write_bytes(queries.read_bytes())
    (folder / "clip.gt.npz").write_bytes(gt.read_bytes())
    return folder


def main(argv: list[str] | None = None) -> int:
    """Write the corpus into the folder given on the command line."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python scripts/make_bad_inputs.py OUTDIR", file=sys.stderr)
        return 2
    made = make_all(Path(argv[0]))
    for name, path in sorted(made.items()):
        size = sum(f.stat().st_size for f in path.iterdir()) if path.is_dir() else path.stat().st_size
        print(f"{size:>8}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
