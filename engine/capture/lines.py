"""Source lines of forward bodies: marked at capture time, attributed from the trace.

The profiler's Python tracer names a frame by the line its function starts on, and an operator
(``x + 1``, ``torch.einsum``) has no frame of its own, so the work a module's ``forward`` does in its
own statements (between its submodules) has no finer name than the forward. ``LineMarks`` closes
that gap: the capture's op budget (a TorchFunctionMode, ``engine.capture.profile``) asks it, for each
torch call, for the innermost user frame; when that frame is a ``forward`` (no library module's call
in between: that module's own range names the work) the call runs inside a profiler range
``trackscope.line:FILE:LINE FUNCTION``, FILE as the Python tracer records paths (its trimmed
``sys.path`` prefixes). ``LINE`` is the line being executed, the statement that made the call.

``attribute_lines`` then gives each kernel launched inside such a range that line (``LineRow``:
kernel time, kernels, launches, the ATen ops that launched them) and splits the run's kernel time by
the finest name each kernel has (``KernelNaming``): a module path, a submodule's forward body, a
helper function below a forward, a line of the tracker's forward body, or nothing finer than the
tracker's forward (``roots_of``: the outermost modules and a wrapper's only child). A trace recorded
without the marks still gets the rest; its lines are simply empty.

The marks are made in Python for every torch call (about 1.6 us each under the profiler on a CPU
here); their own Python frames are dropped from the trace (``profile._without_budget_frames``), and a
process with compiled code gets none (dynamo would trace them: ``profile.capture_run``).
"""

from __future__ import annotations

import bisect
import os
import sys
from collections import defaultdict
from dataclasses import dataclass
from types import CodeType, FrameType
from typing import Any, Callable

import torch

from engine.capture.attribution import OUTSIDE_STAGES, STAGE_BODY, UNATTRIBUTED, forward_body
from engine.capture.evidence import USER, LineRow
from engine.capture.sites import LIBRARY, CodeLayers, short_path
from engine.capture.trace import LINE_PREFIX

#: frames walked up from a torch call before giving up on finding its user frame
MAX_WALK = 64
#: torch's frames of a module call: an op below one of these belongs to that module's own range
MODULE_CALL_FUNCTIONS = frozenset({"_call_impl", "_wrapped_call_impl"})
#: the user functions whose statements are a module's forward body
FORWARD_FUNCTIONS = frozenset({"forward"})
#: the ops autocast inserts to cast a tensor (nested under the op that needed the cast)
CAST_OPS = frozenset({"aten::to", "aten::_to_copy"})
CAST_LABEL = "aten::to (autocast casts)"
#: line rows kept in the evidence
TOP_LINES = 80
#: ops named per line row
OPS_PER_LINE = 3

#: bucket labels no module names
UNNAMED = (STAGE_BODY, OUTSIDE_STAGES, UNATTRIBUTED)
_SKIP, _STOP, _FORWARD = 0, 1, 2  # a frame to walk past, one that ends the walk, a user forward


def _trimmed(path: str, prefixes: tuple[str, ...]) -> str:
    """A path as torch's Python tracer records it: less the longest ``sys.path``-like prefix."""
    for prefix in prefixes:
        if path.startswith(prefix):
            return path[len(prefix):]
    return path


def _tracer_prefixes() -> tuple[str, ...]:
    try:
        from torch.profiler.python_tracer import _prefix_regex

        return tuple(sorted(_prefix_regex(), key=len, reverse=True))
    except Exception:  # noqa: BLE001 - another torch: no trimming, the paths stay absolute
        return ()


def _range_class() -> Callable[[str], Any]:
    """The cheapest profiler range this torch has: the C++ one (a cpu_op), else record_function."""
    fast = getattr(getattr(torch._C, "_profiler", None), "_RecordFunctionFast", None)
    if fast is not None:
        try:
            fast(LINE_PREFIX)  # made, never entered: a torch whose signature differs falls back
            return fast
        except Exception:  # noqa: BLE001 - another torch's private class: the public range instead
            pass
    return torch.autograd.profiler.record_function


