"""engine.video: decoding real tiny videos and image folders, and every kind of bad input."""

from __future__ import annotations

import json
import math
from pathlib import Path

import cv2
import numpy as np
import pytest

from engine.core.errors import VideoError
from engine.io import video
from engine.io.video import load_video, open_video, resize_frames, write_images, write_video

NUM_FRAMES = 12
WIDTH, HEIGHT = 64, 48
SQUARE = 10  # side of the moving square, px
STEP = 4  # px the square moves right per frame
CODEC_TOLERANCE = 12.0  # mean absolute error allowed after a lossy round trip


def moving_square(num_frames: int = NUM_FRAMES, width: int = WIDTH, height: int = HEIGHT) -> np.ndarray:
    """uint8 [T, H, W, 3]: a white square moving right over a dark blue-ish background."""
    frames = np.zeros((num_frames, height, width, 3), np.uint8)
    frames[..., 2] = 60
    for t in range(num_frames):
        x = 2 + STEP * t
        frames[t, 10 : 10 + SQUARE, x : x + SQUARE] = 255
    return frames


def square_x(frame: np.ndarray) -> float:
    """Centre column of the bright square in one decoded frame."""
    cols = np.nonzero(frame[..., 0].max(axis=0) > 128)[0]
    return float(cols.mean())


@pytest.fixture
def mp4(tmp_path: Path) -> Path:
    path = tmp_path / "square.mp4"
    write_video(path, moving_square(), fps=24.0)
    return path


@pytest.fixture
def avi(tmp_path: Path) -> Path:
    path = tmp_path / "square.avi"
    write_video(path, moving_square(), fps=30.0)
    return path


# ---------------------------------------------------------------------------------------- decoding


@pytest.mark.parametrize(
    "name,fps",
    [
        ("square.mp4", 24.0),
        ("square.avi", 30.0),
        ("square.mkv", 25.0),
        ("square.mov", 24.0),
        ("s.webm", 24.0),
    ],
)
def test_round_trip_counts_sizes_and_content(tmp_path: Path, name: str, fps: float):
    src = moving_square()
    path = tmp_path / name
    try:
        write_video(path, src, fps=fps)
    except VideoError:
        if name.endswith(".webm"):  # builds of OpenCV without a VP8 encoder
            pytest.skip("this OpenCV build cannot write VP8")
        raise
    with open_video(path) as reader:
        info = reader.info
        assert (info.num_frames, info.width, info.height, info.kind) == (NUM_FRAMES, WIDTH, HEIGHT, "video")
        assert info.fps == pytest.approx(fps)
        assert info.path == str(path)
        frames = reader.read()
        assert reader.warnings == []
    assert frames.shape == (NUM_FRAMES, HEIGHT, WIDTH, 3) and frames.dtype == np.uint8
    assert np.abs(frames.astype(float) - src).mean() < CODEC_TOLERANCE
    xs = [square_x(f) for f in frames]
    assert xs == pytest.approx([2 + STEP * t + (SQUARE - 1) / 2 for t in range(NUM_FRAMES)], abs=1.0)


@pytest.mark.parametrize("name", ["red.mp4", "red.avi"])
def test_colour_order_is_rgb(tmp_path: Path, name: str):
    red = np.zeros((3, HEIGHT, WIDTH, 3), np.uint8)
    red[..., 0] = 255
    write_video(tmp_path / name, red)
    frames, _ = load_video(tmp_path / name)
    mean = frames.reshape(-1, 3).mean(axis=0)
    assert mean[0] > 230 and mean[1] < 25 and mean[2] < 25, mean


def test_frame_range_resize_and_stream(mp4: Path):
    with open_video(mp4) as reader:
        full = reader.read()
        part = reader.read(3, 7)
        np.testing.assert_array_equal(part, full[3:7])
        np.testing.assert_array_equal(reader.read(9), full[9:])
        small = reader.read(2, 5, size=(32, 24))
        assert small.shape == (3, 24, 32, 3)
        np.testing.assert_array_equal(small, resize_frames(full[2:5], (32, 24)))
        with pytest.raises(VideoError, match="out of range"):
            reader.iter_frames(0, NUM_FRAMES + 1)  # checked on the call, before any next()
        stream = reader.iter_frames(1, 11, size=(16, 10))
        assert not isinstance(stream, np.ndarray)
        shapes = [f.shape for f in stream]
        assert shapes == [(10, 16, 3)] * 10
        # A stream abandoned half way leaves the reader usable.
        it = reader.iter_frames()
        np.testing.assert_array_equal(next(it), full[0])
        del it
        assert sum(1 for _ in reader.iter_frames()) == NUM_FRAMES
        np.testing.assert_array_equal(reader.read(5, 6)[0], full[5])


