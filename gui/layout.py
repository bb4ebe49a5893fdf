"""The window's size, place and dock layout across screens: first start, restore, reset.

A saved layout comes from whatever screen the app last closed on. Restored here it is clamped to the
screen the window lands on, and its docks are kept only if each still has room to be read; otherwise
the layout the window was built with comes back, sized to this screen. View > Reset layout does the
same on request.
"""

from __future__ import annotations

from PySide6.QtCore import QByteArray, QPoint, QRect, QSize, Qt
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QDockWidget, QMainWindow

DEFAULT_SIZE = QSize(1500, 900)  # a first start on a screen that has room for it
SCREEN_SHARE = 0.9  # a first start on a smaller screen takes this share of its free area
#: docks built at these widths for a window DEFAULT_SIZE wide, narrower in a narrower window (px)
DEFAULT_DOCK_PX = {"run_dock": 230, "charts_dock": 520}
#: docks along the bottom built at these heights for a window DEFAULT_SIZE tall, lower in a lower window (px)
DEFAULT_DOCK_HEIGHT_PX = {"history_dock": 150}
#: below these sizes a dock's contents cannot be read: such a restored dock is not kept (px)
MIN_DOCK_PX = {"run_dock": 180, "charts_dock": 280}
MIN_OTHER_DOCK_PX = 80  # a dock another part of the app adds: only an unreadable sliver is dropped
MIN_CENTRAL_PX = 320  # the video needs at least this width between the docks
MIN_ON_SCREEN_PX = 100  # a floating dock must show at least this much of itself on some screen


def available_rect(at: QPoint | None = None) -> QRect | None:
    """The free area (no task bars) of the screen at ``at``, else of the primary screen."""
    screen = QGuiApplication.screenAt(at) if at is not None else None
    screen = screen or QGuiApplication.primaryScreen()
    return None if screen is None else screen.availableGeometry()


def first_start_size(available: QRect | None) -> QSize:
    """DEFAULT_SIZE, or SCREEN_SHARE of a screen too small for it."""
    if available is None:
        return QSize(DEFAULT_SIZE)
    return QSize(min(DEFAULT_SIZE.width(), int(available.width() * SCREEN_SHARE)),
                 min(DEFAULT_SIZE.height(), int(available.height() * SCREEN_SHARE)))


def clamp_rect(rect: QRect, available: QRect) -> QRect:
    """``rect`` no larger than ``available`` and moved (not resized further) to lie inside it."""
    size = rect.size().boundedTo(available.size())
    x = min(max(rect.x(), available.left()), available.left() + available.width() - size.width())
    y = min(max(rect.y(), available.top()), available.top() + available.height() - size.height())
    return QRect(QPoint(x, y), size)


def docks(window: QMainWindow) -> list[QDockWidget]:
    return [d for d in window.findChildren(QDockWidget) if d.parent() is window]


def _min_px(dock: QDockWidget) -> int:
    return MIN_DOCK_PX.get(dock.objectName(), MIN_OTHER_DOCK_PX)


def lost_docks(window: QMainWindow) -> list[QDockWidget]:
    """Shown floating docks with less than MIN_ON_SCREEN_PX of themselves on any screen."""
    def on_screen(frame: QRect) -> bool:
        return any(min(s.availableGeometry().intersected(frame).width(),
                       s.availableGeometry().intersected(frame).height()) >= MIN_ON_SCREEN_PX
                   for s in QGuiApplication.screens())

    return [d for d in docks(window) if d.isFloating() and not d.isHidden() and not on_screen(d.frameGeometry())]


def docks_fit(window: QMainWindow) -> bool:
    """Whether every shown dock has room to be read and the centre keeps MIN_CENTRAL_PX (laid out first)."""
    layout = window.layout()
    if layout is not None:
        layout.activate()
    if lost_docks(window):
        return False
    for dock in docks(window):
        if dock.isHidden() or dock.isFloating():
            continue
        area = window.dockWidgetArea(dock)
        side = area in (Qt.DockWidgetArea.LeftDockWidgetArea, Qt.DockWidgetArea.RightDockWidgetArea)
        if (dock.width() if side else dock.height()) < _min_px(dock):
            return False
    central = window.centralWidget()
    return central is None or central.width() >= min(MIN_CENTRAL_PX, window.width() // 3)


def fit_default_docks(window: QMainWindow) -> None:
    """The docks at their default widths, scaled down in a window narrower than DEFAULT_SIZE."""
    scale = min(1.0, window.width() / DEFAULT_SIZE.width())
    sized = [d for d in docks(window) if d.objectName() in DEFAULT_DOCK_PX and not d.isFloating()]
    widths = [max(_min_px(d), int(DEFAULT_DOCK_PX[d.objectName()] * scale)) for d in sized]
    if sized:
        window.resizeDocks(sized, widths, Qt.Orientation.Horizontal)
    vscale = min(1.0, window.height() / DEFAULT_SIZE.height())
    low = [d for d in docks(window) if d.objectName() in DEFAULT_DOCK_HEIGHT_PX and not d.isFloating()]
    heights = [max(_min_px(d), int(DEFAULT_DOCK_HEIGHT_PX[d.objectName()] * vscale)) for d in low]
    if low:
        window.resizeDocks(low, heights, Qt.Orientation.Vertical)


class WindowLayout:
    """Restores, checks and resets one main window's geometry and dock state."""

    def __init__(self, window: QMainWindow):
        self.window = window
        self.default_state = window.saveState()  # the docks as built: what Reset layout brings back

    def first_start(self) -> None:
        """Size the window to the screen and centre it."""
        available = available_rect()
        self.window.resize(first_start_size(available))
        if available is not None:
            frame = QRect(QPoint(0, 0), self.window.size())
            frame.moveCenter(available.center())
            self.window.move(clamp_rect(frame, available).topLeft())
        fit_default_docks(self.window)

    def clamp_to_screen(self) -> None:
        """Keep the (normal, not maximised) window inside the free area of the screen it is on."""
        w = self.window
        if w.isMaximized() or w.isFullScreen():
            return
        geometry = w.geometry()
        available = available_rect(geometry.center())
        if available is None:
            return
        clamped = clamp_rect(geometry, available)
        if clamped != geometry:
            w.resize(clamped.size())
            w.move(clamped.topLeft() - (geometry.topLeft() - w.pos()))  # pos() counts the frame

    def restore(self, geometry: QByteArray | None, state: QByteArray | None) -> str | None:
        """Apply a saved geometry and dock state; a note when the saved docks had to be dropped."""
        if geometry is None or not self.window.restoreGeometry(geometry):
            self.first_start()
        else:
            self.clamp_to_screen()
        if state is None:
            fit_default_docks(self.window)
            return None
        if self.window.restoreState(state) and docks_fit(self.window):
            return None
        self.window.restoreState(self.default_state)
        fit_default_docks(self.window)
        if not docks_fit(self.window):  # a screen too small for any layout: the saved one is as good
            self.window.restoreState(state)
            for dock in lost_docks(self.window):
                dock.setFloating(False)
            return None
        return "the saved dock layout does not fit this screen: docks reset (View > Reset layout)"

    def reset(self) -> None:
        """View > Reset layout: the docks as built, the window sized to its screen."""
        w = self.window
        if w.isMaximized() or w.isFullScreen():
            w.showNormal()
        w.restoreState(self.default_state)
        for dock in docks(w):
            dock.setFloating(False)
        self.first_start()
