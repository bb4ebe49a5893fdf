"""Attribution below the tracker's forward: helper functions through torch frames, source lines of the forward
body (the capture's line marks), the kernel naming and its shares; constructed traces, no GPU."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F  # noqa: N812

from engine.capture.attribution import attribute
from engine.capture.gather import gather
from engine.capture.lines import CAST_LABEL, roots_of
from engine.capture.profile import capture_run
from engine.capture.sites import CodeLayers
from engine.capture.summary import summarize
from engine.capture.trace import LINE_PREFIX, parse_events
from engine.workflows.deep import format_shares

USER_FILE = "mytracker/model.py"  # as the tracer records it (sys.path prefix trimmed)
TORCH_FILE = "torch/nn/functional.py"  # a slimmed trace's relative path
ADAPTER_FILE = "/srv/trackscope/engine/trackers/plugin.py"
TID = 1
ROOT = "MyTracker"
FORWARD_LINE = 40  # where MyTracker.forward starts
EINSUM_LINE = 47  # the statement of the forward body that launches the einsum


class Builder:
    """Chrome trace events of one thread, with explicit times (us), as torch's profiler writes them."""

    def __init__(self) -> None:
        self.events: list[dict] = [{"ph": "X", "cat": "user_annotation", "name": "trackscope.run", "ts": 0.0,
                                    "dur": 1000.0, "tid": TID}]
        self._id = self._corr = 0

    def frame(self, name: str, start: float, dur: float) -> None:
        self._id += 1
        self.events.append({"ph": "X", "cat": "python_function", "name": name, "ts": start, "dur": dur, "tid": TID,
                            "args": {"Python id": self._id}})

    def op(self, name: str, start: float, dur: float) -> None:
        self.events.append({"ph": "X", "cat": "cpu_op", "name": name, "ts": start, "dur": dur, "tid": TID,
                            "args": {}})

    def module(self, path: str, start: float, dur: float) -> None:
        self.events.append({"ph": "X", "cat": "user_annotation", "name": f"trackscope.module:{path}", "ts": start,
                            "dur": dur, "tid": TID})

    def line(self, line: int, start: float, dur: float) -> None:
        """A line mark as _RecordFunctionFast records it (a cpu_op)."""
        self.events.append({"ph": "X", "cat": "cpu_op", "name": f"{LINE_PREFIX}mytracker/model.py:{line} forward",
                            "ts": start, "dur": dur, "tid": TID, "args": {}})

    def launch(self, kernel: str, start: float, kernel_us: float) -> None:
        self._corr += 1
        self.events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": start, "dur": 4.0,
                            "tid": TID, "args": {"correlation": self._corr}})
        self.events.append({"ph": "X", "cat": "kernel", "name": kernel, "ts": start + 500.0, "dur": kernel_us,
                            "tid": 7, "args": {"stream": 7, "device": 0, "correlation": self._corr}})


def tracker_trace(marks: bool = True) -> Builder:
    """MyTracker.forward (100-900 us) under trackscope's adapter: a submodule ``head`` (a leaf, 100 us of kernels),
    a helper two levels below the forward reached through torch frames (``correlate`` -> ``sample`` ->
    F.grid_sample: 200 us), and its own statements: an einsum (300 us) and an autocast cast for a linear (50 us)."""
    b = Builder()
    b.frame(f"{ADAPTER_FILE}(90): _call", 50.0, 900.0)
    b.module(ROOT, 100.0, 800.0)
    b.frame(f"{USER_FILE}({FORWARD_LINE}): forward", 100.0, 800.0)
    # a submodule (a leaf): its own range names it
    b.module(f"{ROOT}.head", 150.0, 50.0)
    b.launch("head_gemm", 160.0, 100.0)
    # a helper two levels below the forward, through torch's own frames
    b.frame(f"{USER_FILE}(60): correlate", 220.0, 100.0)
    b.frame(f"{USER_FILE}(70): sample", 230.0, 80.0)
    b.frame(f"{TORCH_FILE}(4000): grid_sample", 240.0, 60.0)
    b.frame("<built-in method grid_sampler of type object at 0x1>", 245.0, 50.0)
    b.op("aten::grid_sampler", 246.0, 48.0)
    b.launch("grid_sampler_2d_kernel", 250.0, 200.0)
    # the forward's own statements
    if marks:
        b.line(EINSUM_LINE, 400.0, 40.0)
    b.frame("<built-in method einsum of type object at 0x2>", 401.0, 38.0)
    b.op("aten::einsum", 402.0, 36.0)
    b.op("aten::bmm", 410.0, 20.0)
    b.launch("cutlass_gemm_bf16", 415.0, 300.0)
    if marks:
        b.line(EINSUM_LINE + 3, 500.0, 40.0)
    b.op("aten::linear", 501.0, 38.0)
    b.op("aten::to", 502.0, 10.0)
    b.op("aten::_to_copy", 503.0, 8.0)
    b.op("aten::copy_", 504.0, 6.0)
    b.launch("bfloat16_copy_kernel", 505.0, 50.0)
    return b


