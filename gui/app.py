"""`trackscope gui [VIDEO | REPORT.json]` (and `trackscope` alone): the desktop app."""

from __future__ import annotations

import argparse
import logging
import logging.handlers
import os
import sys
from collections.abc import Mapping
from pathlib import Path

from engine.api import COMPILE_MODES, PRECISIONS, UserError, compile_in_flight, sample_video_path
from gui.platform_libs import platform_problem

#: Qt platforms that draw without a display server (QT_QPA_PLATFORM=offscreen for screenshots and tests)
HEADLESS_PLATFORMS = ("offscreen", "minimal", "minimalegl", "vnc", "linuxfb", "eglfs", "vkkhrdisplay")
X11_SOCKET_DIR = "/tmp/.X11-unix"
UNIX_SOCKETS = Path("/proc/net/unix")  # lists path and abstract sockets: where an X server listens
log = logging.getLogger(__name__)
NO_DISPLAY_HINT = ("open it in a desktop session or under xvfb-run (xvfb-run trackscope), "
                   "or headless with QT_QPA_PLATFORM=offscreen and --screenshot")


def _x_server_listening(display: str) -> bool | None:
    """Whether a local X server listens for DISPLAY ':N' (None when that cannot be told)."""
    host, _, rest = display.rpartition(":")
    number = rest.split(".")[0]
    if host not in ("", "unix") or not number.isdigit():
        return None  # a remote display (host:N, ssh forwarding): Qt will tell
    socket = f"{X11_SOCKET_DIR}/X{number}"
    if Path(socket).exists():
        return True
    try:
        listed = UNIX_SOCKETS.read_text(errors="replace")
    except OSError:
        return None
    return socket in listed  # an abstract socket "@/tmp/.X11-unix/XN" has no file


def display_problem(env: Mapping[str, str] | None = None, platform: str = sys.platform) -> str | None:
    """Why Qt could not open a window here (it would abort the process), or None when it can try."""
    env = os.environ if env is None else env
    if not platform.startswith("linux"):
        return None  # Windows and macOS always have their native platform
    chosen = env.get("QT_QPA_PLATFORM", "").split(":")[0].split(";")[0].strip().lower()
    if chosen in HEADLESS_PLATFORMS:
        return None
    wayland = env.get("WAYLAND_DISPLAY", "")
    display = env.get("DISPLAY", "")
    if chosen.startswith("wayland"):
        return None if wayland else "no display: QT_QPA_PLATFORM asks for wayland but WAYLAND_DISPLAY is not set"
    if chosen == "" and wayland:
        return None
    if not display:
        return "no display: DISPLAY is not set"
    if _x_server_listening(display) is False:
        return f"no display: no X server listens on DISPLAY={display}"
    return None


def _config_from_args(args: argparse.Namespace, settings):
    """The stored toggles with those given on the command line applied, and a note per value not usable here.

    Never refuses to start: a device this machine lacks (``--device cuda`` on a CPU-only torch, a saved
    ``cuda:1``), an unknown precision or tracker, or a batch size out of range falls back, with a note;
    so does a settings file that cannot be read (``settings.notes``).
    """
    from gui.settings import checked_config

    base, notes = settings.checked_config()
    given = {k: getattr(args, k) for k in ("tracker", "device", "precision", "points_per_batch",
                                           "frames_per_batch") if getattr(args, k, None) is not None}
    config, arg_notes = checked_config(given, base, "the command line")
    return config, settings.notes + notes + arg_notes


def apply_compile_setting(args: argparse.Namespace, settings, environ=None) -> str:
    """CorrTrack's compile mode for this app: ``--compile`` (then saved), else the setting; the environment's
    TRACKSCOPE_CORRTRACK_COMPILE, when set, wins over the setting (not over ``--compile``). -> the mode."""
    from engine.api import CORRTRACK_COMPILE

    env = os.environ if environ is None else environ
    given = getattr(args, "compile", None)
    if given is not None:
        settings.set_compile_mode(given)
        env[CORRTRACK_COMPILE] = given
    elif CORRTRACK_COMPILE not in env:
        env[CORRTRACK_COMPILE] = settings.compile_mode()
    return env[CORRTRACK_COMPILE]


#: the app's log file (INFO and above) in its cache folder, rotated at this size, one old file kept
LOG_FILE_NAME = "trackscope.log"
LOG_FILE_MAX_BYTES = 2 * 2**20
LOG_FILE_BACKUPS = 1


def open_log_file(folder: str | Path) -> logging.Handler | None:
    """A rotating INFO log file in ``folder`` (made when missing), added to the root logger; None, with a
    warning on stderr, when it cannot be written (the app runs without it)."""
    path = Path(folder) / LOG_FILE_NAME
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handler = logging.handlers.RotatingFileHandler(path, maxBytes=LOG_FILE_MAX_BYTES,
                                                       backupCount=LOG_FILE_BACKUPS, encoding="utf-8")
    except OSError as exc:
        log.warning("no log file %s: %s", path, exc.strerror or exc)
        return None
    handler.setLevel(logging.INFO)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    if root.level > logging.INFO:
        root.setLevel(logging.INFO)  # the stderr handler keeps its own level (warnings unless -v)
    return handler


