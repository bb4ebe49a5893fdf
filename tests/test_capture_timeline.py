"""The capture timeline (engine, no Qt): lanes from the committed H200 traces and from a CPU capture."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

from engine.capture.export import write_trace
from engine.capture.profile import capture_run
from engine.capture.timeline import TimelineData, load_timeline
from engine.capture.trace import Trace
from engine.core.stages import StageTimer
from tests.test_capture import Outer  # a root, a nested module with a leaf, forward bodies

DATA = Path(__file__).parent / "data" / "capture" / "call1"  # the first H200 call: summaries + traces
DEEP = DATA / "trace_deep_nested.json.gz"
CORR = DATA / "trace_corrtrack_bf16_q1024.json.gz"


@pytest.fixture(scope="module")
def deep() -> TimelineData:
    return load_timeline(DEEP)


@pytest.fixture(scope="module")
def corr() -> TimelineData:
    return load_timeline(CORR)


def _summary(label: str) -> dict:
    runs = json.loads((DATA / "summaries.json").read_text())["runs"]
    return next(r for r in runs if r["label"] == label)["summary"]


def _names(data: TimelineData, lane_name: str) -> list[str]:
    return [data.names[i] for i in data.lane(lane_name).label]


def test_deep_nested_trace_has_every_kind_of_lane(deep):
    kinds = Counter(lane.kind for lane in deep.lanes)
    assert kinds["stage"] == 1 and kinds["module"] == 5  # module nesting depths 0..4
    assert kinds["cpu"] == 3 and kinds["runtime"] == 1 and kinds["kernel"] == 1 and kinds["copy"] == 1
    assert _names(deep, "stages") == ["upload", "features", "updater", "download"]
    assert _names(deep, "modules 0") == ["DeepNested"]
    assert "updater.blocks.2.attn.qkv" in _names(deep, "modules 4")
    kernels = deep.lane("stream 7 kernels")
    assert len(kernels) == 116 and deep.dropped == 0
    for lane in deep.lanes:  # times are ms from the run window's start, sorted, inside the window
        assert np.all(np.diff(lane.start_ms) >= 0)
        assert lane.start_ms.min() >= -1e-6 and lane.end_ms.max() <= deep.window_ms + 1e-6
    assert deep.window_ms == pytest.approx(_summary("deep_nested")["wall_ms"], abs=0.01)


def test_deep_nested_kernels_are_attributed_like_the_summary(deep):
    lane = deep.lane("stream 7 kernels")
    got = Counter((deep.names[s], deep.names[m]) for s, m in zip(lane.stage, lane.module))
    want = Counter({(c["stage"], c["module"]): c["kernels"] for c in _summary("deep_nested")["cells"] if c["kernels"]})
    assert got == want


def test_deep_nested_syncs_and_copies_are_marked(deep):
    syncs = [deep.names[i] for i in deep.syncs.label]
    assert Counter(syncs) == {"cudaStreamSynchronize": 3, "cudaEventSynchronize": 1}
    classes = Counter(deep.classes[i] for i in deep.copies.cls)
    assert classes == {"memcpy HtoD pageable": 2, "memcpy DtoH pageable": 2}
    assert int(deep.copies.bytes.sum()) == _summary("deep_nested")["counts"]["copy_bytes"]
    assert np.all((deep.syncs.time_ms >= 0) & (deep.syncs.time_ms <= deep.window_ms))


def test_matches_a_module_its_body_and_a_bucket(deep):
    attn = deep.matches("updater.blocks.0.attn")
    lanes = {deep.lanes[li].name for li in attn}
    assert {"modules 3", "stream 7 kernels", "CUDA API (thread 477)"} <= lanes
    assert len(attn[deep.lanes.index(deep.lane("stream 7 kernels"))]) == 10  # its body and qkv/proj
    body = deep.matches("(forward body of DeepNested)")
    assert len(body[deep.lanes.index(deep.lane("modules 0"))]) == 1  # the root's own call range
    start, end = deep.extent(body)
    assert 0 <= start < end <= deep.window_ms
    outside = deep.matches("(outside stages)", stage="(outside stages)")
    assert outside and all(np.all(deep.lanes[li].stage[i] == deep.names.index("(outside stages)"))
                           for li, i in outside.items())
    assert deep.matches("no such thing") == {}


def test_item_at_reports_the_shortest_item_under_the_cursor(deep):
    li = deep.lanes.index(deep.lane("stages"))
    i = deep.item_at(li, float(deep.lane("stages").start_ms[2]) + 0.01)
    item = deep.item(li, i)
    assert item["name"] == "updater" and item["kind"] == "stage" and item["dur_ms"] > 0
    assert deep.item_at(li, -5.0) is None and deep.item_at(99, 1.0) is None


def test_corrtrack_trace_has_named_stages_and_bf16_kernels(corr):
    assert _names(corr, "stages") == ["upload", "backbone", "query_features", "cost_volume", "init_head", "refine",
                                      "download"]
    assert not corr.lanes_of("module")  # CorrTrack declares stages, not module ranges
    kernels = corr.lane("stream 7 kernels")
    assert len(kernels) == 1457
    classes = Counter(corr.classes[i] for i in kernels.cls)
    assert classes["kernel gemm tc bf16"] > 0 and classes["kernel conv tc bf16"] > 0
    refine = corr.matches("refine")
    assert len(refine[corr.lanes.index(kernels)]) > 500  # the refine loop's kernels (a CUDA graph replay)
    copies = Counter(corr.classes[i] for i in corr.copies.cls)
    assert copies["memcpy HtoD pinned"] == 1 and copies["memcpy DtoD"] == 14
    assert Counter(corr.classes[i] for i in corr.lane("stream 7 copies").cls)["memset"] == 27


def test_bound_keeps_ranges_and_the_longest_items(corr):
    total = corr.items
    small = load_timeline(CORR, max_items=300)
    assert small.items == 300 and small.dropped == total - 300
    assert len(small.lane("stages")) == 7
    assert sum(lane.dropped for lane in small.lanes) == small.dropped
    kept = np.concatenate([lane.dur_ms for lane in small.lanes if lane.kind != "stage"])
    every = np.concatenate([lane.dur_ms for lane in corr.lanes if lane.kind != "stage"])
    assert kept.min() >= np.sort(every)[::-1][len(kept) - 1] - 1e-9


def test_empty_trace_gives_an_empty_timeline():
    data = TimelineData.from_trace(Trace())
    assert data.lanes == [] and data.items == 0 and data.matches("x") == {}


def test_tiny_cpu_capture_round_trips_through_a_trace_file(tmp_path):
    model, x = Outer(), torch.randn(4, 8)

    def run_once() -> None:
        timer = StageTimer("cpu")
        with torch.no_grad(), timer.stage("model"):
            model(x)

    result = capture_run(run_once, device="cpu", roots={"": model})
    assert result.ok, result.error
    data = TimelineData.from_trace(result.trace)
    assert _names(data, "stages") == ["model"]
    assert data.lanes_of("module") and data.lanes_of("cpu") and not data.lanes_of("kernel")
    assert len(data.syncs) == 0 and len(data.copies) == 0
    hits = data.matches("inner.lin")
    assert any(data.lanes[li].kind == "cpu" for li in hits)  # aten::linear inside it
    path = write_trace(result.chrome, tmp_path / "cpu.trace.json.gz")
    again = load_timeline(path)
    assert [lane.name for lane in again.lanes] == [lane.name for lane in data.lanes]
    plain = tmp_path / "cpu.trace.json"
    plain.write_bytes(gzip.decompress(path.read_bytes()))
    assert load_timeline(plain).items == again.items
