"""Arguments and helpers shared by the run-type subcommands (track, eval, bench)."""

from __future__ import annotations

import argparse
import os
import stat
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from engine.core.config import DEFAULT_FRAMES_PER_BATCH, DEFAULT_POINTS_PER_BATCH, PRECISIONS, RunConfig
from engine.core.errors import UserError
from engine.core.paths import RESOURCES, SAMPLE_VIDEO, sidecar  # noqa: F401  (re-exported for the verbs)


def add_tracker_arguments(p: argparse.ArgumentParser, default_tracker: str = "corrtrack") -> None:
    """--tracker and --device: every verb that runs a tracker takes them the same way."""
    p.add_argument("--tracker", default=default_tracker,
                   help="corrtrack (default), corrtrack-nopolish, lk, module:factory, or an installed plugin name")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N (default auto)")


def add_run_arguments(p: argparse.ArgumentParser, default_tracker: str = "corrtrack") -> None:
    """--tracker, --device, --precision and the batch sizes of a single run."""
    add_tracker_arguments(p, default_tracker)
    p.add_argument("--precision", default="fp32", choices=PRECISIONS)
    p.add_argument("--points-per-batch", type=int, default=DEFAULT_POINTS_PER_BATCH, metavar="N")
    p.add_argument("--frames-per-batch", type=int, default=DEFAULT_FRAMES_PER_BATCH, metavar="M")


def config_from_args(args: argparse.Namespace) -> RunConfig:
    """The run's config from the parsed arguments; UserError for a bad value."""
    try:
        return RunConfig(tracker=args.tracker, device=args.device, precision=args.precision,
                         points_per_batch=args.points_per_batch, frames_per_batch=args.frames_per_batch)
    except ValueError as exc:
        raise UserError(str(exc)) from exc


def check_output_path(path: Path, flag: str, suffixes: Sequence[str] = ()) -> Path:
    """UserError (exit 2) unless ``path`` can be written as a regular file; call it before the work starts.

    Refused: a name without one of ``suffixes`` (when given), a folder, an existing non-file (a device such
    as /dev/full, a FIFO, a socket), a missing folder, and a folder that cannot be written (read-only,
    no permission: probed by creating and removing a temp file there).
    """
    path = Path(path).expanduser()
    where = f"{flag} {path}"
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


def check_output_folder(folder: Path, flag: str) -> Path:
    """UserError (exit 2) unless ``folder`` is, or can be created as, a folder that can be written.

    A folder that does not exist yet is checked at its nearest existing ancestor (it is made with parents).
    """
    folder = Path(folder).expanduser()
    where = f"{flag} {folder}"
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


class Progress:
    """A one-line progress bar on a terminal; silent otherwise."""

    def __init__(self, total: int, label: str, stream=None):
        self.total = max(1, total)
        self.label = label
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty()

    def update(self, done: int, extra: str = "") -> None:
        if not self.enabled:
            return
        width = 30
        filled = int(width * done / self.total)
        bar = "#" * filled + "-" * (width - filled)
        self.stream.write(f"\r{self.label} [{bar}] {done}/{self.total} {extra}")
        self.stream.flush()

    def close(self) -> None:
        if self.enabled:
            self.stream.write("\n")
            self.stream.flush()


