"""Open, decode and resize videos (OpenCV) and folders of images; write small test videos.

Frames come out as uint8 [T, H, W, 3] RGB. Every problem a user can fix raises ``VideoError`` with one
line naming the file and the problem; problems that still leave usable frames (a truncated stream, a
missing frame rate, frames too large) are recorded in ``VideoReader.warnings``.

Frame count policy: containers can lie about how many frames they hold. We trust
``CAP_PROP_FRAME_COUNT`` when it is a plausible positive number (so opening stays cheap) and correct it
on read: a stream that ends early is truncated to what decoded (with a warning naming where it stopped),
and a read to the end that finds more frames than claimed keeps them (with a warning). When the count is
0, negative, NaN or absurd (more frames than the file has bytes), the video is counted by decoding it once
at open (``grab()`` only, no colour conversion). ``info.num_frames`` is updated whenever a read corrects it.

Sizes are never trusted: ``read()`` grows its buffer as frames decode (it preallocates at most
``PREALLOCATE_MAX_BYTES`` on the container's word) and stops with a VideoError past ``MAX_READ_FRAMES``
frames or ``MAX_READ_BYTES`` decoded bytes. A frame that does not decode in the middle of a stream is
replaced by the frame before it (a warning names it) and decoding goes on; only ``MAX_CORRUPT_RUN``
failures in a row count as the end of the stream.

Seeking: a start frame is reached by grabbing forward from the beginning (or from the current position
of a still-open capture), never with ``CAP_PROP_POS_FRAMES``, whose accuracy depends on codec and keyframes.
"""

from __future__ import annotations

import logging
import math
import operator
import os
import re
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import overload

import cv2
import numpy as np

from engine.core.atomic import atomic_path
from engine.core.errors import VideoError
from engine.io.geometry import VideoGeometry

log = logging.getLogger(__name__)

VIDEO_EXTENSIONS = (".mp4", ".avi", ".mov", ".mkv", ".webm", ".m4v")
IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff")
DEFAULT_FPS = 24.0  # used when a container reports no usable frame rate, and for image folders
DEFAULT_MAX_SIDE = 4096  # frames whose larger side exceeds this are resized down (or refused)
MAX_PLAUSIBLE_FRAME_COUNT = 100_000_000  # a container count above this is treated as unknown
MIN_CONTAINER_BYTES_PER_FRAME = 1  # a count claiming more frames than the file has bytes is treated as unknown
MAX_READ_FRAMES = 200_000  # most frames read() decodes in one call
MAX_READ_BYTES = 32 * 1024**3  # most decoded bytes (uint8 RGB) read() holds in one call
PREALLOCATE_MAX_BYTES = 1024**3  # read() preallocates at most this on the container's claimed count; grows after
MAX_CORRUPT_RUN = 16  # this many undecodable frames in a row end the stream; fewer are repeated over
MAX_CORRUPT_WARNINGS = 10  # corrupt frames named one by one in the warnings; the rest are counted
MAX_RESIZE_SIDE = 16384  # largest width or height read() resizes to, px
RANGE_HINT = "read a frame range: VideoReader.read(start, stop), or `trackscope track --max-frames N`"
HUGE_POLICIES = ("resize", "refuse")
WRITER_FOURCC = {
    ".mp4": "mp4v",
    ".m4v": "mp4v",
    ".mov": "mp4v",
    ".avi": "MJPG",
    ".mkv": "MJPG",
    ".webm": "VP80",
}
UINT16_TO_UINT8 = 257  # 65535 / 255

# OpenCV prints its own warnings for files it cannot open; ours name the file and the problem instead
try:
    cv2.utils.logging.setLogLevel(cv2.utils.logging.LOG_LEVEL_ERROR)
except AttributeError:  # builds without the logging utilities
    pass


@dataclass
class VideoInfo:
    """What a video or image folder holds. width/height are the source's own frame size."""

    path: str
    num_frames: int
    fps: float
    width: int
    height: int
    kind: str  # "video" | "images"

    def to_dict(self) -> dict:
        """Plain JSON-ready dict."""
        return asdict(self)


# ----------------------------------------------------------------------------------------- helpers


def _natural_key(name: str) -> list:
    """Sort key that orders 'frame2' before 'frame10'."""
    return [
        (0, int(part), "") if part.isdigit() else (1, 0, part.lower()) for part in re.split(r"(\d+)", name)
    ]


