"""The app's mutable state in one object that says when it changes.

``AppState`` holds what the window shows and works on: the video (frames, path, info), the queries,
the video's ground truth, the current run, the run history (``gui.history``: every run of the session
and every report opened, the entry selected and the two picked as A and B), the current report (typed),
its analysis (run on load: roofline and today's findings) and its recorder, the run configuration and
the last problem shown. Controllers change it through its
methods; panels and widgets subscribe to its signals instead of being called by the window.
Signals carry no bool (PySide6 6.12 leaks a reference per Python-emitted bool); read the state instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from PySide6.QtCore import QObject, Signal

from engine.api import Analysis, DecodeProgress, FrameStore, Report, RunConfig, VideoGeometry, analyse
from gui.history import FINISHED, HistoryEntry, RunHistory, queries_match, video_name, why_not_comparable
from gui.model import RunData

GT_QUERY_TOLERANCE_PX = 0.5  # ground truth fits the queries when it passes through them
AB_SIDES = ("A", "B")


@dataclass(frozen=True)
class Message:
    """A problem (or note) to show: text, what to do about it, and 'error' | 'warning' | 'info'."""

    text: str
    suggestion: str | None = None
    level: str = "error"


@dataclass(frozen=True)
class Comparison:
    """Two runs side by side, with the ground truth when it fits both."""

    a: RunData
    b: RunData
    ground_truth: dict[str, np.ndarray] | None


class AppState(QObject):
    """What the window shows and works on; every change is announced by a signal."""

    video_changed = Signal()  # frames, video_path, video_info (also when decoding ends with another frame count)
    video_progress = Signal(object)  # DecodeProgress of the video shown, while it decodes and once at its end
    queries_changed = Signal()
    current_changed = Signal()  # another run is shown (or none)
    tracks_updated = Signal()  # the current run's tracks got new points (in place)
    report_changed = Signal()  # the current report (a finished run's, or a replayed one)
    report_replayed = Signal(object)  # a report opened from a file: (the Report, the file's path)
    comparison_changed = Signal(object)  # Comparison
    entry_added = Signal(object)  # a HistoryEntry (a run made here, or a report opened)
    entries_dropped = Signal(object)  # [HistoryEntry] that left the history (MAX_HISTORY)
    selection_changed = Signal()  # another history entry is selected (``selected``), or none
    ab_changed = Signal()  # the entries picked as A and B (``ab``)
    config_changed = Signal(object)  # RunConfig set from outside the toggles (a replayed report's)
    message_posted = Signal(object)  # Message

    def __init__(self, config: RunConfig | None = None, parent: QObject | None = None):
        super().__init__(parent)
        self.video: FrameStore | None = None  # the video's frames: bounded, decoded in the background
        self.geometry = VideoGeometry.unscaled(1, 1)  # source vs frame pixels of the video shown
        self.video_path: str | None = None
        self.video_info: dict[str, Any] = {}
        self.queries = np.zeros((0, 3), np.float32)  # [N, 3] (t, x, y)
        self.ground_truth: dict[str, np.ndarray] | None = None  # sidecar <video>.gt.npz, when it exists
        self.current: RunData | None = None
        self.runs = RunHistory()
        self.selected: int | None = None  # id of the history entry shown (its report in the Diagnosis tab)
        self.ab: dict[str, int | None] = dict.fromkeys(AB_SIDES)  # ids of the entries picked as A and B
        self.report: Report | None = None
        self.analysis: Analysis | None = None  # of ``report``: its roofline and today's findings
        self.recorder: Any = None  # the RunRecorder of ``report`` when it came from a run here
        self.config = config or RunConfig()
        self.last_message: Message | None = None

    # -- video and queries -------------------------------------------------------------------------------
    @property
    def frames(self) -> np.ndarray | None:
        """uint8 [T, H, W, 3], the video's frames as kept (frames not decoded yet are black), or None."""
        return None if self.video is None else self.video.frames

    @property
    def decoding(self) -> bool:
        """Whether the video shown is still being decoded (a run or capture waits for it)."""
        return self.video is not None and not self.video.complete

    def set_video(self, frames: np.ndarray | FrameStore, path: str | None, info: dict[str, Any],
                  geometry: VideoGeometry | None = None) -> None:
        """A new video (frames uint8 [T, H, W, 3], or a store still decoding): forget the run, report and
        ground truth of the previous one."""
        store = frames if isinstance(frames, FrameStore) else FrameStore.from_array(frames, geometry)
        self.video = store
        self.geometry = geometry or store.geometry  # queries and tracks: its source pixels
        self.video_path = path
        self.video_info = dict(info)
        self.current = None
        self.report = None
        self.analysis = None
        self.recorder = None  # the recorder belongs to the report: an export must not rebuild an older run
        self.ground_truth = None
        self.selected = None
        self.video_changed.emit()
        self.current_changed.emit()
        self.report_changed.emit()  # the Diagnosis tab must not keep the previous video's run
        self.selection_changed.emit()

    def video_decoding(self, progress: DecodeProgress) -> None:
        """The video's decoding went on; at its end, a frame count other than the container's re-shows it."""
        if self.video is None:
            return
        if progress.complete and len(self.video) != self.video_info.get("num_frames"):
            self.video_info["num_frames"] = len(self.video)
            self.video_changed.emit()
        self.video_progress.emit(progress)

    def set_queries(self, queries: np.ndarray) -> None:
        """New queries [N, 3]; the current run is dropped when it tracked other ones."""
        self.queries = np.asarray(queries, np.float32).reshape(-1, 3)
        self.queries_changed.emit()
        if self.current is not None and not np.array_equal(self.current.queries, self.queries):
            self.set_current(None)

    def set_ground_truth(self, ground_truth: dict[str, np.ndarray] | None) -> None:
        """The video's ground truth (tracks, visible, query_t), or None."""
        self.ground_truth = ground_truth

    def matching_ground_truth(self) -> dict[str, np.ndarray] | None:
        """The video's ground truth when it was made for the current queries, else None."""
        gt, q = self.ground_truth, self.queries
        num_frames = 0 if self.frames is None else len(self.frames)
        if gt is None or gt["tracks"].shape[0] != len(q) or gt["tracks"].shape[1] != num_frames:
            return None
        if not np.array_equal(gt["query_t"].astype(np.int64), np.round(q[:, 0]).astype(np.int64)):
            return None
        at_query = gt["tracks"][np.arange(len(q)), gt["query_t"].astype(np.int64)]  # [N, 2]
        return gt if np.nanmax(np.abs(at_query - q[:, 1:]), initial=0.0) <= GT_QUERY_TOLERANCE_PX else None

    # -- runs --------------------------------------------------------------------------------------------
    def set_current(self, run: RunData | None, adopt_queries: bool = False) -> None:
        """Show ``run`` (None: no run); ``adopt_queries`` makes its queries the current ones."""
        self.current = run
        if adopt_queries and run is not None:
            self.queries = run.queries
            self.queries_changed.emit()
        self.current_changed.emit()

    def run_to_export(self) -> tuple[RunData | None, str]:
        """The run File > Export writes (tracks, report, video): the current run, else the run of the current
        report (kept when new queries replaced it); and, for that one, a line saying the queries changed
        since ('' when they did not). Every export reads this, so they all agree on what is current."""
        if self.current is not None:
            return self.current, ""
        entry = self.runs.get(self.selected)
        same = entry is not None and (entry.report is self.report or (
            entry.recorder is not None and entry.recorder is self.recorder))  # an export rebuilt its report
        run = entry.run if entry is not None and same else None
        if run is None and self.report is not None:
            run = RunData.from_report(self.report)
        if run is None:
            return None, ""
        name = entry.describe() if entry is not None and entry.run is run else "the last run"
        if len(self.queries) and queries_match(run.queries, self.queries):
            return run, ""
        return run, (f"the queries changed since {name} ({run.num_points} points; {len(self.queries)} "
                     "query points now): this is that run's, not a run of the queries now set")

    def update_tracks(self) -> None:
        """Say that the current run's arrays were written in place."""
        self.tracks_updated.emit()

    # -- the run history ---------------------------------------------------------------------------------
    @property
    def history(self) -> list[RunData]:
        """The tracked runs of the history's entries, oldest first."""
        return self.runs.runs()

    def new_entry(self, **fields: Any) -> HistoryEntry:
        """A history entry with the next id (not added yet)."""
        return HistoryEntry(id=self.runs.new_id(), **fields)

    def add_entry(self, entry: HistoryEntry, compare_previous: bool = True, select: bool = False) -> None:
        """Keep an entry; ``compare_previous`` puts the latest earlier entry of the same video and queries
        beside it as A and B; ``select`` makes it the selected one (without changing the current run)."""
        dropped = self.runs.add(entry)
        for side, picked in self.ab.items():
            if any(d.id == picked for d in dropped):
                self.ab[side] = None
        self.entry_added.emit(entry)
        if dropped:
            self.entries_dropped.emit(dropped)
        if select:
            self.selected = entry.id
            self.selection_changed.emit()
        previous = self.runs.previous_match(entry) if compare_previous and entry.run is not None else None
        if previous is not None:
            self.compare_entries(previous.id, entry.id)

    def add_history(self, run: RunData) -> None:
        """Keep a finished run (an entry of its own); compare it with the previous run of the same video and
        queries, if any."""
        report = run.report
        self.add_entry(self.new_entry(
            video=video_name(run.video_path or self.video_path), tracker=str(run.config.get("tracker", "?")),
            settings={}, machine=report.device_name if report is not None else "", status=FINISHED,
            source="run", run=run, report=report, num_frames=run.num_frames))

    def select(self, entry_id: int) -> bool:
        """Show an entry: its report (and analysis) becomes the current one; its tracks the current run when it
        is of the video shown. False (and a message) when the entry is no longer kept."""
        entry = self.runs.get(entry_id)
        if entry is None:
            self.post_message(f"run #{entry_id} is no longer in the history", level="info")
            return False
        self.selected = entry.id
        run = entry.run
        num_frames = 0 if self.frames is None else len(self.frames)
        if run is not None and entry.video == video_name(self.video_path) and run.num_frames == num_frames:
            self.set_current(run, adopt_queries=True)
        elif run is not None:
            self.post_message(f"{entry.describe()} tracked {entry.video}: its tracks are not drawn on this video",
                              f"open {entry.video} to see them", level="info")
        self.set_report(entry.report, entry.recorder, entry.analysis)
        if entry.report is not None and entry.source != "run":  # an opened report: its charts replayed too
            self.report_replayed.emit((entry.report, entry.source))
        self.selection_changed.emit()
        return True

    def set_ab(self, side: str, entry_id: int) -> bool:
        """Pick an entry as A or B; with both picked they are compared (False and a message when they cannot).
        A refused pick changes nothing: the other side and the comparison shown stay as they were."""
        picked = {**self.ab, side: entry_id}
        a, b = picked["A"], picked["B"]
        if a is None or b is None:  # one side picked: nothing to compare yet
            self.ab = picked
            self.ab_changed.emit()
            return False
        return self.compare_entries(a, b)  # sets both sides only when they can be compared

    def compare_entries(self, a_id: int, b_id: int) -> bool:
        """Put two history entries side by side; False (and a plain message) when they cannot be compared."""
        a, b = self.runs.get(a_id), self.runs.get(b_id)
        if a is None or b is None:
            self.post_message("that run is no longer in the history", level="info")
            return False
        why = why_not_comparable(a, b)
        if why is not None:
            self.post_message(why, "pick two runs of the same video and queries", level="warning")
            return False
        assert a.run is not None and b.run is not None
        self.ab = {"A": a.id, "B": b.id}
        self.ab_changed.emit()
        self.compare(a.run, b.run)
        return True

    def compare(self, a: RunData, b: RunData) -> None:
        """Put two runs side by side (with ground truth when it fits both)."""
        gt = self.matching_ground_truth() if a.tracks.shape == b.tracks.shape else None
        self.comparison_changed.emit(Comparison(a, b, gt))

    # -- reports -----------------------------------------------------------------------------------------
    def set_report(self, report: Report | None, recorder: Any = None, analysis: Analysis | None = None) -> None:
        """The current report, its analysis (made here when not given) and the recorder that can rebuild it
        with tracks."""
        self.report = report
        self.analysis = analysis if analysis is not None or report is None else analyse(report)
        self.recorder = recorder
        self.report_changed.emit()

    def replay_report(self, report: Report, source: str, analysis: Analysis | None = None) -> None:
        """A report opened from the file ``source`` becomes the current one and is replayed in the charts
        (analysis: of its whole file, a bench's growth findings included; made here when not given)."""
        self.set_report(report, analysis=analysis)
        self.report_replayed.emit((report, source))

    # -- configuration and messages ----------------------------------------------------------------------------
    def set_config(self, config: RunConfig, announce: bool = True) -> None:
        """The run configuration; ``announce`` tells the toggles (False when they made the change)."""
        self.config = config
        if announce:
            self.config_changed.emit(config)

    def post_message(self, text: str, suggestion: str | None = None, level: str = "error") -> None:
        """A problem to show in the window (never a modal dialog)."""
        self.last_message = Message(text, suggestion, level)
        self.message_posted.emit(self.last_message)
