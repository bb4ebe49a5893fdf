"""Saving what the window shows: tracks, the run report, the overlaid video, PNG screenshots.

Each export checks its path first (a folder, a device, a missing or read-only folder is a UserError before
any work) and writes atomically: a temp file beside the target, renamed into place only when complete, so
a full disk or a crash leaves the previous file as it was and is never reported as saved.
"""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
from PySide6.QtWidgets import QWidget

from engine.api import (
    VIDEO_WRITE_SUFFIXES,
    Report,
    UserError,
    VideoGeometry,
    atomic_path,
    check_output_path,
    save,
    save_tracks,
    write_video,
)
from gui.model import RunData
from gui.widgets.video_view import DEFAULT_TRAIL, PALETTE

POINT_RADIUS = 3
TRAIL_THICKNESS = 1
QUERY_SIZE = 5
TRACKS_SUFFIXES = (".npz", ".csv")


def export_tracks(path: str | Path, run: RunData) -> Path:
    """Tracks as NPZ, or CSV when the name ends in .csv."""
    path = check_output_path(path, "", TRACKS_SUFFIXES)
    save_tracks(path, run.tracks, run.visible, run.queries)
    return path


def export_report(path: str | Path, report: Report) -> Path:
    """The run report as JSON."""
    return save(report, check_output_path(path, ""))


def check_video_path(path: str | Path) -> Path:
    """UserError unless the overlaid video can be written at ``path`` (called before drawing starts)."""
    return check_output_path(path, "", VIDEO_WRITE_SUFFIXES)


def draw_overlay(frames: np.ndarray, run: RunData, trail: int = DEFAULT_TRAIL,
                 geometry: VideoGeometry | None = None) -> np.ndarray:
    """Frames with points, trails and query markers drawn on them. uint8 [T, H, W, 3] RGB.

    The run's tracks and queries are in source pixels; ``geometry`` maps them onto the frames drawn on.
    """
    out = np.ascontiguousarray(frames.copy())
    geometry = geometry or VideoGeometry.unscaled(out.shape[2], out.shape[1])
    tracks, visible = geometry.to_frame(run.tracks), run.visible  # [N, T, 2] frame pixels, [N, T]
    queries = geometry.queries_to_frame(run.queries)
    num_frames = min(len(out), tracks.shape[1])
    colours = [PALETTE[i % len(PALETTE)] for i in range(len(tracks))]
    for t in range(num_frames):
        img = out[t]
        t0 = max(0, t - trail)
        for i in range(len(tracks)):
            seg = tracks[i, t0:t + 1]
            ok = np.isfinite(seg).all(axis=1)
            if ok.sum() >= 2:
                pts = np.round(seg[ok]).astype(np.int32).reshape(-1, 1, 2)
                cv2.polylines(img, [pts], False, colours[i], TRAIL_THICKNESS, cv2.LINE_AA)
            x, y = tracks[i, t]
            if np.isfinite(x) and np.isfinite(y):
                c = (int(round(x)), int(round(y)))
                if visible[i, t]:
                    cv2.circle(img, c, POINT_RADIUS, colours[i], -1, cv2.LINE_AA)
                else:
                    cv2.circle(img, c, POINT_RADIUS, colours[i], 1, cv2.LINE_AA)
        for q in queries[np.round(queries[:, 0]) == t]:
            cv2.drawMarker(img, (int(round(q[1])), int(round(q[2]))), (255, 255, 255), cv2.MARKER_CROSS,
                           QUERY_SIZE * 2, 1)
    return out


def export_video(path: str | Path, frames: np.ndarray, run: RunData, fps: float, trail: int = DEFAULT_TRAIL,
                 geometry: VideoGeometry | None = None) -> Path:
    """The video with tracks drawn on it, written by engine.video.write_video (even sizes padded)."""
    path = check_video_path(path)
    out = draw_overlay(frames, run, trail, geometry)
    h, w = out.shape[1:3]
    if h % 2 or w % 2:  # mp4v needs even sizes: pad one black row/column
        out = np.pad(out, ((0, 0), (0, h % 2), (0, w % 2), (0, 0)))
    write_video(path, out, fps)
    return path


def export_png(path: str | Path, widget: QWidget) -> Path:
    """A screenshot of ``widget`` (the window or one chart)."""
    path = check_output_path(path, "")  # a folder is refused as given, not turned into FOLDER.png
    if not path.suffix:
        path = check_output_path(path.with_suffix(".png"), "")
    image = widget.grab()
    try:
        with atomic_path(path) as tmp:
            if not image.save(str(tmp), "PNG"):
                raise UserError(f"{path}: could not write the PNG (is the disk full?)", "choose another folder")
    except OSError as exc:
        raise UserError(f"{path}: could not write the PNG: {exc.strerror or exc}") from exc
    return path
