"""What persists between launches (QSettings, organisation "trackscope"): recent files, toggles, layout."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from PySide6.QtCore import QByteArray, QSettings

from engine.api import RunConfig

ORGANIZATION = "trackscope"
APPLICATION = "trackscope"
MAX_RECENT = 10


class Settings:
    """Typed access to the app's QSettings; pass a QSettings to use another store (tests)."""

    def __init__(self, store: QSettings | None = None):
        self.store = store or QSettings(ORGANIZATION, APPLICATION)

    # -- recent files -------------------------------------------------------------------------------
    def recent_files(self) -> list[str]:
        value: Any = self.store.value("recent_files", [])  # QSettings.value is typed object
        if isinstance(value, str):
            value = [value]
        return [str(v) for v in (value or []) if v]

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
        """The last toggles, or ``default`` when none are stored or they no longer validate."""
        default = default or RunConfig()
        raw = self.store.value("config", "")
        if not raw:
            return default
        try:
            config = RunConfig.from_dict({**default.to_dict(), **json.loads(str(raw))})
        except (ValueError, TypeError):
            return default
        from engine.api import available_trackers

        if ":" not in config.tracker and config.tracker not in available_trackers():
            # e.g. the tracker of a replayed report that is not installed here
            config = config.with_changes(tracker=default.tracker)
        return config

    def set_config(self, config: RunConfig) -> None:
        self.store.setValue("config", json.dumps(config.to_dict()))

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
