"""Output paths checked before the work starts, and write errors turned into one-line UserErrors.

Every CLI verb with an output (``--out``, ``--report``, ``--json``, ...) calls ``check_output_path`` or
``check_output_folder`` before it decodes or runs anything, so a directory given as ``--out``, ``/dev/full``,
a missing or read-only folder is exit 2 with the reason, not a traceback after minutes of work. The app's
exports use the same checks before they start. ``write_error`` words an OSError raised during a write
(a full disk, a file size limit, a quota) the same way. ``exclusive_folder`` holds an output folder for
one command at a time (an advisory ``flock`` on the folder itself, released when the command ends, even
by a crash), so two benches given one ``--out`` cannot interleave their files.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

from engine.core.errors import UserError

#: errno values that mean "the place cannot take the file" (the user can fix them), not a bug
WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EACCES, errno.EPERM,
                          errno.EISDIR, errno.ENOTDIR, errno.ENOENT, errno.EIO, errno.EEXIST})


def check_output_path(path: str | Path, flag: str, suffixes: Sequence[str] = ()) -> Path:
    """UserError (exit 2) unless ``path`` can be written as a regular file; call it before the work starts.

    Refused: a name without one of ``suffixes`` (when given), a folder, an existing non-file (a device such
    as /dev/full, a FIFO, a socket), a missing folder, and a folder that cannot be written (read-only,
    no permission: probed by creating and removing a temp file there).
    """
    path = Path(path).expanduser()
    where = f"{flag} {path}".strip()
    if suffixes and path.suffix.lower() not in tuple(s.lower() for s in suffixes):
        raise UserError(f"{where}: must end in {' or '.join(suffixes)}")
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        mode = None
    except OSError as exc:
        raise UserError(f"{where}: cannot be checked: {exc.strerror or exc}") from None
    if mode is not None and stat.S_ISDIR(mode):
        raise UserError(f"{where}: is a folder, not a file name")
    if mode is not None and not stat.S_ISREG(mode):
        raise UserError(f"{where}: exists and is not a regular file (a device, FIFO or socket)")
    folder = path.parent
    if not folder.exists():
        raise UserError(f"{where}: folder {folder} does not exist")
    if not folder.is_dir():
        raise UserError(f"{where}: {folder} is not a folder")
    _probe(folder, where)
    return path


def check_output_folder(folder: str | Path, flag: str) -> Path:
    """UserError (exit 2) unless ``folder`` is, or can be created as, a folder that can be written.

    A folder that does not exist yet is checked at its nearest existing ancestor (it is made with parents).
    """
    folder = Path(folder).expanduser()
    where = f"{flag} {folder}".strip()
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise UserError(f"{where}: {existing} exists and is not a folder")
    _probe(existing, where)
    return folder


def _probe(folder: Path, where: str) -> None:
    """UserError unless a file can be created (and is removed again) in ``folder``."""
    try:
        fd, probe = tempfile.mkstemp(prefix=".trackscope-probe.", dir=folder)
    except OSError as exc:
        raise UserError(f"{where}: folder {folder} cannot be written ({exc.strerror or exc})") from None
    os.close(fd)
    os.unlink(probe)


def check_distinct_outputs(*named: tuple[str, Path | None]) -> None:
    """UserError when two output flags name the same file."""
    seen: dict[str, str] = {}
    for flag, path in named:
        if path is None:
            continue
        key = os.path.abspath(Path(path).expanduser())
        if key in seen:
            raise UserError(f"{flag} {path}: is the same file as {seen[key]}")
        seen[key] = f"{flag} {path}"


def is_write_error(exc: BaseException) -> bool:
    """An OSError a user can fix (full disk, size limit, quota, read-only, permission, missing folder)."""
    return isinstance(exc, OSError) and exc.errno in WRITE_ERRNOS


def write_error(path: str | Path, what: str, exc: OSError) -> UserError:
    """A one-line UserError for an OSError met while writing ``what`` to ``path``."""
    reason = exc.strerror or str(exc) or type(exc).__name__
    hint = "free some space or choose another folder" if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG) \
        else None
    return UserError(f"{path}: cannot write the {what}: {reason}; the previous file (if any) is unchanged", hint)


@contextlib.contextmanager
def exclusive_folder(folder: str | Path, flag: str) -> Iterator[Path]:
    """Hold ``folder`` (made when missing) for this command alone while the block runs; UserError when another
    command holds it. A folder made here and still empty at the end is removed again. Without ``fcntl``
    (Windows) the folder is made but not held."""
    folder = Path(folder).expanduser()
    made = not folder.exists()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(folder, os.O_RDONLY)
    except OSError as exc:
        raise UserError(f"{flag} {folder}: cannot make or open the folder: {exc.strerror or exc}") from None
    try:
        try:
            import fcntl
        except ImportError:
            fcntl = None  # type: ignore[assignment]
        if fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise
                raise UserError(f"{flag} {folder}: another trackscope command is writing into this folder",
                                "wait for it to finish, or choose another folder") from None
        yield folder
    finally:
        os.close(fd)  # releases the lock
        if made:
            with contextlib.suppress(OSError):
                folder.rmdir()  # only when still empty
