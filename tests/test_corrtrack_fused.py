"""CorrTrack's inference fast paths: fused.py's Triton kernels (checked through Triton's CPU interpreter in a
subprocess) and when they run, and casts.py's kept parameter casts."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from engine.core import flags
from engine.trackers.corrtrack import casts, fused

HERE = Path(__file__).resolve().parent


@pytest.mark.skipif(fused.triton_version() is None, reason="no Triton (the test extra installs it on Linux)")
def test_fused_kernels_compute_what_the_eager_code_computes() -> None:
    env = {**os.environ, "TRITON_INTERPRET": "1", flags.CORRTRACK_FUSED: "1"}
    done = subprocess.run([sys.executable, str(HERE / "fused_check.py")], env=env, capture_output=True, text=True,
                          timeout=300, cwd=HERE.parent)
    assert done.returncode == 0, done.stderr[-3000:]
    diffs = json.loads(done.stdout.strip().splitlines()[-1])
    assert diffs["fp32_block"] < 1e-6  # the norm and all three taps, edges included (d >= T too), then the MLP
    assert diffs["fp32_norm"] < 1e-5
    assert diffs["float16_block_units"] <= 2.0  # the norm's and the sum's roundings: two units at most
    # the interpreter truncates to bf16 (a GPU rounds to nearest): a wrong tap or row would be far beyond this;
    # on the H200 bf16 gave the validation set's AJ to within 0.0001 (docs/corrtrack.md, session 22)
    assert diffs["bfloat16_block_units"] <= 32.0
    assert diffs["net_px"] < 1e-3  # a whole v2 net: positions after every iteration's norms


def test_fused_kernels_run_only_at_inference_on_a_gpu_with_the_switch_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    x = torch.randn(2, 5, 32)
    assert not fused.usable(x)  # a CPU tensor, no interpreter
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    with torch.no_grad():
        assert fused.usable(x) == (fused.triton_version() is not None)
        assert not fused.usable(torch.randn(2, 5, 24))  # not a power of two
        with fused.disabled():
            assert not fused.usable(x)
        monkeypatch.setenv(flags.CORRTRACK_FUSED, "0")
        assert not fused.usable(x)
        assert fused.status().startswith("off")
    monkeypatch.delenv(flags.CORRTRACK_FUSED)
    assert not fused.usable(x)  # autograd on: training keeps the eager code (torch's backward)


def test_kept_casts_are_reused_until_the_parameter_changes() -> None:
    layer = nn.Linear(8, 4)
    with torch.no_grad(), casts.keeping():
        first = casts.param_as(layer.weight, torch.bfloat16)
        assert casts.param_as(layer.weight, torch.bfloat16) is first
        assert casts.param_as(layer.weight, torch.float32) is layer.weight
        layer.weight.mul_(2.0)  # an optimiser step or a load: the version counter moves
        second = casts.param_as(layer.weight, torch.bfloat16)
        assert second is not first
        torch.testing.assert_close(second, (layer.weight).to(torch.bfloat16), rtol=0, atol=0)
    grad_cast = casts.param_as(layer.weight, torch.bfloat16)
    assert grad_cast.requires_grad and grad_cast.grad_fn is not None  # training: a cast autograd sees through


def test_casts_are_kept_only_inside_keeping_so_a_fused_optimiser_step_is_seen() -> None:
    """Training validates between fused AdamW steps, which change the weights without moving their version
    counter: outside ``keeping()`` (everything but CorrTrackTracker's stages) every call must cast afresh."""
    torch.manual_seed(0)
    layer, x = nn.Linear(16, 8), torch.randn(5, 16)
    opt = torch.optim.AdamW(layer.parameters(), lr=0.1, fused=True)

    def validate() -> torch.Tensor:
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            return casts.linear(layer, x)

    before = validate()
    version = layer.weight._version
    layer(x).square().sum().backward()
    opt.step()
    assert layer.weight._version == version  # what makes a version stamp blind to this step
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        torch.testing.assert_close(validate(), layer(x), rtol=0, atol=0)  # the new weights, not a stale cast
    assert not torch.equal(validate(), before)
    with torch.no_grad(), casts.keeping():
        first = casts.param_as(layer.weight, torch.bfloat16)
        assert casts.param_as(layer.weight, torch.bfloat16) is first
    with torch.no_grad():
        assert casts.param_as(layer.weight, torch.bfloat16) is not first


def test_an_inference_tensor_is_cast_each_call() -> None:
    with torch.inference_mode():  # the int8/fp8 copies are made so: no version counter to read
        weight = torch.randn(4, 8)
        assert casts.param_as(weight, torch.bfloat16).dtype == torch.bfloat16
    with torch.no_grad(), casts.keeping():
        first = casts.param_as(weight, torch.bfloat16)
        assert casts.param_as(weight, torch.bfloat16) is not first


def test_kept_casts_go_with_their_parameter() -> None:
    casts.clear()
    layer = nn.Linear(8, 4)
    with torch.no_grad(), casts.keeping():
        casts.param_as(layer.weight, torch.bfloat16)
        casts.param_as(layer.bias, torch.bfloat16)
    assert len(casts._casts) == 2
    del layer
    gc.collect()
    assert len(casts._casts) == 0


def test_layers_through_kept_casts_give_autocasts_numbers() -> None:
    torch.manual_seed(0)
    lin, conv = nn.Linear(16, 8), nn.Conv2d(3, 4, 3, stride=2, padding=1)
    x, img = torch.randn(5, 16), torch.randn(2, 3, 9, 9)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16), casts.keeping():
        for _ in range(2):  # the second call reads the kept casts
            torch.testing.assert_close(casts.linear(lin, x), lin(x), rtol=0, atol=0)
            torch.testing.assert_close(casts.conv(conv, img), conv(img), rtol=0, atol=0)
        torch.testing.assert_close(casts.sequential(nn.Sequential(conv, nn.ReLU()), img), F.relu(conv(img)),
                                   rtol=0, atol=0)
    with torch.no_grad():  # no autocast: the layer's own call
        assert casts.linear(lin, x).dtype == torch.float32


