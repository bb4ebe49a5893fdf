"""The background compile: the switch's logic with fake jobs (slow, failing, succeeding), CorrTrack running
eagerly until the job is done and compiled after (torch.compile replaced by a stand-in: no Inductor here),
the per-run label in reports and the bench note, the --compile flag and the status lines."""

from __future__ import annotations

import argparse
import threading
from pathlib import Path

import numpy as np
import pytest
import torch

from engine.core.config import RunConfig
from engine.core.flags import CORRTRACK_COMPILE
from engine.report.recorder import RunRecorder
from engine.report.schema import Report
from engine.run.session import Finished, Session
from engine.trackers.compile_cache import INDUCTOR_CACHE_ENV, CompileCache, environment_key
from engine.trackers.compiled_switch import (
    COMPILED,
    COMPILING,
    FAILED,
    IDLE,
    THREAD_NAME,
    CompiledSwitch,
    CompileStatus,
    RetryLater,
    compile_status_text,
)
from engine.trackers.corrtrack import CorrTrackNet, CorrTrackTracker
from engine.trackers.corrtrack.model import CorrTrackConfig
from engine.trackers.corrtrack.tracker import compile_mode
from engine.workflows.bench import compile_note

TINY = CorrTrackConfig(feature_dim=8, widths=(8, 8, 8), hidden_dim=16, mixer_dilations=(1, 2), num_iters=2)
WAIT_S = 30  # generous: the job threads only wait on events the tests set


# -- the switch alone --------------------------------------------------------------------------------------
def test_keys_become_ready_only_when_the_background_job_succeeds() -> None:
    switch = CompiledSwitch("background")
    release = threading.Event()
    threads: list[str] = []

    def job() -> bool:
        threads.append(threading.current_thread().name)
        assert release.wait(WAIT_S)
        return True

    seen: list[CompileStatus] = []
    switch.on_change(seen.append)
    assert switch.request(["a", "b"], job)
    assert not switch.request(["a", "b"], job)  # one job at a time
    assert switch.busy and not switch.ready("a") and switch.status.label == "eager, compiling in the background"
    release.set()
    assert switch.wait(WAIT_S)
    assert switch.ready("a") and switch.ready("b") and not switch.ready("c")
    assert threads == [THREAD_NAME]
    status = switch.status
    assert status.state == COMPILED and status.from_cache and status.label == "compiled (from cache)"
    assert [s.state for s in seen] == [COMPILING, COMPILED]
    assert not switch.request(["a"], job)  # ready: nothing to do


def test_a_failing_job_leaves_eager_for_good_and_says_why() -> None:
    switch = CompiledSwitch("background")

    def job() -> bool:
        raise RuntimeError("inductor: no C compiler\nmore lines")

    assert switch.request(["a"], job) and switch.wait(WAIT_S)
    status = switch.status
    assert status.state == FAILED and status.label == "eager"
    assert status.error == "RuntimeError: inductor: no C compiler"
    assert not switch.ready("a")
    assert not switch.request(["b"], lambda: True)  # never again
    assert not switch.inline(["b"], lambda: True)


def test_a_job_asked_to_retry_leaves_nothing_ready_and_runs_again() -> None:
    switch = CompiledSwitch("background")
    attempts: list[int] = []

    def job() -> bool:
        attempts.append(1)
        if len(attempts) == 1:
            raise RetryLater("a flag changed")
        return False

    assert switch.request(["a"], job) and switch.wait(WAIT_S)
    assert switch.status.state == IDLE and not switch.ready("a")
    assert switch.request(["a"], job) and switch.wait(WAIT_S)
    assert switch.ready("a") and switch.status.label == "compiled" and len(attempts) == 2


def test_inline_runs_the_job_in_the_callers_thread_and_off_mode_never_starts_one() -> None:
    switch = CompiledSwitch("on")
    names: list[str] = []
    assert switch.inline(["k"], lambda: names.append(threading.current_thread().name) or False)
    assert names == [threading.current_thread().name] and switch.ready("k")
    assert not switch.request(["j"], lambda: True)  # "on" never compiles in the background
    off = CompiledSwitch("off")
    assert not off.request(["k"], lambda: True) and off.status.label == "eager"
    with pytest.raises(ValueError, match="compile mode"):
        CompiledSwitch("sometimes")