def _attribute(b: Builder):
    trace = parse_events(b.events)
    att = attribute(trace, frozenset({ROOT}), CodeLayers())
    opaque = frozenset({f"(forward body of {ROOT})", "(stage body)", "(outside stages)", "(unattributed)"})
    return trace, gather(trace, att, precision="bf16", settings={}, opaque=opaque)


def test_a_kernel_through_torch_frames_goes_to_the_user_function_two_levels_below_the_forward():
    _, (evidence, below_us, naming) = _attribute(tracker_trace())
    rows = {r.function: r for r in evidence.functions}
    sample = rows["sample (mytracker/model.py:70)"]
    assert sample.module == f"(forward body of {ROOT})"
    assert sample.kernel_ms == pytest.approx(0.2) and sample.kernels == 1
    assert rows["correlate (mytracker/model.py:60)"].kernels == 0  # the innermost user frame, not the one above it
    assert below_us == pytest.approx(200.0)
    assert naming.function == pytest.approx(200.0)


def test_a_kernel_from_a_statement_of_the_forward_gets_its_line_row():
    _, (evidence, _, naming) = _attribute(tracker_trace())
    lines = {r.line: r for r in evidence.lines}
    einsum = lines[f"mytracker/model.py:{EINSUM_LINE} forward"]
    assert einsum.module == f"(forward body of {ROOT})"
    assert einsum.function == f"forward (mytracker/model.py:{FORWARD_LINE})"
    assert einsum.kernel_ms == pytest.approx(0.3) and einsum.kernels == 1 and einsum.launches == 1
    assert einsum.ops == ("aten::einsum",)
    assert einsum.wall_ms == pytest.approx(0.04)
    cast = lines[f"mytracker/model.py:{EINSUM_LINE + 3} forward"]
    assert cast.ops == (CAST_LABEL,)  # autocast's copy kernel under aten::linear
    assert naming.line == pytest.approx(350.0)
    assert all("sample" not in r.function for r in evidence.lines)  # a helper's kernels stay its function's


def test_the_shares_tell_strict_below_forward_and_with_lines_apart():
    for marks, with_lines in ((True, 1.0), (False, 300 / 650)):
        trace, (_, _, naming) = _attribute(tracker_trace(marks))
        assert naming.total == pytest.approx(650.0)
        assert naming.module + naming.submodule_body + naming.function + naming.line + naming.opaque == \
            pytest.approx(naming.total)
        result = SimpleNamespace(device="cuda:0", trace=trace, capability=(9, 0), torch_version="2.11",
                                 profiled_wall_ms=1.0, unprofiled_wall_ms=0.8, error=None,
                                 module_parents=frozenset({ROOT}), root_labels={"": ROOT}, user_dirs=(), settings={})
        sh = summarize(result, precision="bf16").shares
        assert sh.kernel_named == pytest.approx(1.0)
        assert sh.kernel_named_or_function == pytest.approx(300 / 650)  # the head's 100 + the helper's 200
        assert sh.kernel_below_forward == pytest.approx(300 / 650)
        assert sh.kernel_below_forward_or_line == pytest.approx(with_lines)
        text = format_shares(summarize(result, precision="bf16"))[0]
        assert "46% by a leaf module or a function below a forward" in text
        assert f"{with_lines:.0%} with the lines of its forward body" in text


