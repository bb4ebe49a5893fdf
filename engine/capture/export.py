"""Write a capture as a gzipped Chrome/Perfetto trace (ui.perfetto.dev, chrome://tracing, HTA).

trackscope's stages and module calls are ranges in it (``trackscope.stage:NAME`` and
``trackscope.module:PATH`` user annotations); the captured run is ``trackscope.run``. To keep a
1024-query run's file small, Python frames are kept only where they explain something: the frames
enclosing a host sync (its call site and the chain above it, up to ``PYTHON_CHAIN``), the non-library
frames above each kernel launch (so the function rows can be recomputed from the file) and frames of
user code longer than ``PYTHON_MIN_US``. The write is atomic (engine.core.atomic).

Viewers need the complete ('X') events of one thread to nest. trackscope's ranges are opened and
closed inside Python hooks, so on the profiled thread they cross the hooks' Python frames (and a
stage opened inside a module's forward crosses that module's range): the file puts them on tracks
of their own, one for the run and its stages and one for module calls per profiled thread (named
"trackscope stages (thread N)"; ``args["trackscope.tid"]`` keeps N, so the parsed Trace is the same
as the profiler's). What still crosses its parent on a thread or stream (profiler rounding, a few
ns) is clipped to the parent's end; ``nesting_problems`` checks a trace. The file's ``traceName`` is
its own name and ``distributedInfo`` gives its rank (HolisticTraceAnalysis reads a folder of traces
as one trace per rank).
"""

from __future__ import annotations

import bisect
import gzip
import json
from pathlib import Path
from typing import Any, Iterator, Mapping

from engine.capture.attribution import is_library_file
from engine.capture.trace import MODULE_PREFIX, PY_FRAME, RUN_RANGE, SOURCE_TID_ARG, STAGE_PREFIX, runtime_kind
from engine.core.atomic import atomic_open

PYTHON_MIN_US = 200.0  # user-code python frames at least this long stay in the file
PYTHON_CHAIN = 12  # frames kept above each sync
PYTHON_LAUNCH_DEPTH = 64  # frames walked above each kernel launch for the user's frames among them
#: the pseudo-thread ids of trackscope's own tracks: this plus 2 x (profiled thread's ordinal) (+1 for modules),
#: far above any Linux thread id (pid_max is at most 2**22)
OWN_TRACK_TID = 1_000_000_000
#: the distributedInfo of a capture made in one process (HolisticTraceAnalysis reads it as its rank)
SINGLE_PROCESS = {"rank": 0, "world_size": 1, "backend": "none"}


def _slim_python(events: list[Any]) -> list[Any]:
    frames = [e for e in events if isinstance(e, Mapping) and e.get("cat") == "python_function"]
    if not frames:
        return events
    by_id = {}
    for f in frames:
        pid = (f.get("args") or {}).get("Python id")
        if pid is not None:
            by_id[(f.get("tid"), pid)] = f
    keep: set[int] = set()
    runtime = [e for e in events if isinstance(e, Mapping) and e.get("cat") in ("cuda_runtime", "cuda_driver")]
    syncs = [e for e in runtime if runtime_kind(str(e.get("name", ""))) == "sync"]
    launches = [e for e in runtime if runtime_kind(str(e.get("name", ""))) == "launch"]
    # innermost frame containing each sync: frames sorted by start, scanned per thread
    by_tid: dict[Any, list[Any]] = {}
    for f in frames:
        by_tid.setdefault(f.get("tid"), []).append(f)
    for tid_frames in by_tid.values():
        tid_frames.sort(key=lambda f: (float(f.get("ts", 0)), -float(f.get("dur", 0))))
    starts = {tid: [float(f.get("ts", 0)) for f in fs] for tid, fs in by_tid.items()}
    for s in syncs:
        fs = by_tid.get(s.get("tid"), [])
        t = float(s.get("ts", 0))
        i = bisect.bisect_right(starts.get(s.get("tid"), []), t) - 1
        # walk back to the nearest frame that contains the sync (the innermost one)
        while i >= 0 and float(fs[i].get("ts", 0)) + float(fs[i].get("dur", 0)) < t:
            i -= 1
        frame = fs[i] if i >= 0 else None
        for _ in range(PYTHON_CHAIN):
            if frame is None:
                break
            keep.add(id(frame))
            parent = (frame.get("args") or {}).get("Python parent id")
            frame = by_id.get((frame.get("tid"), parent))
    # the user's (and trackscope's) frames above each kernel launch: its function row and the frames above it
    # (gather's function rows name a kernel by its innermost non-library frame and whether a user frame is above)
    walked: set[int] = set()
    for launch in launches:
        fs = by_tid.get(launch.get("tid"), [])
        t = float(launch.get("ts", 0)) + float(launch.get("dur", 0)) / 2
        i = bisect.bisect_right(starts.get(launch.get("tid"), []), t) - 1
        while i >= 0 and float(fs[i].get("ts", 0)) + float(fs[i].get("dur", 0)) < t:
            i -= 1
        frame = fs[i] if i >= 0 else None
        for _ in range(PYTHON_LAUNCH_DEPTH):
            if frame is None or id(frame) in walked:
                break
            walked.add(id(frame))
            m = PY_FRAME.match(str(frame.get("name", "")))
            if m and not is_library_file(m.group("file")):
                keep.add(id(frame))
            frame = by_id.get((frame.get("tid"), (frame.get("args") or {}).get("Python parent id")))
    for f in frames:
        m = PY_FRAME.match(str(f.get("name", "")))
        if m and float(f.get("dur", 0)) >= PYTHON_MIN_US and not is_library_file(m.group("file")):
            keep.add(id(f))
    return [e for e in events if not (isinstance(e, Mapping) and e.get("cat") == "python_function")
            or id(e) in keep]


