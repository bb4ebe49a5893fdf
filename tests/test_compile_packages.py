"""AOTInductor packages (engine.trackers.compile_packages) and CorrTrack's aoti backend: corrupt, foreign and
refused entries are ignored with a note; a failed export leaves the tracker eager with compile_error; the
switch gives up after MAX_RETRIES retries; and (slow: real export + AOTInductor on the CPU, needs gcc) a
package round-trips to eager's tracks and a second process on the same cache runs compiled code from its first
batch, saying "compiled (from cache)"."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from engine.core.flags import CORRTRACK_COMPILE_BACKEND, CORRTRACK_COMPILE_CPU
from engine.core.precision import precision_context
from engine.core.stages import StageTimer
from engine.trackers.base import RunContext
from engine.trackers.compile_cache import INDUCTOR_CACHE_ENV, CompileCache, environment_key
from engine.trackers.compile_packages import PackageStore, available, call_key, digest
from engine.trackers.compiled_switch import FAILED, MAX_RETRIES, CompiledSwitch, JobLog, RetryLater
from engine.trackers.corrtrack import CorrTrackNet, CorrTrackTracker
from engine.trackers.corrtrack.model import CorrTrackConfig
from engine.trackers.corrtrack.tracker import compile_backend_for

ROOT = Path(__file__).resolve().parents[1]
#: one refinement iteration, no mixer dilation beyond 1: the fewest packages (features, refine_step)
ONE_ITER = CorrTrackConfig(feature_dim=8, widths=(8, 8, 8), hidden_dim=16, mixer_dilations=(1,), num_iters=1)
QUERIES = np.array([[0, 10.0, 12.0], [1, 30.0, 20.0], [2, 24.0, 40.0]], np.float32)
CPU = torch.device("cpu")


def _frames() -> np.ndarray:
    return np.random.default_rng(3).integers(0, 256, (4, 48, 48, 3), dtype=np.uint8)


def _batch(tracker: CorrTrackTracker, precision: str = "fp32"):
    ctx = RunContext(CPU, precision, 2, StageTimer(CPU, enabled=False))
    with torch.inference_mode(), precision_context(precision, CPU):
        return tracker.track(tracker.prepare(_frames(), ctx), QUERIES, ctx)


def _key(name: str = "f") -> dict:
    return call_key(name, torch.tanh, (torch.ones(2, 3),), "cpu", "")


# -- the store: what it refuses, without compiling ------------------------------------------------------
def test_corrupt_and_foreign_entries_are_ignored_with_a_note(tmp_path: Path, caplog) -> None:
    store = PackageStore(tmp_path)
    key = _key()
    assert store.load(key) is None and store.notes == []  # missing: nothing to say
    package, side = store.paths(digest(key))
    package.parent.mkdir(mode=0o700, parents=True)
    package.write_bytes(b"not a zip")
    with caplog.at_level(logging.WARNING):
        assert store.load(key) is None  # no side file
        side.write_text(json.dumps({"key": _key("other"), "sha256": "x"}))
        assert store.load(key) is None  # a side file for another call: foreign
        side.write_text(json.dumps({"key": json.loads(json.dumps(key)), "sha256": "0" * 64}))
        assert store.load(key) is None  # the file is not the one built
        side.write_text("{")
        assert store.load_digest(digest(key)) is None  # a corrupt side file
        (store.folder / "variant-x.json").write_text("[]")
    assert len(store.notes) == 4 and all("ignored" in n for n in store.notes)
    assert "foreign" in store.notes[1] and "sha256" in store.notes[2]
    assert "ignored" in caplog.text
    assert store.recall(["some", "variant"]) is None
    store.remember(["v"], ["abc"])
    assert store.recall(["v"]) == ["abc"] and store.recall(["w"]) is None


def test_a_package_file_others_may_write_is_refused(tmp_path: Path) -> None:
    store = PackageStore(tmp_path)
    key = _key()
    package, _ = store.paths(digest(key))
    package.parent.mkdir(mode=0o700, parents=True)
    package.write_bytes(b"x")
    package.chmod(0o666)
    assert store.load(key) is None and "others may write" in store.notes[-1]


def test_backend_words_and_torch_versions(monkeypatch) -> None:
    assert available("2.11.0+cu130") and available("2.13.0+cpu") and not available("2.5.1") and not available("x")
    assert compile_backend_for("dynamo") == "dynamo"
    assert compile_backend_for(None, {CORRTRACK_COMPILE_BACKEND: "AOTI"}) == "aoti"
    assert compile_backend_for(None, {}) == "dynamo"  # aoti is opt-in (its loader crashed on the H200)
    with pytest.raises(ValueError, match="compile backend"):
        compile_backend_for("tensorrt")


# -- the switch: retries are capped and said ------------------------------------------------------------
def test_a_job_that_keeps_asking_to_retry_gives_up_saying_so(caplog) -> None:
    switch = CompiledSwitch("background")

    def job() -> bool:
        raise RetryLater("a batch with TF32 on ran during the compile")

    with caplog.at_level(logging.INFO):
        for _ in range(MAX_RETRIES + 3):
            switch.request(["k"], job)
            assert switch.wait(10)
    status = switch.status
    assert status.state == FAILED and f"gave up after {MAX_RETRIES} retries" in status.error
    assert "TF32" in status.error and status.retries == MAX_RETRIES + 1
    assert "retry 1 of" in caplog.text and "gave up" in caplog.text
    assert not switch.request(["k"], job)  # no job runs again


def test_the_job_log_keeps_timed_events(caplog) -> None:
    times = iter([0.0, 1.5, 2.0])
    joblog = JobLog(logging.getLogger("t"), clock=lambda: next(times))
    with caplog.at_level(logging.INFO):
        joblog.event("built features", seconds=1.5)
        joblog.set(state="compiled")
    assert joblog.to_dict() == {"state": "compiled", "events": [{"t_s": 1.5, "event": "built features",
                                                                 "seconds": 1.5}]}
    assert "+1.50 s: built features" in caplog.text


# -- the tracker --------------------------------------------------------------------------------------------
def test_a_failed_export_leaves_the_tracker_eager_with_compile_error(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv(CORRTRACK_COMPILE_CPU, "1")
    monkeypatch.setenv(INDUCTOR_CACHE_ENV, str(CompileCache(tmp_path, environment_key("cpu")).folder))

    def refuse(*args, **kwargs):
        raise RuntimeError("export: data-dependent control flow")

    monkeypatch.setattr(torch.export, "export", refuse)
    model = CorrTrackNet(ONE_ITER)
    tracker = CorrTrackTracker(model=model, compile="on", compile_cache_root=tmp_path, compile_backend="aoti")
    result = _batch(tracker)
    info = tracker.describe()
    assert info["compile"] == "eager" and "data-dependent" in info["compile_error"]
    assert info["compile_job"]["state"] == "failed" and not tracker.last_track_compiled
    eager = _batch(CorrTrackTracker(model=model))
    np.testing.assert_array_equal(result.tracks, eager.tracks)


_SECOND_START = """
import json, sys
import torch
from engine.trackers.corrtrack import CorrTrackNet, CorrTrackTracker
from tests.test_compile_packages import ONE_ITER, _batch
torch.manual_seed(0)
tracker = CorrTrackTracker(model=CorrTrackNet(ONE_ITER), compile=sys.argv[2], compile_cache_root=sys.argv[1],
                           compile_backend="aoti")
