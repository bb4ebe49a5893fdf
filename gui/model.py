"""What the GUI shows about one run: tracks, queries, config and (optionally) its report.

``RunData`` is the hand-off between the main window and the panels (A/B view, trade-off, diagnosis).
It holds numpy arrays only, no Qt objects, so panels and tests can build one directly.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from engine.api import Report, run_title, track_arrays


def report_title(report: Report) -> str:
    """A report's title: its tracker and the settings that tracker uses when it says which, else its label."""
    described = report.tracker.details
    if "tunable" in described:
        return run_title(report.config, described)
    return report.label or report.config.tracker or "report"


@dataclass
class RunData:
    """One run's results as the GUI sees them.

    queries: float32 [N, 3] rows (t, x, y); tracks: float32 [N, T, 2] (x, y), NaN where not computed;
    visible: bool [N, T]; report: the run's Report (engine.api) or None.
    """

    label: str
    config: dict[str, Any]
    queries: np.ndarray
    tracks: np.ndarray
    visible: np.ndarray
    report: Report | None = None
    video_path: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.queries = np.asarray(self.queries, dtype=np.float32).reshape(-1, 3)
        self.tracks, self.visible = track_arrays(self.tracks, self.visible)
        if len(self.queries) != len(self.tracks):
            raise ValueError(f"{len(self.queries)} queries but {len(self.tracks)} tracks")

    @property
    def num_points(self) -> int:
        return int(self.tracks.shape[0])

    @property
    def num_frames(self) -> int:
        return int(self.tracks.shape[1])

    @property
    def complete(self) -> bool:
        """True when every point has a track (no NaN left from a cancelled or failed run)."""
        return bool(np.isfinite(self.tracks).all())

    @classmethod
    def empty(cls, label: str, config: dict[str, Any], queries: np.ndarray, num_frames: int) -> RunData:
        """A run with no results yet: NaN tracks, nothing visible. [N, T, 2] / [N, T]."""
        queries = np.asarray(queries, dtype=np.float32).reshape(-1, 3)
        n = len(queries)
        return cls(label, dict(config), queries, np.full((n, num_frames, 2), np.nan, np.float32),
                   np.zeros((n, num_frames), bool))

    @classmethod
    def from_report(cls, report: Report) -> RunData | None:
        """Build from a run report holding tracks; None when the report has none."""
        got = report.tracks_arrays()
        if got is None:
            return None
        queries, tracks, visible = got
        return cls(report_title(report), report.config.to_dict(), queries, tracks, visible, report=report,
                   video_path=report.video.path)
