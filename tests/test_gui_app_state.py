"""The app's state never lies (issue 20, items 3-6 and 8): the Runs list changes one row per run, a refused
A/B pick changes nothing, a run toggled mid-run is diagnosed by what each batch ran with, exports agree on
what is current, and text fits where it is shown."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("pytestqt")

from gui.history import HistoryEntry  # noqa: E402
from gui.model import RunData  # noqa: E402
from gui.panels.history import HistoryPanel  # noqa: E402
from gui.panels.runs_model import COL  # noqa: E402
from gui.state import AppState  # noqa: E402

NUM_FRAMES = 6


def _entry(state: AppState, points: int = 2, video: str = "a.mp4") -> HistoryEntry:
    queries = np.stack([np.zeros(points), np.arange(points) + 4.0, np.full(points, 4.0)], axis=1).astype(np.float32)
    run = RunData("r", {}, queries, np.repeat(queries[:, None, 1:], NUM_FRAMES, axis=1),
                  np.ones((points, NUM_FRAMES), bool))
    return state.new_entry(video=video, tracker="corrtrack", settings={"precision": ("fp32",)}, machine="CPU",
                           status="finished", source="run", run=run, num_frames=NUM_FRAMES)


def _column(panel: HistoryPanel, column: str) -> list[str]:
    model = panel.table.model()
    return [model.index(r, COL[column]).data() or "" for r in range(model.rowCount())]


# -- item 3: a new run costs the Runs list one row, not a rebuild of all of them ---------------------------
def test_a_new_run_inserts_one_row_and_rebuilds_none_at_60_entries(qtbot):
    state = AppState()
    panel = HistoryPanel(state)
    qtbot.addWidget(panel)
    for _ in range(60):
        state.add_entry(_entry(state), compare_previous=False, select=True)
    model = panel.table.model()
    assert model.rowCount() == state.runs.limit  # 50 kept of 60
    counts = {"reset": 0, "inserted": [], "removed": [], "cells": 0}
    model.modelReset.connect(lambda: counts.__setitem__("reset", counts["reset"] + 1))
    model.rowsInserted.connect(lambda _, first, last: counts["inserted"].append(last - first + 1))
    model.rowsRemoved.connect(lambda _, first, last: counts["removed"].append(last - first + 1))

    def changed(top, bottom, *_):
        counts["cells"] += (bottom.row() - top.row() + 1) * (bottom.column() - top.column() + 1)

    model.dataChanged.connect(changed)
    newest = _entry(state)
    state.add_entry(newest, compare_previous=False, select=True)
    assert counts["reset"] == 0 and counts["inserted"] == [1] and counts["removed"] == [1]
    assert counts["cells"] <= 2 * len(COL)  # the marks of the rows selected before and now, nothing else
    assert panel.entry_ids() == [e.id for e in state.runs] and panel.entry_ids()[-1] == newest.id
    assert _column(panel, "#")[-1] == f"▶ {newest.id}" and not _column(panel, "#")[-2].startswith("▶")
