"""The app state and the one worker idiom, on their own: signals on change, the worker's loop, backpressure."""

from __future__ import annotations

import threading

import numpy as np
import pytest

pytest.importorskip("pytestqt")
from engine.api import RunConfig, as_report  # noqa: E402
from gui.model import RunData  # noqa: E402
from gui.state import AppState, Comparison, Message  # noqa: E402
from gui.worker import GeneratorWorker, start_worker  # noqa: E402

WAIT_MS = 5000
NUM_FRAMES, SIZE = 4, 16


def _run(queries: np.ndarray, shift: float = 0.0) -> RunData:
    tracks = np.repeat(queries[:, None, 1:], NUM_FRAMES, axis=1) + shift
    return RunData("r", {}, queries, tracks, np.ones((len(queries), NUM_FRAMES), bool))


def _recorder(state: AppState) -> list[str]:
    """The names of the state's signals, in the order they fire."""
    fired: list[str] = []
    for name in ("video_changed", "queries_changed", "current_changed", "tracks_updated", "report_changed",
                 "report_replayed", "comparison_changed", "config_changed", "message_posted"):
        getattr(state, name).connect(lambda *_, n=name: fired.append(n))
    return fired


def test_state_announces_each_change(qtbot):
    state = AppState(RunConfig())
    fired = _recorder(state)
    state.set_video(np.zeros((NUM_FRAMES, SIZE, SIZE, 3), np.uint8), "clip.mp4", {"fps": 10.0})
    # report_changed: the Diagnosis tab lets go of the previous video's report
    assert fired == ["video_changed", "current_changed", "report_changed"] and state.video_path == "clip.mp4"
    q = np.array([[0, 4.0, 4.0], [0, 8.0, 8.0]], np.float32)
    state.set_queries(q)
    state.set_current(_run(q))
    state.update_tracks()
    state.set_report(as_report({"format": "trackscope-report", "version": 2, "label": "x", "environment": {},
                                "config": {}, "stages": [], "runs": [], "totals": {}}))
    assert state.analysis is not None and state.analysis.findings == ()  # analysed when it is set
    state.set_config(RunConfig(precision="bf16"))
    state.set_config(RunConfig(precision="fp16"), announce=False)  # the toggles made it: nothing to tell them
    state.post_message("no video", "open one", "warning")
    assert fired[3:] == ["queries_changed", "current_changed", "tracks_updated", "report_changed",
                         "config_changed", "message_posted"]
    assert state.config.precision == "fp16" and state.last_message == Message("no video", "open one", "warning")


def test_new_queries_drop_a_run_of_other_queries(qtbot):
    state = AppState()
    q = np.array([[0, 4.0, 4.0]], np.float32)
    state.set_queries(q)
    state.set_current(_run(q))
    state.set_queries(q.copy())  # the same queries: the run stays
    assert state.current is not None
    state.set_queries(q + 1)
    assert state.current is None


def test_history_compares_runs_of_the_same_shape_with_fitting_ground_truth(qtbot):
    state = AppState()
    state.set_video(np.zeros((NUM_FRAMES, SIZE, SIZE, 3), np.uint8), None, {})
    q = np.array([[0, 4.0, 4.0], [0, 8.0, 8.0]], np.float32)
    state.set_queries(q)
    gt = {"tracks": np.repeat(q[:, None, 1:], NUM_FRAMES, axis=1), "visible": np.ones((2, NUM_FRAMES), bool),
          "query_t": np.zeros(2)}
    state.set_ground_truth(gt)
    comparisons: list[Comparison] = []
    state.comparison_changed.connect(comparisons.append)
    first, second, other = _run(q), _run(q, 0.5), _run(q[:1])
    for run in (first, other, second):
        state.add_history(run)
    assert len(comparisons) == 1 and comparisons[0].a is first and comparisons[0].b is second
    assert comparisons[0].ground_truth is gt
    state.set_queries(q + 3)  # the ground truth no longer passes through the queries
    assert state.matching_ground_truth() is None


def test_worker_loop_body_runs_without_a_thread():
    values: list[int] = []
    returned: list[object] = []

    def work():
        yield 1
        yield 2
        return "done"

    worker = GeneratorWorker(work, max_in_flight=10)
    worker.yielded.connect(values.append)
    worker.returned.connect(returned.append)
    worker.run()
    assert values == [1, 2] and returned == ["done"]


def test_worker_relays_errors_and_plain_results_from_its_thread(qtbot):
    def fail():
        raise ValueError("bad input")

    errors: list[Exception] = []
    handle = start_worker(fail, "test-worker", connect=lambda w, t: w.errored.connect(errors.append))
    qtbot.waitUntil(lambda: bool(errors) and not handle.running, timeout=WAIT_MS)
    assert isinstance(errors[0], ValueError) and threading.current_thread() is threading.main_thread()
    results: list[object] = []
    handle = start_worker(lambda: 42, "test-worker", connect=lambda w, t: w.returned.connect(results.append))
    qtbot.waitUntil(lambda: results == [42] and not handle.running, timeout=WAIT_MS)


def test_worker_waits_for_the_gui_and_stops_on_quit(qtbot):
    produced: list[int] = []
    seen: list[int] = []
    stopped = threading.Event()

    def work():
        for i in range(100):
            produced.append(i)
            yield i

    handle = start_worker(work, "test-worker", connect=lambda w, t: w.yielded.connect(seen.append))
    qtbot.waitUntil(lambda: len(seen) == handle.worker._max_in_flight, timeout=WAIT_MS)  # never handled()
    qtbot.wait(200)
    assert len(produced) <= handle.worker._max_in_flight + 1  # backpressure: it waits for the GUI
    assert handle.join()
    assert handle.worker.aborted and len(produced) < 100  # stopped at its next value
    produced.clear()
    handle = start_worker(work, "test-worker", on_quit=stopped.set)
    assert handle.join()  # told through on_quit, this work winds down by itself: all its values, no waiting
    assert stopped.is_set() and len(produced) == 100
