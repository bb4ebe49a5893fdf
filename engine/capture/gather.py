"""Gather the diagnosis evidence (``engine.capture.evidence``) from a parsed, attributed capture.

One pass per kind of evidence, each a function over the Trace and its Attribution (the call keys,
the locator and the Python stacks it built), stateless: ``gather`` is what ``summarize`` calls. Every
row carries the user's call site and its layer (``engine.capture.sites``), so a rule can tell the
tracker's own work from trackscope's.
"""

from __future__ import annotations

import bisect
import math
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from engine.capture.attribution import Attribution, Key
from engine.capture.evidence import (
    TRACKSCOPE,
    USER,
    CompileFacts,
    CopyRow,
    Evidence,
    FunctionRow,
    GemmShape,
    HostFacts,
    IdleBreakdown,
    KernelGroup,
    MemoryFacts,
    SyncRow,
)
from engine.capture.kernels import classify
from engine.capture.lines import KernelNaming, attribute_lines
from engine.capture.sites import NO_SITE, Site, nest_parents
from engine.capture.trace import CUDA_DEVICE_TYPE, CpuOp, RuntimeCall, Trace, frame_site

TOP_ROWS = 12  # rows kept per kind of evidence
TOP_FUNCTIONS = 80  # function rows kept (the capture tab's children of the module rows)
#: trackscope's own stages around a tracker's call (its upload, download and decode)
ADAPTER_STAGES = ("upload", "download", "decode")
#: idle gaps shorter than this between GPU work are launch latency (HTA's "kernel wait"), us
KERNEL_WAIT_MAX_US = 30.0
#: top-level CPU ops shorter than this are not "CPU work" (dispatch of a view, a shape op), us
CPU_WORK_MIN_US = 50.0
#: consecutive elementwise kernels (or CPU ops) from one site before they count as a fusable chain
CHAIN_MIN = 3
#: an elementwise CPU op over fewer elements than this is not worth fusing
CHAIN_MIN_NUMEL = 1 << 12
#: kernels whose op's tensors hold at least the run's largest allocation are a ``buffer_sweep`` group (the fill
#: of a large buffer and every pass over all of it), kept only where that allocation is at least this large
SWEEP_MIN_ALLOCATION_BYTES = 64 << 20
#: bytes per element of the profiler's input type names
ITEMSIZE = {"float": 4, "double": 8, "c10::Half": 2, "c10::BFloat16": 2, "int": 4, "long int": 8, "bool": 1,
            "unsigned char": 1, "signed char": 1, "short int": 2, "c10::complex<float>": 8,
            "c10::complex<double>": 16, "c10::Float8_e4m3fn": 1, "c10::Float8_e5m2": 1}
#: tensor-core granule per compute precision: dims not a multiple of it leave tensor cores (or pad)
GRANULE = {"fp16": 8, "bf16": 8, "tf32": 4, "int8": 16, "fp8": 16}
#: a conv with this few input channels reads an image (grey, RGB, RGBA): its C_in is the data's, not a choice
IMAGE_CHANNELS = 4

SYNC_OP_KINDS = (
    ("item", re.compile(r"aten::(?:_local_scalar_dense|item|is_nonzero)$")),
    ("nonzero", re.compile(r"aten::(?:nonzero|nonzero_static|masked_select|unique\w*|_unique\w*|repeat_interleave|"
                           r"argwhere|masked_scatter)$")),
    ("to_host", re.compile(r"aten::(?:to|_to_copy|copy_|cpu|_copy_from\w*)$")),
)
SYNC_FUNCTIONS = frozenset({"synchronize", "_cuda_synchronize", "_synchronize"})
LAYOUT_KERNEL = re.compile(r"nchwToNhwc|nhwcToNchw|nchw2nhwc|nhwc2nchw|NCHW.{0,12}NHWC|NHWC.{0,12}NCHW", re.I)
CONTIGUOUS_OPS = frozenset({"aten::contiguous", "aten::clone", "aten::reshape", "aten::flatten"})
COPY_KERNEL = re.compile(r"copy", re.I)
ELEMENTWISE_KERNEL = re.compile(r"(?<!index_)elementwise_kernel|vectorized_elementwise|unrolled_elementwise|"
                                r"launch_clamp_scalar")
ELEMENTWISE_OPS = frozenset(f"aten::{n}" for n in (
    "add", "add_", "sub", "sub_", "mul", "mul_", "div", "div_", "exp", "exp_", "log", "log_", "sigmoid", "sigmoid_",
    "tanh", "tanh_", "relu", "relu_", "clamp", "clamp_", "clamp_min", "clamp_max", "pow", "pow_", "sqrt", "rsqrt",
    "neg", "abs", "where", "maximum", "minimum", "sin", "cos", "square", "reciprocal", "gelu", "silu", "softplus",
    "addcmul", "addcdiv", "lerp", "floor", "ceil", "round", "sign", "erf", "exp2", "log1p", "expm1"))
