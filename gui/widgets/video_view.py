"""The video with tracked points over it: playback, scrub, zoom/pan, click to add queries.

While a video decodes in the background a row under the picture shows how far it is, with Cancel; the
frames array it shows is filled in place, so a frame not decoded yet reads black and is redrawn once it is.

Drawing stays cheap with 1,000 points: one ImageItem for the frame, one trail curve per colour of the
palette (``connect="pairs"``: all of that colour's segments in one item), and one points item that
draws every point as a pixmap fragment (visible: filled disc; occluded: hollow, faded ring).
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QLineF, QPointF, QRectF, Qt, QTimer, Signal
from PySide6.QtGui import QBrush, QColor, QPainter, QPen, QPixmap
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QProgressBar,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from engine.api import VideoGeometry
from gui.widgets.transport import Transport

#: colours per track, cycled (a qualitative palette that reads on video)
PALETTE = [
    (230, 25, 75), (60, 180, 75), (255, 225, 25), (67, 99, 216), (245, 130, 49), (145, 30, 180),
    (70, 240, 240), (240, 50, 230), (188, 246, 12), (250, 190, 190), (0, 128, 128), (230, 190, 255),
    (154, 99, 36), (255, 250, 200), (128, 0, 0), (170, 255, 195),
]
DEFAULT_TRAIL = 10  # frames of trail behind each point
POINT_SIZE = 7  # px on screen
QUERY_MARKER_SIZE = 11  # px on screen
OCCLUDED_ALPHA = 150
TRAIL_ALPHA = 170
SPEEDS = (0.25, 0.5, 1.0, 2.0, 4.0)
DEFAULT_FPS = 25.0
#: no levels for uint8 RGB frames: pyqtgraph then builds the QImage straight from the array; explicit (0, 255)
#: sends every frame through a per-pixel rescale (7 ms for 976x548 here, 0.02 ms without) for the same pixels
IMAGE_LEVELS = None


def track_colours(n: int) -> np.ndarray:
    """Palette index per track. [N] int."""
    return np.arange(n) % len(PALETTE)


class TrailsItem(pg.GraphicsObject):
    """Every trail segment of a frame in one item: one ``drawLines`` call per palette colour."""

    def __init__(self, width: float = 1.0):
        super().__init__()
        self._pens = []
        for rgb in PALETTE:
            pen = QPen(QColor(*rgb, TRAIL_ALPHA))
            pen.setWidthF(width)
            pen.setCosmetic(True)
            self._pens.append(pen)
        self._lines = pg.Qt.internals.PrimitiveArray(QLineF, 4)
        self._segments: list[np.ndarray] = [np.zeros((0, 4)) for _ in PALETTE]
        self._counts = np.zeros(len(PALETTE), int)
        self._rect = QRectF()

    def set_bounds(self, rect: QRectF) -> None:
        self.prepareGeometryChange()
        self._rect = QRectF(rect)

    def set_segments(self, colour: int, segments: np.ndarray) -> None:
        """Segments of one colour: [S, 4] rows (x0, y0, x1, y1) in video pixels."""
        self._segments[colour] = segments
        self._counts[colour] = len(segments)

    def clear(self) -> None:
        self._counts[:] = 0
        self.update()

    @property
    def count(self) -> int:
        return int(self._counts.sum())

    def boundingRect(self) -> QRectF:  # noqa: N802
        return self._rect

    def paint(self, p: QPainter, *args) -> None:
        # Lines are mapped to device pixels here: Qt strokes transformed lines several times slower.
        tr = p.transform()
        m = np.array([[tr.m11(), tr.m21()], [tr.m12(), tr.m22()]])
        offset = np.array([tr.dx(), tr.dy()])
        p.resetTransform()
        p.setRenderHint(QPainter.RenderHint.Antialiasing, False)
        for pen, seg, n in zip(self._pens, self._segments, self._counts):
            if not n:
                continue
            self._lines.resize(n)
            out = self._lines.ndarray().reshape(n, 2, 2)
            np.matmul(seg.reshape(n, 2, 2), m.T, out=out)
            out += offset
            p.setPen(pen)
            p.drawLines(*self._lines.drawargs())


class TrackPointsItem(pg.GraphicsObject):
    """All tracked points of a frame in one item, drawn as pixmap fragments from a prebuilt atlas.

    The atlas has one filled disc (visible) and one hollow, faded ring (occluded) per palette colour,
    so a frame costs one ``drawPixmapFragments`` call however many points there are.
    """

    def __init__(self, size: int = POINT_SIZE):
        super().__init__()
        self._cell = size + 4  # atlas cell, px, with room for the outline
        self._atlas = self._make_atlas(size)
        self._fragments = pg.Qt.internals.PrimitiveArray(QPainter.PixmapFragment, 10)
        self._xy = np.zeros((2, 0))  # [2, M] video pixels
        self._source = np.zeros((0, 4))  # [M, 4] atlas rects (sx, sy, w, h)
        self._rect = QRectF()

    def _make_atlas(self, size: int) -> QPixmap:
        c = self._cell
        atlas = QPixmap(c * len(PALETTE), 2 * c)
        atlas.fill(Qt.GlobalColor.transparent)
        p = QPainter(atlas)
        p.setRenderHint(QPainter.RenderHint.Antialiasing, True)
        for i, rgb in enumerate(PALETTE):
            box = QRectF(i * c + 2, 2, size, size)
            p.setPen(QPen(QColor(0, 0, 0, 200), 1))
            p.setBrush(QBrush(QColor(*rgb)))
            p.drawEllipse(box)
            p.setPen(QPen(QColor(*rgb, OCCLUDED_ALPHA), 1.5))
            p.setBrush(Qt.BrushStyle.NoBrush)
            p.drawEllipse(box.translated(0, c))
        p.end()
        return atlas

    def set_bounds(self, rect: QRectF) -> None:
        self.prepareGeometryChange()
        self._rect = QRectF(rect)

    def set_points(self, xy: np.ndarray, colour: np.ndarray, occluded: np.ndarray) -> None:
        """xy [M, 2] video pixels, palette index [M], occluded bool [M]."""
        c = self._cell
        self._xy = np.ascontiguousarray(xy, dtype=np.float64).T
        src = np.empty((len(xy), 4))
        src[:, 0] = colour * c
        src[:, 1] = occluded * c
        src[:, 2:] = c
        self._source = src
        self.update()

    @property
    def count(self) -> int:
        return int(self._xy.shape[1])

    @property
    def occluded_count(self) -> int:
        return int((self._source[:, 1] > 0).sum())

    def boundingRect(self) -> QRectF:  # noqa: N802
        return self._rect

    def paint(self, p: QPainter, *args) -> None:
        if self._xy.shape[1] == 0:
            return
        pts = pg.functions.transformCoordinates(p.transform(), self._xy)  # [2, M] device pixels
        p.resetTransform()
        self._fragments.resize(pts.shape[1])
        frags = self._fragments.ndarray()
        frags[:, 0:2] = pts.T
        frags[:, 2:6] = self._source
        frags[:, 6:10] = (1.0, 1.0, 0.0, 1.0)  # scale x, scale y, rotation, opacity
        p.drawPixmapFragments(*self._fragments.drawargs(), self._atlas)


class QueryMarkersItem(TrackPointsItem):
    """Query points of the current frame as white crosses with a dark outline (same fragment drawing)."""

    def __init__(self, size: int = QUERY_MARKER_SIZE):
        super().__init__(size)

    def _make_atlas(self, size: int) -> QPixmap:
        c = self._cell
        atlas = QPixmap(c, c)
        atlas.fill(Qt.GlobalColor.transparent)
        p = QPainter(atlas)
        mid = c / 2
        for colour, width in ((QColor(0, 0, 0, 220), 3.5), (QColor(255, 255, 255), 1.5)):
            p.setPen(QPen(colour, width))
            p.drawLine(QLineF(mid, 2, mid, c - 2))
            p.drawLine(QLineF(2, mid, c - 2, mid))
        p.end()
        return atlas

    def set_queries(self, xy: np.ndarray) -> None:
        """xy [M, 2] video pixels."""
        self.set_points(xy, np.zeros(len(xy), int), np.zeros(len(xy), bool))


class VideoView(QWidget):
    """Frames at native aspect with tracks, trails, occlusion and query markers."""

    frame_changed = Signal(int)
    query_added = Signal(float, float, float)  # t, x, y in video pixels
    frame_drawn = Signal()
    cancel_decoding = Signal()  # the user pressed Cancel on the decoding row

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.frames: np.ndarray | None = None  # uint8 [T, H, W, 3]
        self.video_geometry = VideoGeometry.unscaled(1, 1)  # source vs frame pixels; queries and tracks are source
        self.tracks: np.ndarray | None = None  # float32 [N, T, 2]
        self.visible: np.ndarray | None = None  # bool [N, T]
        self.queries = np.zeros((0, 3), np.float32)  # [N, 3]
        self.fps = DEFAULT_FPS
        self.trail = DEFAULT_TRAIL
        self.frame = 0
        self.click_adds_queries = True
        self.frames_drawn = 0
        self.decoded = 0  # frames of ``frames`` decoded so far (all of them unless a decoding says otherwise)
        self._drawn_undecoded = False  # the frame on screen was drawn before it was decoded

        self.plot = pg.PlotWidget()
        self.plot.setBackground((20, 20, 20))
        vb = self.plot.getViewBox()
        vb.setAspectLocked(True)
        vb.invertY(True)
        vb.setMenuEnabled(False)
        self.plot.hideAxis("left")
        self.plot.hideAxis("bottom")
        self.image = pg.ImageItem(axisOrder="row-major")
        self.plot.addItem(self.image)
        self.trails = TrailsItem()
        self.plot.addItem(self.trails)
        self.points = TrackPointsItem()
        self.query_markers = QueryMarkersItem()
        for item in (self.points, self.query_markers):
            self.plot.addItem(item)
        self.plot.scene().sigMouseClicked.connect(self._on_click)

        self.transport = Transport("Play / pause (Space)", ("Previous frame (,)", "Next frame (.)"), 80)
        self.transport.connect_view(self.set_playing, self.step, self.set_frame)
        self.play_button, self.slider = self.transport.play_button, self.transport.slider
        self.speed = QComboBox()
        for s in SPEEDS:
            self.speed.addItem(f"{s:g}x", s)
        self.speed.setCurrentIndex(SPEEDS.index(1.0))
        self.speed.setToolTip("Playback speed")
        self.speed.currentIndexChanged.connect(self._update_interval)
        fit = QToolButton(text="Fit")
        fit.setToolTip("Reset zoom (wheel zooms, drag pans)")
        fit.clicked.connect(self.fit)

        self.transport.add(self.speed)
        self.transport.add(fit)
        self.decode_bar = QProgressBar()
        self.decode_bar.setFormat("Decoding %v of %m frames")
        self.decode_bar.setToolTip("The video decodes in the background; the frames decoded so far can be viewed")
        self.decode_cancel = QToolButton(text="Cancel")
        self.decode_cancel.setToolTip("Stop decoding and keep the frames decoded so far")
        self.decode_cancel.clicked.connect(self.cancel_decoding)
        self.decode_row = QWidget()
        row = QHBoxLayout(self.decode_row)
        row.setContentsMargins(4, 0, 4, 0)
        row.addWidget(self.decode_bar, 1)
        row.addWidget(self.decode_cancel)
        self.decode_row.hide()

        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.plot, 1)
        layout.addWidget(self.decode_row)
        layout.addWidget(self.transport)

        self._timer = QTimer(self)
        self._timer.setTimerType(Qt.TimerType.PreciseTimer)
        self._timer.timeout.connect(self._advance)
        self._update_interval()

    # -- data -------------------------------------------------------------------------------------
    def set_video(self, frames: np.ndarray, fps: float | None = None, geometry: VideoGeometry | None = None) -> None:
        """Show a new video (uint8 [T, H, W, 3]) in source pixels (geometry; default unscaled); clears tracks."""
        self.frames = np.ascontiguousarray(frames)
        self.fps = float(fps) if fps and fps > 0 else DEFAULT_FPS
        t, h, w = self.frames.shape[:3]
        self.video_geometry = geometry or VideoGeometry.unscaled(w, h)
        # the image is placed in source pixels (queries and tracks draw as they are), each frame pixel's centre on
        # the source position cv2.resize sampled it from (centre-aligned: the image spans the source's edges)
        rect = QRectF(*self.video_geometry.frame_extent)
        self.image.setImage(self.frames[0], levels=IMAGE_LEVELS, autoLevels=False)
        self.image.setRect(rect)
        self.points.set_bounds(rect)
        self.trails.set_bounds(rect)
        self.query_markers.set_bounds(rect)
        self.tracks = self.visible = None
        self.queries = np.zeros((0, 3), np.float32)
        self.decoded = t
        self.transport.set_count(t)
        self.transport.show_frame(0, t)
        self.frame = 0
        self._update_interval()
        self.fit()
        self.redraw()

    def show_decoding(self, progress) -> None:
        """A DecodeProgress of the video shown: the row with progress and Cancel while it decodes; the frame
        on screen redrawn once it is decoded."""
        self.decoded = min(self.num_frames, int(progress.decoded))
        self.decode_row.setVisible(not progress.complete)
        self.decode_bar.setRange(0, max(1, int(progress.total)))
        self.decode_bar.setValue(min(int(progress.decoded), int(progress.total)))
        if self._drawn_undecoded and self.frame < self.decoded:
            self.redraw()

    def set_queries(self, queries: np.ndarray) -> None:
        self.queries = np.asarray(queries, np.float32).reshape(-1, 3)
        self.redraw()

    def set_click_adds_queries(self, on: bool) -> None:
        """Whether a left click on the video adds a query."""
        self.click_adds_queries = bool(on)

    def set_tracks(self, tracks: np.ndarray | None, visible: np.ndarray | None) -> None:
        """Tracks float32 [N, T, 2] (NaN where not computed yet) and visibility bool [N, T]."""
        self.tracks = tracks
        self.visible = visible
        if tracks is not None:
            colours = track_colours(len(tracks))
            self._order = np.argsort(colours, kind="stable")  # tracks grouped by colour
            self._bounds = np.searchsorted(colours[self._order], np.arange(len(PALETTE) + 1))
        self.redraw()

    @property
    def num_frames(self) -> int:
        return 0 if self.frames is None else int(self.frames.shape[0])

    # -- playback ---------------------------------------------------------------------------------
    def set_frame(self, index: int) -> None:
        if self.frames is None:
            return
        index = int(np.clip(index, 0, self.num_frames - 1))
        self.frame = index
        self.transport.show_frame(index, self.num_frames)
        self.redraw()
        self.frame_changed.emit(index)

    def step(self, delta: int) -> None:
        self.set_frame(self.frame + delta)

    def set_playing(self, playing: bool) -> None:
        if playing and self.frames is not None:
            self._timer.start()
        else:
            self._timer.stop()
        self.transport.show_playing(self.playing)

    @property
    def playing(self) -> bool:
        return self._timer.isActive()

    def set_speed(self, speed: float) -> None:
        i = min(range(len(SPEEDS)), key=lambda k: abs(SPEEDS[k] - speed))
        self.speed.setCurrentIndex(i)

    def _update_interval(self) -> None:
        speed = self.speed.currentData() or 1.0
        self._timer.setInterval(max(1, int(round(1000.0 / (self.fps * speed)))))

    def _advance(self) -> None:
        if self.num_frames:
            self.set_frame((self.frame + 1) % self.num_frames)

    def stop_timers(self) -> None:
        self.set_playing(False)

    def fit(self) -> None:
        if self.frames is not None:
            w, h = self.video_geometry.source_size  # the image is placed in source pixels
            self.plot.getViewBox().setRange(QRectF(-0.5, -0.5, w, h), padding=0.0)

    # -- drawing ----------------------------------------------------------------------------------
    def redraw(self) -> None:
        """Draw the current frame, points, trails and query markers."""
        if self.frames is None:
            return
        t = self.frame
        self.image.setImage(self.frames[t], levels=IMAGE_LEVELS, autoLevels=False)
        self._drawn_undecoded = t >= self.decoded
        self._draw_tracks(t)
        q = self.queries
        self.query_markers.set_queries(q[np.round(q[:, 0]) == t, 1:])
        self.frames_drawn += 1
        self.frame_drawn.emit()

    def _clear_tracks(self) -> None:
        self.trails.clear()
        self.points.set_points(np.zeros((0, 2)), np.zeros(0, int), np.zeros(0, bool))

    def _draw_tracks(self, t: int) -> None:
        tracks, visible = self.tracks, self.visible
        if tracks is None or visible is None or len(tracks) == 0 or t >= tracks.shape[1]:
            self._clear_tracks()
            return
        pos = tracks[:, t]  # [N, 2]
        have = np.isfinite(pos).all(axis=1)
        self.points.set_points(pos[have], track_colours(len(tracks))[have], ~visible[have, t])
        t0 = max(0, t - self.trail)
        seg = tracks[self._order, t0:t + 1]  # [N, K+1, 2], grouped by colour
        ok = np.isfinite(seg).all(-1) & visible[self._order, t0:t + 1]  # [N, K+1]
        ok = ok[:, :-1] & ok[:, 1:]  # both ends known and visible: no trail through an occlusion [N, K]
        lines = np.concatenate([seg[:, :-1], seg[:, 1:]], axis=2)  # [N, K, 4] (x0, y0, x1, y1)
        for c in range(len(PALETTE)):
            lo, hi = self._bounds[c], self._bounds[c + 1]
            self.trails.set_segments(c, lines[lo:hi][ok[lo:hi]])
        self.trails.update()

    # -- input --------------------------------------------------------------------------------------
    def _on_click(self, event) -> None:
        if not self.click_adds_queries or self.frames is None:
            return
        if event.button() != Qt.MouseButton.LeftButton or event.double():
            return
        p = self.plot.getViewBox().mapSceneToView(event.scenePos())
        self.add_query_at(p)

    def add_query_at(self, p: QPointF) -> None:
        """Emit ``query_added`` for a point in source pixels, if it lies inside the video."""
        x, y = float(p.x()), float(p.y())
        if self.video_geometry.contains_source(np.array([x, y])):
            self.query_added.emit(float(self.frame), x, y)
