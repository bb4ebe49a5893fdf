"""Atomic file writes: a temp file in the target's folder, fsynced, then renamed over the target.

Every writer of user-visible output goes through here: tracks files, reports and bench files
(``engine/report/files.py``), capture traces (``engine/capture/export.py``), videos (``write_video``),
``compare --json`` and the app's PNG exports. The previous file survives any error, Ctrl-C
or SIGTERM during the write, and the temp file is removed; only SIGKILL or a power cut can leave a
hidden ``.NAME.*.tmp.SUFFIX`` file behind (never the target half-written). The result gets the mode a
plain ``open()`` would give it (0o666 minus the umask), not mkstemp's 0600.

    with atomic_open("tracks.csv", "w", newline="") as f:   # a file object
        f.write(...)
    with atomic_path("tracks.npz") as tmp:                   # a path, for libraries that want one
        np.savez_compressed(tmp, ...)
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import stat
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

#: the mode bits a new file gets before the umask is applied (what open() uses)
DEFAULT_FILE_MODE = 0o666
#: marks the temp file's name: .NAME.<random>.tmp.SUFFIX (the real suffix last, for libraries that look at it)
TEMP_MARK = ".tmp"


class Terminated(BaseException):
    """SIGTERM arrived during an atomic write (raised so that the temp file is removed)."""


def current_umask() -> int:
    """The process's umask (from /proc on Linux, without changing it; else set-and-restore)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def temp_path_for(path: Path) -> Path:
    """A new, empty, unique temp file beside ``path`` (its suffix kept last)."""
    fd, name = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=f"{TEMP_MARK}{path.suffix}", dir=path.parent)
    os.close(fd)
    return Path(name)


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(folder: Path) -> None:
    """Make the rename durable (POSIX; a no-op where folders cannot be opened)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def _sigterm_raises() -> Iterator[None]:
    """In the main thread, with SIGTERM at its default, turn it into ``Terminated`` for the block."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    try:
        previous = signal.getsignal(signal.SIGTERM)
    except (AttributeError, ValueError):
        yield
        return
    if previous is not signal.SIG_DFL:  # someone handles SIGTERM already: leave it to them
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        raise Terminated(signum)

    signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _refuse_non_file(path: Path) -> None:
    """OSError when ``path`` exists and is not a regular file: renaming over it would replace a folder's
    entry for a device (/dev/full, as root), a FIFO or a socket instead of writing a file."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISREG(mode):
        kind = "a folder" if stat.S_ISDIR(mode) else "not a regular file (a device, FIFO or socket)"
        raise OSError(errno.EEXIST, f"exists and is {kind}", str(path))


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temp path beside ``path``; on success fsync, chmod by umask, rename into place.

    On any exception (KeyboardInterrupt and SIGTERM included) the temp file is removed, the target is
    left as it was and the exception goes on; a SIGTERM is re-sent once the temp file is gone.
    """
    path = Path(path)
    _refuse_non_file(path)
    terminated = False
    with _sigterm_raises():
        tmp = temp_path_for(path)
        try:
            yield tmp
            _fsync_file(tmp)
            os.chmod(tmp, DEFAULT_FILE_MODE & ~current_umask())
            os.replace(tmp, path)
        except Terminated:
            terminated = True
            tmp.unlink(missing_ok=True)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
    if terminated:  # the handler is back at the default: die of SIGTERM as the process would have
        os.kill(os.getpid(), signal.SIGTERM)
        raise Terminated(signal.SIGTERM)  # only reached where the signal is not delivered at once
    _fsync_dir(path.parent)


@contextlib.contextmanager
def atomic_open(path: str | Path, mode: str = "w", **open_kwargs: Any) -> Iterator[IO]:
    """``open(path, mode)`` that writes atomically (mode "w", "wb", "wt", "x" is not supported)."""
    if "w" not in mode or any(c in mode for c in "ax+"):
        raise ValueError(f"atomic_open writes whole files: mode must be 'w', 'wb' or 'wt', got {mode!r}")
    with atomic_path(path) as tmp, open(tmp, mode, **open_kwargs) as f:
        yield f
        f.flush()


def atomic_write(path: str | Path, writer: Callable[[Path], Any]) -> Path:
    """Call ``writer(temp_path)`` and rename the result over ``path`` atomically; -> path."""
    with atomic_path(path) as tmp:
        writer(tmp)
    return Path(path)
