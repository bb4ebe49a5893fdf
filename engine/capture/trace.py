"""A profiler capture parsed once into typed events (modelled on HTA's ``hta/common/trace.py``).

Source: the Chrome trace JSON that ``torch.profiler.profile.export_chrome_trace`` writes (torch 2.11
on the lent GPU, 2.13 here). Its ``traceEvents`` carry a ``cat`` per event:

| cat                       | becomes        | keys read from ``args``                               |
| cpu_op                    | CpuOp          | Input Dims, Input type, External id                   |
| cuda_runtime, cuda_driver | RuntimeCall    | correlation                                           |
| kernel                    | GpuKernel      | stream, device, correlation                           |
| gpu_memcpy, gpu_memset    | GpuCopy        | bytes, stream, correlation; kind/memory from the name |
| user_annotation           | Range          | ``trackscope.stage:NAME``, ``.module:PATH``, ``.run`` |
| python_function           | PyFrame        | Python id, Python parent id                           |
| user_annotation (others)  | Range          | the name (``Torch-Compiled Region: 0/1``, ...)        |
| cpu_op / user_annotation  | Range (lines)  | ``trackscope.line:FILE:LINE FUNCTION`` (line marks)   |
| cpu_instant_event [memory]| MemoryEvent    | Bytes, Total Allocated, Total Reserved, Device Type   |

Times are microseconds on the profiler's clock (CPU and GPU events share it). Unknown categories and
malformed events are skipped, never fatal: a trace from another torch version parses to what it has.
"""

from __future__ import annotations

import codecs
import gc
import gzip
import json
import re
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping

import numpy as np

from engine.core.errors import UserError

STAGE_PREFIX = "trackscope.stage:"
MODULE_PREFIX = "trackscope.module:"
RUN_RANGE = "trackscope.run"
#: a torch call made by a statement of a forward body, marked at capture time (engine.capture.lines)
LINE_PREFIX = "trackscope.line:"
#: in an exported trace, the thread a range moved onto its own track ran on (``args``; see engine.capture.export)
SOURCE_TID_ARG = "trackscope.tid"
#: the most JSON a trace file may hold (inflated, when gzipped): past it the file is refused unread (a 1 MB gzip
#: can inflate to 1 GiB). The JSON parser needs the text as one string, and making it holds the GIL: 110 ms for
#: a 254 MiB trace (1.5M events) on the 2-core machine, a stall of the app's window past its 100 ms bound; at
#: 192 MiB (about 1.1M events) it is ~80 ms. trackscope's own captures stop at 30,000 ops (a few MiB); a larger
#: file is refused with the pointer to Perfetto, which streams it
MAX_TRACE_BYTES = 192 * 2**20
#: the most events a trace file is read into; past it the rest are counted, not kept
MAX_TRACE_EVENTS = 500_000
#: bytes read from a trace file (or its gzip stream) at a time
READ_CHUNK_BYTES = 2**20

LAUNCH_CALLS = frozenset({
    "cudaLaunchKernel", "cudaLaunchKernelExC", "cudaLaunchCooperativeKernel", "cudaLaunchKernelEx",
    "cuLaunchKernel", "cuLaunchKernelEx", "cudaGraphLaunch", "cuGraphLaunch", "cudaLaunchCooperativeKernelMultiDevice",
})
#: runtime calls that block the host until the device has caught up
SYNC_CALLS = frozenset({
    "cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy", "cudaMemcpy2D",
    "cuStreamSynchronize", "cuCtxSynchronize", "cuEventSynchronize", "cudaMemcpyFromSymbol", "cudaMemcpyToSymbol",
})
COPY_CALLS = frozenset({"cudaMemcpyAsync", "cudaMemcpy", "cudaMemcpy2DAsync", "cudaMemcpy2D", "cudaMemcpyPeerAsync",
                        "cuMemcpyAsync", "cuMemcpyDtoHAsync_v2", "cuMemcpyHtoDAsync_v2"})
MEMSET_CALLS = frozenset({"cudaMemsetAsync", "cudaMemset", "cuMemsetD8Async", "cuMemsetD32Async"})

