"""Stage timing on the CPU and precision gates (GPU gates checked with a given capability)."""

from __future__ import annotations

import time

import pytest
import torch

from engine.core.errors import UserError
from engine.core.precision import gate, precision_context
from engine.core.stages import StageTimer


def test_cpu_stage_times_accumulate_and_reset():
    timer = StageTimer("cpu")
    with timer.stage("a"):
        time.sleep(0.02)
    with timer.stage("a"):
        time.sleep(0.01)
    with timer.stage("b"):
        pass
    ms = timer.collect()
    assert ms["a"] >= 25 and ms["b"] >= 0  # lower bounds only: a loaded machine can stretch any interval
    assert timer.collect() == {}


def test_disabled_timer_records_nothing():
    timer = StageTimer("cpu", enabled=False)
    with timer.stage("a"):
        pass
    assert timer.collect() == {}


def test_mismatched_end_raises():
    timer = StageTimer("cpu")
    timer.begin("a")
    with pytest.raises(RuntimeError):
        timer.end("b")


@pytest.mark.parametrize(
    "mode, cc, native, runnable, words",
    [
        ("bf16", (7, 5), False, True, "emulated"),
        ("tf32", (7, 5), False, True, "silently runs IEEE fp32"),
        ("fp16", (6, 1), False, True, "slow"),
        ("bf16", (9, 0), True, True, ""),
        ("tf32", (8, 0), True, True, ""),
        ("int8", (9, 0), True, True, ""),
        ("fp8", (8, 0), False, False, "need compute capability 8.9"),
    ],
)
def test_cuda_gates(mode, cc, native, runnable, words):
    g = gate(mode, "cuda", capability=cc)
    assert (g.native, g.runnable) == (native, runnable)
    assert words in g.reason


def test_cpu_gates_and_contexts():
    assert gate("fp16", "cpu").runnable is False
    assert gate("tf32", "cpu").native is False and gate("tf32", "cpu").runnable
    with pytest.raises(UserError, match="fp16"), precision_context("fp16", torch.device("cpu")):
        pass
    lin = torch.nn.Linear(8, 8)
    with precision_context("bf16", torch.device("cpu")):
        assert lin(torch.randn(2, 8)).dtype == torch.bfloat16
    with precision_context("fp32", torch.device("cpu")):
        assert lin(torch.randn(2, 8)).dtype == torch.float32


def test_tf32_flags_restored():
    before = torch.backends.cuda.matmul.allow_tf32
    with precision_context("tf32", torch.device("cpu")):
        assert torch.backends.cuda.matmul.allow_tf32 is True
    assert torch.backends.cuda.matmul.allow_tf32 == before
