"""Write a capture as a gzipped Chrome/Perfetto trace (ui.perfetto.dev, chrome://tracing).

trackscope's stages and module calls are already ranges in it (``trackscope.stage:NAME`` and
``trackscope.module:PATH`` user annotations); the captured run is ``trackscope.run``. To keep a
1024-query run's file small, Python frames are kept only where they explain something: the frames
enclosing a host sync (its call site and the chain above it, up to ``PYTHON_CHAIN``) and frames of
user code longer than ``PYTHON_MIN_US``. The write is atomic (engine.core.atomic).
"""

from __future__ import annotations

import bisect
import gzip
import json
from pathlib import Path
from typing import Any, Mapping

from engine.capture.attribution import is_library_file
from engine.capture.trace import PY_FRAME, runtime_kind
from engine.core.atomic import atomic_open

PYTHON_MIN_US = 200.0  # user-code python frames at least this long stay in the file
PYTHON_CHAIN = 12  # frames kept above each sync


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
    syncs = [e for e in events if isinstance(e, Mapping) and e.get("cat") in ("cuda_runtime", "cuda_driver")
             and runtime_kind(str(e.get("name", ""))) == "sync"]
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
    for f in frames:
        m = PY_FRAME.match(str(f.get("name", "")))
        if m and float(f.get("dur", 0)) >= PYTHON_MIN_US and not is_library_file(m.group("file")):
            keep.add(id(f))
    return [e for e in events if not (isinstance(e, Mapping) and e.get("cat") == "python_function")
            or id(e) in keep]


def slim_chrome_trace(chrome: Mapping[str, Any], *, keep_python: bool = False) -> dict[str, Any]:
    """The trace with Python frames reduced to the useful ones (all of them with ``keep_python``)."""
    events = list(chrome.get("traceEvents", []))
    if not keep_python:
        events = _slim_python(events)
    return {**{k: v for k, v in chrome.items() if k != "traceEvents"}, "traceEvents": events}


def write_trace(chrome: Mapping[str, Any], path: str | Path, *, keep_python: bool = False) -> Path:
    """Write ``chrome`` (a profiler Chrome trace) gzipped to ``path``, atomically; returns the path.

    The file gets the umask's mode; an interrupted or refused write leaves the previous file and no temp file.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = slim_chrome_trace(chrome, keep_python=keep_python)
    with atomic_open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=6, mtime=0) as gz:
        gz.write(json.dumps(data, separators=(",", ":")).encode("utf-8"))
    return path