def test_load_video_and_info_dict(avi: Path):
    frames, info = load_video(avi, start=2, stop=6, size=(40, 30))
    assert frames.shape == (4, 30, 40, 3)
    d = info.to_dict()
    assert json.loads(json.dumps(d)) == d
    assert d["num_frames"] == NUM_FRAMES and d["kind"] == "video" and d["fps"] == pytest.approx(30.0)


@pytest.mark.parametrize("start,stop", [(0, NUM_FRAMES + 1), (-1, None), (5, 5), (NUM_FRAMES, None), (7, 3)])
def test_out_of_range_names_the_range(mp4: Path, start, stop):
    with open_video(mp4) as reader, pytest.raises(VideoError) as err:
        reader.read(start, stop)
    msg = str(err.value)
    assert str(mp4) in msg and f"[{start}," in msg and f"[0, {NUM_FRAMES})" in msg


def test_closed_reader_refuses(mp4: Path):
    with open_video(mp4) as reader:
        pass
    with pytest.raises(VideoError, match="closed"):
        reader.read()


# ---------------------------------------------------------------------------------------- image folders


def test_image_folder_natural_order(tmp_path: Path):
    folder = tmp_path / "frames"
    folder.mkdir()
    for i in (1, 2, 10, 11, 3):  # natural order 1, 2, 3, 10, 11; plain string order would put 10 first
        cv2.imwrite(str(folder / f"img{i}.png"), np.full((6, 8, 3), i * 10, np.uint8))
    (folder / "notes.txt").write_text("not a frame")
    with open_video(folder) as reader:
        assert reader.info.kind == "images" and reader.info.num_frames == 5
        assert (reader.info.width, reader.info.height, reader.info.fps) == (8, 6, video.DEFAULT_FPS)
        frames = reader.read()
    assert frames.shape == (5, 6, 8, 3)
    assert list(frames[:, 0, 0, 0]) == [10, 20, 30, 100, 110]


def test_image_folder_colour_order_and_jpg(tmp_path: Path):
    frames = moving_square(4)
    frames[0] = (255, 0, 0)
    write_images(tmp_path / "png", frames)
    write_images(tmp_path / "jpg", frames, ext=".jpg")
    png, _ = load_video(tmp_path / "png")
    np.testing.assert_array_equal(png, frames)
    jpg, info = load_video(tmp_path / "jpg", size=(32, 24))
    assert jpg.shape == (4, 24, 32, 3) and info.num_frames == 4
    assert jpg[0, ..., 0].mean() > 230 and jpg[0, ..., 2].mean() < 25


def test_grayscale_rgba_16bit_and_1x1(tmp_path: Path):
    gray = tmp_path / "gray"
    gray.mkdir()
    cv2.imwrite(str(gray / "0.png"), np.full((5, 7), 77, np.uint8))
    frames, _ = load_video(gray)
    assert frames.shape == (1, 5, 7, 3) and np.all(frames == 77)

    rgba = tmp_path / "rgba"
    rgba.mkdir()
    bgra = np.zeros((4, 4, 4), np.uint8)
    bgra[..., 2] = 200  # red in OpenCV's BGRA order
    bgra[..., 3] = 0  # fully transparent: alpha is dropped, colour kept
    cv2.imwrite(str(rgba / "0.png"), bgra)
    frames, _ = load_video(rgba)
    assert frames.shape == (1, 4, 4, 3) and np.all(frames[..., 0] == 200) and np.all(frames[..., 1:] == 0)

    deep = tmp_path / "deep"
    deep.mkdir()
    img16 = np.zeros((3, 3, 3), np.uint16)
    img16[..., 0] = 65535  # blue in BGR
    img16[..., 1] = 257 * 100
    cv2.imwrite(str(deep / "0.png"), img16)
    cv2.imwrite(str(deep / "1.png"), np.full((3, 3), 65535, np.uint16))  # 16-bit grayscale
    frames, _ = load_video(deep)
    assert frames.dtype == np.uint8
    assert tuple(frames[0, 0, 0]) == (0, 100, 255) and np.all(frames[1] == 255)

    tiny = tmp_path / "tiny"
    write_images(tiny, np.array([[[[1, 2, 3]]], [[[4, 5, 6]]]], np.uint8))
    with open_video(tiny) as reader:
        assert (reader.info.width, reader.info.height, reader.info.num_frames) == (1, 1, 2)
        np.testing.assert_array_equal(reader.read()[:, 0, 0], [[1, 2, 3], [4, 5, 6]])
        assert reader.read(size=(3, 2)).shape == (2, 2, 3, 3)


