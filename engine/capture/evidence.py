"""The evidence a capture summary keeps for the diagnosis rules: typed rows, one kind per problem class.

These are the facts the rules in ``engine.capture.rules`` read; ``engine.capture.gather`` builds them
from a parsed Trace once, at capture time, so a report replayed on a laptop carries the same evidence.
Every row that points at code carries:

- ``site``: the user's call site, ``file:line function`` of the innermost frame outside torch, other
  infrastructure libraries, the standard library and trackscope (``engine.capture.sites``); the profiler
  records function entries, so ``line`` is the line the function starts on;
- ``layer``: ``"user"`` (the tracker's own code), ``"trackscope"`` (the session, the plugin adapter's upload
  and download, the stage timer: shown, never a finding about the user's code) or ``"unknown"`` (no Python
  stack in the capture);
- ``stage`` / ``module``: where it happened, as the attribution names it.

Times are ms on the profiled timeline, bytes are bytes. All fields have defaults, so a summary written
before a field existed still loads.
"""

from __future__ import annotations

from dataclasses import dataclass, field

USER = "user"
TRACKSCOPE = "trackscope"
UNKNOWN = "unknown"


@dataclass(frozen=True)
class SyncRow:
    """Host-device syncs of one kind from one call site.

    ``kind``: ``item`` (``.item()``, ``.tolist()``, ``print``/``float``/``bool``/``if`` on a tensor: the aten
    ``_local_scalar_dense``), ``to_host`` (``.cpu()``, ``.numpy()``, ``.to('cpu')``: a device-to-host copy that
    waits), ``nonzero`` (``nonzero``, boolean-mask indexing, ``masked_select``, ``unique``, ``where(cond)``:
    an output whose size the host must read), ``synchronize`` (``torch.cuda.synchronize()``,
    ``Stream/Event.synchronize``), ``blocking_copy`` (a synchronous ``cudaMemcpy``/``cudaMemset``) or ``other``.
    """

    kind: str
    op: str  # the aten op or Python builtin that synced ("aten::_local_scalar_dense", "synchronize")
    count: int
    wait_ms: float  # host time blocked in the sync calls
    idle_after_ms: float = 0.0  # GPU idle gaps these syncs started
    site: str | None = None
    layer: str = UNKNOWN
    stage: str = ""
    module: str = ""


@dataclass(frozen=True)
class CopyRow:
    """Copies (or memsets) of one direction and memory kind from one call site."""

    op: str  # memcpy | memset
    direction: str  # HtoD | DtoH | DtoD | HtoH | PtoP | ""
    src: str  # Pageable | Pinned | Device | ""
    dst: str
    count: int
    bytes: int
    ms: float  # GPU time of the copies
    api: str = ""  # the runtime call that issued most of them (cudaMemcpyAsync, cudaMemcpy, ...)
    blocking: int = 0  # how many blocked the host (synchronous API, or pageable memory)
    host_ms: float = 0.0  # host time in the issuing runtime calls
    repeated: int = 0  # copies of a size this site copied before in the same run (same data again?)
    sizes: int = 0  # distinct byte sizes
    site: str | None = None
    layer: str = UNKNOWN
    stage: str = ""
    module: str = ""


@dataclass(frozen=True)
class KernelGroup:
    """Kernels of one problem class from one call site: layout transposes, contiguous copies, float64 work,
    elementwise chains, fp32 GEMMs in a reduced-precision run, ..."""

    #: layout_transpose | contiguous_copy | fp64 | elementwise_chain | fp32_gemm | buffer_sweep (kernels whose
    #: op's tensors hold at least the run's largest allocation: its fill and the passes over all of it) | ...
    kind: str
    count: int
    ms: float
    names: tuple[str, ...] = ()  # the top kernel (or op) names
    bytes: int = 0  # estimated bytes moved (elementwise chains, buffer sweeps: inputs + outputs of each op)
    length: int = 0  # elementwise chains: kernels in the longest chain
    site: str | None = None
    layer: str = UNKNOWN
    stage: str = ""
    module: str = ""


@dataclass(frozen=True)
class GemmShape:
    """Matmul / conv ops of one shape: tensor-core alignment."""

    op: str  # aten::mm, aten::bmm, aten::addmm, aten::linear, aten::convolution, ...
    dims: tuple[int, ...]  # (M, N, K) for matmuls; (N, C_in, C_out) for convs
    dtype: str
    count: int
    ms: float  # GPU time of its kernels (CPU time on the CPU)
    misaligned: tuple[str, ...] = ()  # which of the dims are not multiples of the tensor-core granule
    tensor_core: bool | None = None  # whether its kernels used tensor cores
    site: str | None = None
    layer: str = UNKNOWN
    module: str = ""


