"""A video's frames in one bounded array, decoded in the background: the app's (and the CLI's) frame source.

``open_frames(path)`` opens the video (the container's header and its first frame: fast) and sizes a
store for every frame: the reader's output size, shrunk (aspect kept, even sides) so that its larger
side is at most ``max_side`` and the whole store fits ``budget_bytes``. Frame 0, decoded while
opening, is in the store at once. ``FrameStore.decode()`` is a generator that fills in the rest and
yields a ``DecodeProgress`` now and then: run it in a worker thread; closing it (or stopping iterating)
cancels. Frames below ``decoded`` are final and may be read from any thread while later ones decode;
later ones read as black until then.

The tracker is fed the same array (``frames``; nothing writes to it once complete) with ``geometry`` mapping source
pixels to the store's, so a run holds no second copy of the video. A tracker that works at its own
resolution (CorrTrack: 256 x 256) loses little to a store smaller than the source; the budget only
bites on long videos (768 MiB: 500 frames of 1080p are kept at 976x548, 3600 at 364x204); a video
that fits it is kept, and tracked, at the reader's size, as the CLI does.
"""

from __future__ import annotations

import math
import time
from collections.abc import Generator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.core.errors import VideoError
from engine.io.geometry import VideoGeometry
from engine.io.video import (
    DEFAULT_MAX_SIDE,
    MAX_READ_BYTES,
    MAX_READ_FRAMES,
    PREALLOCATE_MAX_BYTES,
    RANGE_HINT,
    VideoInfo,
    VideoReader,
    fit_within,
    open_video,
)

#: the app's store: every frame of a video together in at most this many bytes (uint8 RGB), whatever its length
APP_BUDGET_BYTES = 768 * 2**20
#: the app's store: no cap on the side beyond the budget's (a short clip is kept, and tracked, as the CLI does)
APP_MAX_SIDE: int | None = None
#: at most this long between two progress values, s (the first frame is always reported)
PROGRESS_INTERVAL_S = 0.1
#: a store smaller than this on its shorter side gets a warning (tracking and display lose detail)
SMALL_SIDE_WARNING = 160
BYTES_PER_PIXEL = 3


@dataclass(frozen=True)
class DecodeProgress:
    """How far a store's decoding is: ``decoded`` of ``total`` frames (total: the best count known)."""

    decoded: int
    total: int
    complete: bool

    @property
    def fraction(self) -> float:
        return self.decoded / max(1, self.total)


def store_size(width: int, height: int, num_frames: int, budget_bytes: int | None = None,
               max_side: int | None = None) -> tuple[int, int]:
    """(width, height) to keep num_frames frames of width x height within max_side and budget_bytes.

    Unchanged when both allow it; otherwise shrunk with the aspect kept and both sides rounded down to even
    (video writers need even sides), at least 2 px.
    """
    w, h = fit_within(width, height, max_side) if max_side is not None else (width, height)
    if budget_bytes is not None:
        pixels = budget_bytes / max(1, num_frames) / BYTES_PER_PIXEL  # per frame
        if w * h > pixels:
            scale = math.sqrt(pixels / (w * h))
            w, h = int(w * scale), int(h * scale)
    if (w, h) != (width, height):
        w, h = max(2, w - w % 2), max(2, h - h % 2)
    return w, h