def test_huge_frames_resized_or_refused(tmp_path: Path):
    folder = tmp_path / "big"
    write_images(folder, np.zeros((2, 50, 100, 3), np.uint8))
    with open_video(folder, max_side=40) as reader:
        assert (reader.info.width, reader.info.height) == (100, 50)  # the source's own size
        assert reader.read().shape == (2, 20, 40, 3)
        assert any("100x50" in w and "40" in w for w in reader.warnings)
        assert reader.read(size=(100, 50)).shape == (2, 50, 100, 3)  # an explicit size wins
    with pytest.raises(VideoError) as err:
        open_video(folder, max_side=40, on_huge="refuse")
    assert str(folder) in str(err.value) and "100x50" in str(err.value)


# ---------------------------------------------------------------------------------------- bad input


def _message(path) -> str:
    with pytest.raises(VideoError) as err:
        open_video(path).read()
    msg = str(err.value)
    assert "\n" not in msg
    return msg


def test_missing_file_and_empty_folders(tmp_path: Path):
    missing = tmp_path / "nope.mp4"
    assert _message(missing) == f"{missing}: file not found"
    empty = tmp_path / "empty"
    empty.mkdir()
    msg = _message(empty)
    assert str(empty) in msg and "no images" in msg
    others = tmp_path / "others"
    others.mkdir()
    (others / "a.txt").write_text("x")
    msg = _message(others)
    assert str(others) in msg and "no images" in msg and "1 other" in msg


@pytest.mark.parametrize(
    "content,problem",
    [
        (b"this is a text file, not a video\n" * 20, "cannot be opened as a video"),
        (np.random.default_rng(0).integers(0, 256, 4000, dtype=np.uint8).tobytes(), "cannot be opened"),
        (b"", "empty"),
    ],
)
def test_not_a_video(tmp_path: Path, content: bytes, problem: str):
    path = tmp_path / "fake.mp4"
    path.write_bytes(content)
    msg = _message(path)
    assert str(path) in msg and problem in msg


def test_zero_frames(tmp_path: Path):
    path = tmp_path / "zero.avi"
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), 24.0, (WIDTH, HEIGHT))
    assert writer.isOpened()
    writer.release()
    msg = _message(path)
    assert str(path) in msg and ("no frames" in msg or "cannot be opened" in msg)


def test_truncated_mp4_gives_prefix_or_clear_error(mp4: Path):
    data = mp4.read_bytes()
    mp4.write_bytes(data[: int(len(data) * 0.6)])
    try:
        reader = open_video(mp4)
        frames = reader.read()
    except VideoError as err:
        assert str(mp4) in str(err)
        return
    assert 0 < len(frames) < NUM_FRAMES
    assert any("truncated" in w for w in reader.warnings)


def test_truncated_avi_reads_prefix_with_warning(tmp_path: Path):
    path = tmp_path / "long.avi"
    write_video(path, moving_square(40, WIDTH, HEIGHT) // 2 + 100)
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * 0.6)])
    with open_video(path) as reader:
        claimed = reader.info.num_frames
        assert reader.read(0, 3).shape[0] == 3  # the head is fine
        frames = reader.read()
        decoded = len(frames)
        assert 0 < decoded < claimed
        assert reader.info.num_frames == decoded
        expected = f"stream truncated: decoded {decoded} of {claimed} frames; stopped at frame {decoded}"
        assert expected in reader.warnings
        with pytest.raises(VideoError, match=r"out of range"):
            reader.read(decoded, decoded + 1)


