"""A capture as drawable lanes: built once from a parsed Trace, numpy arrays only (no Qt).

Lanes, top to bottom: trackscope's stage ranges; module call ranges, one lane per nesting depth; per
host thread its CPU ops (one lane per op nesting depth, up to ``CPU_DEPTHS``; deeper ops are folded
into the last one) and its CUDA API calls; per CUDA stream its kernels and its memcpy/memset. Each
lane holds parallel arrays: ``start_ms``/``dur_ms`` (ms from the start of the captured run's
window), ``label`` (index into ``names``), ``cls`` (index into ``classes``: the colour class, e.g.
``kernel gemm tc bf16`` or ``memcpy DtoH pageable``) and the ``stage``/``module`` the item is
attributed to (indices into ``names``, -1 for none), by the same rules as
``engine.capture.attribution``: time containment on the item's thread, through the launching call's
correlation id for GPU work. Point markers: host syncs (``cudaStreamSynchronize``, ...) and copies
(direction, pageable or pinned, bytes).

At most ``MAX_ITEMS`` items are kept (stage and module ranges always): the longest CPU ops, API
calls, kernels and copies; ``dropped`` says how many were left out, per lane and in all.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from engine.capture.attribution import FORWARD_BODY, OUTSIDE_STAGES, STAGE_BODY, forward_body, innermost
from engine.capture.kernels import classify
from engine.capture.trace import MAX_TRACE_BYTES, MAX_TRACE_EVENTS, Trace, collection_paused, read_trace

MAX_ITEMS = 200_000
CPU_DEPTHS = 3  # CPU op lanes per thread; deeper ops are drawn in the last one
_FB_PREFIX, _FB_SUFFIX = FORWARD_BODY.split("{}")


@dataclass
class Lane:
    """One row of the timeline: items sorted by start."""

    name: str
    kind: str  # stage | module | cpu | runtime | kernel | copy
    start_ms: np.ndarray
    dur_ms: np.ndarray
    label: np.ndarray  # int32 index into TimelineData.names
    cls: np.ndarray  # int16 index into TimelineData.classes
    stage: np.ndarray  # int32 index into names, -1
    module: np.ndarray  # int32 index into names, -1
    dropped: int = 0

    def __len__(self) -> int:
        return int(self.start_ms.size)

    @property
    def end_ms(self) -> np.ndarray:
        return self.start_ms + self.dur_ms

    def take(self, keep: np.ndarray) -> Lane:
        dropped = self.dropped + int(self.start_ms.size - np.count_nonzero(keep))
        return Lane(self.name, self.kind, self.start_ms[keep], self.dur_ms[keep], self.label[keep], self.cls[keep],
                    self.stage[keep], self.module[keep], dropped)


@dataclass
class Markers:
    """Point events (host syncs, copies): their time, duration, name and class."""

    time_ms: np.ndarray
    dur_ms: np.ndarray
    label: np.ndarray  # index into names
    cls: np.ndarray  # index into classes
    bytes: np.ndarray  # int64 (copies; 0 for syncs)

    def __len__(self) -> int:
        return int(self.time_ms.size)


def _empty_markers() -> Markers:
    return Markers(np.zeros(0), np.zeros(0), np.zeros(0, np.int32), np.zeros(0, np.int16), np.zeros(0, np.int64))


@dataclass
class TimelineData:
    lanes: list[Lane] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    classes: list[str] = field(default_factory=list)
    syncs: Markers = field(default_factory=_empty_markers)
    copies: Markers = field(default_factory=_empty_markers)
    window_ms: float = 0.0
    dropped: int = 0
    max_items: int = MAX_ITEMS
    events_left_out: int = 0  # events of the file past the read cap (load_timeline), never parsed into lanes
    max_events: int = MAX_TRACE_EVENTS

    @property
    def items(self) -> int:
        return sum(len(lane) for lane in self.lanes)

    def lane(self, name: str) -> Lane:
        for lane in self.lanes:
            if lane.name == name:
                return lane
        raise KeyError(name)

    def lanes_of(self, kind: str) -> list[Lane]:
        return [lane for lane in self.lanes if lane.kind == kind]

    def item(self, lane_index: int, i: int) -> dict[str, Any]:
        """One item as plain values: lane, name, class, start/duration ms, stage, module."""
        lane = self.lanes[lane_index]
        stage, module = int(lane.stage[i]), int(lane.module[i])
        return {"lane": lane.name, "kind": lane.kind, "name": self.names[int(lane.label[i])],
                "cls": self.classes[int(lane.cls[i])], "start_ms": float(lane.start_ms[i]),
                "dur_ms": float(lane.dur_ms[i]), "stage": self.names[stage] if stage >= 0 else "",
                "module": self.names[module] if module >= 0 else ""}

    def item_at(self, lane_index: int, t_ms: float, tol_ms: float = 0.0) -> int | None:
        """The shortest item of a lane covering ``t_ms`` (within ``tol_ms``), or None."""
        if not 0 <= lane_index < len(self.lanes):
            return None
        lane = self.lanes[lane_index]
        hit = np.flatnonzero((lane.start_ms <= t_ms + tol_ms) & (lane.end_ms >= t_ms - tol_ms))
        if hit.size == 0:
            return None
        return int(hit[np.argmin(lane.dur_ms[hit])])

    def matches(self, name: str, stage: str | None = None) -> dict[int, np.ndarray]:
        """Items about ``name`` per lane index (indices into the lane's arrays).

        ``name`` is a kernel or op name, a stage, a module path (its calls, and the work in it and in
        its sub-modules) or a bucket (``(forward body of X)``: X's calls and the work in X's own body;
        ``(stage body)``, ``(outside stages)``). ``stage`` restricts the match to work in that stage.
        """
        index = {n: i for i, n in enumerate(self.names)}
        labels: set[int] = set()  # items named so
        buckets: set[int] = set()  # items attributed to it (module or stage)
        if name in index:
            labels.add(index[name])
            buckets.add(index[name])
        if name.startswith(_FB_PREFIX) and name.endswith(_FB_SUFFIX):
            owner = name[len(_FB_PREFIX):len(name) - len(_FB_SUFFIX)]
            if owner in index:
                labels.add(index[owner])
        elif name and name not in (STAGE_BODY, OUTSIDE_STAGES):
            prefix = name + "."
            for n, i in index.items():  # a module path covers its sub-modules and their bodies
                if n.startswith(prefix) or n == forward_body(name) or (
                        n.startswith(_FB_PREFIX + prefix) and n.endswith(_FB_SUFFIX)):
                    buckets.add(i)
        if not labels and not buckets:
            return {}
        stage_idx = index.get(stage, -2) if stage else None
        lab = np.fromiter(labels, np.int64, len(labels))
        buck = np.fromiter(buckets, np.int64, len(buckets))
        out: dict[int, np.ndarray] = {}
        for li, lane in enumerate(self.lanes):
            if lane.kind == "stage":
                mask = np.isin(lane.label, lab)
            else:
                mask = np.isin(lane.label, lab) | np.isin(lane.module, buck) | np.isin(lane.stage, buck)
            if stage_idx is not None:
                mask &= lane.stage == stage_idx
            hit = np.flatnonzero(mask)
            if hit.size:
                out[li] = hit
        return out

    def extent(self, hits: dict[int, np.ndarray]) -> tuple[float, float] | None:
        """(start, end) ms spanning the given items."""
        if not hits:
            return None
        starts = [float(self.lanes[li].start_ms[i].min()) for li, i in hits.items()]
        ends = [float(self.lanes[li].end_ms[i].max()) for li, i in hits.items()]
        return min(starts), max(ends)

    @classmethod
    def from_trace(cls, trace: Trace, max_items: int = MAX_ITEMS) -> TimelineData:
        return _Builder(trace).build(max_items)


def load_timeline(path: str | Path, max_items: int = MAX_ITEMS, *, max_bytes: int = MAX_TRACE_BYTES,
                  max_events: int = MAX_TRACE_EVENTS, cancel: threading.Event | None = None) -> TimelineData:
    """Read a Chrome trace file (gzipped or not) and build its timeline, bounded (``engine.capture.trace.read_trace``:
    a file past ``max_bytes`` of JSON is refused with a TraceError; past ``max_events`` the rest are left out and
    ``events_left_out`` says how many; ``cancel`` set ends the read with TraceCancelled)."""
    with collection_paused():  # the events die here, as numpy arrays take their place: never walked by the collector
        trace = read_trace(path, max_bytes=max_bytes, max_events=max_events, cancel=cancel)
        data = TimelineData.from_trace(trace, max_items)
        data.events_left_out = int(trace.meta.get("events_left_out", 0))
        _release(trace)
        del trace
    data.max_events = max_events
    return data


#: events freed per step when a parsed trace goes (one ``del`` of 500k events held the GIL ~100 ms)
RELEASE_CHUNK = 20_000


def _release(trace: Trace) -> None:
    """Free a trace's events a chunk at a time, so another thread (the app's window) gets the GIL in between."""
    for name in ("cpu_ops", "runtime", "kernels", "copies", "stages", "modules", "runs", "python", "annotations",
                 "memory"):
        items = getattr(trace, name, None)
        while items:
            del items[-RELEASE_CHUNK:]


# -- building -------------------------------------------------------------------------------------------
def _depths(items: Sequence[Any]) -> tuple[list[int], set[int]]:
    """Nesting depth of each range (sorted by start, longest first) and the indices that contain others."""
    depths: list[int] = []
    parents: set[int] = set()
    stack: list[int] = []
    for i, r in enumerate(items):
        while stack and items[stack[-1]].end <= r.start:
            stack.pop()
        if stack:
            parents.add(stack[-1])
        depths.append(len(stack))
        stack.append(i)
    return depths, parents


def _copy_class(op: str, direction: str, src: str, dst: str) -> str:
    if op == "memset":
        return "memset"
    memory = "pageable" if "Pageable" in (src, dst) else "pinned" if "Pinned" in (src, dst) else ""
    return " ".join(p for p in ("memcpy", direction or "?", memory) if p)


def _kernel_class(name: str, cache: dict[str, str]) -> str:
    label = cache.get(name)
    if label is None:
        k = classify(name)
        parts = ["kernel", k.kind]
        if k.tensor_core is not None:
            parts.append("tc" if k.tensor_core else "simt")
        if k.precision:
            parts.append(k.precision)
        label = cache[name] = " ".join(parts)
    return label


def _fmt_bytes(n: int) -> str:
    for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def _intern(text: str, table: list[str], index: dict[str, int]) -> int:
    """The index of ``text`` in ``table``, appended the first time it is seen."""
    i = index.get(text)
    if i is None:
        i = index[text] = len(table)
        table.append(text)
    return i


class _Builder:
    def __init__(self, trace: Trace):
        self.trace = trace
        self.names: list[str] = []
        self.name_index: dict[str, int] = {}
        self.classes: list[str] = []
        self.class_index: dict[str, int] = {}

    def name(self, text: str) -> int:
        return _intern(text, self.names, self.name_index)

    def cls(self, text: str) -> int:
        return _intern(text, self.classes, self.class_index)

    def lane(self, name: str, kind: str, rows: list[tuple[float, float, int, int, int, int]]) -> Lane:
        rows.sort(key=lambda r: (r[0], -r[1]))
        # converted a chunk at a time: one np.array over 500k tuples held the GIL ~100 ms (the window stalled)
        chunks = [np.array(rows[i:i + RELEASE_CHUNK], dtype=np.float64).reshape(-1, 6)
                  for i in range(0, len(rows), RELEASE_CHUNK)]
        a = np.concatenate(chunks) if chunks else np.zeros((0, 6))
        return Lane(name, kind, (a[:, 0] - self.t0) / 1e3, a[:, 1] / 1e3, a[:, 2].astype(np.int32),
                    a[:, 3].astype(np.int16), a[:, 4].astype(np.int32), a[:, 5].astype(np.int32))

    def build(self, max_items: int) -> TimelineData:
        t = self.trace
        window = t.run_window
        if window is None:
            spans = [(e.start, e.end) for e in t.kernels] + [(e.start, e.end) for e in t.copies]
            if not spans:
                return TimelineData(max_items=max_items)
            window = min(s for s, _ in spans), max(e for _, e in spans)
        self.t0, t1 = window

        def inside(e: Any) -> bool:
            return e.end >= self.t0 and e.start <= t1

        stages = [r for r in t.stages if inside(r)]
        modules = [r for r in t.modules if inside(r)]
        cpu_ops = [e for e in t.cpu_ops if inside(e)]
        runtime = [e for e in t.runtime if inside(e)]
        kernels = [e for e in t.kernels if inside(e)]
        copies = [e for e in t.copies if inside(e)]

        # attribution of host events: innermost stage and module on their own thread, at their midpoint
        tids = sorted({e.tid for e in cpu_ops} | {e.tid for e in runtime} | {r.tid for r in stages}
                      | {r.tid for r in modules})
        stages_by = {tid: [r for r in stages if r.tid == tid] for tid in tids}
        modules_by = {tid: [r for r in modules if r.tid == tid] for tid in tids}
        module_nest = {tid: _depths(rs) for tid, rs in modules_by.items()}  # (depths, parent indices)

        def keys(tid: int, events: Sequence[Any]) -> list[tuple[int, int]]:
            mids = [e.start + e.dur / 2 for e in events]
            s_rs, m_rs = stages_by.get(tid, []), modules_by.get(tid, [])
            parents = module_nest[tid][1] if tid in module_nest else set()
            out = []
            for si, mi in zip(innermost(s_rs, mids), innermost(m_rs, mids)):
                stage = s_rs[si].label if si >= 0 else OUTSIDE_STAGES
                if mi >= 0:
                    module = forward_body(m_rs[mi].label) if mi in parents else m_rs[mi].label
                else:
                    module = STAGE_BODY if si >= 0 else OUTSIDE_STAGES
                out.append((self.name(stage), self.name(module)))
            return out

        lanes: list[Lane] = []
        # stages
        rows = []
        for tid in tids:
            for r in stages_by[tid]:
                i = self.name(r.label)
                rows.append((r.start, r.dur, i, self.cls("stage"), i, -1))
        if rows:
            lanes.append(self.lane("stages", "stage", rows))
        # modules by depth
        module_tids = [tid for tid in tids if modules_by[tid]]
        for tid in module_tids:
            rs = modules_by[tid]
            depths, parents = module_nest[tid]
            ks = keys(tid, rs)
            by_depth: dict[int, list] = {}
            for j, (r, d, (si, _)) in enumerate(zip(rs, depths, ks)):
                own = self.name(forward_body(r.label) if j in parents else r.label)
                by_depth.setdefault(d, []).append((r.start, r.dur, self.name(r.label), self.cls("module"), si, own))
            suffix = f" (thread {tid})" if len(module_tids) > 1 else ""
            for d in sorted(by_depth):
                lanes.append(self.lane(f"modules {d}{suffix}", "module", by_depth[d]))
        # CPU ops and API calls per thread
        corr: dict[int, tuple[int, int]] = {}
        host_tids = [tid for tid in tids if any(e.tid == tid for e in cpu_ops) or any(e.tid == tid for e in runtime)]
        main = t.main_tid
        host_tids.sort(key=lambda tid: (tid != main, tid))
        host_lanes: list[Lane] = []
        for tid in host_tids:
            ops = [e for e in cpu_ops if e.tid == tid]
            if ops:
                depths, _ = _depths(ops)
                by_depth = {}
                for e, d, (si, mi) in zip(ops, depths, keys(tid, ops)):
                    by_depth.setdefault(min(d, CPU_DEPTHS - 1), []).append(
                        (e.start, e.dur, self.name(e.name), self.cls("cpu op"), si, mi))
                for d in sorted(by_depth):
                    more = "+" if d == CPU_DEPTHS - 1 and max(depths) > d else ""
                    host_lanes.append(self.lane(f"CPU ops {d}{more} (thread {tid})", "cpu", by_depth[d]))
            calls = [e for e in runtime if e.tid == tid]
            if calls:
                rows = []
                for call, (si, mi) in zip(calls, keys(tid, calls)):
                    rows.append((call.start, call.dur, self.name(call.name), self.cls(f"api {call.kind}"), si, mi))
                    if call.correlation is not None:
                        corr[call.correlation] = (si, mi)
                host_lanes.append(self.lane(f"CUDA API (thread {tid})", "runtime", rows))
        # GPU work per stream, attributed through the launching call
        gpu_lanes: list[Lane] = []
        cache: dict[str, str] = {}
        for stream in sorted({k.stream for k in kernels} | {c.stream for c in copies}):
            rows = []
            for k in kernels:
                if k.stream == stream:
                    si, mi = corr.get(k.correlation, (-1, -1)) if k.correlation is not None else (-1, -1)
                    rows.append((k.start, k.dur, self.name(k.name), self.cls(_kernel_class(k.name, cache)), si, mi))
            if rows:
                gpu_lanes.append(self.lane(f"stream {stream} kernels", "kernel", rows))
            rows = []
            for c in copies:
                if c.stream == stream:
                    si, mi = corr.get(c.correlation, (-1, -1)) if c.correlation is not None else (-1, -1)
                    text = f"Memset {_fmt_bytes(c.bytes)}" if c.op == "memset" else \
                        f"Memcpy {c.direction} ({c.src} -> {c.dst}) {_fmt_bytes(c.bytes)}"
                    kind = self.cls(_copy_class(c.op, c.direction, c.src, c.dst))
                    rows.append((c.start, c.dur, self.name(text), kind, si, mi))
            if rows:
                gpu_lanes.append(self.lane(f"stream {stream} copies", "copy", rows))

        # bound: ranges always stay; of the rest, the longest
        bounded = host_lanes + gpu_lanes
        budget = max(0, max_items - sum(len(lane) for lane in lanes))
        total = sum(len(lane) for lane in bounded)
        dropped = 0
        if total > budget:
            durs = np.concatenate([lane.dur_ms for lane in bounded])
            keep = np.zeros(total, bool)
            if budget:
                keep[np.argpartition(-durs, budget - 1)[:budget]] = True
            out, pos = [], 0
            for lane in bounded:
                sub = lane.take(keep[pos:pos + len(lane)])
                pos += len(lane)
                if len(sub):
                    out.append(sub)
                dropped += sub.dropped
            bounded = out
            host_lanes = [lane for lane in bounded if lane.kind in ("cpu", "runtime")]
            gpu_lanes = [lane for lane in bounded if lane.kind in ("kernel", "copy")]
        lanes += host_lanes + gpu_lanes

        # markers
        sync_calls = [e for e in runtime if e.kind == "sync"]
        syncs = Markers(np.array([(e.start - self.t0) / 1e3 for e in sync_calls], np.float64).reshape(-1),
                        np.array([e.dur / 1e3 for e in sync_calls], np.float64).reshape(-1),
                        np.array([self.name(e.name) for e in sync_calls], np.int32).reshape(-1),
                        np.array([self.cls("sync") for _ in sync_calls], np.int16).reshape(-1),
                        np.zeros(len(sync_calls), np.int64))
        memcpys = [c for c in copies if c.op == "memcpy"]
        copy_marks = Markers(
            np.array([(c.start - self.t0) / 1e3 for c in memcpys], np.float64).reshape(-1),
            np.array([c.dur / 1e3 for c in memcpys], np.float64).reshape(-1),
            np.array([self.name(f"Memcpy {c.direction} ({c.src} -> {c.dst}) {_fmt_bytes(c.bytes)}")
                      for c in memcpys], np.int32).reshape(-1),
            np.array([self.cls(_copy_class(c.op, c.direction, c.src, c.dst)) for c in memcpys], np.int16).reshape(-1),
            np.array([c.bytes for c in memcpys], np.int64).reshape(-1))
        return TimelineData(lanes, self.names, self.classes, syncs, copy_marks, (t1 - self.t0) / 1e3, dropped,
                            max_items)