#: "Memcpy DtoH (Device -> Pageable)", "Memcpy HtoD (Pinned -> Device)", "Memset (Device)"
COPY_NAME = re.compile(r"^(?P<op>Memcpy|Memset)\s*(?P<dir>[A-Za-z]toD|[A-Za-z]toH|[A-Za-z]to[A-Za-z]|PtoP)?"
                       r"\s*(?:\((?P<src>[A-Za-z ]+?)(?:\s*->\s*(?P<dst>[A-Za-z ]+))?\))?")
#: python frames: "/path/file.py(123): func"
PY_FRAME = re.compile(r"^(?P<file>.+)\((?P<line>\d+)\): (?P<func>.+)$")
PY_BUILTIN = re.compile(r"^<built-in (?:method|function) (?P<name>\w+)")


class TraceError(UserError):
    """A trace file that cannot be read: missing, not JSON, or past the size limit."""


class TraceCancelled(Exception):
    """A trace read stopped because its cancel flag was set (the app closing, another capture shown)."""


class _Span:
    """An event with ``start`` and ``dur`` (us, the trace's clock): its ``end``."""

    __slots__ = ()
    start: float
    dur: float

    @property
    def end(self) -> float:
        return self.start + self.dur


@dataclass(frozen=True, slots=True)
class CpuOp(_Span):
    name: str
    tid: int
    start: float
    dur: float
    input_dims: tuple = ()
    input_types: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class RuntimeCall(_Span):
    name: str
    tid: int
    start: float
    dur: float
    correlation: int | None
    kind: str  # launch | sync | copy | memset | other


@dataclass(frozen=True, slots=True)
class GpuKernel(_Span):
    name: str
    device: int
    stream: int
    start: float
    dur: float
    correlation: int | None


@dataclass(frozen=True, slots=True)
class GpuCopy(_Span):
    op: str  # memcpy | memset
    direction: str  # DtoH | HtoD | DtoD | PtoP | HtoH | "" (memset)
    src: str  # Device | Pageable | Pinned | ""
    dst: str
    bytes: int
    stream: int
    start: float
    dur: float
    correlation: int | None

    @property
    def pageable(self) -> bool:
        return "Pageable" in (self.src, self.dst)


@dataclass(frozen=True, slots=True)
class Range(_Span):
    """A record_function range of trackscope's: a stage, a module call, or the captured run."""

    label: str
    tid: int
    start: float
    dur: float


@dataclass(frozen=True, slots=True)
class PyFrame(_Span):
    name: str
    tid: int
    start: float
    dur: float
    frame_id: int | None
    parent_id: int | None


@dataclass(frozen=True, slots=True)
class MemoryEvent:
    """One allocator event (``profile_memory=True``): ``bytes`` > 0 an allocation, < 0 a free."""

    tid: int
    start: float
    bytes: int
    total_allocated: int
    total_reserved: int
    device_type: int  # 0 CPU, 1 CUDA (c10::DeviceType)

    @property
    def dur(self) -> float:
        return 0.0

    @property
    def end(self) -> float:
        return self.start


#: the allocator's instant events
MEMORY_EVENT = "[memory]"
#: c10::DeviceType of a CUDA allocation
CUDA_DEVICE_TYPE = 1


@dataclass
class Trace:
    """All events of one capture, by type; each list sorted by start time."""

    cpu_ops: list[CpuOp] = field(default_factory=list)
    runtime: list[RuntimeCall] = field(default_factory=list)
    kernels: list[GpuKernel] = field(default_factory=list)
    copies: list[GpuCopy] = field(default_factory=list)
    stages: list[Range] = field(default_factory=list)
    modules: list[Range] = field(default_factory=list)
    runs: list[Range] = field(default_factory=list)
    python: list[PyFrame] = field(default_factory=list)
    annotations: list[Range] = field(default_factory=list)  # other record_function ranges (torch.compile's, ...)
    lines: list[Range] = field(default_factory=list)  # line marks: label "FILE:LINE FUNCTION" (engine.capture.lines)
    memory: list[MemoryEvent] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def run_window(self) -> tuple[float, float] | None:
        """(start, end) of the captured run: its range, else the span of the CPU events."""
        if self.runs:
            return self.runs[0].start, self.runs[-1].end
        spans = [(e.start, e.end) for e in self.cpu_ops] + [(e.start, e.end) for e in self.runtime]
        if not spans:
            return None
        return min(s for s, _ in spans), max(e for _, e in spans)

    @property
    def main_tid(self) -> int | None:
        """The thread the run ran on (its range's), else the one with most CPU ops."""
        if self.runs:
            return self.runs[0].tid
        if not self.cpu_ops:
            return None
        counts: dict[int, int] = {}
        for op in self.cpu_ops:
            counts[op.tid] = counts.get(op.tid, 0) + 1
        return max(counts, key=lambda t: counts[t])