MATMUL_OPS = frozenset({"aten::mm", "aten::bmm", "aten::addmm", "aten::baddbmm", "aten::linear", "aten::matmul",
                        "aten::addbmm"})
CONV_OPS = frozenset({"aten::conv1d", "aten::conv2d", "aten::conv3d", "aten::convolution"})
MALLOC_CALLS = frozenset({"cudaMalloc", "cudaMallocAsync", "cuMemAlloc", "cuMemAlloc_v2", "cudaMallocHost",
                          "cuMemCreate"})
FREE_CALLS = frozenset({"cudaFree", "cudaFreeAsync", "cuMemFree", "cuMemFree_v2", "cudaFreeHost", "cuMemRelease"})
SYNC_COPY_APIS = frozenset({"cudaMemcpy", "cudaMemcpy2D", "cudaMemset", "cuMemcpy", "cudaMemcpyToSymbol",
                            "cudaMemcpyFromSymbol"})
#: torch.compile's own host ops (its cache lookup, region markers, dynamo's bookkeeping): no user CPU work
COMPILE_OPS = ("TorchDynamo", "Torch-Compiled", "dynamo", "CompiledFunction", "## Call CompiledFxGraph")
COMPILED_REGION = re.compile(r"^Torch-Compiled Region: (?P<frame>\d+)/(?P<compile>\d+)")
RESUME_FUNCTION = re.compile(r"^torch_dynamo_resume_in_(?P<fn>\w+?)_at_(?P<line>\d+)$")
COMPILE_FRAMES = frozenset({"_compile", "compile_inner", "compile_fx", "compile_fx_inner", "_compile_fx_inner",
                            "fx_codegen_and_compile", "codegen_and_compile"})
AUTOTUNE_FRAMES = frozenset({"autotune", "benchmark_choices", "do_autotuning", "autotune_select_algorithm"})


def _ms(us: float) -> float:
    return us / 1e3


def _largest(values: dict[str, float]) -> str | None:
    """The key with the largest value ("" and an empty dict: None)."""
    return (max(values.items(), key=lambda kv: kv[1])[0] or None) if values else None


def _top(values: dict[str, float], n: int) -> tuple[str, ...]:
    return tuple(k for k, _ in sorted(values.items(), key=lambda kv: -kv[1])[:n])


@dataclass
class _Context:
    """What every pass reads: the trace, its attribution, op nesting per thread, calls by correlation."""

    trace: Trace
    att: Attribution
    ops_by_tid: dict[int, list[CpuOp]] = field(default_factory=dict)
    op_parents: dict[int, list[int]] = field(default_factory=dict)
    op_starts: dict[int, list[float]] = field(default_factory=dict)
    calls_by_corr: dict[int, RuntimeCall] = field(default_factory=dict)
    calls: list[RuntimeCall] = field(default_factory=list)
    has_gpu: bool = False

    @classmethod
    def build(cls, trace: Trace, att: Attribution) -> _Context:
        ctx = cls(trace, att)
        lo, hi = att.window
        for op in trace.cpu_ops:
            if lo <= op.start + op.dur / 2 <= hi:
                ctx.ops_by_tid.setdefault(op.tid, []).append(op)
        for tid, ops in ctx.ops_by_tid.items():
            ctx.op_parents[tid] = nest_parents(ops)
            ctx.op_starts[tid] = [o.start for o in ops]
        ctx.calls = [c for c in trace.runtime if lo <= c.start + c.dur / 2 <= hi]
        ctx.calls_by_corr = {c.correlation: c for c in ctx.calls if c.correlation is not None}
        ctx.has_gpu = att.has_gpu
        return ctx

    def site(self, tid: int, t: float) -> Site:
        return self.att.stacks.site(tid, t) if self.att.stacks else NO_SITE

    def key(self, tid: int, t: float) -> Key:
        return self.att.locate(tid, [t])[0] if self.att.locate else ("", "")

    def op_chain(self, tid: int, t: float) -> list[CpuOp]:
        """The CPU ops containing time ``t`` on ``tid``, innermost first."""
        ops = self.ops_by_tid.get(tid)
        if not ops:
            return []
        i = bisect.bisect_right(self.op_starts[tid], t) - 1
        parents = self.op_parents[tid]
        while i >= 0 and ops[i].end < t:
            i = parents[i]
        chain = []
        while i >= 0:
            chain.append(ops[i])
            i = parents[i]
        return chain

    def launcher(self, corr: int | None) -> RuntimeCall | None:
        return self.calls_by_corr.get(corr) if corr is not None else None


def _session(stage: str, module: str) -> bool:
    return stage in ADAPTER_STAGES or module == "(outside stages)"