def _own_track(event: Mapping[str, Any]) -> int | None:
    """0 for the run and stage ranges, 1 for module ranges, None for the profiler's events."""
    if event.get("cat") != "user_annotation" or event.get("ph", "X") != "X":
        return None
    name = str(event.get("name", ""))
    if name == RUN_RANGE or name.startswith(STAGE_PREFIX):
        return 0
    return 1 if name.startswith(MODULE_PREFIX) else None


def _move_own_ranges(events: list[Any]) -> list[Any]:
    """trackscope's ranges onto their own pseudo-threads (with thread-name metadata), the source tid in args."""
    ordinals: dict[tuple[Any, Any], int] = {}
    out: list[Any] = []
    for e in events:
        track = _own_track(e) if isinstance(e, Mapping) else None
        if track is None:
            out.append(e)
            continue
        key = (e.get("pid"), e.get("tid"))
        ordinal = ordinals.setdefault(key, len(ordinals))
        args = e.get("args") if isinstance(e.get("args"), Mapping) else {}
        out.append({**e, "tid": OWN_TRACK_TID + 2 * ordinal + track,
                    "args": {**args, SOURCE_TID_ARG: e.get("tid")}})
    for (pid, tid), ordinal in ordinals.items():
        for track, what in ((0, "stages"), (1, "modules")):
            own = OWN_TRACK_TID + 2 * ordinal + track
            out.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": own,
                        "args": {"name": f"trackscope {what} (thread {tid})"}})
            out.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": own,
                        "args": {"sort_index": -2 + track}})
    return out


def _ns(value: Any) -> int:
    try:
        return round(float(value) * 1000)
    except (TypeError, ValueError):
        return 0


def _complete_by_thread(events: list[Any]) -> dict[tuple[Any, Any], list[int]]:
    """Indices of the complete events per (pid, tid), sorted by start (ns) and longest first."""
    by: dict[tuple[Any, Any], list[int]] = {}
    for i, e in enumerate(events):
        if isinstance(e, Mapping) and e.get("ph") == "X":
            by.setdefault((e.get("pid"), e.get("tid")), []).append(i)
    for indices in by.values():
        indices.sort(key=lambda i: (_ns(events[i].get("ts")), -_ns(events[i].get("dur"))))
    return by


def _crossings(events: list[Any], indices: list[int]) -> Iterator[tuple[int, int, int]]:
    """(parent index, child index, parent end ns) for each event that starts inside its parent and ends after."""
    stack: list[tuple[int, int]] = []  # (index, end ns)
    for i in indices:
        start = _ns(events[i].get("ts"))
        end = start + max(0, _ns(events[i].get("dur")))
        while stack and stack[-1][1] <= start:
            stack.pop()
        if stack and end > stack[-1][1]:
            yield stack[-1][0], i, stack[-1][1]
            end = stack[-1][1]
        stack.append((i, end))


def _clip_to_nest(events: list[Any]) -> list[Any]:
    """Events that still cross their parent on a thread end where it ends (copies; the input is not changed)."""
    out = list(events)
    for indices in _complete_by_thread(out).values():
        for _parent, i, parent_end in _crossings(out, indices):
            out[i] = {**out[i], "dur": (parent_end - _ns(out[i].get("ts"))) / 1000}
    return out


def nesting_problems(chrome: Mapping[str, Any] | list, limit: int = 20) -> list[str]:
    """Complete events that start inside another on the same (pid, tid) and end after it (at most ``limit``).

    An empty list means every thread's and stream's ranges nest, as Perfetto and chrome://tracing need.
    Times are compared in whole ns, as Perfetto reads them.
    """
    events = chrome if isinstance(chrome, list) else list(chrome.get("traceEvents", []))
    problems: list[str] = []
    for (pid, tid), indices in _complete_by_thread(events).items():
        for parent, child, _end in _crossings(events, indices):
            problems.append(f"pid {pid} tid {tid}: {events[child].get('name')!r} crosses the end of "
                            f"{events[parent].get('name')!r}")
            if len(problems) >= limit:
                return problems
    return problems


def slim_chrome_trace(chrome: Mapping[str, Any], *, keep_python: bool = False) -> dict[str, Any]:
    """The trace as written: Python frames reduced to the useful ones (all of them with ``keep_python``),
    trackscope's ranges on their own tracks, every thread's ranges nested."""
    events = list(chrome.get("traceEvents", []))
    if not keep_python:
        events = _slim_python(events)
    events = _clip_to_nest(_move_own_ranges(events))
    return {**{k: v for k, v in chrome.items() if k != "traceEvents"}, "traceEvents": events}


def write_trace(chrome: Mapping[str, Any], path: str | Path, *, keep_python: bool = False,
                rank: int = 0, world_size: int = 1) -> Path:
    """Write ``chrome`` (a profiler Chrome trace) gzipped to ``path``, atomically; returns the path.

    ``traceName`` becomes the file's name and ``distributedInfo`` says ``rank`` of ``world_size`` (one
    process: 0 of 1). The file gets the umask's mode; an interrupted or refused write leaves the previous
    file and no temp file.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # distributedInfo first and '": "' after keys: HolisticTraceAnalysis finds a file's rank with the regex
    # '"rank":\s+(\d+)' at its first match (hta/common/trace_file.py), so a compact '"rank":1' reads as rank 0
    data = {"distributedInfo": {**SINGLE_PROCESS, "rank": rank, "world_size": max(world_size, rank + 1)},
            **slim_chrome_trace(chrome, keep_python=keep_python)}
    data["traceName"] = path.name
    with atomic_open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=6, mtime=0) as gz:
        gz.write(json.dumps(data, separators=(",", ": ")).encode("utf-8"))
    return path