# -- CorrTrack with the switch, on the CPU with a stand-in for torch.compile -------------------------------
def _frames(num_frames: int = 4, size: int = 48) -> np.ndarray:
    rng = np.random.default_rng(3)
    return rng.integers(0, 256, (num_frames, size, size, 3), dtype=np.uint8)


QUERIES = np.array([[0, 10.0, 12.0], [1, 30.0, 20.0], [2, 24.0, 40.0]], np.float32)


class _StandIn:
    """torch.compile and dynamo's run-only mode replaced: the "compile" waits for ``release`` (it takes time)
    or raises ``error``; calls are recorded with their thread."""

    def __init__(self, error: Exception | None = None):
        self.release = threading.Event()
        self.error = error
        self.compiled: list[tuple[str, str]] = []  # (function, thread) of calls through the compiled function
        self.run_only: list[str] = []  # functions called through run-only wrappers (the run's compiled code)

    def compile(self, fn, dynamic=False):
        def compiled(*args, **kwargs):
            assert self.release.wait(WAIT_S)
            if self.error is not None:
                raise self.error
            self.compiled.append((fn.__name__, threading.current_thread().name))
            return fn(*args, **kwargs)
        return compiled

    def run(self, fn):
        def run_only(*args, **kwargs):
            self.run_only.append(fn.__name__)
            return fn(*args, **kwargs)
        return run_only


def _tracker(monkeypatch, tmp_path: Path, stand_in: _StandIn, mode: str = "background") -> CorrTrackTracker:
    tracker = CorrTrackTracker(model=CorrTrackNet(TINY), compile=mode, compile_cache_root=tmp_path,
                               compile_backend="dynamo")
    monkeypatch.setattr(tracker, "_compiling", lambda device: True)  # as on CUDA
    monkeypatch.setattr(torch, "compile", stand_in.compile)
    monkeypatch.setattr(torch._dynamo, "run", stand_in.run)
    folder = CompileCache(tmp_path, environment_key("cpu")).folder
    monkeypatch.setenv(INDUCTOR_CACHE_ENV, str(folder))  # restored after the test
    return tracker


def _run(tracker: CorrTrackTracker, precision: str = "fp32") -> Finished:
    config = RunConfig(device="cpu", precision=precision, points_per_batch=2)
    last = Session(_frames(), QUERIES, config, tracker=tracker).run()
    assert isinstance(last, Finished), last
    return last


def test_runs_are_eager_until_the_background_compile_is_done_then_compiled(monkeypatch, tmp_path: Path) -> None:
    stand_in = _StandIn()
    tracker = _tracker(monkeypatch, tmp_path, stand_in)
    recorder = RunRecorder()
    config = RunConfig(device="cpu", precision="fp32", points_per_batch=2)
    first_events = list(Session(_frames(), QUERIES, config, tracker=tracker).events())
    assert isinstance(first_events[-1], Finished)
    assert stand_in.run_only == []  # the run went on eagerly while the job waits
    assert tracker.describe()["compile"] == "eager, compiling in the background"
    stand_in.release.set()
    assert tracker.switch.wait(WAIT_S)
    assert stand_in.compiled and {t for _, t in stand_in.compiled} == {THREAD_NAME}
    assert {f for f, _ in stand_in.compiled} >= {"features", "refine_step", "ncc_polish"}
    assert not tracker.last_track_compiled
    second_events = list(Session(_frames(), QUERIES, config, tracker=tracker).events())
    assert {"features", "refine_step", "ncc_polish"} <= set(stand_in.run_only)
    assert not tracker.last_track_compiled  # its last batch (1 point) is a variant of its own: eager, asked for
    np.testing.assert_array_equal(first_events[-1].tracks, second_events[-1].tracks)  # same functions underneath
    for event in first_events + second_events:
        recorder.add(event)
    report = Report.from_dict(recorder.build().to_dict())  # the per-run labels survive a file round trip
    assert [r.extra.get("compile") for r in report.runs] == ["eager", "compiled"]
    assert "compile_s" in report.runs[1].extra and "compile_s" not in report.runs[0].extra
    assert report.tracker.details["compile_mode"] == "background"
    assert report.runs[0].cold and compile_note(report).startswith("compiled, compile ")  # the warm runs' note
    # the manifest says what was compiled, for the next start
    cache = CompileCache(tmp_path, environment_key("cpu"))
    cache.load()
    assert [v.precision for v in cache.variants] == ["fp32"]