# -- syncs ------------------------------------------------------------------------------------------
def sync_kind(call: RuntimeCall, chain: Sequence[CpuOp], functions: Sequence[str]) -> tuple[str, str]:
    """(kind, op) of a syncing runtime call from its op chain and Python functions (innermost first)."""
    name = call.name
    device_wide = name.startswith(("cudaDeviceSynchronize", "cuCtxSynchronize"))
    if device_wide or any(f in SYNC_FUNCTIONS for f in functions[:4]):
        return "synchronize", "synchronize"
    if name.startswith(("cudaEventSynchronize", "cuEventSynchronize")):
        return "synchronize", "Event.synchronize"
    for kind, pattern in SYNC_OP_KINDS:
        op = next((o.name for o in chain if pattern.match(o.name)), None)
        if op is not None:
            return kind, op
    if name.split("_")[0] in SYNC_COPY_APIS:
        return "blocking_copy", name
    return "other", chain[-1].name if chain else name


def gather_syncs(ctx: _Context) -> tuple[SyncRow, ...]:
    groups: dict[tuple, list[float]] = defaultdict(lambda: [0, 0.0, 0.0])
    ends: list[tuple[float, tuple]] = []
    for call in ctx.calls:
        if call.kind != "sync":
            continue
        mid = call.start + call.dur / 2
        site = ctx.site(call.tid, mid)
        stacks = ctx.att.stacks.threads.get(call.tid) if ctx.att.stacks else None
        functions = stacks.functions_above(stacks.innermost(mid)) if stacks is not None else []
        kind, op = sync_kind(call, ctx.op_chain(call.tid, mid), functions)
        stage, module = ctx.key(call.tid, mid)
        gkey = (kind, op, site.label, site.layer, stage, module)
        g = groups[gkey]
        g[0] += 1
        g[1] += call.dur
        ends.append((call.end, gkey))
    ends.sort()
    end_times = [e for e, _ in ends]
    for gap in ctx.att.gaps:
        if gap.cause != "sync":
            continue
        i = bisect.bisect_left(end_times, gap.start - 50.0)
        if i < len(ends) and ends[i][0] <= gap.start + 50.0:
            groups[ends[i][1]][2] += gap.dur
    rows = [SyncRow(kind, op, int(c), _ms(us), _ms(idle), label, layer, stage, module)
            for (kind, op, label, layer, stage, module), (c, us, idle) in groups.items()]
    return tuple(sorted(rows, key=lambda r: -(r.wait_ms + r.idle_after_ms + 0.015 * r.count))[:TOP_ROWS])


# -- copies -----------------------------------------------------------------------------------------
def gather_copies(ctx: _Context) -> tuple[CopyRow, ...]:
    lo, hi = ctx.att.window
    groups: dict[tuple, dict[str, Any]] = {}
    for c in ctx.trace.copies:
        if not lo <= c.start + c.dur / 2 <= hi and c.correlation not in ctx.calls_by_corr:
            continue
        call = ctx.launcher(c.correlation)
        if call is not None:
            mid = call.start + call.dur / 2
            site, (stage, module) = ctx.site(call.tid, mid), ctx.key(call.tid, mid)
            api = re.sub(r"(?:_v\d+)?(?:_ptsz|_ptds)?$", "", call.name)
        else:
            site, stage, module, api = NO_SITE, "(outside stages)", "(unattributed)", ""
        gkey = (c.op, c.direction, c.src, c.dst, site.label, site.layer, stage, module)
        g = groups.setdefault(gkey, {"count": 0, "bytes": 0, "us": 0.0, "host": 0.0, "blocking": 0, "sizes": set(),
                                     "repeated": 0, "apis": defaultdict(int)})
        g["count"] += 1
        g["bytes"] += c.bytes
        g["us"] += c.dur
        g["host"] += call.dur if call is not None else 0.0
        if api in SYNC_COPY_APIS or (c.pageable and c.direction == "DtoH"):
            g["blocking"] += 1
        if c.bytes in g["sizes"]:
            g["repeated"] += 1
        g["sizes"].add(c.bytes)
        if api:
            g["apis"][api] += 1
    rows = []
    for (op, direction, src, dst, label, layer, stage, module), g in groups.items():
        api = _largest(g["apis"]) or ""
        rows.append(CopyRow(op, direction, src, dst, g["count"], g["bytes"], _ms(g["us"]), api, g["blocking"],
                            _ms(g["host"]), g["repeated"], len(g["sizes"]), label, layer, stage, module))
    return tuple(sorted(rows, key=lambda r: -(r.ms + r.host_ms))[:TOP_ROWS])


# -- kernel groups (layout, contiguous copies, float64, elementwise chains, fp32 GEMMs) ----------------
def _numel(dims: Sequence[Any]) -> int:
    try:
        return int(math.prod(int(d) for d in dims)) if dims else 0
    except (TypeError, ValueError):
        return 0


def op_bytes(op: CpuOp) -> int:
    """Bytes an elementwise op reads and writes: each tensor input once, an output the size of the largest."""
    sizes = [(_numel(d), ITEMSIZE.get(t, 4)) for d, t in zip(op.input_dims, op.input_types) if d]
    if not sizes:
        return 0
    largest = max(sizes, key=lambda s: s[0] * s[1])
    return sum(n * b for n, b in sizes) + largest[0] * largest[1]


