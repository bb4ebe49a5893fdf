"""int8/fp8 building blocks on the CPU: recipes per device, gates, QuantLinear and quantized_matmul numerics,
the shape padding CUDA needs (exercised on the CPU), quantize_module's swaps and its report."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch import nn

from engine.core.errors import UserError
from engine.core.precision import autocast_dtype, gate, precision_context
from engine.trackers import quant as Q

# measured on the CPU (Gaussian data, k = 64..256): int8 0.7-0.9e-2, fp8 rowwise 3.3-3.7e-2, tensorwise 3.7e-2
INT8_BOUND = 1.5e-2
FP8_BOUND = 5e-2
BOUND = {"int8": INT8_BOUND, "fp8": FP8_BOUND}


def _padded(recipe: Q.QuantRecipe, multiple: int = 16, min_rows: int = 17) -> Q.QuantRecipe:
    """A CPU recipe that pads as the CUDA kernels need (the CPU kernels take any shape)."""
    return dataclasses.replace(recipe, pad_multiple=multiple, min_rows=min_rows)


@pytest.mark.parametrize(
    "mode, cc, native, runnable, words",
    [
        ("int8", (9, 0), True, True, ""),
        ("int8", (7, 5), True, True, ""),
        ("int8", (7, 0), False, True, "7.5"),
        ("fp8", (9, 0), True, True, ""),
        ("fp8", (8, 9), True, True, ""),
        ("fp8", (8, 0), False, False, "8.9"),
        ("fp8", (7, 5), False, False, "try int8"),
    ],
)
def test_quant_gates_on_cuda(mode, cc, native, runnable, words):
    g = gate(mode, "cuda", capability=cc)
    assert (g.native, g.runnable) == (native, runnable)
    assert words in g.reason


def test_quant_gates_on_cpu_say_accuracy_not_speed():
    for mode in Q.QUANT_MODES:
        g = gate(mode, "cpu")
        assert g.runnable and not g.native and "accuracy, not speed" in g.reason
    assert autocast_dtype("int8", torch.device("cpu")) is None  # the rest stays fp32 on the CPU
    assert autocast_dtype("fp8", torch.device("cuda"), (9, 0)) == torch.bfloat16
    assert autocast_dtype("int8", torch.device("cuda"), (7, 5)) == torch.float16  # bf16 is emulated on a T4
    lin = nn.Linear(8, 8)
    with precision_context("int8", torch.device("cpu")):
        assert lin(torch.randn(2, 8)).dtype == torch.float32


def test_recipes_per_device_and_capability():
    h200 = Q.recipe_for("fp8", "cuda", (9, 0))
    assert (h200.scaling, h200.pad_multiple, h200.float_dtype) == ("rowwise", 16, "bf16")
    assert "_scaled_mm" in h200.kernel
    l4 = Q.recipe_for("fp8", "cuda", (8, 9))
    assert l4.scaling == "tensorwise" and l4.notes
    t4 = Q.recipe_for("int8", "cuda", (7, 5))
    assert (t4.pad_multiple, t4.min_rows, t4.float_dtype) == (8, 17, "fp16") and "_int_mm" in t4.kernel
    cpu = Q.recipe_for("int8", "cpu")
    assert cpu.float_dtype == "fp32" and cpu.pad_multiple == 1 and "integer-exact" in cpu.kernel
    d = cpu.describe()
    assert d["mode"] == "int8" and "dynamic" in d["activations"] and "per output channel" in d["weights"]
    assert any("conv" in k for k in d["not_quantised"])
    with pytest.raises(ValueError):
        Q.recipe_for("bf16", "cpu")


@pytest.mark.parametrize("mode", Q.QUANT_MODES)
@pytest.mark.parametrize("k, n", [(64, 96), (153, 128), (256, 40)])
def test_quant_linear_close_to_float(mode, k, n):
    gen = torch.Generator().manual_seed(k + n)
    lin = nn.Linear(k, n)
    x = torch.randn(300, k, generator=gen)
    for recipe in (Q.recipe_for(mode, "cpu"), _padded(Q.recipe_for(mode, "cpu"))):
        got = Q.QuantLinear(lin, recipe)(x)
        assert got.shape == (300, n) and got.dtype == torch.float32
        err = Q.relative_error(got, lin(x))
        assert 1e-4 < err < BOUND[mode], (recipe.pad_multiple, err)  # quantised (not a float GEMM), and close


def test_quant_linear_keeps_leading_dims_autocast_dtype_and_small_batches():
    lin = nn.Linear(64, 32)
    q = Q.QuantLinear(lin, _padded(Q.recipe_for("int8", "cpu"), 8, 17))
    x = torch.randn(2, 3, 64)  # m = 6 rows: padded to 17 as CUDA's _int_mm needs
    assert Q.relative_error(q(x), lin(x)) < INT8_BOUND
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert q(x).dtype == torch.bfloat16 and q(x).shape == (2, 3, 32)


def test_int8_cpu_gemm_is_integer_exact_against_int_mm():
    recipe = Q.recipe_for("int8", "cpu")
    gen = torch.Generator().manual_seed(3)
    aq, _ = Q.quantize_rows(torch.randn(40, Q.EXACT_FP32_MAX_K, generator=gen), recipe)
    wq, _ = Q.quantize_rows(torch.randn(24, Q.EXACT_FP32_MAX_K, generator=gen), recipe)
    assert aq.dtype == torch.int8 and int(aq.abs().max()) == 127
    assert torch.equal((aq.float() @ wq.float().t()).to(torch.int32), torch._int_mm(aq, wq.t()))


def test_quantized_matmul_batched_tensorwise_and_zero_rows():
    gen = torch.Generator().manual_seed(4)
    a = torch.randn(2, 30, 64, generator=gen)
    b = torch.randn(2, 64, 500, generator=gen)
    a[0, 3] = 0  # an all-zero row: a tiny scale, zeros out
    for mode in Q.QUANT_MODES:
        for recipe in (Q.recipe_for(mode, "cpu"), dataclasses.replace(Q.recipe_for(mode, "cpu"), scaling="tensorwise"),
                       _padded(Q.recipe_for(mode, "cpu"))):
            got = Q.quantized_matmul(a, b, recipe)
            assert got.shape == (2, 30, 500) and torch.isfinite(got).all()
            assert Q.relative_error(got, a @ b) < BOUND[mode] and float(got[0, 3].abs().max()) == 0.0


def test_fp8_quantisation_saturates_instead_of_nan():
    recipe = dataclasses.replace(Q.recipe_for("fp8", "cpu"), scaling="tensorwise")
    q, scale = Q.quantize_rows(torch.tensor([[1e6, -1e6, 1.0, 0.0]]), recipe)
    assert torch.isfinite(q.float()).all() and float(q.float().abs().max()) == Q.FP8_MAX


class Custom(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(16, 16))

    def forward(self, x):
        return x @ self.w


class Small(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Conv2d(8, 32, 1)
        self.conv = nn.Conv2d(32, 32, 3, padding=1)
        self.norm = nn.LayerNorm(32)
        self.fc = nn.Linear(32, 64)
        self.inner = nn.Sequential(nn.Linear(64, 16), nn.GELU(), Custom())
        self.head = nn.Linear(16, 2)

    def forward(self, x):  # [B, 8, H, W]
        y = self.conv(self.proj(x)).mean(dim=(2, 3))
        return self.head(self.inner(self.fc(self.norm(y))))


def test_quantize_module_swaps_linears_and_1x1_convs_and_lists_the_rest():
    torch.manual_seed(0)
    model = Small()
    x = torch.randn(3, 8, 6, 6)
    ref = model(x)
    hits = []
    model.fc.register_forward_hook(lambda *a: hits.append(1))  # a user's hook survives the swap
    report = Q.quantize_module(model, Q.recipe_for("int8", "cpu"))
    assert isinstance(model.proj, Q.QuantConv1x1) and isinstance(model.fc, Q.QuantLinear)
    assert isinstance(model.inner[0], Q.QuantLinear) and isinstance(model.conv, nn.Conv2d)
    assert isinstance(model.head, nn.Linear)  # 16 -> 2: too small
    names = {e["name"] for e in report.quantised}
    assert names == {"proj", "fc", "inner.0"}
    skipped = {e["name"]: e["reason"] for e in report.not_quantised}
    assert "3x3 conv" in skipped["conv"] and "normalisation" in skipped["norm"]
    assert "custom layer" in skipped["inner.2"] and "smaller than 16" in skipped["head"]
    got = model(x)
    assert hits and Q.relative_error(got, ref) < 0.05
    d = report.describe()
    assert d["quantised_layers"] == 3 and d["recipe"]["mode"] == "int8" and len(d["not_quantised"]) == 4


def test_quantize_module_keep_and_refusal():
    model = Small()
    report = Q.quantize_module(model, Q.recipe_for("fp8", "cpu"), keep={"fc": "a measured reason"})
    assert isinstance(model.fc, nn.Linear)
    assert any(e["name"] == "fc" and "a measured reason" in e["reason"] for e in report.not_quantised)
    with pytest.raises(UserError, match="not an nn.Module"):
        Q.quantize_module(lambda f, q: (f, q), Q.recipe_for("int8", "cpu"))  # type: ignore[arg-type]


def test_check_kernel_catches_wrong_numbers_and_tries_the_other_layout(monkeypatch):
    recipe = dataclasses.replace(Q.recipe_for("int8", "cpu"), notes=("a fresh key for the cache",))
    monkeypatch.setattr(Q, "_gemm", lambda *a, **k: torch.zeros(40, 24))
    with pytest.raises(RuntimeError, match="column-major: wrong numbers.*row-major: wrong numbers"):
        Q.check_kernel(recipe, "cpu")
    assert ("int8", "cpu") not in Q._ROW_MAJOR_B
    monkeypatch.undo()
    real = Q._gemm

    def wrong_unless_row_major(aq, sa, bq_t, sb, r, out_dtype):  # a kernel misreading a transposed operand
        good = real(aq, sa, bq_t.contiguous(), sb, r, out_dtype)
        return good if ("int8", "cpu") in Q._ROW_MAJOR_B else 2 * good

    monkeypatch.setattr(Q, "_gemm", wrong_unless_row_major)
    try:
        result = Q.check_kernel(dataclasses.replace(recipe, notes=("another fresh key",)), "cpu")
        assert result["operand_layout"] == "row-major" and ("int8", "cpu") in Q._ROW_MAJOR_B
    finally:
        Q._ROW_MAJOR_B.discard(("int8", "cpu"))
    ok = Q.check_kernel(Q.recipe_for("fp8", "cpu"), "cpu")
    assert ok["operand_layout"] == "column-major" and ok["relative_error"] < FP8_BOUND


def test_a_quantised_1x1_conv_keeps_its_weights_on_the_conv_device(monkeypatch):
    """QuantConv1x1 built its matmul weights on the CPU whatever the conv's device: CorrTrack int8/fp8 then
    failed on CUDA with 'mat2 is on cpu'. The device a tensor is made on is checked through nn.Linear."""
    from torch import nn

    from engine.trackers import quant

    made_on = []
    real_linear = nn.Linear

    class SpyLinear(real_linear):
        def __init__(self, *args, device=None, **kwargs):
            made_on.append(device)
            super().__init__(*args, device=device, **kwargs)

    monkeypatch.setattr(quant.nn, "Linear", SpyLinear)
    conv = nn.Conv2d(32, 32, 1)
    quant.QuantConv1x1(conv, quant.recipe_for("int8", "cpu"))
    assert made_on == [conv.weight.device]