def test_the_last_smaller_batch_is_its_own_variant(monkeypatch, tmp_path: Path) -> None:
    stand_in = _StandIn()
    stand_in.release.set()
    tracker = _tracker(monkeypatch, tmp_path, stand_in)
    _run(tracker)  # 3 points in batches of 2: a 2-point and a 1-point batch
    assert tracker.switch.wait(WAIT_S)
    ready = {k[-1] for k in tracker.switch._ready if k[0] == "track"}
    assert 2 in ready  # the first batch's job; the 1-point batch asks for its own once that one is done
    _run(tracker)
    assert tracker.switch.wait(WAIT_S)
    assert {k[-1] for k in tracker.switch._ready if k[0] == "track"} == {1, 2}


def test_a_failing_background_compile_leaves_the_tracker_eager_and_says_why(monkeypatch, tmp_path: Path) -> None:
    stand_in = _StandIn(error=RuntimeError("triton: no compiler found"))
    stand_in.release.set()
    tracker = _tracker(monkeypatch, tmp_path, stand_in)
    eager = _run(tracker)
    assert tracker.switch.wait(WAIT_S)
    after = _run(tracker)
    assert stand_in.run_only == []
    info = tracker.describe()
    assert info["compile"] == "eager" and "triton: no compiler found" in info["compile_error"]
    assert "the compile failed" in compile_status_text(info)
    np.testing.assert_array_equal(eager.tracks, after.tracks)


def test_a_tf32_batch_during_the_job_makes_it_retry(monkeypatch, tmp_path: Path) -> None:
    tracker = _tracker(monkeypatch, tmp_path, _StandIn())
    job = tracker._compile_job(torch.device("cpu"), "fp32", (4, 48, 48, 3), 16, 2, threaded=True)
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", True)
    with pytest.raises(RetryLater):
        job()


def test_tf32_and_quantised_modes_are_not_compiled_in_the_background(monkeypatch, tmp_path: Path) -> None:
    stand_in = _StandIn()
    stand_in.release.set()
    tracker = _tracker(monkeypatch, tmp_path, stand_in)
    monkeypatch.setattr("engine.core.precision.check_runnable", lambda mode, device: None)
    _run(tracker, precision="tf32")
    assert not tracker.switch.busy and stand_in.compiled == []


def test_on_mode_compiles_before_the_batch_in_the_run_thread(monkeypatch, tmp_path: Path) -> None:
    stand_in = _StandIn()
    stand_in.release.set()
    tracker = _tracker(monkeypatch, tmp_path, stand_in, mode="on")
    _run(tracker)
    assert {t for _, t in stand_in.compiled} == {threading.current_thread().name}
    assert {"features", "refine_step", "ncc_polish"} <= set(stand_in.run_only)  # the first run already compiled
    assert tracker.describe()["compile"] == "compiled"


# -- settings, flags and lines ---------------------------------------------------------------------------
@pytest.mark.parametrize(("value", "env", "mode"), [
    (None, {}, "off"), (None, {CORRTRACK_COMPILE: "1"}, "on"), (None, {CORRTRACK_COMPILE: "Background"}, "background"),
    (None, {CORRTRACK_COMPILE: "off"}, "off"), (True, {}, "on"), (False, {CORRTRACK_COMPILE: "1"}, "off"),
    ("background", {}, "background"),
])
def test_the_compile_mode_comes_from_the_argument_or_the_environment(value, env, mode) -> None:
    assert compile_mode(value, env) == mode


def test_a_wrong_compile_word_is_refused() -> None:
    with pytest.raises(ValueError, match="off, on, background"):
        compile_mode("fast")