class FrameStore:
    """All frames of one video at one bounded size: uint8 [T, h, w, 3], filled by ``decode()``."""

    def __init__(self, frames: np.ndarray, geometry: VideoGeometry, info: VideoInfo | None = None,
                 reader: VideoReader | None = None, decoded: int | None = None, stop: int | None = None,
                 budget_bytes: int | None = None, total: int | None = None):
        self._array = frames
        self._total = len(frames) if total is None else total  # frames expected (the container's word)
        self.geometry = geometry
        self.info = info
        self.decoded = len(frames) if decoded is None else decoded
        self.warnings: list[str] = list(reader.warnings) if reader is not None else []
        self._reader = reader
        self._stop = stop
        self._budget = budget_bytes
        self.complete = reader is None  # a store over frames decoded elsewhere

    @classmethod
    def from_array(cls, frames: np.ndarray, geometry: VideoGeometry | None = None) -> FrameStore:
        """A complete store over frames already decoded (uint8 [T, H, W, 3]; not copied)."""
        frames = np.ascontiguousarray(frames)
        if frames.ndim != 4 or frames.shape[3] != 3:
            raise VideoError(f"frames must be [T, H, W, 3], got shape {frames.shape}")
        return cls(frames, geometry or VideoGeometry.unscaled(frames.shape[2], frames.shape[1]))

    # -- reading (any thread) -------------------------------------------------------------------
    @property
    def frames(self) -> np.ndarray:
        """uint8 [T, h, w, 3], frames from ``decoded`` on black until decoded; final once complete."""
        return self._array

    def frame(self, index: int) -> np.ndarray:
        """uint8 [h, w, 3] frame ``index`` (black until decoded)."""
        return self._array[index]

    def __len__(self) -> int:
        return len(self._array)

    @property
    def size(self) -> tuple[int, int]:
        """(width, height) of the stored frames."""
        return self.geometry.frame_size

    @property
    def nbytes(self) -> int:
        """Bytes of the whole store once decoded."""
        return int(self._array.nbytes)

    @property
    def progress(self) -> DecodeProgress:
        total = len(self._array) if self.complete else max(self._total, self.decoded)
        return DecodeProgress(self.decoded, total, self.complete)

    # -- decoding (one thread) ------------------------------------------------------------------
    def decode(self) -> Generator[DecodeProgress, None, DecodeProgress]:
        """Decode the frames not decoded yet, yielding progress at least every PROGRESS_INTERVAL_S; closing
        the generator stops it (the frames so far stay). Returns the final progress."""
        if self.complete or self._reader is None:
            return self.progress
        last = time.monotonic()
        # a store holding as many frames as the container claims is not searched for more
        frames = self._reader.iter_frames(self.decoded, self._stop, self.size) if self.decoded < len(self) \
            else iter(())
        try:
            for frame in frames:
                if self.decoded == len(self._array) and not self._grow():
                    break
                self._array[self.decoded] = frame
                self.decoded += 1
                now = time.monotonic()
                if now - last >= PROGRESS_INTERVAL_S:
                    last = now
                    yield self.progress
        except VideoError as exc:
            if self.decoded == 0 or "read limit" in exc.message:
                raise
            # the reader stopped at a truncated stream and recorded why in its warnings
        finally:
            close = getattr(frames, "close", None)
            if close is not None:
                close()
        self._finish()
        return self.progress

    def decode_all(self) -> FrameStore:
        """Decode the rest here and now."""
        for _ in self.decode():
            pass
        return self

    def keep_decoded(self) -> None:
        """After a cancelled decode: the store becomes the frames decoded so far (at least one)."""
        if not self.complete:
            self._finish()

    def close(self) -> None:
        """Release the decoder (the frames stay)."""
        if self._reader is not None:
            self._reader.close()

    # -- internals -------------------------------------------------------------------------------
    def _grow(self) -> bool:
        """Room for more frames than the container claimed: x2 within the budget; False (warned) past it."""
        n = len(self._array)
        frame_bytes = self._array[0].nbytes
        if self._budget is None:  # read()'s limits, whatever the container claims
            limit = min(MAX_READ_FRAMES, MAX_READ_BYTES // frame_bytes)
            if n >= limit:
                raise VideoError(f"{self.info.path if self.info else 'video'}: more than {limit} frames of "
                                 f"{frame_bytes / 2**20:.1f} MiB are over the read limit", RANGE_HINT)
            more = min(2 * n, limit)
        else:
            more = min(2 * n, self._budget // frame_bytes)
        if more <= n:
            self._warn(f"the video holds more frames than its container claimed ({n}); kept the first {n} "
                       f"(the frame store is {(self._budget or 0) / 2**20:.0f} MiB)")
            return False
        grown = np.zeros((more, *self._array.shape[1:]), np.uint8)
        grown[:n] = self._array
        self._array = grown  # readers of the old array see the same decoded frames
        return True

    def _finish(self) -> None:
        decoded = max(1, self.decoded)
        if decoded < len(self._array):
            self._array = self._array[:decoded]
        self.decoded = len(self._array)
        if self._reader is not None:
            self.warnings = list(dict.fromkeys([*self.warnings, *self._reader.warnings]))
            self._reader.close()
            if self.info is not None:
                self.info.num_frames = len(self._array)
        self.complete = True  # writeable still: torch.from_numpy warns on a read-only array (the trackers use it)

    def _warn(self, message: str) -> None:
        if message not in self.warnings:
            self.warnings.append(message)


def open_frames(path: str | Path, budget_bytes: int | None = APP_BUDGET_BYTES, max_side: int | None = APP_MAX_SIDE,
                stop: int | None = None, reader_max_side: int = DEFAULT_MAX_SIDE) -> FrameStore:
    """Open a video or image folder into a store sized for all its frames (frames [0, stop) with stop);
    frame 0 is in it at once, ``decode()`` fills in the rest. VideoError naming the file if it cannot be used.

    budget_bytes / max_side None: the reader's own output size (the CLI: tracks as ``reader.read()``'s).
    """
    reader = open_video(path, max_side=reader_max_side)
    try:
        info = reader.info
        count = info.num_frames if stop is None else min(stop, info.num_frames)
        if count < 1:
            raise VideoError(f"{info.path}: the video holds no frames")
        width, height = store_size(*reader.output_size, count, budget_bytes, max_side)
        capacity = count  # within a budget the whole store; else at most PREALLOCATE_MAX_BYTES, grown as frames come
        if budget_bytes is None:
            capacity = max(1, min(count, PREALLOCATE_MAX_BYTES // (width * height * BYTES_PER_PIXEL)))
        try:
            frames = np.zeros((capacity, height, width, 3), np.uint8)  # pages are taken as frames decode
        except MemoryError:
            raise VideoError(f"{info.path}: not enough host memory for {count} frames of {width}x{height}",
                             RANGE_HINT) from None
        first = reader.take_first((width, height))
        decoded = 0
        if first is not None:
            frames[0] = first
            decoded = 1
        geometry = VideoGeometry(info.width, info.height, width, height)
        store = FrameStore(frames, geometry, info, reader, decoded, stop if stop is not None and stop <= count
                           else None, budget_bytes, total=count)
    except BaseException:
        reader.close()
        raise
    if (width, height) != reader.output_size and min(width, height) < SMALL_SIDE_WARNING:
        store._warn(f"a long video: its {count} frames are kept at only {width}x{height} to stay within "
                    f"{store.nbytes / 2**20:.0f} MiB; track a shorter clip for more detail")
    return store
