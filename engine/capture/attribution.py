"""Attribute every event of a capture to (stage, innermost module), statelessly over a parsed Trace.

- A CPU op or CUDA runtime call: by time containment on its own thread (its midpoint, inside the
  innermost stage range and the innermost module range of that thread).
- A GPU kernel, memcpy or memset: through its launching runtime call (same correlation id).
- Module labels: a leaf module's work is its path (``updater.blocks.2.attn.qkv``); work of a module
  with children done between its children is ``(forward body of PATH)``; work in a stage outside any
  module is ``(stage body)``; outside every stage and module ``(outside stages)``.
- Wall time: the main thread's run window is cut at every stage and module boundary and each piece
  goes to the bucket its midpoint lies in, so the buckets' wall times add up to the run's wall.
- GPU idle: the run window minus the union of kernels and copies on all streams; each idle gap gets
  the bucket(s) the host was in and, where the record shows one, a cause (a host sync, a blocking copy).
- A sync's call site is the innermost Python frame of user code around it (torch's own frames and
  the capture's are skipped), as ``file:line function (.method)``; the profiler's Python tracer
  records function entries, so ``line`` is the line the function starts on, not the calling line.
"""

from __future__ import annotations

import bisect
import os
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch

from engine.capture.evidence import TRACKSCOPE
from engine.capture.kernels import FP32_SENSITIVE_OPS, REDUCED_TYPES, classify, stays_fp32
from engine.capture.sites import CodeLayers, Site, Stacks, nest_parents
from engine.capture.trace import Range, Trace

#: prefix of a call site in trackscope's own code (the session, the plugin adapter): never the user's
TRACKSCOPE_MARK = "trackscope: "
OUTSIDE_STAGES = "(outside stages)"
STAGE_BODY = "(stage body)"
UNATTRIBUTED = "(unattributed)"
FORWARD_BODY = "(forward body of {})"
#: idle gaps shorter than this are not listed one by one (they still count in the idle total)
GAP_LIST_MIN_US = 20.0
#: a sync or blocking copy whose return lies within this of a gap's start caused the gap
CAUSE_TOLERANCE_US = 50.0
#: copies smaller than this are scalars (``.item()``), not a host round trip of data
ROUND_TRIP_MIN_BYTES = 16 * 1024
#: at most this many kernel launches between the DtoH and the HtoD copy of a round trip
ROUND_TRIP_MAX_LAUNCHES = 2
#: frames from these folders are not call sites: torch itself, this package, the standard library
TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
CAPTURE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
STDLIB_DIR = os.path.dirname(os.__file__) + os.sep
LIBRARY_PARTS = (f"{os.sep}site-packages{os.sep}torch{os.sep}", f"{os.sep}dist-packages{os.sep}torch{os.sep}",
                 f"{os.sep}engine{os.sep}capture{os.sep}")
PACKAGE_DIRS = (f"{os.sep}site-packages{os.sep}", f"{os.sep}dist-packages{os.sep}")


def is_library_file(path: str) -> bool:
    """True for torch's, the standard library's and the capture's own files (a user's ``x/torch/y.py`` is not)."""
    if path.startswith((TORCH_DIR, CAPTURE_DIR, "<")) or any(part in path for part in LIBRARY_PARTS):
        return True
    return path.startswith(STDLIB_DIR) and not any(part in path for part in PACKAGE_DIRS)

Key = tuple[str, str]  # (stage, module label)


def forward_body(path: str) -> str:
    return FORWARD_BODY.format(path)


@dataclass
class Bucket:
    """What happened in one (stage, module label)."""

    wall_us: float = 0.0
    cpu_ops: int = 0
    kernel_us: float = 0.0
    kernels: int = 0
    launches: int = 0
    syncs: int = 0
    sync_us: float = 0.0
    copies: int = 0
    copy_bytes: int = 0
    copy_us: float = 0.0
    copies_by_direction: dict[str, list[float]] = field(default_factory=dict)  # dir -> [count, bytes, us]
    pageable_copies: int = 0
    pinned_copies: int = 0
    memsets: int = 0
    idle_us: float = 0.0


@dataclass
class Gap:
    start: float
    dur: float
    stage: str
    module: str
    cause: str  # sync | copy | host
    call_site: str | None = None


@dataclass
class RoundTrip:
    stage: str
    module: str
    dtoh_bytes: int
    htod_bytes: int
    host_us: float
    copy_us: float
    ops: list[str]


