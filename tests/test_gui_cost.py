"""The Diagnosis tab's what-if on a report without a cost model: counted in a worker, then projected."""

from __future__ import annotations

import dataclasses

import pytest

pytest.importorskip("pytestqt")

from engine.analysis import cost  # noqa: E402
from gui.controllers.cost import COUNT_THREAD_NAME, CostController  # noqa: E402
from gui.panels.diagnosis import COUNT_WAITING, COUNTING, NO_COST, DiagnosisPanel  # noqa: E402
from tests.test_count_work import recorded  # noqa: E402

#: generous: the counted pass is a real (small) CPU run; the test never depends on how fast it is
COUNT_TIMEOUT_MS = 120_000


class InThreadCount:
    """The child process's work done in the worker thread itself: the same counting, no process start-up
    (the window test below takes the real child-process path)."""

    def __init__(self, device: str):
        self.device = device

    def run(self, report):
        from engine.workflows.count import ready_for_whatif

        return ready_for_whatif(report, device=self.device)

    def stop(self) -> None:
        pass


@pytest.fixture
def counting_panel(qtbot):
    cost.clear_cache()
    panel = DiagnosisPanel()
    qtbot.addWidget(panel)
    controller = CostController(panel, process=InThreadCount)
    controller.requests = []  # every count the panel asked for
    panel.count_requested.connect(controller.requests.append)
    yield panel, controller
    controller.shutdown()
    cost.clear_cache()


def test_whatif_fills_in_after_counting_in_a_worker(qtbot, counting_panel):
    panel, controller = counting_panel
    report = recorded()
    assert not report.work
    panel.set_report(report)
    assert panel.whatif_summary.text() == COUNTING and panel.projection is None  # the GUI thread did not count
    assert controller.busy and controller._job is not None
    assert controller._job.thread.objectName() == COUNT_THREAD_NAME
    qtbot.waitUntil(lambda: panel.projection is not None, timeout=COUNT_TIMEOUT_MS)
    assert panel.report is not report and panel.report.work["embed"].flops > 0
    assert panel.projected_ms()["embed"] > 0
    assert "counted on demand on cpu" in panel.assumptions.text()
    assert "Tesla T4" in panel.whatif_summary.text()
    panel.set_target("A100 80GB SXM")  # another target projects the counted report; nothing is counted again
    assert controller.requests == [report] and "A100" in panel.whatif_summary.text()


def test_a_report_that_cannot_be_counted_says_why_in_the_panel(qtbot, counting_panel):
    panel, controller = counting_panel
    report = recorded()
    missing = dataclasses.replace(report, config=report.config.with_changes(tracker="no_such_module:factory"))
    panel.set_report(missing)
    qtbot.waitUntil(lambda: "could not be counted" in panel.whatif_summary.text(), timeout=COUNT_TIMEOUT_MS)
    assert "cannot rebuild tracker" in panel.whatif_summary.text() and panel.projection is None
    panel.gpu_combo.setCurrentText("A100 80GB SXM")  # a failed count is not retried on every target change
    assert controller.requests == [missing] and "could not be counted" in panel.whatif_summary.text()


def test_a_late_count_for_a_report_no_longer_shown_is_dropped(qtbot, counting_panel):
    panel, controller = counting_panel
    report = recorded()
    with qtbot.waitSignal(controller.answered, timeout=COUNT_TIMEOUT_MS) as answer:
        panel.set_report(report)
        panel.set_report(None)  # the user moved on before the count finished
    assert answer.args[0].original is report and answer.args[0].counted is not None
    assert panel.report is None and panel.projection is None


def test_without_a_controller_the_panel_says_there_is_no_cost_model(qtbot):
    panel = DiagnosisPanel()
    qtbot.addWidget(panel)
    panel.set_report(recorded())
    assert panel.whatif_summary.text() == NO_COST


@pytest.mark.slow
def test_a_live_run_in_the_window_gets_its_whatif(qtbot, tmp_path):
    """A run made in the app (no cost model recorded): the Diagnosis tab counts it in a child process (as
    the app does), then projects it."""
    from PySide6.QtCore import QSettings

    from engine.core.config import RunConfig
    from gui.main_window import MainWindow
    from gui.settings import Settings
    from tests.helpers import moving_square_video
    from tests.test_count_work import MLP

    settings = Settings(QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat))
    w = MainWindow(settings=settings, sampler=None, config=RunConfig(tracker=MLP, device="cpu", points_per_batch=4))
    qtbot.addWidget(w)
    w.set_video(moving_square_video(6, 32), fps=10.0)
    w.show()
    with qtbot.waitSignal(w.run_finished, timeout=COUNT_TIMEOUT_MS):
        assert w.start_run()
    assert w.report is not None and not w.report.work
    w.tabs.setCurrentWidget(w.diagnosis)  # the panel gets the report when shown, and asks for its cost
    qtbot.waitUntil(lambda: w.diagnosis.projection is not None, timeout=COUNT_TIMEOUT_MS)
    assert w.diagnosis.projected_ms()["embed"] > 0
    assert "counted on demand" in w.diagnosis.assumptions.text()
    w.close()
    assert not w.cost.busy


def test_the_unstaged_row_shows_the_time_it_keeps(qtbot):
    """Was: the (unstaged) row read '—' while the run's 8.26 ms outside every stage was kept in the total."""
    from tests.test_count_work import unstaged_report

    panel = DiagnosisPanel()
    qtbot.addWidget(panel)
    panel.set_report(unstaged_report())
    table = panel.whatif_table
    row = next(r for r in range(table.rowCount()) if table.item(r, 0).text() == "(unstaged)")
    assert table.item(row, 3).text() == "8.3" and table.item(row, 4).text() == "8.3"


def test_counting_waits_for_a_tracking_run_to_end(qtbot):
    """A counted pass on the same cores would skew the run's timings: it starts once the run has ended."""
    cost.clear_cache()
    running = [True]
    panel = DiagnosisPanel()
    qtbot.addWidget(panel)
    controller = CostController(panel, is_running=lambda: running[0], process=InThreadCount)
    try:
        panel.set_report(recorded())
        assert not controller.busy and panel.whatif_summary.text() == COUNT_WAITING
        running[0] = False
        controller.resume()  # the window calls it when a run ends
        assert panel.whatif_summary.text() == COUNTING
        qtbot.waitUntil(lambda: panel.projection is not None, timeout=COUNT_TIMEOUT_MS)
    finally:
        controller.shutdown()
        cost.clear_cache()