def _num(value: Any, default: float = 0.0) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return default


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _tid(value: Any) -> int:
    tid = _int(value)
    if tid is not None:
        return tid
    # some kineto versions write "stream 7" or a thread name: keep a stable number
    m = re.search(r"(\d+)", str(value))
    return int(m.group(1)) if m else hash(str(value)) & 0xFFFF


#: CUPTI callback names may carry an API version or per-thread-stream suffix: cudaLaunchKernelExC_v11060, _ptsz
RUNTIME_SUFFIX = re.compile(r"(?:_v\d+)?(?:_ptsz|_ptds)?(?:_v\d+)?$")


def runtime_kind(name: str) -> str:
    name = RUNTIME_SUFFIX.sub("", name)
    if name in LAUNCH_CALLS:
        return "launch"
    if name in SYNC_CALLS:
        return "sync"
    if name in COPY_CALLS:
        return "copy"
    if name in MEMSET_CALLS:
        return "memset"
    return "other"


def parse_copy_name(name: str) -> tuple[str, str, str, str]:
    """'Memcpy DtoH (Device -> Pageable)' -> ('memcpy', 'DtoH', 'Device', 'Pageable')."""
    m = COPY_NAME.match(name)
    if not m:
        return ("memset" if name.lower().startswith("memset") else "memcpy"), "", "", ""
    return (m.group("op").lower(), m.group("dir") or "", (m.group("src") or "").strip(),
            (m.group("dst") or "").strip())


def _typed(ev: Mapping[str, Any]) -> tuple[str, Any] | None:
    """One Chrome trace event as (the Trace list it belongs to, its typed event), or None to skip it."""
    if ev.get("ph", "X") != "X":  # complete events ('X'; some writers omit ph), and the allocator's instants
        margs = ev.get("args")
        if ev.get("ph") in ("i", "I") and ev.get("name") == MEMORY_EVENT and isinstance(margs, Mapping):
            return "memory", MemoryEvent(_tid(ev.get("tid")), _num(ev.get("ts")), _int(margs.get("Bytes")) or 0,
                                         _int(margs.get("Total Allocated")) or 0,
                                         _int(margs.get("Total Reserved")) or 0,
                                         _int(margs.get("Device Type")) or 0)
        return None
    cat = str(ev.get("cat", ""))
    name = str(ev.get("name", ""))
    raw_args = ev.get("args")
    args: Mapping[str, Any] = raw_args if isinstance(raw_args, Mapping) else {}
    start, dur = _num(ev.get("ts")), max(0.0, _num(ev.get("dur")))
    # an exported trace moves trackscope's stage ranges onto a track of their own (engine.capture.export) and
    # keeps the thread they ran on in args: the parsed Trace is the profiler's either way
    tid = _tid(args.get(SOURCE_TID_ARG, ev.get("tid")))
    if name.startswith(LINE_PREFIX) and cat in ("cpu_op", "user_annotation"):
        return "lines", Range(name[len(LINE_PREFIX):], tid, start, dur)
    if cat == "cpu_op":
        dims = args.get("Input Dims", ())
        types = args.get("Input type", ())
        return "cpu_ops", CpuOp(name, tid, start, dur,
                                tuple(tuple(d) if isinstance(d, list) else () for d in dims)
                                if isinstance(dims, list) else (),
                                tuple(str(t) for t in types) if isinstance(types, list) else ())
    if cat in ("cuda_runtime", "cuda_driver"):
        return "runtime", RuntimeCall(name, tid, start, dur, _int(args.get("correlation")), runtime_kind(name))
    if cat == "kernel":
        stream = _int(args.get("stream"))
        return "kernels", GpuKernel(name, _int(args.get("device")) or 0, stream if stream is not None else tid,
                                    start, dur, _int(args.get("correlation")))
    if cat in ("gpu_memcpy", "gpu_memset"):
        op, direction, src, dst = parse_copy_name(name)
        if cat == "gpu_memset":
            op = "memset"
        stream = _int(args.get("stream"))
        return "copies", GpuCopy(op, direction, src, dst, _int(args.get("bytes")) or 0,
                                 stream if stream is not None else tid, start, dur, _int(args.get("correlation")))
    if cat == "user_annotation":
        if name.startswith(STAGE_PREFIX):
            return "stages", Range(name[len(STAGE_PREFIX):], tid, start, dur)
        if name.startswith(MODULE_PREFIX):
            return "modules", Range(name[len(MODULE_PREFIX):], tid, start, dur)
        if name == RUN_RANGE:
            return "runs", Range(name, tid, start, dur)
        return "annotations", Range(name, tid, start, dur)  # torch.compile's regions and others
    if cat == "python_function":
        return "python", PyFrame(name, tid, start, dur, _int(args.get("Python id")), _int(args.get("Python parent id")))
    return None