@dataclass
class Attribution:
    """The attributed capture (inputs to the summary)."""

    window: tuple[float, float]
    buckets: dict[Key, Bucket]
    module_wall_inclusive: dict[str, float]
    kernels: dict[str, list[float]]  # kernel name -> [count, total us]
    kernel_buckets: dict[tuple[str, str, str], list[float]]  # (stage, module, kernel) -> [count, us]
    sync_sites: dict[str, list[float]]  # call site -> [count, us]
    gaps: list[Gap]
    idle_us: float
    busy_us: float
    round_trips: list[RoundTrip]
    fp32_ops: dict[tuple[str, str], list[float]]  # (op, module label) -> [count, gpu us, cpu us]
    has_gpu: bool
    call_keys: dict[int, Key] = field(default_factory=dict)  # runtime call correlation id -> (stage, module)
    segments: list[tuple[float, float, Key]] = field(default_factory=list)  # the main thread's window, cut
    locate: Any = None  # (tid, points) -> [(stage, module)]: the same locator the buckets used
    stacks: Any = None  # engine.capture.sites.Stacks of the trace's Python frames

    @property
    def wall_us(self) -> float:
        return self.window[1] - self.window[0]


def innermost(ranges: Sequence[Any], points: Sequence[float]) -> list[int]:
    """For each point, the index in ``ranges`` (sorted by start, longest first, nested) of the innermost
    range containing it, or -1."""
    order = sorted(range(len(points)), key=points.__getitem__)
    out = [-1] * len(points)
    stack: list[int] = []
    i = 0
    for pos in order:
        t = points[pos]
        while i < len(ranges) and ranges[i].start <= t:
            while stack and ranges[stack[-1]].end <= ranges[i].start:
                stack.pop()
            stack.append(i)
            i += 1
        while stack and ranges[stack[-1]].end < t:
            stack.pop()
        # a range overlapping without nesting can hide an ended one below it: look down the stack
        j = len(stack) - 1
        while j >= 0 and ranges[stack[j]].end < t:
            j -= 1
        out[pos] = stack[j] if j >= 0 else -1
    return out


def _by_tid(items: Sequence[Any]) -> dict[int, list[Any]]:
    out: dict[int, list[Any]] = defaultdict(list)
    for item in items:
        out[item.tid].append(item)
    return out


class _Locator:
    """(stage, module label) of points on one thread."""

    def __init__(self, stages: list[Range], modules: list[Range], parents: frozenset[str]):
        self.stages = stages
        self.modules = modules
        self.parents = parents
        self._index: tuple | None = None  # (nesting parents, starts) of stages and modules, for key_at

    def keys(self, points: Sequence[float]) -> list[Key]:
        """The keys of many points at once (a sweep: O((ranges + points) log points))."""
        if len(points) == 1:
            return [self.key_at(points[0])]
        return self._keys(innermost(self.stages, points), innermost(self.modules, points))

    def key_at(self, t: float) -> Key:
        """The key of one point: a bisect and a walk up the nesting (O(log ranges + depth))."""
        if self._index is None:
            self._index = tuple((nest_parents(r), [x.start for x in r]) for r in (self.stages, self.modules))
        found = []
        for ranges, (parents, starts) in zip((self.stages, self.modules), self._index):
            i = bisect.bisect_right(starts, t) - 1
            while i >= 0 and ranges[i].end < t:
                i = parents[i]
            found.append(i)
        return self._keys([found[0]], [found[1]])[0]

    def _keys(self, s_idx: Sequence[int], m_idx: Sequence[int]) -> list[Key]:
        out: list[Key] = []
        for si, mi in zip(s_idx, m_idx):
            stage = self.stages[si].label if si >= 0 else OUTSIDE_STAGES
            if mi >= 0:
                path = self.modules[mi].label
                module = forward_body(path) if path in self.parents else path
            else:
                module = STAGE_BODY if si >= 0 else OUTSIDE_STAGES
            out.append((stage, module))
        return out


def _inside(window: tuple[float, float], start: float, dur: float) -> bool:
    mid = start + dur / 2
    return window[0] <= mid <= window[1]


def _union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            if e > out[-1][1]:
                out[-1] = (out[-1][0], e)
        else:
            out.append((s, e))
    return out