def _has_double(op: CpuOp) -> bool:
    """Whether a tensor input of ``op`` is float64 (a Python float argument is recorded as 'double' too: no dims)."""
    return any(t == "double" and d for d, t in zip(op.input_dims, op.input_types))


class _Groups:
    """KernelGroup accumulators keyed by (kind, site, layer, stage, module)."""

    def __init__(self) -> None:
        self.groups: dict[tuple, dict[str, Any]] = {}

    def add(self, kind: str, site: Site, key: Key, us: float, name: str, nbytes: int = 0, length: int = 0) -> None:
        gkey = (kind, site.label, site.layer, key[0], key[1])
        g = self.groups.setdefault(gkey, {"count": 0, "us": 0.0, "names": defaultdict(float), "bytes": 0, "len": 0})
        g["count"] += 1
        g["us"] += us
        g["names"][name] += us
        g["bytes"] += nbytes
        g["len"] = max(g["len"], length)

    def rows(self) -> list[KernelGroup]:
        out = []
        for (kind, label, layer, stage, module), g in self.groups.items():
            names = _top(g["names"], 3)
            out.append(KernelGroup(kind, g["count"], _ms(g["us"]), names, g["bytes"], g["len"], label, layer,
                                   stage, module))
        return out


def gather_kernel_groups(ctx: _Context, precision: str) -> tuple[KernelGroup, ...]:
    groups = _Groups()
    reduced = precision in ("fp16", "bf16", "int8", "fp8")
    chain: list[tuple[Any, Site, Key, int]] = []

    def close_chain() -> None:
        if len(chain) >= CHAIN_MIN:
            for k, site, key, nbytes in chain:
                groups.add("elementwise_chain", site, key, k.dur, k.name, nbytes, len(chain))
        chain.clear()

    last_stream: int | None = None
    largest = _largest_allocation(ctx)
    sweep_bytes = largest.bytes if largest is not None and largest.bytes >= SWEEP_MIN_ALLOCATION_BYTES else 0
    for k in ctx.trace.kernels:
        call = ctx.launcher(k.correlation)
        if call is None:
            continue
        mid = call.start + call.dur / 2
        site, key = ctx.site(call.tid, mid), ctx.key(call.tid, mid)
        ops = ctx.op_chain(call.tid, mid)
        names = {o.name for o in ops}
        cls = classify(k.name)
        if sweep_bytes and ops:
            moved = op_bytes(ops[-1])
            if moved >= sweep_bytes:
                groups.add("buffer_sweep", site, key, k.dur, k.name, moved)
        if LAYOUT_KERNEL.search(k.name):
            groups.add("layout_transpose", site, key, k.dur, k.name)
        elif COPY_KERNEL.search(k.name) and names & CONTIGUOUS_OPS:
            groups.add("contiguous_copy", site, key, k.dur, k.name)
        if cls.precision == "fp64" or any(_has_double(o) for o in ops[-1:]):
            groups.add("fp64", site, key, k.dur, k.name)
        if reduced and cls.kind in ("gemm", "conv") and cls.precision in ("fp32", "tf32") and not cls.tensor_core:
            groups.add("fp32_gemm", site, key, k.dur, k.name)
        elementwise = bool(ELEMENTWISE_KERNEL.search(k.name))
        same = chain and chain[-1][1].label == site.label and last_stream == k.stream
        if not elementwise or not same:
            close_chain()
        if elementwise:
            top = ops[-1] if ops else None
            chain.append((k, site, key, op_bytes(top) if top is not None else 0))
        last_stream = k.stream
    close_chain()
    if not ctx.has_gpu:
        _cpu_groups(ctx, groups)
    rows = groups.rows()
    return tuple(sorted(rows, key=lambda r: -r.ms)[:3 * TOP_ROWS])


def _cpu_groups(ctx: _Context, groups: _Groups) -> None:
    """The same kinds from CPU ops, for a CPU capture (no kernels): time is the ops' CPU time."""
    for tid, ops in ctx.ops_by_tid.items():
        parents = ctx.op_parents[tid]
        chain: list[tuple[CpuOp, Site, Key]] = []

        def close(chain: list = chain) -> None:
            if len(chain) >= CHAIN_MIN:
                for op, site, key in chain:
                    groups.add("elementwise_chain", site, key, op.dur, op.name, op_bytes(op), len(chain))
            chain.clear()

        for i, op in enumerate(ops):
            if parents[i] >= 0:
                continue  # top-level ops only: their nested ops are their own work
            mid = op.start + op.dur / 2
            site, key = ctx.site(tid, mid), ctx.key(tid, mid)
            if op.name in CONTIGUOUS_OPS and op.dur >= CPU_WORK_MIN_US:
                groups.add("contiguous_copy", site, key, op.dur, op.name)
            if _has_double(op):
                groups.add("fp64", site, key, op.dur, op.name)
            big = max((_numel(d) for d in op.input_dims), default=0) >= CHAIN_MIN_NUMEL
            if op.name in ELEMENTWISE_OPS and big and (not chain or chain[-1][1].label == site.label):
                chain.append((op, site, key))
            else:
                close()
                if op.name in ELEMENTWISE_OPS and big:
                    chain.append((op, site, key))
        close()