def test_the_bench_says_whether_the_fused_kernels_ran_on_a_gpu() -> None:
    import dataclasses

    from engine.report.parts import Run, TrackerInfo
    from engine.report.recorder import RunRecorder
    from engine.workflows.bench import fused_note

    empty = RunRecorder().build()

    def report(device: str, status: str | None):
        run = Run(index=0, cold=False, status="finished", start_s=0.0, wall_ms=5.0, end_to_end_ms=None, stage_ms={},
                  batches=(), device=device)
        details = {} if status is None else {"fused_kernels": status}
        return dataclasses.replace(empty, runs=(run,), tracker=TrackerInfo("corrtrack", details=details))

    assert fused_note(report("cuda:0", "on for CUDA inference (Triton 3.6.0)")) == "fused kernels"
    assert fused_note(report("cuda:0", "off: TRACKSCOPE_CORRTRACK_FUSED is false")) == "fused kernels off"
    assert fused_note(report("cpu", "on for CUDA inference (Triton 3.6.0)")) == ""  # the CPU runs the eager code
    assert fused_note(report("cuda:0", None)) == ""  # a tracker that does not say


def test_a_broken_triton_leaves_the_eager_code_and_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(name: str):
        raise RuntimeError("libtriton.so: cannot open shared object file")

    monkeypatch.setattr(fused, "_kernels", fused._NOT_LOADED)
    monkeypatch.setattr(fused.importlib, "import_module", broken)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    with torch.no_grad():
        assert not fused.usable(torch.randn(2, 5, 32))
    assert fused.status() == ("off: Triton failed to import (RuntimeError: libtriton.so: cannot open shared object "
                              "file) (the eager code runs)")


def test_the_tracker_keeps_casts_and_a_bare_model_call_does_not() -> None:
    import numpy as np

    from engine.core.stages import StageTimer
    from engine.trackers.base import RunContext
    from engine.trackers.corrtrack import CorrTrackTracker

    casts.clear()
    tracker = CorrTrackTracker()
    cpu = torch.device("cpu")
    frames = np.random.default_rng(0).integers(0, 256, (6, 64, 64, 3), dtype=np.uint8)
    queries = np.array([[0, 10, 10], [2, 30, 30]], np.float32)
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
        video = torch.from_numpy(frames).permute(0, 3, 1, 2)[None].float()
        tracker.model.features(torch.nn.functional.interpolate(video[0], size=(256, 256)) / 255.0)
        assert len(casts._casts) == 0  # outside the tracker's stages: cast each call
        ctx = RunContext(cpu, "bf16", 16, StageTimer(cpu, enabled=False))
        tracker.track(tracker.prepare(frames, ctx), queries, ctx)
    assert len(casts._casts) > 0  # inside them: kept for the next batch and for graph replays