@dataclass(frozen=True)
class FunctionRow:
    """Work attributed to one user function inside one module (the rows below a module in the tree)."""

    module: str  # the module label the function ran in ("(forward body of X)", a leaf path, "(stage body)")
    function: str  # "name (file:line)"
    site: str
    layer: str
    wall_ms: float  # host time on the main thread with this function innermost among user frames
    kernel_ms: float
    kernels: int
    launches: int
    syncs: int
    cpu_ops: int
    stage: str = ""


@dataclass(frozen=True)
class LineRow:
    """Work launched by one source line of a forward body (marked at capture time: engine.capture.lines)."""

    module: str  # the bucket it ran in: "(forward body of X)"
    function: str  # the forward as the function rows name it: "forward (file:first line)"
    line: str  # "file:line forward": the statement that made the torch call
    kernel_ms: float
    kernels: int
    launches: int
    ops: tuple[str, ...] = ()  # ATen ops that launched its kernels, costliest first ("aten::to (autocast casts)")
    wall_ms: float = 0.0  # host time of its torch calls on the main thread
    stage: str = ""


@dataclass(frozen=True)
class MemoryFacts:
    """Device memory during the captured (warm) run, from the allocator's events and the runtime calls."""

    mallocs: int = 0  # cudaMalloc / cudaMallocAsync calls (the caching allocator asked the driver)
    malloc_ms: float = 0.0
    frees: int = 0  # cudaFree calls (empty_cache or the allocator freeing to retry)
    free_ms: float = 0.0
    empty_cache_calls: int = 0
    empty_cache_site: str | None = None
    allocations: int = 0  # allocator events in the run
    allocated_bytes: int = 0  # bytes allocated in the run (sum over allocations)
    largest_allocation_bytes: int = 0
    largest_allocation_site: str | None = None
    peak_allocated_bytes: int = 0
    peak_reserved_bytes: int = 0
    capacity_bytes: int = 0
    malloc_site: str | None = None


@dataclass(frozen=True)
class CompileFacts:
    """torch.compile seen in the captured (warm) run."""

    regions: int = 0  # distinct compiled frames ("Torch-Compiled Region: F/C") entered
    region_calls: int = 0
    recompiles: int = 0  # compiled regions with a compile id above 0, or dynamo's counters moved in the run
    graph_breaks: int = 0  # dynamo's graph-break counter over the capture, when torch.compile ran
    compile_ms: float = 0.0  # host time in dynamo / inductor compilation frames during the warm run
    compile_site: str | None = None
    autotune_ms: float = 0.0  # host time in autotuning frames (inductor's select_algorithm, cudnn benchmark)
    reasons: tuple[str, ...] = ()  # recompile / graph-break reasons dynamo recorded, when it did


@dataclass(frozen=True)
class HostFacts:
    """The host side of the captured run."""

    cpu_only_ops: int = 0  # top-level CPU ops in the tracker's stages that launched no GPU work (GPU runs)
    cpu_only_ms: float = 0.0
    cpu_only_names: tuple[str, ...] = ()
    cpu_only_site: str | None = None
    python_ms: float = 0.0  # main-thread time in user Python frames with no torch op under them
    python_site: str | None = None  # the user function with most of it
    num_threads: int = 0  # torch.get_num_threads() at capture time
    interop_threads: int = 0
    cores: int = 0  # CPU cores this process may run on (affinity)
    busy_threads: int = 0  # threads with CPU ops in the run


@dataclass(frozen=True)
class IdleBreakdown:
    """GPU idle time of the run window, split the way HolisticTraceAnalysis splits it, plus its causes.

    ``kernel_wait``: gaps between consecutive GPU work shorter than ``KERNEL_WAIT_MAX_US`` (launch latency);
    ``host_wait``: longer gaps while the host was not blocked on the GPU (Python, CPU ops, the host side);
    ``sync``: gaps that start when a host sync returns; ``copy``: gaps after a blocking device-to-host copy;
    ``trackscope``: gaps in trackscope's own stages and loop (upload, download, between batches).
    """

    kernel_wait_ms: float = 0.0
    host_wait_ms: float = 0.0
    sync_ms: float = 0.0
    copy_ms: float = 0.0
    trackscope_ms: float = 0.0
    host_wait_site: str | None = None  # the user function the host was in during most of the host wait


@dataclass(frozen=True)
class Evidence:
    """Everything above, as one summary part."""

    syncs: tuple[SyncRow, ...] = ()
    copies: tuple[CopyRow, ...] = ()
    kernel_groups: tuple[KernelGroup, ...] = ()
    gemm_shapes: tuple[GemmShape, ...] = ()
    functions: tuple[FunctionRow, ...] = ()
    memory: MemoryFacts = field(default_factory=MemoryFacts)
    compile: CompileFacts = field(default_factory=CompileFacts)
    host: HostFacts = field(default_factory=HostFacts)
    idle: IdleBreakdown = field(default_factory=IdleBreakdown)
    settings: dict[str, str] = field(default_factory=dict)  # cudnn_benchmark, allow_tf32, ... as strings
    lines: tuple[LineRow, ...] = ()  # the source lines of forward bodies (a capture with line marks)