def attribute(trace: Trace, module_parents: frozenset[str] = frozenset(), layers: CodeLayers | None = None
              ) -> Attribution:
    """Attribute a parsed capture (see the module docstring); ``layers`` tells the user's code from trackscope's."""
    stacks = Stacks(trace.python, layers or CodeLayers())
    window = trace.run_window or (0.0, 0.0)
    main = trace.main_tid
    stages_by, modules_by = _by_tid(trace.stages), _by_tid(trace.modules)
    # a module path seen enclosing another module range is a parent even when not declared
    parents = set(module_parents)
    for mods in modules_by.values():
        stack: list[Range] = []
        for m in mods:
            while stack and stack[-1].end <= m.start:
                stack.pop()
            if stack:
                parents.add(stack[-1].label)
            stack.append(m)
    parents_f = frozenset(parents)
    locators: dict[int, _Locator] = {}

    def locator(tid: int) -> _Locator:
        if tid not in locators:
            locators[tid] = _Locator(stages_by.get(tid, []), modules_by.get(tid, []), parents_f)
        return locators[tid]

    buckets: dict[Key, Bucket] = defaultdict(Bucket)

    # -- CPU ops and runtime calls, by thread --------------------------------------------------------
    ops = [op for op in trace.cpu_ops if _inside(window, op.start, op.dur)]
    calls = [c for c in trace.runtime if _inside(window, c.start, c.dur)]
    for tid, tid_ops in _by_tid(ops).items():
        for key in locator(tid).keys([op.start + op.dur / 2 for op in tid_ops]):
            buckets[key].cpu_ops += 1
    top_ops: dict[int, list[Any]] = {}
    for tid, tid_ops in _by_tid(ops).items():
        tops, end = [], float("-inf")
        for op in tid_ops:
            if op.start >= end:
                tops.append(op)
                end = op.end
        top_ops[tid] = tops
    call_key: dict[int, Key] = {}
    call_op: dict[int, Any] = {}
    call_site: dict[int, str | None] = {}
    sync_sites: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for tid, tid_calls in _by_tid(calls).items():
        mids = [c.start + c.dur / 2 for c in tid_calls]
        keys = locator(tid).keys(mids)
        tops = top_ops.get(tid, [])
        starts = [op.start for op in tops]
        sync_site_of = {i: _site_label(stacks.site(tid, mids[i])) for i, c in enumerate(tid_calls) if c.kind == "sync"}
        for i, (call, key) in enumerate(zip(tid_calls, keys)):
            b = buckets[key]
            if call.kind == "launch":
                b.launches += 1
            elif call.kind == "sync":
                b.syncs += 1
                b.sync_us += call.dur
                site = sync_site_of.get(i) or f"{key[0]} / {key[1]}"
                sync_sites[site][0] += 1
                sync_sites[site][1] += call.dur
                call_site[id(call)] = site
            j = bisect.bisect_right(starts, mids[i]) - 1
            op = tops[j] if j >= 0 and tops[j].end >= mids[i] else None
            if call.correlation is not None:
                call_key[call.correlation] = key
                call_op[call.correlation] = (op, key)
    # -- GPU work, through correlation -----------------------------------------------------------------
    kernels: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    kernel_buckets: dict[tuple[str, str, str], list[float]] = defaultdict(lambda: [0, 0.0])
    op_gpu_us: dict[int, float] = defaultdict(float)
    busy: list[tuple[float, float]] = []
    def gpu_key(event: Any) -> tuple[str, str] | None:
        """A GPU event's (stage, module): its launching call's, else outside every stage if it ran in the
        run's window; None for one outside the window."""
        found = call_key.get(event.correlation) if event.correlation is not None else None
        if found is None and _inside(window, event.start, event.dur):
            found = (OUTSIDE_STAGES, UNATTRIBUTED)
        return found

    for k in trace.kernels:
        place = gpu_key(k)
        if place is None:
            continue
        key = place
        b = buckets[key]
        b.kernels += 1
        b.kernel_us += k.dur
        kernels[k.name][0] += 1
        kernels[k.name][1] += k.dur
        kb = kernel_buckets[(key[0], key[1], k.name)]
        kb[0] += 1
        kb[1] += k.dur
        owner = call_op.get(k.correlation) if k.correlation is not None else None
        if owner is not None and owner[0] is not None:
            op_gpu_us[id(owner[0])] += k.dur
        busy.append((k.start, k.end))
    copy_of_call: dict[int, Any] = {}
    for c in trace.copies:
        place = gpu_key(c)
        if place is None:
            continue
        key = place
        b = buckets[key]
        if c.op == "memset":
            b.memsets += 1
        else:
            b.copies += 1
            b.copy_bytes += c.bytes
            b.copy_us += c.dur
            d = b.copies_by_direction.setdefault(c.direction or "?", [0, 0, 0.0])
            d[0] += 1
            d[1] += c.bytes
            d[2] += c.dur
            if c.pageable:
                b.pageable_copies += 1
            elif "Pinned" in (c.src, c.dst):
                b.pinned_copies += 1
            if c.correlation is not None:
                copy_of_call[c.correlation] = c
        busy.append((c.start, c.end))
    # -- wall time on the main thread ------------------------------------------------------------------
    segments: list[tuple[float, float, Key]] = []
    if main is not None and window[1] > window[0]:
        loc = locator(main)
        bounds = {window[0], window[1]}
        for r in (*loc.stages, *loc.modules):
            for t in (r.start, r.end):
                if window[0] < t < window[1]:
                    bounds.add(t)
        edges = sorted(bounds)
        mids = [(a + b) / 2 for a, b in zip(edges, edges[1:])]
        for (a, b_), key in zip(zip(edges, edges[1:]), loc.keys(mids)):
            buckets[key].wall_us += b_ - a
            segments.append((a, b_, key))
    module_wall: dict[str, float] = defaultdict(float)
    for m in modules_by.get(main, []) if main is not None else []:
        module_wall[m.label] += max(0.0, min(m.end, window[1]) - max(m.start, window[0]))
    # -- GPU idle gaps ---------------------------------------------------------------------------------
    has_gpu = bool(trace.kernels or trace.copies)
    gaps: list[Gap] = []
    idle_us = busy_us = 0.0
    if has_gpu:
        merged = _union([(max(s, window[0]), min(e, window[1])) for s, e in busy if e > window[0] and s < window[1]])
        busy_us = sum(e - s for s, e in merged)
        idle_us = max(0.0, (window[1] - window[0]) - busy_us)
        edges = [window[0], *[t for s, e in merged for t in (s, e)], window[1]]
        seg_starts = [s for s, _, _ in segments]
        blocking = sorted((c for c in calls if c.kind in ("sync", "copy")), key=lambda c: c.end)
        block_ends = [c.end for c in blocking]
        for gs, ge in zip(edges[::2], edges[1::2]):
            if ge - gs <= 0:
                continue
            # per-bucket idle by overlap with the host's segments
            j = max(0, bisect.bisect_right(seg_starts, gs) - 1)
            while j < len(segments) and segments[j][0] < ge:
                a, b_, key = segments[j]
                overlap = min(b_, ge) - max(a, gs)
                if overlap > 0:
                    buckets[key].idle_us += overlap
                j += 1
            if ge - gs < GAP_LIST_MIN_US:
                continue
            # a blocking call returns when the GPU work it waits for is done, so the one that caused the gap
            # ends right at its start; a sync wins over a blocking DtoH copy
            cause, gap_site = "host", None
            bi = bisect.bisect_left(block_ends, gs - CAUSE_TOLERANCE_US)
            while bi < len(blocking) and block_ends[bi] <= gs + CAUSE_TOLERANCE_US:
                bc = blocking[bi]
                if bc.kind == "sync":
                    cause, gap_site = "sync", call_site.get(id(bc))
                    break
                if bc.correlation in copy_of_call and copy_of_call[bc.correlation].direction == "DtoH":
                    cause = "copy"
                bi += 1
            j = max(0, bisect.bisect_right(seg_starts, (gs + ge) / 2) - 1)
            key = segments[j][2] if segments else (OUTSIDE_STAGES, OUTSIDE_STAGES)
            gaps.append(Gap(gs, ge - gs, key[0], key[1], cause, gap_site))
    # -- host round trips (DtoH, CPU ops, HtoD) on the main thread ---------------------------------------
    round_trips: list[RoundTrip] = []
    if has_gpu and main is not None:
        main_calls = [c for c in calls if c.tid == main]
        launches_at = [c.start for c in main_calls if c.kind == "launch"]
        copies_seq = [(c, copy_of_call[c.correlation]) for c in main_calls
                      if c.correlation in copy_of_call and copy_of_call[c.correlation].bytes >= ROUND_TRIP_MIN_BYTES]
        tops = top_ops.get(main, [])
        i = 0
        while i < len(copies_seq):
            call, copy = copies_seq[i]
            if copy.direction != "DtoH":
                i += 1
                continue
            nxt = next((n for n in range(i + 1, len(copies_seq)) if copies_seq[n][1].direction == "HtoD"), None)
            if nxt is None:
                break
            back_call, back = copies_seq[nxt]
            a, b_ = call.end, back_call.start
            launches = bisect.bisect_left(launches_at, b_) - bisect.bisect_right(launches_at, a)
            between = [op for op in tops if op.start >= a and op.end <= b_]
            if launches <= ROUND_TRIP_MAX_LAUNCHES and between:
                by_name: dict[str, float] = defaultdict(float)
                for op in between:
                    by_name[op.name] += op.dur
                key = (call_key.get(call.correlation, (OUTSIDE_STAGES, OUTSIDE_STAGES)) if call.correlation is not None
                       else (OUTSIDE_STAGES, OUTSIDE_STAGES))
                round_trips.append(RoundTrip(key[0], key[1], copy.bytes, back.bytes, b_ - a, copy.dur + back.dur,
                                             sorted(by_name, key=lambda n: by_name[n], reverse=True)[:5]))
                i = nxt + 1
            else:
                i += 1
    # -- ops that stay float32 (the summary keeps them for autocast runs) --------------------------------
    # autocast records an op with its inputs as given, before it casts them, so the op's own input types
    # do not say what it computed in. On the GPU its kernels do (fp32 kernels and no fp16/bf16 ones); on
    # the CPU its nested ops do: no nested op with fp16/bf16 inputs, and float32 inputs at the top or in
    # a nested fp32-sensitive op (grid_sampler -> grid_sampler_2d).
    kernel_precisions: dict[int, set[str | None]] = defaultdict(set)
    for k in trace.kernels:
        owner = call_op.get(k.correlation) if k.correlation is not None else None
        if owner is not None and owner[0] is not None:
            kernel_precisions[id(owner[0])].add(classify(k.name).precision)
    fp32_ops: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0, 0.0, 0.0])
    for tid, tid_ops in _by_tid(ops).items():
        candidates: list[Any] = []
        state: dict[str, Any] = {}

        def close(state: dict[str, Any], candidates: list[Any] = candidates) -> None:
            top = state.get("top")
            if top is None:
                return
            precisions = kernel_precisions.get(id(top))
            if precisions:
                fp32 = "fp32" in precisions and not precisions & {"bf16", "fp16"}
            else:
                fp32 = not state["reduced"] and (stays_fp32(top.name, top.input_types) or state["nested_fp32"])
            if fp32:
                candidates.append(top)

        for op in tid_ops:
            if op.start >= state.get("end", float("-inf")):
                close(state)
                state = {"top": op if FP32_SENSITIVE_OPS.match(op.name) else None, "end": op.end,
                         "reduced": False, "nested_fp32": False}
            elif state.get("top") is not None:
                if any(t in REDUCED_TYPES for t in op.input_types):
                    state["reduced"] = True
                elif stays_fp32(op.name, op.input_types):
                    state["nested_fp32"] = True
        close(state)
        if not candidates:
            continue
        for op, key in zip(candidates, locator(tid).keys([op.start + op.dur / 2 for op in candidates])):
            row = fp32_ops[(op.name, key[1])]
            row[0] += 1
            row[1] += op_gpu_us.get(id(op), 0.0)
            row[2] += op.dur
    return Attribution(window, dict(buckets), dict(module_wall), dict(kernels), dict(kernel_buckets),
                       dict(sync_sites), gaps, idle_us, busy_us, round_trips, dict(fp32_ops), has_gpu,
                       call_key, segments, lambda tid, points: locator(tid).keys(points), stacks)


def _site_label(site: Site) -> str | None:
    """A call site as the tables show it: the user's ``file:line function (.builtin)``, or trackscope's own
    work marked as such; None when the capture has no Python stack for it."""
    if site.label is None:
        return None
    label = f"{site.label} (.{site.via})" if site.via else site.label
    return f"{TRACKSCOPE_MARK}{label}" if site.layer == TRACKSCOPE else label