class LineMarks:
    """The line mark of a torch call (``label``), for the capture's TorchFunctionMode.

    ``label`` runs inside ``__torch_function__`` for every op: it walks frames by attribute access and
    classifies each code object once (its layer, whether it is a forward or a module call).
    """

    def __init__(self, layers: CodeLayers):
        self.layers = layers
        self.prefixes = _tracer_prefixes()
        self.range = _range_class()
        self._kinds: dict[CodeType, int] = {}
        self._labels: dict[tuple[CodeType, int], str] = {}

    def _kind(self, code: CodeType) -> int:
        path = code.co_filename
        layer = self.layers.layer(path)
        if layer == USER:
            return _FORWARD if code.co_name in FORWARD_FUNCTIONS else _STOP
        if code.co_name in MODULE_CALL_FUNCTIONS and path.startswith(os.path.dirname(torch.__file__)):
            return _STOP  # a module called from the forward: its own range names its work
        return _SKIP if layer == LIBRARY else _STOP  # trackscope's own code: never the user's line

    def label(self, frame: FrameType | None) -> str | None:
        """``FILE:LINE forward`` of the user forward that made the call at ``frame`` (its caller), or None."""
        depth = 0
        while frame is not None and depth < MAX_WALK:
            code = frame.f_code
            kinds = self._kinds
            kind = kinds[code] if code in kinds else kinds.setdefault(code, self._kind(code))
            if kind == _FORWARD:
                key = (code, frame.f_lineno)
                labels = self._labels
                if key not in labels:
                    labels[key] = f"{_trimmed(code.co_filename, self.prefixes)}:{frame.f_lineno} {code.co_name}"
                return labels[key]
            if kind == _STOP:
                return None
            frame = frame.f_back
            depth += 1
        return None

    def caller_label(self) -> str | None:
        """The label of the torch call being handled (called from ``__torch_function__``)."""
        return self.label(sys._getframe(2))

    def mark(self, label: str) -> Any:
        """The profiler range of one marked call (a context manager)."""
        return self.range(LINE_PREFIX + label)


# -- attribution -----------------------------------------------------------------------------------------
@dataclass
class KernelNaming:
    """The run's kernel us by the finest name each kernel has (each kernel counted once, in this order)."""

    module: float = 0.0  # a module path (a leaf, or a module's work outside its forward body: none today)
    submodule_body: float = 0.0  # a submodule's own forward body (a module below the tracker's forward; a wrapper's
    # only child is the tracker's forward itself: roots_of)
    function: float = 0.0  # a user helper function below a forward (in a forward body or outside modules)
    line: float = 0.0  # a marked line of a forward body, no helper function below it
    opaque: float = 0.0  # nothing finer than the tracker's forward, a stage body or outside stages
    total: float = 0.0
    leaf_or_function: float = 0.0  # a module path, or a helper function below any forward body (the old share)

    @property
    def below_forward(self) -> float:
        return self.module + self.submodule_body + self.function

    @property
    def below_forward_or_line(self) -> float:
        return self.below_forward + self.line


def line_label(raw: str) -> str:
    """``FILE:LINE function`` of a mark, FILE as the sites' labels write it (``short_path``)."""
    head, _, function = raw.partition(" ")
    file, _, line = head.rpartition(":")
    return f"{short_path(file)}:{line} {function}".strip() if file else raw


def roots_of(modules: list[Any]) -> frozenset[str]:
    """The tracker's top-level modules: those with a call no other module range encloses, and below each, while a
    module calls exactly one submodule (a wrapper, like a plugin's adapter around the model), that submodule: its
    forward is the tracker's forward too."""
    roots: set[str] = set()
    children: dict[str, set[str]] = defaultdict(set)
    by_tid: dict[int, list[Any]] = defaultdict(list)
    for m in modules:
        by_tid[m.tid].append(m)
    for ranges in by_tid.values():
        stack: list[Any] = []
        for m in ranges:  # sorted by start, longest first
            while stack and stack[-1].end <= m.start:
                stack.pop()
            if stack:
                children[stack[-1].label].add(m.label)
            else:
                roots.add(m.label)
            stack.append(m)
    top, frontier = set(roots), list(roots)
    while frontier:
        kids = children.get(frontier.pop(), set())
        if len(kids) == 1 and not kids <= top:
            top |= kids
            frontier.extend(kids)
    return frozenset(top)


def owner_of(label: str) -> str | None:
    """The module path a bucket label names: a path itself, a forward body's module, None for no module."""
    prefix, suffix = forward_body("\0").split("\0")
    if label.startswith(prefix) and label.endswith(suffix):
        return label[len(prefix):len(label) - len(suffix)]
    return None if label in UNNAMED else label


