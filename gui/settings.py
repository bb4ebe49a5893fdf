"""What persists between launches (QSettings, organisation "trackscope"): recent files, toggles, layout.

Every value is read defensively: a settings file edited by hand, written by another version or copied
from another machine (``cuda:1`` on a laptop) gives a working default and a note, never a failed start.
A settings file that is not a regular file (a FIFO, a device, a socket: QSettings would block reading
it at construction) is never opened: the app starts with settings kept in memory for this session only,
and says so (``Settings.notes``).
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from PySide6.QtCore import QByteArray, QSettings, QStandardPaths

from engine.api import (
    COMPILE_MODES,
    MAX_FRAMES_PER_BATCH,
    MAX_POINTS_PER_BATCH,
    PRECISIONS,
    RunConfig,
    UserError,
    available_trackers,
    resolve_device,
)
from gui.panels.run_panel import DEFAULT_GRID, MAX_GRID

ORGANIZATION = "trackscope"
APPLICATION = "trackscope"
MAX_RECENT = 10
#: CorrTrack's compile mode in the app. "background" (eager at once, compiled when a background compile is done)
#: is not the default: on the H200 (session 19, scripts/compile_second_start_h200.py) a second start reached
#: compiled code from the cache only after 16.5 s, and a process that quits while the compile thread is inside
#: Inductor aborts; `trackscope gui --compile background` turns it on
DEFAULT_COMPILE_MODE = "off"
MAX_SHOWN_CHARS = 80  # a bad value is quoted in a note up to this length


def _quoted(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= MAX_SHOWN_CHARS else text[:MAX_SHOWN_CHARS] + "…"


def _whole_number(value: Any, default: int, limit: int) -> tuple[int, str | None]:
    """An int in 1..limit (a whole float or a digit string is accepted), else the default or the bound."""
    if isinstance(value, str):
        value = value.strip()
        value = int(value) if value.lstrip("-").isdigit() else value
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        return default, f"{_quoted(value)} is not a whole number"
    if value < 1:
        return default, f"{value} is below 1"
    if value > limit:
        return limit, f"{value} is above the most the app allows ({limit})"
    return value, None


def _tracker(value: Any, default: str) -> tuple[str, str | None]:
    if not isinstance(value, str) or not value.strip():
        return default, f"{_quoted(value)} is not a tracker name"
    name = value.strip()
    if ":" in name or name in available_trackers():  # module:factory plugins are checked when run
        return name, None
    return default, f"{_quoted(name)} is not installed here"


def _device(value: Any, default: str) -> tuple[str, str | None]:
    if not isinstance(value, str) or not value.strip():
        return "auto", f"{_quoted(value)} is not a device name"
    try:
        resolve_device(value)
    except UserError as exc:
        reason = exc.message.replace(f"device {value.strip().lower()!r} asked for, but ", "")
        return "auto", f"{_quoted(value)}: {reason}"
    except (RuntimeError, ValueError) as exc:  # torch refuses the name itself ("cuda:x")
        return "auto", f"{_quoted(value)} is not a device torch knows ({exc})"
    return value.strip().lower(), None


def _precision(value: Any, default: str) -> tuple[str, str | None]:
    if isinstance(value, str) and value.strip().lower() in PRECISIONS:
        return value.strip().lower(), None
    return default, f"{_quoted(value)} is not one of {', '.join(PRECISIONS)}"


#: each run setting's check: (value, the fallback) -> (the value to use, the problem or None)
FIELD_CHECKS: dict[str, Callable[[Any, Any], tuple[Any, str | None]]] = {
    "tracker": _tracker,
    "device": _device,
    "precision": _precision,
    "points_per_batch": lambda v, d: _whole_number(v, d, MAX_POINTS_PER_BATCH),
    "frames_per_batch": lambda v, d: _whole_number(v, d, MAX_FRAMES_PER_BATCH),
}
FIELD_NAMES = {"points_per_batch": "points per batch", "frames_per_batch": "frames per batch"}


def checked_config(data: Mapping[str, Any], default: RunConfig, source: str) -> tuple[RunConfig, list[str]]:
    """``default`` with each usable value of ``data`` applied; a note per value that was not usable.

    ``source`` names where the values come from in the notes ('saved settings', 'the command line').
    """
    values = default.to_dict()
    notes = []
    for key, check in FIELD_CHECKS.items():
        if key not in data or data[key] is None:
            continue
        value, problem = check(data[key], values[key])
        if problem is not None:
            notes.append(f"{source}: {FIELD_NAMES.get(key, key)} {problem}; using {value}")
        values[key] = value
    return RunConfig.from_dict(values), notes


def settings_files() -> list[Path]:
    """The files QSettings(ORGANIZATION, APPLICATION) reads on Linux: per user, then system-wide, each
    application file and organisation file (Qt's native format is an .conf INI file under the XDG folders)."""
    folders = QStandardPaths.standardLocations(QStandardPaths.StandardLocation.GenericConfigLocation)
    return [Path(folder) / name for folder in folders
            for name in (f"{ORGANIZATION}/{APPLICATION}.conf", f"{ORGANIZATION}.conf")]


def unreadable_settings_file() -> Path | None:
    """A settings file that exists and is not a regular file (checked with stat, which never blocks)."""
    for path in settings_files():
        try:
            mode = os.stat(path).st_mode
        except OSError:
            continue  # missing (the usual case) or unreachable: QSettings treats it as empty
        if not stat.S_ISREG(mode):
            return path
    return None


class MemoryStore:
    """A stand-in for QSettings kept in memory: value / setValue / sync, nothing written."""

    def __init__(self) -> None:
        self._values: dict[str, Any] = {}

    def value(self, key: str, default: Any = None) -> Any:
        return self._values.get(key, default)

    def setValue(self, key: str, value: Any) -> None:  # noqa: N802  (QSettings' name)
        self._values[key] = value

    def sync(self) -> None:
        pass


class Settings:
    """Typed access to the app's QSettings; pass a QSettings to use another store (tests).

    notes: why the saved settings are not used (a settings file that is not a regular file), or empty.
    """

    def __init__(self, store: QSettings | MemoryStore | None = None):
        self.notes: list[str] = []
        if store is None:
            odd = unreadable_settings_file()
            if odd is not None:
                self.notes.append(f"the settings file {odd} is not a regular file, so it was not read; "
                                  "settings are kept for this session only (remove or replace that file)")
                store = MemoryStore()
            else:
                store = QSettings(ORGANIZATION, APPLICATION)
        self.store = store

    # -- recent files -------------------------------------------------------------------------------
    def recent_files(self) -> list[str]:
        value: Any = self.store.value("recent_files", [])  # QSettings.value is typed object
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, (list, tuple)):
            return []
        return [v for v in value if isinstance(v, str) and v][:MAX_RECENT]

    def add_recent(self, path: str | Path) -> list[str]:
        """Put ``path`` first in the recent list (deduplicated, at most MAX_RECENT)."""
        path = str(Path(path).resolve())
        files = [path] + [f for f in self.recent_files() if f != path]
        files = files[:MAX_RECENT]
        self.store.setValue("recent_files", files)
        return files

    def remove_recent(self, path: str) -> None:
        self.store.setValue("recent_files", [f for f in self.recent_files() if f != path])

    # -- run configuration --------------------------------------------------------------------------
    def config(self, default: RunConfig | None = None) -> RunConfig:
        """The last toggles, each one that no longer works here replaced by ``default``'s."""
        return self.checked_config(default)[0]

    def checked_config(self, default: RunConfig | None = None) -> tuple[RunConfig, list[str]]:
        """The last toggles and a note per stored value that could not be used (``cuda:1`` on a laptop)."""
        default = default or RunConfig()
        raw = self.store.value("config", "")
        if not raw:
            return default, []
        try:
            data = json.loads(str(raw))
        except ValueError:
            data = None
        if not isinstance(data, dict):
            return default, [f"saved settings: the run settings {_quoted(raw)} are unreadable; using the defaults"]
        return checked_config(data, default, "saved settings")

    def set_config(self, config: RunConfig) -> None:
        self.store.setValue("config", json.dumps(config.to_dict()))

    def compile_mode(self) -> str:
        """How CorrTrack compiles in the app (off / on / background, a no-op without CUDA; default
        DEFAULT_COMPILE_MODE); a stored value that is not one of them reads as the default."""
        value = self.store.value("corrtrack/compile", DEFAULT_COMPILE_MODE)
        return value if value in COMPILE_MODES else DEFAULT_COMPILE_MODE

    def set_compile_mode(self, mode: str) -> None:
        if mode not in COMPILE_MODES:
            raise ValueError(f"compile mode must be one of {', '.join(COMPILE_MODES)}, not {mode!r}")
        self.store.setValue("corrtrack/compile", mode)

    def grid(self) -> int:
        """The last grid size k (k x k queries), within the grid control's range."""
        return _whole_number(self.store.value("grid", DEFAULT_GRID), DEFAULT_GRID, MAX_GRID)[0]

    def value(self, key: str, default=None):
        v = self.store.value(key, default)
        return default if v is None else v

    def set_value(self, key: str, value) -> None:
        self.store.setValue(key, value)

    # -- window layout --------------------------------------------------------------------------------
    def geometry(self) -> QByteArray | None:
        v = self.store.value("window/geometry")
        return v if isinstance(v, QByteArray) and not v.isEmpty() else None

    def state(self) -> QByteArray | None:
        v = self.store.value("window/state")
        return v if isinstance(v, QByteArray) and not v.isEmpty() else None

    def save_window(self, geometry: QByteArray, state: QByteArray) -> None:
        self.store.setValue("window/geometry", geometry)
        self.store.setValue("window/state", state)

    def sync(self) -> None:
        self.store.sync()