def test_folder_with_mismatched_or_unreadable_image(tmp_path: Path):
    mixed = tmp_path / "mixed"
    write_images(mixed, np.zeros((3, 6, 8, 3), np.uint8))
    cv2.imwrite(str(mixed / "frame_00003.png"), np.zeros((6, 9, 3), np.uint8))
    cv2.imwrite(str(mixed / "frame_00004.png"), np.zeros((7, 9, 3), np.uint8))
    with pytest.raises(VideoError) as err:
        load_video(mixed)
    msg = str(err.value)
    assert str(mixed / "frame_00003.png") in msg and "9x6" in msg and "8x6" in msg

    broken = tmp_path / "broken"
    write_images(broken, np.zeros((3, 6, 8, 3), np.uint8))
    (broken / "frame_00001.png").write_bytes(b"\x89PNG garbage")
    with pytest.raises(VideoError) as err:
        load_video(broken)
    assert str(broken / "frame_00001.png") in str(err.value) and "unreadable image" in str(err.value)


# ---------------------------------------------------------------------------------------- lying containers


class LyingCapture:
    """A real capture whose container reports a chosen frame count and frame rate."""

    def __init__(self, cap: cv2.VideoCapture, count: float, fps: float):
        self._cap, self._count, self._fps = cap, count, fps

    def get(self, prop: int) -> float:
        if prop == cv2.CAP_PROP_FRAME_COUNT:
            return self._count
        if prop == cv2.CAP_PROP_FPS:
            return self._fps
        return self._cap.get(prop)

    def __getattr__(self, name):
        return getattr(self._cap, name)


def _lie(monkeypatch, count: float, fps: float = 24.0) -> None:
    real = video._open_capture
    monkeypatch.setattr(video, "_open_capture", lambda path: LyingCapture(real(path), count, fps))


@pytest.mark.parametrize("count", [0.0, -1.0, math.nan])
def test_missing_frame_count_is_counted_by_decoding(mp4: Path, monkeypatch, count: float):
    _lie(monkeypatch, count)
    with open_video(mp4) as reader:
        assert reader.info.num_frames == NUM_FRAMES
        assert any("counted 12 frames" in w for w in reader.warnings)
        assert reader.read().shape[0] == NUM_FRAMES


def test_overstated_count_is_corrected_on_read(mp4: Path, monkeypatch):
    _lie(monkeypatch, 100.0)
    with open_video(mp4) as reader:
        assert reader.info.num_frames == 100
        assert reader.read().shape[0] == NUM_FRAMES
        assert reader.info.num_frames == NUM_FRAMES
        assert "stream truncated: decoded 12 of 100 frames; stopped at frame 12" in reader.warnings


def test_understated_count_keeps_extra_frames(mp4: Path, monkeypatch):
    _lie(monkeypatch, 5.0)
    with open_video(mp4) as reader:
        assert reader.read(0, 5).shape[0] == 5
        assert reader.read().shape[0] == NUM_FRAMES
        assert reader.info.num_frames == NUM_FRAMES
        assert any("reported 5 frames" in w for w in reader.warnings)


@pytest.mark.parametrize("fps", [0.0, math.nan])
def test_missing_fps_falls_back_with_warning(mp4: Path, monkeypatch, fps: float):
    _lie(monkeypatch, float(NUM_FRAMES), fps)
    with open_video(mp4) as reader:
        assert reader.info.fps == video.DEFAULT_FPS
        assert any("frame rate" in w for w in reader.warnings)


# ---------------------------------------------------------------------------------------- writing


def test_write_video_rejects_bad_requests(tmp_path: Path):
    good = moving_square(2)
    cases = [
        (tmp_path / "x.gif", good, "cannot write this file type"),
        (tmp_path / "odd.mp4", np.zeros((2, 5, 7, 3), np.uint8), "even width and height"),
        (tmp_path / "missing" / "x.mp4", good, "does not exist"),
        (tmp_path / "float.mp4", good.astype(np.float32), "uint8"),
        (tmp_path / "none.avi", good[:0], "T >= 1"),
    ]
    for path, frames, problem in cases:
        with pytest.raises(VideoError) as err:
            write_video(path, frames)
        assert str(path) in str(err.value) and problem in str(err.value)


