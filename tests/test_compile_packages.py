"""Compile packages (engine.trackers.compile_packages) and CorrTrack's aoti and precompile backends: corrupt,
foreign and refused entries are ignored with a note; a failed export leaves the tracker eager with compile_error;
the switch gives up after MAX_RETRIES retries; (slow: real export + AOTInductor on the CPU, needs gcc) a
package round-trips to eager's tracks and a second process on the same cache runs compiled code from its first
batch, saying "compiled (from cache)"; and the same for dynamo's precompile (a tiny module loaded in a fresh
process, a tampered file refused, a call failing the guards run plainly, CorrTrack's second start from disk)."""

from __future__ import annotations

import json
import logging
import os
import shutil
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
from engine.trackers.compile_packages import (
    PackageStore,
    Precompiled,
    available,
    available_precompile,
    call_key,
    digest,
    weights_digest,
)
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
    assert available_precompile("2.13.0+cpu") and available_precompile("2.14.1")
    assert not available_precompile("2.11.0+cu130") and not available_precompile("x")  # 2.11 lacks aot_compile
    assert compile_backend_for("dynamo") == "dynamo"
    assert compile_backend_for(None, {CORRTRACK_COMPILE_BACKEND: "AOTI"}) == "aoti"
    assert compile_backend_for("precompile") == "precompile"
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
                           compile_backend=sys.argv[3] if len(sys.argv) > 3 else "aoti")
result = _batch(tracker)
info = tracker.describe()
events = [e["event"] for e in (info.get("compile_job") or {}).get("events", [])]
print(json.dumps({"compiled": tracker.last_track_compiled, "label": info["compile"], "compile_s": info.get("compile_s"),
                  "ready_after_s": info.get("compile_ready_after_s"), "events": events,
                  "error": info.get("compile_error"), "notes": info.get("compile_cache_note"),
                  "from_cache": (info.get("compile_job") or {}).get("from_cache"),
                  "guard_failures": info.get("compile_guard_failures"), "misses": info.get("compile_package_misses"),
                  "tracks": result.tracks.tolist()}))