def _capture_backend() -> int:
    """FFmpeg when OpenCV has it (avoids the image-sequence backend guessing at names), else any."""
    try:
        if cv2.videoio_registry.hasBackend(cv2.CAP_FFMPEG):
            return cv2.CAP_FFMPEG
    except AttributeError:  # very old builds without the registry
        pass
    return cv2.CAP_ANY


def _open_capture(path: str) -> cv2.VideoCapture:
    """A cv2.VideoCapture on path (a separate function so tests can substitute a lying container)."""
    return cv2.VideoCapture(path, _capture_backend())


def _to_rgb_uint8(image: np.ndarray, name: str) -> np.ndarray:
    """Any OpenCV-decoded image (gray, BGR, BGRA, 16-bit, float) -> uint8 [H, W, 3] RGB."""
    if image.dtype == np.uint16:
        image = ((image.astype(np.uint32) + UINT16_TO_UINT8 // 2) // UINT16_TO_UINT8).astype(np.uint8)
    elif image.dtype.kind == "f":
        image = np.clip(np.nan_to_num(image) * 255.0 + 0.5, 0, 255).astype(np.uint8)
    elif image.dtype != np.uint8:
        raise VideoError(f"{name}: unsupported pixel type {image.dtype}")
    if image.ndim == 2:
        return cv2.cvtColor(image, cv2.COLOR_GRAY2RGB)
    channels = image.shape[2]
    if channels in (1, 2):  # gray, or gray + alpha: drop alpha
        return cv2.cvtColor(np.ascontiguousarray(image[:, :, 0]), cv2.COLOR_GRAY2RGB)
    if channels == 3:
        return cv2.cvtColor(image, cv2.COLOR_BGR2RGB)
    if channels == 4:  # alpha is dropped, not composited
        return cv2.cvtColor(image, cv2.COLOR_BGRA2RGB)
    raise VideoError(f"{name}: unsupported number of channels {channels}")


@overload
def _check_size(size: tuple[int, int]) -> tuple[int, int]: ...
@overload
def _check_size(size: None) -> None: ...
@overload
def _check_size(size: tuple[int, int] | None) -> tuple[int, int] | None: ...
def _check_size(size: tuple[int, int] | None) -> tuple[int, int] | None:
    """Validate a (width, height) pair."""
    if size is None:
        return None
    try:
        width, height = (operator.index(v) for v in size)
    except (TypeError, ValueError):
        raise VideoError(f"resize size must be two integers (width, height), got {size!r}") from None
    if width < 1 or height < 1:
        raise VideoError(f"resize size must be positive, got {width}x{height}")
    if max(width, height) > MAX_RESIZE_SIDE:
        raise VideoError(f"resize size {width}x{height} is over the limit of {MAX_RESIZE_SIDE} px per side")
    return width, height


def _resize_one(frame: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """Resize one [H, W, 3] frame to size=(width, height): area when shrinking, bilinear otherwise."""
    height, width = frame.shape[:2]
    if (width, height) == size:
        return frame
    shrinking = size[0] <= width and size[1] <= height
    return cv2.resize(frame, size, interpolation=cv2.INTER_AREA if shrinking else cv2.INTER_LINEAR)


def resize_frames(frames: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """Resize uint8 [T, H, W, 3] frames to size=(width, height) -> [T, height, width, 3]."""
    size = _check_size(size)
    frames = np.asarray(frames)
    if frames.ndim != 4 or frames.shape[3] != 3:
        raise VideoError(f"frames must be [T, H, W, 3], got shape {frames.shape}")
    out = np.empty((frames.shape[0], size[1], size[0], 3), dtype=frames.dtype)
    for i, frame in enumerate(frames):
        out[i] = _resize_one(frame, size)
    return out


def fit_within(width: int, height: int, max_side: int) -> tuple[int, int]:
    """(width, height) scaled down, aspect kept, so the larger side is at most max_side."""
    scale = max_side / max(width, height)
    if scale >= 1.0:
        return width, height
    return max(1, round(width * scale)), max(1, round(height * scale))


# ----------------------------------------------------------------------------------------- sources


class _CaptureSource:
    """Frames of a video file through cv2.VideoCapture; keeps one capture open between reads."""

    def __init__(self, path: str):
        self.path = path
        self._cap: cv2.VideoCapture | None = None
        self._pos = 0  # index of the frame self._cap would return next
        self.first: np.ndarray | None = None  # frame 0 as decoded at open (raw), until take_first() takes it

    def open_fresh(self) -> cv2.VideoCapture:
        """A new capture at frame 0, or VideoError if OpenCV cannot open the file."""
        cap = _open_capture(self.path)
        if not cap.isOpened():
            cap.release()
            raise VideoError(
                f"{self.path}: cannot be opened as a video (not a video, an unsupported codec, "
                "or a truncated/corrupt file)"
            )
        return cap

    def take(self, start: int) -> cv2.VideoCapture:
        """A capture positioned so its next frame is start (reusing the open one when it is not past)."""
        cap, pos = self._cap, self._pos
        self._cap = None
        if cap is None or pos > start:
            if cap is not None:
                cap.release()
            cap, pos = self.open_fresh(), 0
        while pos < start:
            if not cap.grab():
                cap.release()
                raise _StreamEnded(pos)
            pos += 1
        return cap

    def give_back(self, cap: cv2.VideoCapture, pos: int) -> None:
        """Keep cap (next frame pos) for the next read, releasing any other."""
        if self._cap is not None:
            self._cap.release()
        self._cap, self._pos = cap, pos

    def close(self) -> None:
        if self._cap is not None:
            self._cap.release()
            self._cap = None


class _StreamEnded(Exception):
    """Internal: the stream ended at frame ``at`` while seeking."""

    def __init__(self, at: int):
        super().__init__(at)
        self.at = at


class _ImageFolderSource:
    """Frames of a folder of same-sized images, sorted naturally by name."""

    def __init__(self, folder: str, files: list[str]):
        self.folder = folder
        self.files = files
        self.first_shape: tuple[int, int] | None = None  # (height, width) of the first image

    def load(self, index: int) -> np.ndarray:
        """Decode image index -> uint8 [H, W, 3] RGB, checking it matches the first image's size."""
        path = os.path.join(self.folder, self.files[index])
        try:
            data = np.fromfile(path, dtype=np.uint8)
        except OSError as exc:
            raise VideoError(f"{path}: cannot read image file ({exc.strerror or exc})") from None
        image = cv2.imdecode(data, cv2.IMREAD_UNCHANGED) if data.size else None
        if image is None or image.size == 0:
            raise VideoError(f"{path}: unreadable image file (empty, corrupt or not an image)")
        frame = _to_rgb_uint8(image, path)
        shape = frame.shape[:2]
        if self.first_shape is None:
            self.first_shape = shape
        elif shape != self.first_shape:
            h0, w0 = self.first_shape
            raise VideoError(
                f"{path}: image is {shape[1]}x{shape[0]} but {self.files[0]} is {w0}x{h0}; "
                "all images in a folder must be the same size"
            )
        return frame


# ----------------------------------------------------------------------------------------- reader


class VideoReader:
    """A video file or image folder; decode all of it or a range, at once or streaming."""

    def __init__(self, source, info: VideoInfo, warnings: list[str], max_side: int):
        self._source = source
        self.info = info
        self.warnings = warnings
        self.max_side = max_side
        self.corrupt_frames: list[int] = []  # indices of frames that did not decode, replaced on read
        self._closed = False

    def take_first(self, size: tuple[int, int] | None = None) -> np.ndarray | None:
        """Frame 0 as decoded while opening (uint8 [H, W, 3] RGB, resized to size), once; None when not kept.

        The capture then stands at frame 1, so ``iter_frames(1)`` goes on without opening the file again.
        """
        raw = getattr(self._source, "first", None)
        if raw is None or self._closed:
            return None
        self._source.first = None
        return _resize_one(_to_rgb_uint8(raw, self.info.path), _check_size(size) or self.output_size)

    # -- public -------------------------------------------------------------------------------

    @property
    def output_size(self) -> tuple[int, int]:
        """(width, height) that read() returns when no size is given (source size, capped by max_side)."""
        return fit_within(self.info.width, self.info.height, self.max_side)

    @property
    def geometry(self) -> VideoGeometry:
        """Source size vs the size read() returns when no size is given."""
        return VideoGeometry(self.info.width, self.info.height, *self.output_size)

    def read(
        self,
        start: int = 0,
        stop: int | None = None,
        size: tuple[int, int] | None = None,
        max_frames: int = MAX_READ_FRAMES,
        max_bytes: int = MAX_READ_BYTES,
    ) -> np.ndarray:
        """Decode frames [start, stop) -> uint8 [T, H, W, 3] RGB; size=(width, height) resizes.

        The buffer grows as frames decode; more than ``max_frames`` frames or ``max_bytes`` decoded bytes
        is a VideoError (before the memory is taken), whatever the container claims.
        """
        start, stop = self._check_range(start, stop)
        out_w, out_h = _check_size(size) or self.output_size
        frame_bytes = out_w * out_h * 3
        limit = min(max_frames, max_bytes // frame_bytes)
        expected = (stop if stop is not None else self.info.num_frames) - start
        if stop is not None and expected > limit:  # an explicit range: refuse before decoding
            self._over_limit(expected, limit, frame_bytes, max_frames, max_bytes, start)
        capacity = max(1, min(expected, limit, PREALLOCATE_MAX_BYTES // frame_bytes))
        out = self._allocate(capacity, out_w, out_h)
        count = 0
        for frame in self.iter_frames(start, stop, size):
            if count == limit:
                self._over_limit(count + 1, limit, frame_bytes, max_frames, max_bytes, start)
            if count == len(out):  # the container said fewer: grow (x2, within the limit)
                grown = self._allocate(min(2 * len(out), limit), out_w, out_h)
                grown[:count] = out
                out = grown
            out[count] = frame
            count += 1
        return out[:count]

    def _allocate(self, num_frames: int, width: int, height: int) -> np.ndarray:
        """uint8 [num_frames, height, width, 3], or a VideoError when the host cannot hold it."""
        try:
            return np.empty((num_frames, height, width, 3), dtype=np.uint8)
        except MemoryError:
            raise VideoError(f"{self.info.path}: not enough host memory for {num_frames} frames of "
                             f"{width}x{height} ({num_frames * width * height * 3 / 2**30:.2f} GiB)",
                             RANGE_HINT) from None

    def _over_limit(self, at_least: int, limit: int, frame_bytes: int, max_frames: int, max_bytes: int,
                    start: int) -> None:
        """VideoError: a read of at least ``at_least`` frames is over the frame or byte limit."""
        which = (f"{max_frames} frames" if limit == max_frames
                 else f"{max_bytes / 2**30:g} GiB of decoded frames ({limit} frames of {frame_bytes / 2**20:.1f} MiB)")
        raise VideoError(f"{self.info.path}: {at_least if at_least > limit else 'more than ' + str(limit)} frames "
                         f"from frame {start} are over the read limit of {which}", RANGE_HINT)

    def iter_frames(
        self, start: int = 0, stop: int | None = None, size: tuple[int, int] | None = None
    ) -> Iterator[np.ndarray]:
        """Yield frames [start, stop) one at a time as uint8 [H, W, 3] RGB; never holds the whole video."""
        start, stop = self._check_range(start, stop)  # checked now, not at the first next()
        size = _check_size(size) or self.output_size
        raw = self._iter_images(start, stop) if self.info.kind == "images" else self._iter_video(start, stop)
        return (_resize_one(frame, size) for frame in raw)

    def close(self) -> None:
        """Release the decoder."""
        if isinstance(self._source, _CaptureSource):
            self._source.close()
        self._closed = True

    def __enter__(self) -> VideoReader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __len__(self) -> int:
        return self.info.num_frames

    # -- internals ----------------------------------------------------------------------------

    def _warn(self, message: str) -> None:
        if message not in self.warnings:
            log.info("%s: %s", self.info.path, message)  # info: callers show reader.warnings themselves
            self.warnings.append(message)

    def _check_range(self, start: int, stop: int | None) -> tuple[int, int | None]:
        """Validate [start, stop) against the frame count; stop None means 'to the end'."""
        if self._closed:
            raise VideoError(f"{self.info.path}: reader is closed")
        n = self.info.num_frames
        try:
            start = operator.index(start)
            stop = None if stop is None else operator.index(stop)
        except TypeError:
            raise VideoError(
                f"{self.info.path}: frame range must be integers, got {start!r}..{stop!r}"
            ) from None
        end = n if stop is None else stop
        if not 0 <= start < end <= n:
            raise VideoError(
                f"{self.info.path}: frame range [{start}, {end}) is out of range; "
                f"the video has frames [0, {n})"
            )
        return start, stop

    def _iter_images(self, start: int, stop: int | None) -> Iterator[np.ndarray]:
        for index in range(start, self.info.num_frames if stop is None else stop):
            yield self._source.load(index)

    def _iter_video(self, start: int, stop: int | None) -> Iterator[np.ndarray]:
        source: _CaptureSource = self._source
        claimed = self.info.num_frames
        try:
            cap = source.take(start)
        except _StreamEnded as ended:
            self._truncated(ended.at, claimed)
            raise VideoError(
                f"{self.info.path}: no readable frames from frame {start}; "
                f"the stream is truncated at frame {ended.at}"
            ) from None
        pos = start
        finished = False
        corrupt: list[int] = []  # undecodable frames waiting for the next good one
        last: np.ndarray | None = None
        try:
            while stop is None or pos < stop:
                ok, frame = cap.read()
                if not ok or frame is None:
                    if len(corrupt) >= MAX_CORRUPT_RUN or (stop is None and pos >= claimed):
                        break
                    corrupt.append(pos)  # maybe one bad frame: look further before calling it the end
                    pos += 1
                    continue
                if frame.shape[:2] != (self.info.height, self.info.width):  # resized to size below
                    h, w = frame.shape[:2]
                    self._warn(f"frame {pos} is {w}x{h}, not the first frame's size")
                rgb = _to_rgb_uint8(frame, self.info.path)
                for index in corrupt:
                    self._corrupt(index, last is not None)
                    yield last if last is not None else rgb
                corrupt.clear()
                pos += 1
                last = rgb
                yield rgb
            pos -= len(corrupt)  # failures with no good frame after them: the stream ends there
            finished = not corrupt
        finally:
            if finished and (stop is None or pos == stop):
                source.give_back(cap, pos)
            else:
                cap.release()
        if stop is None and pos > claimed:
            self._warn(f"container reported {claimed} frames but {pos} decoded; using {pos}")
            self.info.num_frames = pos
        elif pos < (claimed if stop is None else stop):
            self._truncated(pos, claimed)
            if pos == start:
                raise VideoError(
                    f"{self.info.path}: no readable frames from frame {start}; "
                    f"the stream is truncated or corrupt at frame {pos}"
                )

    def _corrupt(self, index: int, repeated: bool) -> None:
        """Record that frame ``index`` did not decode and what stands in its place."""
        self.corrupt_frames.append(index)
        if len(self.corrupt_frames) <= MAX_CORRUPT_WARNINGS:
            instead = f"repeated frame {index - 1}" if repeated else "used the next decodable frame"
            self._warn(f"frame {index} is corrupt (does not decode); {instead} in its place")
        elif len(self.corrupt_frames) == MAX_CORRUPT_WARNINGS + 1:
            self._warn(f"more than {MAX_CORRUPT_WARNINGS} corrupt frames; the rest are replaced without a warning")

    def _truncated(self, at: int, claimed: int) -> None:
        """Record that the stream stops at frame `at` and correct the frame count."""
        self._warn(f"stream truncated: decoded {at} of {claimed} frames; stopped at frame {at}")
        self.info.num_frames = min(self.info.num_frames, at)


# ----------------------------------------------------------------------------------------- opening


def _check_path(path: Path) -> None:
    """VideoError for a path that is missing, unreadable or empty."""
    if not path.exists():
        raise VideoError(f"{path}: file not found")
    if not os.access(path, os.R_OK):
        raise VideoError(f"{path}: permission denied")
    if path.is_file() and path.stat().st_size == 0:
        raise VideoError(f"{path}: file is empty (0 bytes)")
    if not path.is_file() and not path.is_dir():
        raise VideoError(f"{path}: not a regular file or folder")


def _open_folder(path: Path) -> tuple[_ImageFolderSource, VideoInfo, list[str]]:
    names = [e.name for e in os.scandir(path) if e.is_file() and not e.name.startswith(".")]
    images = sorted((n for n in names if n.lower().endswith(IMAGE_EXTENSIONS)), key=_natural_key)
    if not images:
        others = f" ({len(names)} other files)" if names else ""
        raise VideoError(
            f"{path}: folder has no images{others}; expected {'/'.join(e[1:] for e in IMAGE_EXTENSIONS)}"
        )
    source = _ImageFolderSource(str(path), images)
    first = source.load(0)
    info = VideoInfo(str(path), len(images), DEFAULT_FPS, first.shape[1], first.shape[0], "images")
    return source, info, []


def _count_by_decoding(source: _CaptureSource) -> int:
    cap = source.open_fresh()
    count = 0
    while cap.grab():
        count += 1
    cap.release()
    return count


def _open_file(path: Path) -> tuple[_CaptureSource, VideoInfo, list[str]]:
    warnings: list[str] = []
    source = _CaptureSource(str(path))
    cap = source.open_fresh()
    fps = cap.get(cv2.CAP_PROP_FPS)
    claimed = cap.get(cv2.CAP_PROP_FRAME_COUNT)
    ok, first = cap.read()  # the decoded size is the truth (rotation metadata can swap the props)
    if not ok or first is None:
        cap.release()
        if math.isfinite(claimed) and claimed > 0:
            raise VideoError(f"{path}: no decodable frames (container claims {int(claimed)}); corrupt stream")
        raise VideoError(f"{path}: video contains no frames")
    source.give_back(cap, 1)
    source.first = first  # a frame store shows it at once instead of decoding it again
    file_bytes = path.stat().st_size
    if math.isfinite(claimed) and 0 < claimed <= min(MAX_PLAUSIBLE_FRAME_COUNT,
                                                     file_bytes / MIN_CONTAINER_BYTES_PER_FRAME):
        num_frames = int(claimed)
    else:
        num_frames = _count_by_decoding(source)
        said = f"claims {claimed:.0f} frames in {file_bytes} bytes" if math.isfinite(claimed) and claimed > 0 \
            else "has no usable frame count"
        warnings.append(f"container {said}; counted {num_frames} frames by decoding")
    if not (math.isfinite(fps) and fps > 0):
        warnings.append(f"container reports no frame rate ({fps}); assuming {DEFAULT_FPS:g} fps")
        fps = DEFAULT_FPS
    info = VideoInfo(str(path), num_frames, float(fps), first.shape[1], first.shape[0], "video")
    return source, info, warnings


def open_video(path: str | Path, max_side: int = DEFAULT_MAX_SIDE, on_huge: str = "resize") -> VideoReader:
    """Open a video file or a folder of images; VideoError naming the file if it cannot be used.

    Frames whose larger side exceeds max_side are resized down (aspect kept) by read() with a warning,
    or, with on_huge="refuse", rejected here.
    """
    if on_huge not in HUGE_POLICIES:
        raise ValueError(f"on_huge must be one of {HUGE_POLICIES}, got {on_huge!r}")
    if operator.index(max_side) < 1:
        raise ValueError(f"max_side must be positive, got {max_side}")
    path = Path(path).expanduser()
    _check_path(path)
    source, info, warnings = _open_folder(path) if path.is_dir() else _open_file(path)
    reader = VideoReader(source, info, warnings, max_side)
    if max(info.width, info.height) > max_side:
        if on_huge == "refuse":
            reader.close()
            raise VideoError(
                f"{path}: frames are {info.width}x{info.height}, "
                f"larger than the limit of {max_side} px per side"
            )
        out_w, out_h = reader.output_size
        reader._warn(
            f"frames are {info.width}x{info.height}, larger than {max_side} px per side; "
            f"resized to {out_w}x{out_h} on read"
        )
    return reader


def load_video(
    path: str | Path, start: int = 0, stop: int | None = None, size: tuple[int, int] | None = None
) -> tuple[np.ndarray, VideoInfo]:
    """Open, decode [start, stop) and close: -> (uint8 [T, H, W, 3] RGB, info)."""
    with open_video(path) as reader:
        frames = reader.read(start, stop, size)
        return frames, reader.info


# ----------------------------------------------------------------------------------------- writing


def _check_frames(frames: np.ndarray, path: Path) -> np.ndarray:
    """uint8 [T, H, W, 3] (or [T, H, W] gray, expanded) or VideoError."""
    frames = np.asarray(frames)
    if frames.ndim == 3:
        frames = np.repeat(frames[..., None], 3, axis=3)
    if frames.ndim != 4 or frames.shape[3] != 3 or frames.shape[0] == 0:
        raise VideoError(f"{path}: frames to write must be [T, H, W, 3] with T >= 1, got {frames.shape}")
    if frames.dtype != np.uint8:
        raise VideoError(f"{path}: frames to write must be uint8, got {frames.dtype}")
    return frames


def write_video(path: str | Path, frames: np.ndarray, fps: float = DEFAULT_FPS) -> None:
    """Write uint8 [T, H, W, 3] RGB frames: .mp4/.mov/.m4v as mp4v, .avi/.mkv as MJPG, .webm as VP8.

    Atomic (temp file beside it, renamed into place) and read back before the rename: a write that the
    disk cut short is a VideoError and leaves any previous file intact.
    """
    path = Path(path)
    fourcc = WRITER_FOURCC.get(path.suffix.lower())
    if fourcc is None:
        raise VideoError(f"{path}: cannot write this file type; use one of {', '.join(WRITER_FOURCC)}")
    frames = _check_frames(frames, path)
    if not (math.isfinite(fps) and fps > 0):
        raise VideoError(f"{path}: frame rate must be positive, got {fps}")
    height, width = frames.shape[1:3]
    if width % 2 or height % 2:  # both codecs silently crop odd sizes to even
        raise VideoError(
            f"{path}: {fourcc} needs an even width and height, got {width}x{height}",
            "write an image folder with write_images() for odd sizes",
        )
    if not path.parent.is_dir():
        raise VideoError(f"{path}: folder {path.parent} does not exist")
    try:
        with atomic_path(path) as tmp:  # a full disk or a signal leaves any previous file as it was
            _write_frames(tmp, path, frames, fourcc, float(fps))
    except OSError as exc:
        raise VideoError(f"{path}: cannot write the video: {exc.strerror or exc}") from exc


def _write_frames(tmp: Path, path: Path, frames: np.ndarray, fourcc: str, fps: float) -> None:
    """Encode frames into tmp and check that what was written opens with every frame (else VideoError)."""
    height, width = frames.shape[1:3]
    # opencv's stubs list fourcc only as VideoWriter.fourcc; the module-level function exists at run time
    code = cv2.VideoWriter_fourcc(*fourcc)  # type: ignore[attr-defined]
    writer = cv2.VideoWriter(str(tmp), _capture_backend(), code, fps, (width, height))
    if not writer.isOpened():
        writer.release()
        raise VideoError(f"{path}: cannot open a {fourcc} video writer")
    try:
        for frame in frames:
            writer.write(cv2.cvtColor(frame, cv2.COLOR_RGB2BGR))
    finally:
        writer.release()
    if not tmp.is_file() or tmp.stat().st_size == 0:
        raise VideoError(f"{path}: the video writer produced no file (is the disk full?)")
    check = _open_capture(str(tmp))  # OpenCV's writer reports no I/O errors: read the result back
    try:
        written = check.get(cv2.CAP_PROP_FRAME_COUNT) if check.isOpened() else 0
    finally:
        check.release()
    if not (math.isfinite(written) and written > 0):
        raise VideoError(f"{path}: the written video cannot be read back (is the disk full?); nothing was saved")
    if written != len(frames):
        raise VideoError(f"{path}: the written video holds {written:.0f} of {len(frames)} frames "
                         "(is the disk full?); nothing was saved")


def write_images(folder: str | Path, frames: np.ndarray, ext: str = ".png") -> list[Path]:
    """Write uint8 [T, H, W, 3] RGB frames as frame_00000.png ... into folder (created); -> the paths."""
    folder = Path(folder)
    if ext.lower() not in IMAGE_EXTENSIONS:
        raise VideoError(f"{folder}: cannot write images of type {ext!r}")
    frames = _check_frames(frames, folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, frame in enumerate(frames):
        target = folder / f"frame_{i:05d}{ext}"
        ok, data = cv2.imencode(ext, cv2.cvtColor(frame, cv2.COLOR_RGB2BGR))
        if not ok:
            raise VideoError(f"{target}: cannot encode image")
        data.tofile(str(target))
        paths.append(target)
    return paths