def close_log_file(handler: logging.Handler | None) -> None:
    if handler is not None:
        logging.getLogger().removeHandler(handler)
        handler.close()


def _size(text: str) -> tuple[int, int]:
    """'1500x900' -> (1500, 900); UserError when malformed."""
    w, _, h = text.lower().partition("x")
    try:
        size = int(w), int(h)
    except ValueError:
        raise UserError(f"--size must look like 1500x900, not {text!r}") from None
    if min(size) < 1:
        raise UserError(f"--size must be positive, not {text!r}")
    return size


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", nargs="?", help="a video, an image folder, or a run report / bench JSON to replay")
    parser.add_argument("--queries", help="queries CSV (t,x,y) to load with the video")
    parser.add_argument("--tracker", help="tracker to select (default: the last one used, else corrtrack)")
    parser.add_argument("--device", help="device to select: auto, cpu, cuda, cuda:N")
    parser.add_argument("--precision", help=f"precision to select: {', '.join(PRECISIONS)}")
    parser.add_argument("--points-per-batch", type=int, help="query points per batch")
    parser.add_argument("--frames-per-batch", type=int, help="frames per batch")
    parser.add_argument("--run", action="store_true", help="start tracking as soon as the window opens")
    parser.add_argument("--compile", choices=COMPILE_MODES,
                        help="CorrTrack through torch.compile (CUDA), saved as the app's setting (default "
                             "background: eager at once, compiled when the background compile is done)")
    parser.add_argument("--screenshot", metavar="PNG",
                        help="after the run (with --run) or on open, save the window as PNG and quit")
    parser.add_argument("--size", default="1500x900", help="window size WxH for --screenshot (default 1500x900)")


def run(args: argparse.Namespace) -> int:
    """Open the window; returns the Qt exit code. The log goes to stderr (the CLI's handler: warnings, or
    more with -v) and, from INFO, to LOG_FILE_NAME in the app's cache folder (~/.cache/trackscope/trackscope
    on Linux)."""
    from PySide6.QtCore import QStandardPaths
    from PySide6.QtGui import QGuiApplication
    from PySide6.QtWidgets import QApplication

    from gui.settings import Settings

    if args.path is not None and not Path(args.path).exists():
        raise UserError(f"{args.path}: no such file or folder")
    settings = Settings()
    config, notes = _config_from_args(args, settings)
    apply_compile_setting(args, settings)
    for note in notes:
        print(f"trackscope gui: warning: {note}", file=sys.stderr)
    if args.screenshot:
        _size(args.size)
    problem = display_problem()
    if problem is not None:
        raise UserError(f"{problem}; {NO_DISPLAY_HINT}")
    problem = platform_problem()  # before Qt: it would abort naming one missing library of several
    if problem is not None:
        raise UserError(problem)
    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setOrganizationName("trackscope")
    app.setApplicationName("trackscope")
    log_file = open_log_file(QStandardPaths.writableLocation(QStandardPaths.StandardLocation.CacheLocation))
    log.info("the app starts (Qt platform %s, config %s)", QGuiApplication.platformName(), config.label())
    try:
        return _open_window(args, app, config, notes, settings)
    finally:
        close_log_file(log_file)


def _open_window(args: argparse.Namespace, app, config, notes: list[str], settings) -> int:
    """The window on ``app`` until it closes; the Qt exit code."""
    from PySide6.QtCore import QTimer

    from gui.main_window import MainWindow

    window = MainWindow(config=config, settings=settings)
    if notes:
        window.show_message("; ".join(notes), level="warning")
    path = args.path
    if path is None:
        sample = sample_video_path()
        if sample is None:
            window.show_message("the bundled sample video is missing (resources/sample.mp4)",
                                "open a video with File > Open, or drop one on the window", "warning")
        else:
            window.load_path(sample)
    else:
        window.load_path(path)
    if args.queries:
        window.load_path(args.queries)
    if args.screenshot:
        window.resize(*_size(args.size))
    window.show()

    if args.screenshot:
        from gui.export import export_png

        def shoot() -> None:
            export_png(args.screenshot, window)
            window.close()

        def after_run(_run=None) -> None:
            QTimer.singleShot(300, shoot)

        if args.run:
            window.run_finished.connect(after_run)
            window.controller.failed.connect(after_run)
        else:
            QTimer.singleShot(800, shoot)
    if args.run:
        def start() -> None:
            if not window.start_run() and args.screenshot:  # nothing to wait for: shoot the message
                QTimer.singleShot(300, shoot)

        QTimer.singleShot(0, start)
    code = int(app.exec())
    panel = window.capture_panel
    if (window.controller.abandoned or window.files.lingering or window.capture.abandoned
            or (panel is not None and panel.lingering) or compile_in_flight()):  # Qt would abort destroying
        # a running thread; a capture's or a background compile's daemon thread inside torch may crash
        # interpreter finalisation (a compile in flight did, on the H200)
        print("trackscope: work still running at exit (a tracker batch, a deep capture, a background compile or a "
              "file being read) was left behind",
              file=sys.stderr)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code
