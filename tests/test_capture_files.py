"""The capture's files: bounded trace reading (issue 20 item 9) and a trace that viewers and HTA read (item 11)."""

from __future__ import annotations

import gzip
import json
import re

import pytest

from engine.capture import trace as trace_module
from engine.capture.export import nesting_problems, write_trace
from engine.capture.timeline import load_timeline
from engine.capture.trace import STAGE_PREFIX, TraceError, load_chrome_trace, parse_chrome_trace, read_trace
from tests.plugins import planted_capture
from tests.test_capture import _session_capture

MiB = 2**20


def _events(n: int) -> list[dict]:
    return [{"ph": "X", "cat": "cpu_op", "name": f"aten::op{i % 7}", "pid": 1, "tid": 1, "ts": float(i), "dur": 0.5,
             "args": {"Input Dims": [[2, 3]]}} for i in range(n)]


def test_a_gzip_bomb_is_refused_without_inflating_it(tmp_path, monkeypatch):
    path = tmp_path / "bomb.trace.json.gz"
    with gzip.open(path, "wb", compresslevel=1) as gz:
        gz.write(b'{"traceEvents": [' + b" " * (48 * MiB) + b"]}")
    assert path.stat().st_size < MiB
    inflated = [0]
    real_read = gzip.GzipFile.read

    def counting_read(self, size=-1):
        chunk = real_read(self, size)
        inflated[0] += len(chunk)
        return chunk

    monkeypatch.setattr(gzip.GzipFile, "read", counting_read)
    with pytest.raises(TraceError, match="inflates to more than 4 MiB"):
        read_trace(path, max_bytes=4 * MiB)
    assert 4 * MiB < inflated[0] <= 4 * MiB + 1  # the limit and one byte, never the 48 MiB
    with pytest.raises(TraceError, match="more than 4 MiB"):
        load_timeline(path, max_bytes=4 * MiB)


def test_a_plain_file_past_the_limit_and_garbage_are_refused_with_a_message(tmp_path):
    big = tmp_path / "big.json"
    big.write_text(json.dumps({"traceEvents": _events(20_000)}))
    with pytest.raises(TraceError, match="holds more than"):
        read_trace(big, max_bytes=MiB)
    junk = tmp_path / "junk.json.gz"
    junk.write_bytes(b"\x1f\x8b not a gzip stream")
    with pytest.raises(TraceError, match="cannot read"):
        read_trace(junk)
    text = tmp_path / "text.json"
    text.write_text("{not json")
    with pytest.raises(TraceError, match="not JSON"):
        load_chrome_trace(text)


def test_a_many_event_trace_is_capped_and_says_so(tmp_path):
    path = tmp_path / "many.trace.json.gz"
    with gzip.open(path, "wt") as fh:
        json.dump({"traceEvents": _events(5_000), "traceName": "many"}, fh)
    trace = read_trace(path, max_events=1_000)
    assert len(trace.cpu_ops) == 1_000 and trace.meta["events_left_out"] == 4_000
    assert trace.meta["traceName"] == "many"
    assert [op.start for op in trace.cpu_ops] == [float(i) for i in range(1_000)]  # the first ones, in order
    timeline = load_timeline(path, max_events=1_000)
    assert timeline.events_left_out == 4_000 and timeline.items == 1_000
    uncapped = read_trace(path)
    assert len(uncapped.cpu_ops) == 5_000 and "events_left_out" not in uncapped.meta
    assert trace_module.MAX_TRACE_EVENTS >= 100_000  # the stated cap reads every capture recorded here


@pytest.fixture(scope="module")
def cpu_capture():
    result = _session_capture(planted_capture.deep_nested)
    assert result.ok, result.error
    return result


def test_the_exported_trace_nests_per_thread_and_parses_as_the_profiler_wrote_it(cpu_capture, tmp_path):
    assert nesting_problems(cpu_capture.chrome)  # the profiler's own file: ranges cross hook frames
    path = write_trace(cpu_capture.chrome, tmp_path / "deep.trace.json.gz", keep_python=True)
    data = load_chrome_trace(path)
    assert nesting_problems(data) == []
    threads = {e["args"]["name"] for e in data["traceEvents"] if e.get("ph") == "M" and e["name"] == "thread_name"}
    assert any(t.startswith("trackscope stages (thread ") for t in threads)
    stage_tids = {e["tid"] for e in data["traceEvents"] if str(e.get("name", "")).startswith(STAGE_PREFIX)}
    op_tids = {e["tid"] for e in data["traceEvents"] if e.get("cat") == "cpu_op"}
    assert stage_tids and not stage_tids & op_tids  # the stages have a track of their own
    before, after = cpu_capture.trace, read_trace(path)
    assert after.stages == before.stages and after.modules == before.modules and after.runs == before.runs
    assert after.cpu_ops == before.cpu_ops  # same threads, same times: attribution reads the same Trace


def test_nesting_problems_names_a_crossing_range():
    events = [{"ph": "X", "name": "outer", "pid": 1, "tid": 2, "ts": 0.0, "dur": 10.0},
              {"ph": "X", "name": "inner", "pid": 1, "tid": 2, "ts": 5.0, "dur": 10.0},
              {"ph": "X", "name": "other thread", "pid": 1, "tid": 3, "ts": 5.0, "dur": 10.0}]
    problems = nesting_problems({"traceEvents": events})
    assert len(problems) == 1 and "'inner' crosses the end of 'outer'" in problems[0]


def test_the_trace_names_itself_and_its_rank(cpu_capture, tmp_path):
    one = load_chrome_trace(write_trace(cpu_capture.chrome, tmp_path / "a.trace.json.gz"))
    assert one["traceName"] == "a.trace.json.gz"
    assert one["distributedInfo"] == {"rank": 0, "world_size": 1, "backend": "none"}
    second = write_trace(cpu_capture.chrome, tmp_path / "b.trace.json.gz", rank=1, world_size=2)
    two = load_chrome_trace(second)
    assert two["distributedInfo"]["rank"] == 1 and two["distributedInfo"]["world_size"] == 2
    # HolisticTraceAnalysis takes a file's rank from the first match of this pattern in its text
    # (hta/common/trace_file.py, 0.5.0); a compact '"rank":1' did not match and read as rank 0
    text = gzip.decompress(second.read_bytes()).decode()
    assert re.search(r'"rank":\s+(\d+)', text).group(1) == "1"
    assert parse_chrome_trace(two).stages == cpu_capture.trace.stages