def test_a_submodule_forward_body_is_below_the_forward_and_a_wrapper_child_is_the_forward():
    b = Builder()
    b.frame(f"{USER_FILE}(10): forward", 100.0, 800.0)
    b.module("Wrapper", 100.0, 800.0)  # a plugin's adapter around the model: calls one submodule
    b.module("model", 110.0, 700.0)
    b.module("model.block", 120.0, 200.0)
    b.module("model.block.fc", 130.0, 50.0)
    b.launch("fc_gemm", 135.0, 100.0)  # a leaf
    b.launch("block_add", 200.0, 40.0)  # the block's own forward body: a module below the tracker's forward
    b.module("model.head", 500.0, 100.0)  # the model calls two submodules: it is no wrapper
    b.launch("head_gemm", 510.0, 10.0)
    b.launch("model_einsum", 400.0, 60.0)  # the model's own forward body: the tracker's forward
    trace = parse_events(b.events)
    assert roots_of(trace.modules) == frozenset({"Wrapper", "model"})
    att = attribute(trace, frozenset(), CodeLayers())
    _, _, naming = gather(trace, att, precision="fp32")
    assert (naming.module, naming.submodule_body, naming.opaque) == (110.0, 40.0, 60.0)


class _Head(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x).relu()


def _helper(x: torch.Tensor) -> torch.Tensor:
    return (x * 2).sum(-1)


class _Tracker(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.head = _Head()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = x.permute(1, 0).contiguous()
        b = torch.einsum("ij,jk->ik", a, a.t())
        c = self.head(b[:, :8])
        return _helper(c) + F.interpolate(c[None], scale_factor=2.0).sum()


def test_the_capture_marks_each_statement_of_a_forward_with_its_line(monkeypatch):
    import inspect

    import engine.capture.profile as profile

    monkeypatch.setattr(profile, "_dynamo_counters", dict)  # as in a process that compiled nothing (another test may)
    model, x = _Tracker(), torch.randn(16, 16)
    result = capture_run(lambda: model(x), device="cpu", roots={"": model})
    assert result.error is None
    source, first = inspect.getsourcelines(_Tracker.forward)
    line_of = {text.strip().split(" = ")[0]: first + i for i, text in enumerate(source)}
    marked = {r.label.rsplit(":", 1)[-1] for r in result.trace.lines}  # "LINE forward"
    assert f"{line_of['b']} forward" in marked and f"{line_of['a']} forward" in marked
    assert all(r.label.split(":")[0].endswith("test_capture_lines.py") for r in result.trace.lines)
    assert all(r.label.endswith(" forward") for r in result.trace.lines)  # never the helper's lines
    # _Head.forward's own statement (.relu) is marked; the Linear inside it (a library module) is not
    head_first = inspect.getsourcelines(_Head.forward)[1]
    assert f"{head_first + 1} forward" in marked
    ops_in_marks = {op.name for op in result.trace.cpu_ops
                    for r in result.trace.lines if r.start <= op.start and op.end <= r.end}
    assert "aten::einsum" in ops_in_marks and "aten::linear" not in ops_in_marks and "aten::mul" not in ops_in_marks
    names = [f.name for f in result.trace.python]
    # the marks' own frames are gone
    assert not any("RecordFunctionFast" in n or "capture/lines.py(" in n for n in names)
    summary = summarize(result)
    rows = {r.line.rsplit(":", 1)[-1]: r for r in summary.evidence.lines}
    assert rows[f"{line_of['b']} forward"].module == "(forward body of _Tracker)"
    assert "aten::einsum" in rows[f"{line_of['b']} forward"].ops


def test_a_function_row_gets_the_host_time_it_ran_not_the_time_around_it():
    """The main thread's segments are cut where user frames start and end: the helper's 80 us of host time go to it,
    not all 700 us of the forward-body segment to whichever function runs at its middle."""
    _, (evidence, _, _) = _attribute(tracker_trace())
    wall = {r.function: r.wall_ms for r in evidence.functions if r.module == f"(forward body of {ROOT})"}
    assert wall["sample (mytracker/model.py:70)"] == pytest.approx(0.08)
    assert wall["correlate (mytracker/model.py:60)"] == pytest.approx(0.02)
    assert wall[f"forward (mytracker/model.py:{FORWARD_LINE})"] == pytest.approx(0.05 + 0.6)


def test_a_process_with_compiled_code_gets_no_line_marks(monkeypatch):
    """dynamo would trace the marks' handler in a compiled tracker's eager parts (frames and graphs the tracker does
    not make, read as recompiles; seen with a compiled model here): with compiled code in the process (dynamo's frame
    counter above 0) the capture makes no marks, and its settings say so."""
    import engine.capture.profile as profile

    monkeypatch.setattr(profile, "_dynamo_counters", lambda: {"frames": {"total": 3, "ok": 3}})
    model, x = _Tracker(), torch.randn(16, 16)
    result = capture_run(lambda: model(x), device="cpu", roots={"": model})
    assert result.error is None
    assert result.trace.lines == [] and result.settings["line_marks"] == "False"
