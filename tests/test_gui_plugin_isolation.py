"""The app survives misbehaving plugins: Stop and close during a hung call, sys.exit, writes into frames."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("pytestqt")
from PySide6.QtCore import QSettings  # noqa: E402

from engine.core.config import RunConfig  # noqa: E402
from gui.main_window import MainWindow  # noqa: E402
from gui.settings import Settings  # noqa: E402
from gui.worker import GeneratorWorker  # noqa: E402
from tests.helpers import moving_square_video  # noqa: E402
from tests.plugins import misbehaving  # noqa: E402

MISBEHAVING = "tests.plugins.misbehaving:"
#: generous waits (a loaded machine); fixed, each of these takes about a second
WAIT_MS = 20_000


@pytest.fixture(autouse=True)
def release_hung_plugins():
    misbehaving.RELEASE.clear()
    misbehaving.ENTERED.clear()
    yield
    misbehaving.RELEASE.set()


def _window(qtbot, tmp_path, plugin: str) -> MainWindow:
    settings = Settings(QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat))
    w = MainWindow(settings=settings, sampler=None, config=RunConfig(tracker=MISBEHAVING + plugin, device="cpu"))
    qtbot.addWidget(w)
    w.set_video(moving_square_video(6, 32), fps=10.0)
    w.set_grid(2)
    w.show()
    return w


def test_stop_during_a_hung_plugin_abandons_it_with_a_banner(qtbot, tmp_path):
    w = _window(qtbot, tmp_path, "hangs")
    assert w.start_run()
    qtbot.waitUntil(misbehaving.ENTERED.is_set, timeout=WAIT_MS)
    with qtbot.waitSignal(w.controller.failed, timeout=WAIT_MS) as blocker:
        w.stop_run()  # before: nothing happened and nothing was said
    assert "abandoned" in blocker.args[0].message
    qtbot.waitUntil(lambda: not w.controller.running, timeout=WAIT_MS)
    assert w.banner.isVisible() and "after Stop: abandoned" in w.banner.message
    assert w.run_button.isEnabled() and not w.controller._outlived  # the QThread ended; a new run may start
    w.close()


def test_close_during_a_hung_plugin_ends_the_worker_thread(qtbot, tmp_path):
    w = _window(qtbot, tmp_path, "hangs")
    assert w.start_run()
    qtbot.waitUntil(misbehaving.ENTERED.is_set, timeout=WAIT_MS)
    thread = w.controller._thread
    w.close()  # before: a 10 s freeze, then the QThread was left running (Qt aborts when it is destroyed)
    assert not w.controller.running
    assert thread.isFinished() and not w.controller._outlived


def test_sys_exit_in_a_plugin_leaves_the_app_running_with_a_banner(qtbot, tmp_path):
    w = _window(qtbot, tmp_path, "exits")
    with qtbot.waitSignal(w.controller.failed, timeout=WAIT_MS) as blocker:
        assert w.start_run()
    assert "sys.exit(3)" in blocker.args[0].message
    qtbot.waitUntil(lambda: not w.controller.running, timeout=WAIT_MS)
    assert w.isVisible() and w.banner.isVisible() and "sys.exit(3)" in w.banner.message
    assert w.run_button.isEnabled()
    w.close()


def test_plugin_writing_into_its_frames_leaves_the_video_shown(qtbot, tmp_path):
    w = _window(qtbot, tmp_path, "writes_frames")
    before = w.frames.copy()
    with qtbot.waitSignal(w.controller.finished_run, timeout=WAIT_MS):
        assert w.start_run()
    np.testing.assert_array_equal(w.frames, before)  # before: zeroed, a black video
    qtbot.waitUntil(lambda: not w.controller.running, timeout=WAIT_MS)
    w.close()


def test_worker_reports_system_exit_from_its_work_instead_of_raising(qtbot):
    def work():
        yield 1
        raise SystemExit(3)

    worker = GeneratorWorker(work)
    errors: list = []
    worker.errored.connect(errors.append)
    worker.handled()
    worker.run()  # the loop body, on this thread: a SystemExit here would end the test process
    assert len(errors) == 1 and isinstance(errors[0], SystemExit)


def test_close_during_a_batch_that_does_not_return_leaves_it_behind_instead_of_waiting(qtbot, tmp_path, monkeypatch):
    """A batch run in the worker thread itself (a built-in tracker, or a plugin under instrumentation) that
    does not return: close waits CLOSE_WAIT_MS, not SHUTDOWN_WAIT_MS, and keeps the thread until it ends."""
    from engine.trackers import guard
    from gui import worker

    monkeypatch.setattr(guard, "_instrumented", lambda: True)  # the call runs in the worker's own thread
    waits = []
    join = worker.WorkerHandle.join
    monkeypatch.setattr(worker.WorkerHandle, "join", lambda self, wait_ms=worker.SHUTDOWN_WAIT_MS:
                        waits.append(wait_ms) or join(self, wait_ms))
    w = _window(qtbot, tmp_path, "hangs")
    assert w.start_run()
    qtbot.waitUntil(misbehaving.ENTERED.is_set, timeout=WAIT_MS)
    thread = w.controller._thread
    w.close()  # before: a 10 s wait, then the same abandonment
    assert waits == [worker.CLOSE_WAIT_MS] and worker.CLOSE_WAIT_MS <= 2000
    assert w.controller.abandoned == 1 and not thread.isFinished()  # kept, never destroyed while running
    misbehaving.RELEASE.set()
    qtbot.waitUntil(lambda: w.controller.abandoned == 0, timeout=WAIT_MS)
