"""Issue 12: GUI-thread work at a run's end and in the A/B view kept small (behaviour, never timing)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("pytestqt")
from PySide6.QtCore import QSettings  # noqa: E402

from engine.core.config import RunConfig  # noqa: E402
from gui.main_window import MainWindow  # noqa: E402
from gui.model import RunData  # noqa: E402
from gui.panels.ab_view import ABView  # noqa: E402
from gui.settings import Settings  # noqa: E402
from tests.helpers import moving_square_video  # noqa: E402

RUN_TIMEOUT_MS = 20_000


@pytest.fixture
def window(qtbot, tmp_path):
    settings = Settings(QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat))
    w = MainWindow(settings=settings, sampler=None, config=RunConfig(tracker="lk", points_per_batch=4))
    qtbot.addWidget(w)
    w.set_video(moving_square_video(8, 48), fps=10.0)
    w.show()
    yield w
    w.close()


def test_a_finished_run_redraws_its_tracks_once_per_batch_not_again_at_the_end(qtbot, window):
    """The last batch already wrote and drew every point: Finished must not copy [N, T, 2] again and redraw
    the view on the GUI thread (it did: one more full copy and redraw at the end of every run)."""
    updates, batches = [], []
    window.state.tracks_updated.connect(lambda: updates.append(1))
    window.controller.batch_done.connect(batches.append)
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS) as blocker:
        assert window.start_run()
    run = blocker.args[0]
    assert len(batches) == -(-len(window.queries) // 4) > 1
    assert len(updates) == len(batches)  # before: len(batches) + 1
    assert run.complete and np.isfinite(window.view.tracks).all()
    qtbot.waitUntil(lambda: not window.controller.running, timeout=5000)


def test_keep_done_still_fills_points_the_batches_did_not_deliver(qtbot, window):
    """A Finished/Failed whose arrays hold points the shown run lacks still copies them (and redraws once)."""
    runs = window.runs
    n, t = 3, len(window.frames)
    window.state.current = RunData.empty("x", {}, np.zeros((n, 3), np.float32), t)
    window.state.current.tracks[0] = 1.0  # point 0 arrived in a batch; 1 and 2 did not
    tracks = np.full((n, t, 2), np.nan, np.float32)
    tracks[:2] = 2.0  # the final arrays have points 0 and 1
    visible = np.ones((n, t), bool)
    updates = []
    window.state.tracks_updated.connect(lambda: updates.append(1))
    runs._keep_done(tracks, visible)
    shown = window.state.current.tracks
    assert (shown[1] == 2.0).all() and np.isnan(shown[2]).all() and len(updates) == 1
    runs._keep_done(tracks, visible)  # nothing new: no copy, no redraw
    assert len(updates) == 1


def test_ab_view_draws_uint8_frames_without_levels(qtbot):
    """Explicit levels=(0, 255) made pyqtgraph rescale every pixel of both sides per frame (7 ms per 976x548
    frame); None, as the video view, builds the QImage straight from the uint8 array."""
    frames = np.random.default_rng(0).integers(0, 255, (4, 24, 32, 3), dtype=np.uint8)
    queries = np.array([[0, 5, 5], [0, 10, 12]], np.float32)
    tracks = np.tile(queries[:, None, 1:], (1, 4, 1))
    a = RunData("A", {"tracker": "lk"}, queries, tracks, np.ones((2, 4), bool))
    b = RunData("B", {"tracker": "lk"}, queries, tracks + 1.0, np.ones((2, 4), bool))
    view = ABView()
    qtbot.addWidget(view)
    view.set_frames(frames)
    view.set_runs(a, b)
    view.show()
    view.set_frame(2)
    for side in (view.side_a, view.side_b):
        assert side.image.image is not None and side.image.image.shape == frames[2].shape
        assert side.image.getLevels() is None


def test_the_first_window_freezes_the_startup_heap_once(qtbot, tmp_path, monkeypatch):
    """A full garbage collection walks every tracked object holding the GIL (140-290 ms with torch and
    pyqtgraph loaded), stalling the event loop from whichever thread triggers it: the first window moves the
    objects alive at startup out of its reach, once; later objects are still collected."""
    import gc

    import gui.main_window as mw

    monkeypatch.setattr(mw, "_heap_frozen", False)
    gc.unfreeze()
    try:
        before = type("Before", (), {})()  # a tracked object alive when the first window is built
        assert gc.is_tracked(before)
        settings = Settings(QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat))
        w = MainWindow(settings=settings, sampler=None)
        qtbot.addWidget(w)
        frozen = gc.get_freeze_count()
        assert frozen > 0 and not any(o is before for o in gc.get_objects(generation=2))
        w2 = MainWindow(settings=settings, sampler=None)  # a second window: no second collect-and-freeze
        qtbot.addWidget(w2)
        assert gc.get_freeze_count() <= frozen  # (frozen objects freed by reference counting leave it)
        assert any(o is before for o in gc.get_objects(generation=2)) is False
        later = type("Later", (), {})()
        gc.collect()
        assert any(o is later for o in gc.get_objects(generation=2))  # objects made later are still collected
        w.close()
        w2.close()
    finally:
        gc.unfreeze()