def _sorted(trace: Trace) -> Trace:
    """Each list by start, longest first; numpy's stable sort (a list.sort of 500k tuples holds the GIL ~200 ms)."""
    for name in ("cpu_ops", "runtime", "kernels", "copies", "stages", "modules", "runs", "python", "annotations",
                 "memory", "lines"):
        items = getattr(trace, name)
        if len(items) > 1:
            starts = np.fromiter((e.start for e in items), np.float64, len(items))
            durs = np.fromiter((e.dur for e in items), np.float64, len(items))
            setattr(trace, name, [items[i] for i in np.lexsort((-durs, starts))])
    return trace


def parse_events(events: list[Mapping[str, Any]], meta: Mapping[str, Any] | None = None) -> Trace:
    """Typed events from a list of Chrome trace events (complete 'X' events; others are skipped)."""
    trace = Trace(meta=dict(meta or {}))
    for ev in events:
        typed = _typed(ev) if isinstance(ev, Mapping) else None
        if typed is not None:
            getattr(trace, typed[0]).append(typed[1])
    return _sorted(trace)


def parse_chrome_trace(data: Mapping[str, Any] | list) -> Trace:
    """Parse a loaded Chrome trace (the dict with ``traceEvents``, or the bare event list)."""
    if isinstance(data, list):
        return parse_events(data)
    events = data.get("traceEvents", [])
    meta = {k: v for k, v in data.items() if k != "traceEvents" and isinstance(v, (str, int, float, bool))}
    return parse_events(events if isinstance(events, list) else [], meta)


def _read_chunks(path: Path, max_bytes: int, cancel: threading.Event | None) -> Iterator[bytes]:
    """A trace file's JSON bytes in chunks, gunzipped when gzipped; TraceError past ``max_bytes`` (never read on)."""
    try:
        with open(path, "rb") as raw:
            gzipped = raw.read(2) == b"\x1f\x8b"
            raw.seek(0)
            stream: Any = gzip.GzipFile(fileobj=raw, mode="rb") if gzipped else raw
            size = 0
            while size <= max_bytes:
                if cancel is not None and cancel.is_set():
                    raise TraceCancelled(str(path))
                chunk = stream.read(min(READ_CHUNK_BYTES, max_bytes + 1 - size))
                if not chunk:
                    return
                size += len(chunk)
                if size <= max_bytes:
                    yield chunk
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise TraceError(f"cannot read the trace {path.name}: {exc}") from exc
    what = "inflates to" if gzipped else "holds"
    raise TraceError(f"the trace {path.name} {what} more than {max_bytes / 2**20:.0f} MiB of JSON: not opened",
                     "open it in ui.perfetto.dev, or capture a shorter run")