# -- GEMM shapes ----------------------------------------------------------------------------------------
def gemm_dims(op: CpuOp) -> tuple[int, ...] | None:
    """(M, N, K) of a matmul op, (N, C_in, C_out) of a conv, from its input dims; None when unknown."""
    dims = [tuple(int(x) for x in d) for d in op.input_dims]
    try:
        if op.name in ("aten::mm",):
            (m, k), (_, n) = dims[0], dims[1]
        elif op.name in ("aten::bmm",):
            (_, m, k), (_, _, n) = dims[0], dims[1]
        elif op.name in ("aten::addmm",):
            (m, k), (_, n) = dims[1], dims[2]
        elif op.name in ("aten::baddbmm", "aten::addbmm"):
            (_, m, k), (_, _, n) = dims[1], dims[2]
        elif op.name in ("aten::linear",):
            m, k = _numel(dims[0][:-1]), dims[0][-1]
            n = dims[1][0]
        elif op.name in ("aten::matmul",):
            m, k = _numel(dims[0][:-1]) if len(dims[0]) > 1 else 1, dims[0][-1]
            n = dims[1][-1] if len(dims[1]) > 1 else 1
        elif op.name in CONV_OPS:
            return (dims[0][0], dims[0][1], dims[1][0])
        else:
            return None
    except (IndexError, ValueError, TypeError):
        return None
    return (int(m), int(n), int(k))


def gather_gemm_shapes(ctx: _Context, precision: str) -> tuple[GemmShape, ...]:
    kernels_by_call: dict[int, list[Any]] = defaultdict(list)
    for k in ctx.trace.kernels:
        if k.correlation is not None:
            kernels_by_call[k.correlation].append(k)
    calls_by_tid: dict[int, list[RuntimeCall]] = defaultdict(list)
    for c in ctx.calls:
        calls_by_tid[c.tid].append(c)
    call_starts = {tid: [c.start for c in cs] for tid, cs in calls_by_tid.items()}
    groups: dict[tuple, dict[str, Any]] = {}
    for tid, ops in ctx.ops_by_tid.items():
        parents = ctx.op_parents[tid]
        for i, op in enumerate(ops):
            if op.name not in MATMUL_OPS and op.name not in CONV_OPS:
                continue
            p = parents[i]
            if p >= 0 and (ops[p].name in MATMUL_OPS or ops[p].name in CONV_OPS):
                continue  # linear -> addmm -> mm: the outermost one stands for them
            dims = gemm_dims(op)
            if dims is None:
                continue
            cs = calls_by_tid.get(tid, [])
            a = bisect.bisect_left(call_starts.get(tid, []), op.start)
            b = bisect.bisect_right(call_starts.get(tid, []), op.end)
            kernels = [k for c in cs[a:b] for k in kernels_by_call.get(c.correlation or -1, [])]
            classes = [classify(k.name) for k in kernels if classify(k.name).kind in ("gemm", "conv")]
            us = sum(k.dur for k in kernels) if ctx.has_gpu else op.dur
            kp = next((c.precision for c in classes if c.precision), None)
            dtype = kp or (op.input_types[0] if op.input_types else "")
            granule = GRANULE.get(kp or precision)
            names = ("M", "N", "K") if op.name in MATMUL_OPS else ("N", "C_in", "C_out")
            misaligned = tuple(n for n, d in zip(names, dims) if granule and n != names[0] and d % granule
                               and not (n == "C_in" and d <= IMAGE_CHANNELS))  # an RGB(A) input layer is what it is
            tc = any(c.tensor_core for c in classes) if classes else None
            mid = op.start + op.dur / 2
            site, key = ctx.site(tid, mid), ctx.key(tid, mid)
            gkey = (op.name, dims, dtype, misaligned, tc, site.label, site.layer, key[1])
            g = groups.setdefault(gkey, {"count": 0, "us": 0.0})
            g["count"] += 1
            g["us"] += us
    rows = [GemmShape(op, dims, dtype, g["count"], _ms(g["us"]), mis, tc, label, layer, module)
            for (op, dims, dtype, mis, tc, label, layer, module), g in groups.items()]
    return tuple(sorted(rows, key=lambda r: (-bool(r.misaligned), -r.ms))[:TOP_ROWS])


# -- functions (the rows below a module) ----------------------------------------------------------------
#: the function names of a module's own call: work in them is the module's forward body, not a helper below it
FORWARD_FUNCTIONS = frozenset({"forward", "__call__", "_call_impl", "_wrapped_call_impl"})


def _forward_like(function: str | None) -> bool:
    return (function or "").split(" ")[0] in FORWARD_FUNCTIONS