result = _batch(tracker)
info = tracker.describe()
events = [e["event"] for e in (info.get("compile_job") or {}).get("events", [])]
print(json.dumps({"compiled": tracker.last_track_compiled, "label": info["compile"], "compile_s": info.get("compile_s"),
                  "ready_after_s": info.get("compile_ready_after_s"), "events": events,
                  "error": info.get("compile_error"), "notes": info.get("compile_cache_note"),
                  "tracks": result.tracks.tolist()}))
"""


@pytest.mark.slow
def test_a_package_round_trips_and_a_second_process_starts_compiled(tmp_path: Path) -> None:
    """Real torch.export + AOTInductor on the CPU (C++ through gcc; ~20 s): process 1 builds the packages
    (`on`), its compiled tracks match eager's; process 2 on the same cache loads them before its first batch:
    that batch runs compiled code, labelled "compiled (from cache)", having built nothing, with its load seconds
    reported."""
    env = {k: v for k, v in os.environ.items() if k != INDUCTOR_CACHE_ENV}
    env[CORRTRACK_COMPILE_CPU] = "1"
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")

    def process() -> dict:
        done = subprocess.run([sys.executable, "-c", _SECOND_START, str(tmp_path), "on"], env=env, cwd=ROOT,
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
        return json.loads(done.stdout.strip().splitlines()[-1])

    first = process()
    if first["error"]:
        pytest.skip(f"AOTInductor does not run here: {first['error']}")
    assert first["compiled"] and first["label"] == "compiled"
    torch.manual_seed(0)
    eager = _batch(CorrTrackTracker(model=CorrTrackNet(ONE_ITER)))
    np.testing.assert_allclose(np.array(first["tracks"]), eager.tracks, atol=1e-3)
    second = process()
    assert second["compiled"] and second["label"] == "compiled (from cache)", second
    # loaded, not built: no export or compile in the second start, its seconds reported (not judged: a clock)
    assert not any(e.startswith(("building", "built")) for e in second["events"]), second["events"]
    assert any(e.startswith("loaded") for e in second["events"]), second["events"]
    assert second["compile_s"] is not None and second["ready_after_s"] is not None and not second["error"]
    np.testing.assert_allclose(np.array(second["tracks"]), np.array(first["tracks"]), atol=1e-5)
    # packages that no longer match their side files are rebuilt, not loaded and not a crash
    packages = sorted((CompileCache(tmp_path, environment_key("cpu")).folder / "aoti").glob("*.pt2"))
    assert packages
    for package in packages:
        with open(package, "ab") as f:
            f.write(b"tampered")
    third = process()
    assert third["compiled"] and third["label"] == "compiled" and "sha256" in (third["notes"] or ""), third


def test_a_compile_in_flight_is_seen_by_its_thread_name() -> None:
    """The app's exit leaves by os._exit while one runs (a process exiting under Inductor's threads aborted)."""
    import threading

    from engine.trackers.compiled_switch import THREAD_NAME, compile_in_flight

    assert not compile_in_flight()
    release = threading.Event()
    worker = threading.Thread(target=release.wait, name=THREAD_NAME, daemon=True)
    worker.start()
    try:
        assert compile_in_flight()
    finally:
        release.set()
        worker.join(5)
    assert not compile_in_flight()


def test_the_cli_exits_past_a_compile_in_flight(monkeypatch, capsys) -> None:
    import threading

    from engine.cli import entry
    from engine.trackers.compiled_switch import THREAD_NAME

    exits: list[int] = []
    monkeypatch.setattr(entry.os, "_exit", exits.append)
    entry.exit_past_lingering_threads(0)
    assert exits == []  # nothing running: a normal return
    release = threading.Event()
    worker = threading.Thread(target=release.wait, name=THREAD_NAME, daemon=True)
    worker.start()
    try:
        entry.exit_past_lingering_threads(3)
    finally:
        release.set()
        worker.join(5)
    assert exits == [3] and "background compile was still running" in capsys.readouterr().err