def read_trace_bytes(path: str | Path, max_bytes: int = MAX_TRACE_BYTES,
                     cancel: threading.Event | None = None) -> bytes:
    """A trace file's JSON bytes, gunzipped when it is gzipped, read in chunks: never more than ``max_bytes``.

    A file (or a gzip stream) that holds more is refused with a TraceError once the limit is passed; the rest
    is never read or inflated (a gzip bomb costs ``max_bytes``, not its inflated size).
    """
    return b"".join(_read_chunks(Path(path), max_bytes, cancel))


def read_trace_text(path: str | Path, max_bytes: int = MAX_TRACE_BYTES,
                    cancel: threading.Event | None = None) -> str:
    """The same, decoded as UTF-8 chunk by chunk (no whole-file bytes beside the text; short GIL holds)."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    parts = [decoder.decode(chunk) for chunk in _read_chunks(Path(path), max_bytes, cancel)]
    parts.append(decoder.decode(b"", final=True))
    return "".join(parts)


def load_chrome_trace(path: str | Path, max_bytes: int = MAX_TRACE_BYTES) -> dict[str, Any]:
    """Read a Chrome trace JSON file, gzipped or not (at most ``max_bytes`` of JSON, else TraceError)."""
    try:
        data = json.loads(read_trace_bytes(path, max_bytes))
    except (ValueError, RecursionError) as exc:
        raise TraceError(f"the trace {Path(path).name} is not JSON: {exc}") from exc
    return data if isinstance(data, dict) else {"traceEvents": data}


@contextmanager
def collection_paused() -> Iterator[None]:
    """No cyclic garbage collection while a trace's events are made: each full collection walks every event made
    so far with the GIL held (measured: 100-210 ms stalls of the app's window, growing, on a 1.5M-event trace).
    The events hold no cycles; the collector is back on afterwards."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def read_trace(path: str | Path, *, max_bytes: int = MAX_TRACE_BYTES, max_events: int = MAX_TRACE_EVENTS,
               cancel: threading.Event | None = None) -> Trace:
    """Parse a trace file into a Trace, bounded: at most ``max_bytes`` of JSON and ``max_events`` typed events.

    Events become typed events while the JSON is decoded (no list of event dicts is ever held), so memory
    is the JSON text and the typed events kept. Past ``max_events`` the rest are counted, not kept, and the
    trace's ``meta`` says so (``events_kept``, ``events_left_out``). ``cancel`` set ends the read at the next
    object with TraceCancelled (a parse of hundreds of MB would otherwise run to its end).
    """
    trace = Trace()
    left_out = 0

    def hook(obj: dict[str, Any]) -> Any:
        nonlocal left_out
        if cancel is not None and cancel.is_set():
            raise TraceCancelled(str(path))
        if "ts" not in obj or "traceEvents" in obj:  # args, metadata and the top level stay dicts
            return obj
        typed = _typed(obj)
        if typed is None:
            return None
        if kept[0] >= max_events:
            left_out += 1
            return None
        kept[0] += 1
        getattr(trace, typed[0]).append(typed[1])
        return None

    kept = [0]
    try:
        text = read_trace_text(path, max_bytes, cancel)
        with collection_paused():
            data = json.loads(text, object_hook=hook)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise TraceError(f"the trace {Path(path).name} is not JSON: {exc}") from exc
    del text
    if isinstance(data, dict):
        trace.meta = {k: v for k, v in data.items() if k != "traceEvents" and isinstance(v, (str, int, float, bool))}
    trace.meta["events_kept"] = kept[0]
    if left_out:
        trace.meta["events_left_out"] = left_out
    return _sorted(trace)


def frame_site(frame: PyFrame) -> tuple[str, int, str] | None:
    """(file, line, function) of a python frame, or None for a built-in."""
    m = PY_FRAME.match(frame.name)
    if not m:
        return None
    return m.group("file"), int(m.group("line")), m.group("func")


def builtin_name(frame: PyFrame) -> str | None:
    m = PY_BUILTIN.match(frame.name)
    return m.group("name") if m else None