def gather_functions(ctx: _Context, opaque: frozenset[str] = frozenset()) -> tuple[tuple[FunctionRow, ...], float]:
    """Work per (module, user function), and the kernel us a user function below the tracker's entry (its
    top-level forward) names in the ``opaque`` buckets (no module path names them: the root's forward body,
    the stage body, outside stages)."""
    att = ctx.att
    acc: dict[tuple[str, str, str, str, str], list[float]] = defaultdict(lambda: [0.0, 0.0, 0, 0, 0, 0])
    below_forward_us = 0.0
    if not att.stacks:
        return (), 0.0
    for k in ctx.trace.kernels:
        call = ctx.launcher(k.correlation)
        if call is None:
            continue
        mid = call.start + call.dur / 2
        site = ctx.site(call.tid, mid)
        key = att.call_keys.get(call.correlation) if call.correlation is not None else None
        if site.function is None or key is None:
            continue
        row = acc[(key[0], key[1], site.function, site.label or "", site.layer)]
        row[1] += k.dur
        row[2] += 1
        if key[1] in opaque and is_helper(site):
            below_forward_us += k.dur  # a helper the forward called, not the forward's own body
    for call in ctx.calls:
        mid = call.start + call.dur / 2
        site = ctx.site(call.tid, mid)
        if site.function is None or call.kind not in ("launch", "sync"):
            continue
        found = att.call_keys.get(call.correlation) if call.correlation is not None else None
        stage, module = found or ctx.key(call.tid, mid)
        row = acc[(stage, module, site.function, site.label or "", site.layer)]
        row[3 if call.kind == "launch" else 4] += 1
    main = ctx.trace.main_tid
    if main is not None:
        # a segment (the main thread's window cut at stage and module boundaries) is cut again where a user frame
        # starts or ends, so each piece's wall goes to the function it ran in, not the one at the segment's middle
        stacks = att.stacks.threads.get(main)
        cuts = sorted({t for i, f in enumerate(stacks.frames) if stacks.is_code(i) for t in (f.start, f.end)}
                      ) if stacks is not None else []
        for a, b, key in att.segments:
            edges = [a, *cuts[bisect.bisect_right(cuts, a):bisect.bisect_left(cuts, b)], b]
            for lo, hi in zip(edges, edges[1:]):
                site = ctx.site(main, (lo + hi) / 2)
                if site.function is not None and hi > lo:
                    acc[(key[0], key[1], site.function, site.label or "", site.layer)][0] += hi - lo
        for op in ctx.ops_by_tid.get(main, []):
            mid = op.start + op.dur / 2
            site = ctx.site(main, mid)
            if site.function is not None:
                key = ctx.key(main, mid)
                acc[(key[0], key[1], site.function, site.label or "", site.layer)][5] += 1
    rows = [FunctionRow(module, function, label, layer, _ms(v[0]), _ms(v[1]), int(v[2]), int(v[3]), int(v[4]),
                        int(v[5]), stage)
            for (stage, module, function, label, layer), v in acc.items()]
    rows.sort(key=lambda r: -(r.kernel_ms + r.wall_ms))
    return tuple(rows[:TOP_FUNCTIONS]), below_forward_us


# -- memory -----------------------------------------------------------------------------------------------
def _memory_events(ctx: _Context) -> list[Any]:
    """The allocator's events in the run window: the device's on a GPU run, all of them on a CPU run."""
    lo, hi = ctx.att.window
    if not ctx.has_gpu:
        return [m for m in ctx.trace.memory if lo <= m.start <= hi]
    return [m for m in ctx.trace.memory if lo <= m.start <= hi and m.device_type == CUDA_DEVICE_TYPE]


def _largest_allocation(ctx: _Context) -> Any:
    """The run's largest allocation event, or None."""
    return max((m for m in _memory_events(ctx) if m.bytes > 0), key=lambda m: m.bytes, default=None)


def gather_memory(ctx: _Context, settings: dict[str, str]) -> MemoryFacts:
    mallocs = frees = 0
    malloc_us = free_us = 0.0
    malloc_site: str | None = None
    for c in ctx.calls:
        base = re.sub(r"(?:_v\d+)?(?:_ptsz|_ptds)?$", "", c.name)
        if base in MALLOC_CALLS:
            mallocs += 1
            malloc_us += c.dur
            site = ctx.site(c.tid, c.start + c.dur / 2)
            if malloc_site is None and site.layer == USER:
                malloc_site = site.label
        elif base in FREE_CALLS:
            frees += 1
            free_us += c.dur
    empty, empty_site = 0, None
    if ctx.att.stacks:
        for stacks in ctx.att.stacks.threads.values():
            for i, f in enumerate(stacks.frames):
                fs = frame_site(f)
                if fs and fs[2] == "empty_cache" and "cuda" in fs[0] and _inside(ctx.att.window, f.start):
                    empty += 1
                    site = stacks.site_of_frame(stacks.parents[i])
                    if empty_site is None and site.layer == USER:
                        empty_site = site.label
    events = _memory_events(ctx)
    allocs = [m for m in events if m.bytes > 0]
    largest = max(allocs, key=lambda m: m.bytes, default=None)
    largest_site = None
    if largest is not None:
        site = ctx.site(largest.tid, largest.start)
        largest_site = site.label if site.layer == USER else None
    capacity = int(settings.get("device_capacity_bytes", "0") or 0)
    return MemoryFacts(mallocs, _ms(malloc_us), frees, _ms(free_us), empty, empty_site, len(allocs),
                       sum(m.bytes for m in allocs), largest.bytes if largest else 0, largest_site,
                       max((m.total_allocated for m in events), default=0),
                       max((m.total_reserved for m in events), default=0), capacity, malloc_site)