"""


def _python(script: str, *argv: str, inductor_cache: Path | None = None) -> dict:
    """Run ``script`` in a fresh Python (this repository importable, CPU compile on) -> its last line's JSON."""
    env = {k: v for k, v in os.environ.items() if k != INDUCTOR_CACHE_ENV}
    if inductor_cache is not None:
        env[INDUCTOR_CACHE_ENV] = str(inductor_cache)
    env[CORRTRACK_COMPILE_CPU] = "1"
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    done = subprocess.run([sys.executable, "-c", script, *argv], env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_a_package_round_trips_and_a_second_process_starts_compiled(tmp_path: Path) -> None:
    """Real torch.export + AOTInductor on the CPU (C++ through gcc; ~20 s): process 1 builds the packages
    (`on`), its compiled tracks match eager's; process 2 on the same cache loads them before its first batch:
    that batch runs compiled code, labelled "compiled (from cache)", having built nothing, with its load seconds
    reported."""

    def process() -> dict:
        return _python(_SECOND_START, str(tmp_path), "on", "aoti")

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


# -- dynamo's precompile (kind "precompile", backend "precompile") ------------------------------------------
needs_precompile = pytest.mark.skipif(not available_precompile(), reason="this torch has no dynamo precompile")


def _tiny() -> tuple[torch.nn.Module, torch.Tensor]:
    """A conv + linear module [2, 3, 16, 16] -> [2, 4] and its input, the same in every process."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.Flatten(),
                              torch.nn.Linear(8 * 16 * 16, 4)).eval()
    return net, torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(1))


def _tiny_key(net: torch.nn.Module, x: torch.Tensor) -> dict:
    return call_key("forward", net.forward, (x,), "cpu", weights_digest(net), kind="precompile")


_TINY_START = """
import json, sys, time
import torch
from engine.trackers.compile_packages import PackageStore
from tests.test_compile_packages import _tiny, _tiny_key
net, x = _tiny()
store = PackageStore(sys.argv[1], kind="precompile")
with torch.inference_mode():
    key = _tiny_key(net, x)
    t0 = time.perf_counter()
    package = store.load(key, net.forward)
    built = package is None
    if built:
        package, parts = store.build(net.forward, (x,), key, "cpu")
    seconds = time.perf_counter() - t0
    out = package(x)
print(json.dumps({"built": built, "seconds": seconds, "out": out.tolist(), "notes": store.notes,
                  "guard_failure": package.guard_failure}))
"""


@pytest.fixture(scope="module")
def tiny_package(tmp_path_factory) -> tuple[Path, dict]:
    """A precompile package of ``_tiny`` built by a fresh process: (the keyed folder, what that process said)."""
    folder = tmp_path_factory.mktemp("precompile")
    folder.chmod(0o700)
    built = _python(_TINY_START, str(folder), inductor_cache=folder / "inductor")
    assert built["built"] and not built["notes"] and not built["guard_failure"], built
    return folder, built


@needs_precompile
def test_a_precompiled_function_loads_in_a_fresh_process_without_a_build(tiny_package) -> None:
    """Process 1 (the fixture) traces and compiles; process 2 on the same folder loads the file and builds
    nothing; both give eager's output."""
    folder, first = tiny_package
    second = _python(_TINY_START, str(folder), inductor_cache=folder / "inductor")
    assert not second["built"] and not second["notes"] and not second["guard_failure"], second
    net, x = _tiny()
    with torch.inference_mode():
        eager = net(x)
    np.testing.assert_allclose(np.array(first["out"]), eager.numpy(), atol=1e-5)
    np.testing.assert_allclose(np.array(second["out"]), np.array(first["out"]), atol=1e-6)


@needs_precompile
def test_a_tampered_precompile_file_is_refused_with_a_note(tiny_package, tmp_path: Path) -> None:
    """A file whose sha256 is not its side file's is never unpickled: None, a note; the caller runs fn."""
    folder = tmp_path / "copy"
    shutil.copytree(tiny_package[0], folder)
    folder.chmod(0o700)
    store = PackageStore(folder, kind="precompile")
    net, x = _tiny()
    with torch.inference_mode():
        key = _tiny_key(net, x)
        package, _ = store.paths(digest(key))
        with open(package, "ab") as f:
            f.write(b"tampered")
        assert store.load(key, net.forward) is None
        assert len(store.notes) == 1 and "sha256" in store.notes[0], store.notes
        assert PackageStore(folder, kind="aoti").load(key) is None  # kinds never mix: not even looked for
        # no function to load beside, or another one: refused before any unpickling
        store.notes.clear()
        assert store.load(key) is None and "beside the function" in store.notes[-1]
        assert store.load(key, net[0].forward) is None and "foreign" in store.notes[-1]


@needs_precompile
def test_a_call_that_fails_the_guards_runs_the_plain_function(tiny_package, tmp_path: Path, monkeypatch,
                                                               caplog) -> None:
    """torch's loaded function raises on a guard failure (found on torch 2.13: it neither recompiles nor falls
    back); Precompiled runs the plain function instead, said in one log line, never a crash."""
    folder = tmp_path / "copy"
    shutil.copytree(tiny_package[0], folder)
    monkeypatch.setenv(INDUCTOR_CACHE_ENV, str(folder / "inductor"))  # the kernels the build left there
    store = PackageStore(folder, kind="precompile")
    net, x = _tiny()
    threads = torch.get_num_threads()
    wider = torch.randn(3, 3, 16, 16)  # a plain tensor, as x: only its shape differs
    with torch.inference_mode():
        key = _tiny_key(net, x)  # in inference mode, as the build's (the grad mode is part of a precompile key)
        package = store.load(key, net.forward)
        assert isinstance(package, Precompiled) and not store.notes
        np.testing.assert_allclose(package(x).numpy(), net(x).numpy(), atol=1e-5)
        assert package.guard_failure == ""
        with open(store.paths(digest(key))[0], "rb") as f:  # torch's own loader, its guard check on
            raw = torch.compiler.load_compiled_function(f, external_data={"owner": net})
        with pytest.raises(RuntimeError, match="GuardManager check failed"):
            raw(x.clone())  # made in inference mode: an inference tensor, the package was traced on a plain one
        with caplog.at_level(logging.WARNING):
            inference_x = x.clone()
            np.testing.assert_array_equal(package(inference_x).numpy(), net(inference_x).numpy())
            np.testing.assert_array_equal(package(wider).numpy(), net(wider).numpy())  # another shape
            try:  # what a key does not record: the thread count (capture/threads.py changes it)
                torch.set_num_threads(threads + 1)
                np.testing.assert_array_equal(package(x).numpy(), net(x).numpy())
                assert not package.fits((x,))
            finally:
                torch.set_num_threads(threads)
            assert not package.fits((inference_x,)) and not package.fits((wider,))
        assert package.fits((x,))  # the call it was made for still runs compiled
    assert package.guard_failure and "does not fit this call" in caplog.text, caplog.text
    assert caplog.text.count("does not fit this call") == 1  # one line, however many calls


@pytest.mark.slow
@needs_precompile
def test_corrtrack_precompile_builds_once_and_a_second_process_loads_it(tmp_path: Path) -> None:
    """Real aot_compile on the CPU (C++ through gcc; ~60 s here): process 1 records the calls and builds a
    precompile package per call (`on`), tracks as eager's; process 2 on the same cache loads them before its
    first batch: compiled from it, "compiled (from cache)", from_cache in the job log, nothing built."""
    first = _python(_SECOND_START, str(tmp_path), "on", "precompile")
    assert first["compiled"] and first["label"] == "compiled" and not first["error"], first
    assert any(e.startswith("built") for e in first["events"]) and not first["guard_failures"], first
    torch.manual_seed(0)
    eager = _batch(CorrTrackTracker(model=CorrTrackNet(ONE_ITER)))
    np.testing.assert_allclose(np.array(first["tracks"]), eager.tracks, atol=1e-3)
    second = _python(_SECOND_START, str(tmp_path), "on", "precompile")
    assert second["compiled"] and second["label"] == "compiled (from cache)" and second["from_cache"], second
    assert not any(e.startswith(("building", "built")) for e in second["events"]), second["events"]
    assert any(e.startswith("loaded") for e in second["events"]), second["events"]
    assert not second["error"] and not second["guard_failures"] and not second["misses"], second
    np.testing.assert_allclose(np.array(second["tracks"]), np.array(first["tracks"]), atol=1e-5)
    assert sorted((CompileCache(tmp_path, environment_key("cpu")).folder / "precompile").glob("*.pkl"))


def test_source_digest_covers_the_functions_neighbours(tmp_path, monkeypatch) -> None:
    """A package's code key changes when a sibling module of the traced function's module changes (refine_step
    calls support.py), not only its own file."""
    import importlib
    import sys

    from engine.trackers import compile_packages as cp

    pkg = tmp_path / "digestpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "main.py").write_text("from digestpkg.helper import twice\n\ndef f(x):\n    return twice(x)\n")
    (pkg / "helper.py").write_text("def twice(x):\n    return 2 * x\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    main = importlib.import_module("digestpkg.main")
    try:
        monkeypatch.setattr(cp, "_SOURCE_DIGESTS", {})
        before = cp.source_digest(main.f)
        assert cp.source_digest(main.f) == before  # stable
        (pkg / "helper.py").write_text("def twice(x):\n    return x + x\n")
        monkeypatch.setattr(cp, "_SOURCE_DIGESTS", {})
        assert cp.source_digest(main.f) != before
    finally:
        for name in [m for m in sys.modules if m.startswith("digestpkg")]:
            del sys.modules[name]