# ---------------------------------------------------------------------------------------- sizes never trusted


def _bad_inputs():
    """scripts/make_bad_inputs.py as a module (it crafts the corrupt and lying videos)."""
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "scripts" / "make_bad_inputs.py"
    spec = importlib.util.spec_from_file_location("make_bad_inputs", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_corrupt_middle_frame_is_repeated_and_decoding_goes_on(tmp_path: Path):
    bad = _bad_inputs()
    good = bad.write_good_avi(tmp_path / "good.avi")
    broken = bad.corrupt_frame(bad.write_good_avi(tmp_path / "broken.avi"), bad.CORRUPT_FRAME)
    reference, _ = load_video(good)
    with open_video(broken) as reader:
        frames = reader.read()
        assert frames.shape == reference.shape  # every later frame kept
        assert reader.corrupt_frames == [bad.CORRUPT_FRAME]
        assert reader.warnings == [f"frame {bad.CORRUPT_FRAME} is corrupt (does not decode); "
                                   f"repeated frame {bad.CORRUPT_FRAME - 1} in its place"]
        assert reader.info.num_frames == bad.NUM_FRAMES
    np.testing.assert_array_equal(frames[bad.CORRUPT_FRAME], frames[bad.CORRUPT_FRAME - 1])
    keep = np.arange(len(frames)) != bad.CORRUPT_FRAME
    np.testing.assert_array_equal(frames[keep], reference[keep])


def test_corrupt_first_frame_of_a_range_uses_the_next(tmp_path: Path):
    bad = _bad_inputs()
    broken = bad.corrupt_frame(bad.write_good_avi(tmp_path / "broken.avi"), bad.CORRUPT_FRAME)
    with open_video(broken) as reader:
        frames = reader.read(bad.CORRUPT_FRAME, bad.CORRUPT_FRAME + 3)
        assert len(frames) == 3
        np.testing.assert_array_equal(frames[0], frames[1])
        assert "used the next decodable frame" in reader.warnings[0]


def test_huge_claimed_frame_count_is_not_trusted(tmp_path: Path):
    """An AVI claiming 5e7 frames in 100 KB: counted by decoding, read without a huge allocation."""
    bad = _bad_inputs()
    path = bad.claim_frames(bad.write_good_avi(tmp_path / "huge.avi"), bad.HUGE_CLAIMED_FRAMES)
    assert cv2.VideoCapture(str(path)).get(cv2.CAP_PROP_FRAME_COUNT) == bad.HUGE_CLAIMED_FRAMES
    with open_video(path) as reader:
        assert reader.info.num_frames == bad.NUM_FRAMES
        assert f"claims {bad.HUGE_CLAIMED_FRAMES} frames" in reader.warnings[0]
        assert reader.read().shape[0] == bad.NUM_FRAMES


def test_overstated_count_never_preallocates_it(mp4: Path, monkeypatch):
    """A plausible but false count far over the read limit: the reader grows and finds the truth."""
    _lie(monkeypatch, 5e6)
    with open_video(mp4) as reader:
        frames = reader.read(max_frames=1000)
        assert frames.shape[0] == NUM_FRAMES and reader.info.num_frames == NUM_FRAMES


def test_read_limits_frames_and_bytes(mp4: Path):
    with open_video(mp4) as reader:
        with pytest.raises(VideoError, match=r"over the read limit of 5 frames") as err:
            reader.read(max_frames=5)
        assert str(mp4) in str(err.value) and "read(start, stop)" in str(err.value)
        with pytest.raises(VideoError, match=r"12 frames from frame 0 are over the read limit of"):
            reader.read(0, NUM_FRAMES, max_bytes=WIDTH * HEIGHT * 3 * 4)
        assert reader.read(0, 4, max_bytes=WIDTH * HEIGHT * 3 * 4).shape[0] == 4


def test_resize_size_limit(mp4: Path):
    with open_video(mp4) as reader, pytest.raises(VideoError, match=f"over the limit of {video.MAX_RESIZE_SIDE}"):
        reader.read(0, 1, size=(100_000, 10))