def _inside(window: tuple[float, float], t: float) -> bool:
    return window[0] <= t <= window[1]


# -- compilation ------------------------------------------------------------------------------------------
def gather_compile(ctx: _Context, settings: dict[str, str]) -> CompileFacts:
    regions: set[str] = set()
    calls = recompiled = 0
    # the region marker is a record_function range in some torch versions and a cpu_op in others
    marks = [(r.label, r.tid, r.start) for r in ctx.trace.annotations]
    marks += [(op.name, op.tid, op.start) for op in ctx.trace.cpu_ops if op.name.startswith("Torch-Compiled")]
    region_site = None
    for label, tid, start in marks:
        m = COMPILED_REGION.match(label)
        if m and _inside(ctx.att.window, start):
            if region_site is None:
                site = ctx.site(tid, start)
                region_site = site.label if site.layer == USER else None
            regions.add(m.group("frame"))
            calls += 1
            recompiled += int(m.group("compile")) > 0
    compile_us = autotune_us = 0.0
    compile_site = None
    resumes: set[str] = set()
    if ctx.att.stacks:
        for stacks in ctx.att.stacks.threads.values():
            outer_end = float("-inf")
            for i, f in enumerate(stacks.frames):
                fs = frame_site(f)
                if not fs or not _inside(ctx.att.window, f.start):
                    continue
                rm = RESUME_FUNCTION.match(fs[2])
                if rm:
                    resumes.add(f"{fs[2]} ({fs[0].rsplit('/', 1)[-1]})")
                if f.start < outer_end:
                    continue
                if fs[2] in COMPILE_FRAMES and ("_dynamo" in fs[0] or "_inductor" in fs[0]):
                    compile_us += f.dur
                    outer_end = f.end
                    site = stacks.site_of_frame(stacks.parents[i])
                    if compile_site is None and site.layer == USER:
                        compile_site = site.label
                elif fs[2] in AUTOTUNE_FRAMES and "_inductor" in fs[0]:
                    autotune_us += f.dur
                    outer_end = f.end
    run_recompiles = sum(int(v) for k, v in settings.items()
                         if k.startswith(("dynamo_run.recompiles.", "dynamo_run.stats.unique_graphs")))
    # graph breaks: a compiled function split into frames (a region with a frame id above the first is a resumed
    # part) or dynamo's resume functions in the stack; dynamo's counters are process-wide (another tracker's
    # breaks count there too), so their reasons are read only when this run entered compiled code
    split = max(0, len(regions) - 1)
    reasons: tuple[str, ...] = ()
    if regions or resumes:
        reasons = tuple(k.split(".", 2)[2].split("\n")[0][:160] for k, _ in sorted(
            ((k, v) for k, v in settings.items() if k.startswith("dynamo_total.graph_break.")),
            key=lambda kv: -int(kv[1]))[:5])
    # dynamo recorded break reasons and this run entered compiled code: at least one break per reason (a warm run
    # re-enters the split graphs without counting the break again)
    breaks = max(split, len(resumes), len(reasons) if regions and reasons else 0)
    return CompileFacts(len(regions), calls, run_recompiles, breaks, _ms(compile_us),
                        compile_site or region_site, _ms(autotune_us), reasons or tuple(sorted(resumes))[:5])


# -- host ----------------------------------------------------------------------------------------------------
def gather_host(ctx: _Context, settings: dict[str, str]) -> HostFacts:
    main = ctx.trace.main_tid
    cpu_only: list[tuple[CpuOp, Site]] = []
    if ctx.has_gpu and main is not None:
        ops = ctx.ops_by_tid.get(main, [])
        parents = ctx.op_parents.get(main, [])
        call_starts = sorted(c.start for c in ctx.calls if c.tid == main and c.kind in ("launch", "copy", "memset"))
        for i, op in enumerate(ops):
            if parents[i] >= 0 or op.dur < CPU_WORK_MIN_US:
                continue
            a = bisect.bisect_left(call_starts, op.start)
            if a < len(call_starts) and call_starts[a] <= op.end:
                continue  # it launched GPU work
            mid = op.start + op.dur / 2
            stage, module = ctx.key(main, mid)
            site = ctx.site(main, mid)
            if _session(stage, module) or site.layer == TRACKSCOPE or op.name.startswith(COMPILE_OPS):
                continue
            cpu_only.append((op, site))
    by_name: dict[str, float] = defaultdict(float)
    by_site: dict[str, float] = defaultdict(float)
    for op, site in cpu_only:
        by_name[op.name] += op.dur
        by_site[site.label or ""] += op.dur
    python_us, python_site = _python_self_time(ctx, main)
    return HostFacts(len(cpu_only), _ms(sum(op.dur for op, _ in cpu_only)),
                     _top(by_name, 4), _largest(by_site),
                     _ms(python_us), python_site, int(settings.get("num_threads", "0") or 0),
                     int(settings.get("interop_threads", "0") or 0), int(settings.get("cores", "0") or 0),
                     len(ctx.ops_by_tid))