def attribute_lines(ctx: Any, is_helper: Callable[[Any], bool]) -> tuple[tuple[LineRow, ...], KernelNaming]:
    """Line rows of forward bodies and the kernel naming of one attributed capture (``ctx``: gather's _Context;
    ``is_helper(site)``: the site is a user function below a forward, the function rows' rule)."""
    att, trace = ctx.att, ctx.trace
    by_tid: dict[int, list[Any]] = defaultdict(list)
    for r in trace.lines:
        by_tid[r.tid].append(r)
    starts = {tid: [r.start for r in rs] for tid, rs in by_tid.items()}
    root_bodies = {forward_body(r) for r in roots_of(trace.modules)}

    def line_at(tid: int, t: float) -> str | None:
        """The mark containing ``t`` (marks never nest: the mode is off inside its own handler)."""
        i = bisect.bisect_right(starts.get(tid, ()), t) - 1
        return by_tid[tid][i].label if i >= 0 and by_tid[tid][i].end >= t else None

    acc: dict[tuple[str, str, str, str], dict[str, Any]] = {}
    naming = KernelNaming()
    lo, hi = att.window
    for k in trace.kernels:
        call = ctx.launcher(k.correlation)
        key = att.call_keys.get(call.correlation) if call is not None and call.correlation is not None else None
        if key is None:  # no launching call in the run: (outside stages) / (unattributed) when it ran inside it
            if lo <= k.start + k.dur / 2 <= hi:
                naming.total += k.dur
                naming.opaque += k.dur
            continue
        naming.total += k.dur
        module = key[1]
        owner = owner_of(module)
        if owner == module:  # a module path
            naming.module += k.dur
            naming.leaf_or_function += k.dur
            continue
        mid = call.start + call.dur / 2
        site = ctx.site(call.tid, mid)
        helper = is_helper(site)
        if helper:
            naming.leaf_or_function += k.dur
        if owner is not None and module not in root_bodies:
            naming.submodule_body += k.dur
        elif helper:
            naming.function += k.dur
        raw = None if helper or owner is None else line_at(call.tid, mid)
        if raw is None:
            if not helper and (owner is None or module in root_bodies):
                naming.opaque += k.dur  # nothing finer than the tracker's forward (or no module at all)
            continue
        if module in root_bodies:
            naming.line += k.dur
        chain = ctx.op_chain(call.tid, mid)
        top = chain[-1].name if chain else "?"
        op = CAST_LABEL if top not in CAST_OPS and any(o.name in CAST_OPS for o in chain[:-1]) else top
        row = acc.setdefault((key[0], module, site.function or "", raw),
                             {"us": 0.0, "kernels": 0, "launches": set(), "ops": defaultdict(float)})
        row["us"] += k.dur
        row["kernels"] += 1
        row["launches"].add(call.correlation)
        row["ops"][op] += k.dur
    # host time of the marked calls on the main thread; a line that launched nothing (a CPU run) still gets its row
    host: dict[tuple[str, str, str], float] = defaultdict(float)
    rows_at = {(k[0], k[1], k[3]): k for k in acc}
    main = trace.main_tid
    main_ops, op_starts = ctx.ops_by_tid.get(main, []), ctx.op_starts.get(main, [])
    for r in by_tid.get(main, []) if main is not None else []:
        mid = r.start + r.dur / 2
        if not lo <= mid <= hi:
            continue
        stage, module = ctx.key(main, mid)
        host[(stage, module, r.label)] += r.dur
        if (stage, module, r.label) not in rows_at:
            key = (stage, module, ctx.site(main, mid).function or "", r.label)
            rows_at[(stage, module, r.label)] = key
            acc[key] = {"us": 0.0, "kernels": 0, "launches": set(), "ops": defaultdict(float)}
        i = bisect.bisect_left(op_starts, r.start)
        row = acc[rows_at[(stage, module, r.label)]]
        if i < len(main_ops) and main_ops[i].end <= r.end and not row["kernels"]:
            row["ops"][main_ops[i].name] += main_ops[i].dur  # its outermost op
    rows = []
    for (stage, module, function, raw), v in acc.items():
        ops = tuple(n for n, _ in sorted(v["ops"].items(), key=lambda kv: -kv[1])[:OPS_PER_LINE])
        rows.append(LineRow(module, function, line_label(raw), v["us"] / 1e3, v["kernels"], len(v["launches"]),
                            ops, host.get((stage, module, raw), 0.0) / 1e3, stage))
    rows.sort(key=lambda r: (-r.kernel_ms, -r.wall_ms))
    return tuple(rows[:TOP_LINES]), naming