@pytest.mark.parametrize("verb", ["bench", "track"])
def test_the_cli_flag_parses_and_sets_the_variable(verb: str, monkeypatch) -> None:
    from engine.cli import bench, track
    from engine.cli.compile_flag import apply_compile_flag

    parser = argparse.ArgumentParser()
    (bench if verb == "bench" else track).add_arguments(parser)
    base = [] if verb == "bench" else ["v.mp4", "--grid", "2", "--out", "o.npz"]
    assert parser.parse_args(base).compile is None
    args = parser.parse_args([*base, "--compile", "background"])
    monkeypatch.delenv(CORRTRACK_COMPILE, raising=False)
    apply_compile_flag(args)
    import os

    assert os.environ[CORRTRACK_COMPILE] == "background"
    with pytest.raises(SystemExit):
        parser.parse_args([*base, "--compile", "fast"])


def test_status_lines_say_which_code_runs() -> None:
    base = {"name": "corrtrack", "compile_mode": "background"}
    assert compile_status_text({"name": "corrtrack", "compile_mode": "off", "compile": "eager"}) == ""
    assert compile_status_text({**base, "compile": "eager, compiling in the background"}) == \
        "CorrTrack: eager, compiling in the background…"
    assert compile_status_text({**base, "compile": "compiled", "compile_s": 45.1, "compile_cache": "/c"}) == \
        "CorrTrack: compiled (took 45 s; cached for next start)"
    assert compile_status_text({**base, "compile": "compiled (from cache)", "compile_s": 1.24}) == \
        "CorrTrack: compiled (from the cache, 1.2 s)"


def test_an_old_report_reads_its_true_false_compile() -> None:
    import dataclasses

    from engine.report.parts import TrackerInfo

    empty = RunRecorder().build()
    report = dataclasses.replace(empty, tracker=TrackerInfo("corrtrack", details={"compile": True}))
    assert compile_note(report) == "compiled"
    assert compile_note(dataclasses.replace(empty, tracker=TrackerInfo("corrtrack", details={"compile": False}))) == ""


def test_the_counting_pass_runs_eager_and_asks_for_no_compile(monkeypatch, tmp_path: Path) -> None:
    stand_in = _StandIn()
    stand_in.release.set()
    tracker = _tracker(monkeypatch, tmp_path, stand_in, mode="on")
    with tracker.counting_mode():
        _run(tracker)
    assert stand_in.compiled == [] and stand_in.run_only == [] and not tracker.switch._ready


@pytest.mark.slow
def test_with_real_inductor_the_run_after_the_switch_runs_the_jobs_compiled_code(monkeypatch, tmp_path: Path) -> None:
    """torch.compile for real (Inductor on the CPU, needs a C compiler): the background job's variants are the
    ones the run's calls need (same shapes, strides, inference mode and autocast), so the run-only calls after
    the switch run compiled regions (seen by the profiler) and never compile; the tracks match eager's."""
    from torch.profiler import ProfilerActivity, profile

    tracker = CorrTrackTracker(model=CorrTrackNet(TINY), compile="background", compile_cache_root=tmp_path,
                               compile_backend="dynamo")
    monkeypatch.setattr(tracker, "_compiling", lambda device: True)
    monkeypatch.setenv(INDUCTOR_CACHE_ENV, str(CompileCache(tmp_path, environment_key("cpu")).folder))
    config = RunConfig(device="cpu", precision="fp32", points_per_batch=len(QUERIES))
    eager = Session(_frames(), QUERIES, config, tracker=tracker).run()
    assert isinstance(eager, Finished)
    assert tracker.switch.wait(600)
    if tracker.switch.status.state == FAILED:
        pytest.skip(f"torch.compile does not run here: {tracker.switch.status.error}")
    assert tracker.switch.status.state == COMPILED
    from torch._dynamo.utils import counters

    graphs_before = counters["stats"]["unique_graphs"]
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        compiled = Session(_frames(), QUERIES, config, tracker=tracker).run()
    assert isinstance(compiled, Finished)
    regions = [e.name for e in prof.events() if "Compiled Region" in e.name]
    assert len(regions) >= 3  # features, the refinement iterations, the polish
    assert counters["stats"]["unique_graphs"] == graphs_before  # nothing compiled in the run's thread
    np.testing.assert_allclose(compiled.tracks, eager.tracks, atol=1e-3)