def _python_self_time(ctx: _Context, tid: int | None) -> tuple[float, str | None]:
    """Time the main thread spent in the user's own Python: a user frame's duration less its child frames' and
    less the torch ops it ran directly (``0.25 * x`` is an op under the frame with no Python frame of its own)."""
    stacks = ctx.att.stacks.threads.get(tid) if ctx.att.stacks and tid is not None else None
    if stacks is None:
        return 0.0, None
    child_us = [0.0] * len(stacks.frames)
    for i, p in enumerate(stacks.parents):
        if p >= 0:
            child_us[p] += stacks.frames[i].dur
    ops = ctx.ops_by_tid.get(tid, []) if tid is not None else []
    parents = ctx.op_parents.get(tid, []) if tid is not None else []
    for op, parent in zip(ops, parents):
        if parent < 0:
            i = stacks.innermost(op.start + op.dur / 2)
            if i >= 0:
                child_us[i] += op.dur
    per_site: dict[str, float] = defaultdict(float)
    for i, f in enumerate(stacks.frames):
        if not _inside(ctx.att.window, f.start + f.dur / 2):
            continue
        fs = frame_site(f)
        if fs is None or stacks.layers.layer(fs[0]) != USER:
            continue
        stage, module = ctx.key(tid, f.start + f.dur / 2)  # type: ignore[arg-type]
        if _session(stage, module):
            continue
        self_us = max(0.0, f.dur - child_us[i])
        site = stacks.site_of_frame(i)
        per_site[site.label or ""] += self_us
    total = sum(per_site.values())
    return total, _largest(per_site)


# -- GPU idle ---------------------------------------------------------------------------------------------------
def gather_idle(ctx: _Context) -> IdleBreakdown:
    att = ctx.att
    if not att.has_gpu:
        return IdleBreakdown()
    listed = sum(g.dur for g in att.gaps)
    kernel_wait = max(0.0, att.idle_us - listed)  # the gaps under GAP_LIST_MIN_US
    host = sync = copy = session = 0.0
    host_sites: dict[str, float] = defaultdict(float)
    main = ctx.trace.main_tid
    for g in att.gaps:
        if _session(g.stage, g.module):
            session += g.dur
        elif g.cause == "sync":
            sync += g.dur
        elif g.cause == "copy":
            copy += g.dur
        elif g.dur < KERNEL_WAIT_MAX_US:
            kernel_wait += g.dur
        else:
            host += g.dur
            if main is not None:
                site = ctx.site(main, g.start + g.dur / 2)
                if site.layer == USER and site.label:
                    host_sites[site.label] += g.dur
    return IdleBreakdown(_ms(kernel_wait), _ms(host), _ms(sync), _ms(copy), _ms(session), _largest(host_sites))


def is_helper(site: Site) -> bool:
    """A user function below the tracker's entry that is not a module's own forward (a function row's name)."""
    return site.layer == USER and not site.outermost_user and not _forward_like(site.function)


def gather(trace: Trace, att: Attribution, *, precision: str, settings: dict[str, str] | None = None,
           opaque: frozenset[str] = frozenset()) -> tuple[Evidence, float, KernelNaming]:
    """The evidence of one attributed capture, the kernel us a user function below the tracker's entry
    names in the ``opaque`` buckets, and the kernel time by its finest name (for the attributed shares)."""
    settings = dict(settings or {})
    ctx = _Context.build(trace, att)
    functions, below_forward_us = gather_functions(ctx, opaque)
    lines, naming = attribute_lines(ctx, is_helper)
    # dynamo's process-wide break reasons go into CompileFacts.reasons (when this run entered compiled code), not here
    kept = {k: v for k, v in settings.items() if not k.startswith("dynamo_total.graph_break.")}
    evidence = Evidence(gather_syncs(ctx), gather_copies(ctx), gather_kernel_groups(ctx, precision),
                        gather_gemm_shapes(ctx, precision), functions, gather_memory(ctx, settings),
                        gather_compile(ctx, settings), gather_host(ctx, settings), gather_idle(ctx), kept, lines)
    return evidence, below_forward_us, naming
