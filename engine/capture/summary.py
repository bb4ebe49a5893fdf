"""The compact, versioned summary of one capture: what the report keeps and a laptop replays.

Built once from a CaptureResult (``summarize``), it holds tables, not events: per stage, per module
and per (stage, module) rows, the top kernels with their classes, counts, sync call sites, ops that
stay float32 under autocast, legacy-architecture kernels, the longest GPU idle gaps with their
causes, host round trips, the attributed shares and the capture's own overhead. Times are ms
on the profiled timeline (the run under the profiler); ``unprofiled_wall_ms`` is the same run
without it. ``to_dict``/``from_dict`` round-trip through JSON; a malformed field raises ReportError
naming its path.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from typing import Any

from engine.capture.attribution import (
    OUTSIDE_STAGES,
    STAGE_BODY,
    UNATTRIBUTED,
    Attribution,
    Bucket,
    attribute,
    forward_body,
)
from engine.capture.evidence import Evidence
from engine.capture.gather import gather
from engine.capture.kernels import classify, is_legacy_arch
from engine.capture.lines import KernelNaming
from engine.capture.sites import CodeLayers
from engine.core.errors import ReportError

SUMMARY_VERSION = 1
AUTOCAST_PRECISIONS = ("fp16", "bf16", "int8", "fp8")  # int8/fp8 run their float ops under autocast
TOP_KERNELS = 30
TOP_CELLS = 120
TOP_MODULES = 80
TOP_SITES = 10
TOP_GAPS = 20
TOP_FP32_OPS = 20
UNNAMED = (STAGE_BODY, OUTSIDE_STAGES, UNATTRIBUTED)
ADAPTER_STAGES = ("upload", "download", "decode")  # trackscope's own stages around a tracker's call


@dataclass(frozen=True)
class Row:
    """One table row: a stage (module ""), a module label (stage ""), or a (stage, module) cell."""

    stage: str
    module: str
    wall_ms: float
    kernel_ms: float
    kernels: int
    launches: int
    syncs: int
    sync_ms: float
    copies: int
    copy_bytes: int
    copy_ms: float
    dtoh: int
    htod: int
    dtod: int
    pageable: int
    pinned: int
    memsets: int
    idle_ms: float
    cpu_ops: int
    inclusive_wall_ms: float | None = None  # module rows (a path or its forward body): children included
    inclusive_kernel_ms: float | None = None


@dataclass(frozen=True)
class KernelRow:
    name: str
    kind: str
    tensor_core: bool | None
    precision: str | None
    arch: int | None
    count: int
    total_ms: float
    legacy: bool = False
    stage: str = ""  # where most of its time was launched
    module: str = ""


@dataclass(frozen=True)
class SyncSite:
    call_site: str
    count: int
    ms: float


@dataclass(frozen=True)
class Fp32Op:
    op: str
    module: str
    count: int
    gpu_ms: float
    cpu_ms: float


@dataclass(frozen=True)
class GapRow:
    start_ms: float  # from the start of the run window
    dur_ms: float
    stage: str
    module: str
    cause: str  # sync | copy | host
    call_site: str | None = None


@dataclass(frozen=True)
class RoundTripRow:
    stage: str
    module: str
    dtoh_bytes: int
    htod_bytes: int
    host_ms: float
    copy_ms: float
    ops: tuple[str, ...] = ()


@dataclass(frozen=True)
class Counts:
    kernels: int = 0
    launches: int = 0
    syncs: int = 0
    copies: int = 0
    copy_bytes: int = 0
    dtoh: int = 0
    htod: int = 0
    pageable: int = 0
    memsets: int = 0
    cpu_ops: int = 0


@dataclass(frozen=True)
class Shares:
    """How much of the captured run is attributed to a named module or forward body.

    "Named" means a real module path (``updater.blocks.2.attn.qkv``) or a ``(forward body of PATH)``
    bucket; "(stage body)", "(outside stages)" and "(unattributed)" are not named. Denominators differ:

    - ``kernel_named``: named GPU kernel time / all GPU kernel time of the run window (kernels go to the
      bucket of the host call that launched them).
    - ``wall_named``: named main-thread wall / the WHOLE run window, trackscope's own session time
      included: its upload/download/decode stages and its loop between stages ("(outside stages)"). On a
      plugin tracker that is a floor, not the tracker's figure (deep_nested on the H200: 62 %).
    - ``wall_attributed``: wall inside any stage, module or forward body / the run window, i.e. all but
      the session's loop between stages.
    - ``wall_named_of_tracker``: named wall in the tracker's own stages / the tracker's own time, the run
      window less the adapter stages (upload, download, decode) and the session's loop. This is the figure
      for the issue's ">= 90 % of wall time attributed to a named module or forward body", since the
      session's upload, download and loop are not the tracker's (deep_nested on the H200: 100 %). A
      tracker with declared stages but no module hooks (CorrTrack) has 0 here: its work is "(stage body)".
    - ``kernel_ms_named`` / ``wall_ms_named``: the numerators in ms (wall_ms_named over all stages).
    - ``kernel_named_or_function``, ``kernel_below_forward``, ``kernel_below_forward_or_line``: kernel time
      named finer than the tracker's top-level forward, over all kernel time (``engine.capture.lines``
      ``KernelNaming``), from strict to wide: see each field.
    """

    kernel_named: float | None = None
    wall_named: float | None = None
    kernel_ms_named: float = 0.0
    wall_ms_named: float = 0.0
    wall_attributed: float | None = None
    wall_named_of_tracker: float | None = None
    kernel_named_or_function: float | None = None  # kernel time named by a module path (a leaf) OR a user helper
    # function below a forward (the function rows of engine.capture.evidence); every forward body, the tracker's
    # and its submodules', counts as unnamed here (the strictest of the three)
    kernel_below_forward: float | None = None  # kernel time below the tracker's top-level forward: a module path,
    # a submodule's own forward body, or a user helper function (the function rows); the 90 % target
    kernel_below_forward_or_line: float | None = None  # the same, plus the source lines of the tracker's own forward
    # body (the line rows, engine.capture.lines: captures with line marks only)
    kernel_ms_lines: float = 0.0  # kernel ms named only by a line of the tracker's forward body


@dataclass(frozen=True)
class CaptureSummary:
    device: str
    precision: str
    torch_version: str
    capability: tuple[int, ...] | None = None
    wall_ms: float = 0.0  # the captured run's window, profiled
    profiled_wall_ms: float | None = None
    unprofiled_wall_ms: float | None = None
    kernel_ms: float = 0.0
    gpu_busy_ms: float = 0.0
    gpu_idle_ms: float = 0.0
    has_gpu: bool = False
    counts: Counts = field(default_factory=Counts)
    shares: Shares = field(default_factory=Shares)
    stages: tuple[Row, ...] = ()
    modules: tuple[Row, ...] = ()
    cells: tuple[Row, ...] = ()
    top_kernels: tuple[KernelRow, ...] = ()
    kernel_class_ms: dict[str, float] = field(default_factory=dict)
    legacy_kernels: tuple[KernelRow, ...] = ()
    sync_sites: tuple[SyncSite, ...] = ()
    fp32_ops: tuple[Fp32Op, ...] = ()
    gaps: tuple[GapRow, ...] = ()
    idle_by_cause_ms: dict[str, float] = field(default_factory=dict)
    round_trips: tuple[RoundTripRow, ...] = ()
    evidence: Evidence = field(default_factory=Evidence)  # the rules' typed evidence (engine.capture.evidence)
    error: str | None = None
    version: int = SUMMARY_VERSION

    @property
    def overhead(self) -> float | None:
        if not self.unprofiled_wall_ms or self.profiled_wall_ms is None:
            return None
        return self.profiled_wall_ms / self.unprofiled_wall_ms

    def to_dict(self) -> dict[str, Any]:
        return _to_plain(self)

    @classmethod
    def from_dict(cls, data: Any) -> CaptureSummary:
        if not isinstance(data, dict):
            raise ReportError(f"capture summary: expected an object, got {type(data).__name__}")
        version = data.get("version", SUMMARY_VERSION)
        if version != SUMMARY_VERSION:
            raise ReportError(f"capture summary: version {version!r} is not {SUMMARY_VERSION}",
                              "open it with the trackscope version that wrote it")
        return _from_plain(cls, data, "capture")


# -- (de)serialisation with type checks ---------------------------------------------------------------
def _to_plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value):
        return {f.name: _to_plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, tuple):
        return [_to_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _to_plain(v) for k, v in value.items()}
    if isinstance(value, float):
        return round(value, 4)
    return value


def _check(hint: Any, value: Any, path: str) -> Any:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(hint)
        if value is None and type(None) in options:
            return None
        errors = []
        for option in options:
            if option is type(None):
                continue
            try:
                return _check(option, value, path)
            except ReportError as exc:
                errors.append(exc)
        raise errors[0] if errors else ReportError(f"{path}: unexpected null")
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise ReportError(f"{path}: expected a list, got {type(value).__name__}")
        inner = typing.get_args(hint)[0]
        return tuple(_check(inner, v, f"{path}[{i}]") for i, v in enumerate(value))
    if origin is dict:
        if not isinstance(value, dict):
            raise ReportError(f"{path}: expected an object, got {type(value).__name__}")
        inner = typing.get_args(hint)[1]
        return {str(k): _check(inner, v, f"{path}.{k}") for k, v in value.items()}
    if dataclasses.is_dataclass(hint):
        if not isinstance(value, dict):
            raise ReportError(f"{path}: expected an object, got {type(value).__name__}")
        return _from_plain(typing.cast(type, hint), value, path)  # a field's hint: the class, never an instance
    if hint is bool:
        if not isinstance(value, bool):
            raise ReportError(f"{path}: expected true/false, got {value!r}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ReportError(f"{path}: expected an integer, got {value!r}")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ReportError(f"{path}: expected a number, got {value!r}")
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise ReportError(f"{path}: expected a string, got {value!r}")
        return value
    return value


def _from_plain(cls: type, data: dict[str, Any], path: str) -> Any:
    hints = typing.get_type_hints(cls)
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        sub = f"{path}.{f.name}"
        if f.name not in data:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise ReportError(f"capture summary: {sub} is missing")
            continue
        try:
            kwargs[f.name] = _check(hints[f.name], data[f.name], sub)
        except ReportError as exc:
            if exc.message.startswith("capture summary:"):
                raise
            raise ReportError(f"capture summary: {exc.message}") from None
    return cls(**kwargs)


# -- building -----------------------------------------------------------------------------------------
def _ms(us: float) -> float:
    return us / 1e3


def _row(stage: str, module: str, b: Bucket, **extra: Any) -> Row:
    d = b.copies_by_direction
    return Row(stage, module, _ms(b.wall_us), _ms(b.kernel_us), b.kernels, b.launches, b.syncs, _ms(b.sync_us),
               b.copies, b.copy_bytes, _ms(b.copy_us), int(d.get("DtoH", [0])[0]), int(d.get("HtoD", [0])[0]),
               int(d.get("DtoD", [0])[0]), b.pageable_copies, b.pinned_copies, b.memsets, _ms(b.idle_us),
               b.cpu_ops, **extra)


def _merge(into: Bucket, b: Bucket) -> None:
    for name in ("wall_us", "cpu_ops", "kernel_us", "kernels", "launches", "syncs", "sync_us", "copies",
                 "copy_bytes", "copy_us", "pageable_copies", "pinned_copies", "memsets", "idle_us"):
        setattr(into, name, getattr(into, name) + getattr(b, name))
    for k, v in b.copies_by_direction.items():
        row = into.copies_by_direction.setdefault(k, [0, 0, 0.0])
        for i in range(3):
            row[i] += v[i]


def _owner_path(label: str) -> str | None:
    prefix, suffix = forward_body("\0").split("\0")
    if label.startswith(prefix) and label.endswith(suffix):
        return label[len(prefix):len(label) - len(suffix)]
    return None if label in UNNAMED else label


def _below_forward(naming: KernelNaming | None, kernel_us: float) -> tuple[float | None, float | None, float]:
    """(kernel_below_forward, kernel_below_forward_or_line, kernel_ms_lines) of the shares."""
    if naming is None or not kernel_us:
        return None, None, 0.0
    return (min(1.0, naming.below_forward / kernel_us), min(1.0, naming.below_forward_or_line / kernel_us),
            _ms(naming.line))


def summarize(result: Any, *, precision: str = "fp32") -> CaptureSummary:
    """The summary of a CaptureResult (``engine.capture.profile``); an empty one carrying its error."""
    capability = tuple(result.capability) if result.capability else None
    base = dict(device=result.device, precision=precision, torch_version=result.torch_version,
                capability=capability, profiled_wall_ms=result.profiled_wall_ms,
                unprofiled_wall_ms=result.unprofiled_wall_ms, error=result.error)
    if result.trace is None:
        return CaptureSummary(**base)
    att = attribute(result.trace, result.module_parents, CodeLayers(tuple(getattr(result, "user_dirs", ()))))
    bare_roots = tuple(label for key, label in result.root_labels.items() if key == "")
    # kernel time no module path names: the stage and outside buckets, and every forward body (work a module does
    # between its children); a user function below a forward names it (the function rows)
    opaque = frozenset(UNNAMED) | {m for _, m in att.buckets if _owner_path(m) is not None and m != _owner_path(m)}
    evidence, below_forward_us, naming = gather(result.trace, att, precision=precision,
                                                settings=getattr(result, "settings", None), opaque=opaque)
    return _build(att, base, precision, capability, bare_roots, evidence, below_forward_us, naming)


def _build(att: Attribution, base: dict[str, Any], precision: str, capability: tuple | None,
           bare_roots: tuple[str, ...] = (), evidence: Evidence | None = None,
           below_forward_us: float = 0.0, naming: KernelNaming | None = None) -> CaptureSummary:
    stages: dict[str, Bucket] = {}
    modules: dict[str, Bucket] = {}
    total = Bucket()
    for (stage, module), b in att.buckets.items():
        _merge(stages.setdefault(stage, Bucket()), b)
        _merge(modules.setdefault(module, Bucket()), b)
        _merge(total, b)
    # inclusive kernel time of a real module path: its own label, its forward body, its descendants
    inclusive_kernel: dict[str, float] = {}
    for label, b in modules.items():
        path = _owner_path(label)
        while path:
            inclusive_kernel[path] = inclusive_kernel.get(path, 0.0) + b.kernel_us
            path = path.rpartition(".")[0] if "." in path else None
    for root in bare_roots:  # a root under key "": its children's paths do not start with its label
        inclusive_kernel[root] = sum(b.kernel_us for label, b in modules.items() if _owner_path(label))
    stage_rows = tuple(_row(s, "", b) for s, b in sorted(stages.items(), key=lambda kv: -kv[1].wall_us))

    def mod_row(label: str, b: Bucket) -> Row:
        owner = _owner_path(label)  # a forward-body row carries its module's inclusive numbers
        real = owner if owner in att.module_wall_inclusive else None
        return _row("", label, b,
                    inclusive_wall_ms=_ms(att.module_wall_inclusive[real]) if real else None,
                    inclusive_kernel_ms=_ms(inclusive_kernel.get(real, 0.0)) if real else None)

    cost = lambda b: b.wall_us + b.kernel_us  # noqa: E731
    module_rows = tuple(mod_row(m, b) for m, b in sorted(modules.items(), key=lambda kv: -cost(kv[1]))[:TOP_MODULES])
    cells = tuple(_row(s, m, b) for (s, m), b in
                  sorted(att.buckets.items(), key=lambda kv: -cost(kv[1]))[:TOP_CELLS])
    kernel_rows: list[KernelRow] = []
    class_ms: dict[str, float] = {}
    legacy: list[KernelRow] = []
    owner: dict[str, tuple[float, str, str]] = {}
    for (stage, module, name), (_, us) in att.kernel_buckets.items():
        if us > owner.get(name, (-1.0, "", ""))[0]:
            owner[name] = (us, stage, module)
    for name, (count, us) in sorted(att.kernels.items(), key=lambda kv: -kv[1][1]):
        k = classify(name)
        _, stage, module = owner.get(name, (0.0, "", ""))
        row = KernelRow(name, k.kind, k.tensor_core, k.precision, k.arch, int(count), _ms(us),
                        is_legacy_arch(k.arch, capability), stage, module)
        class_ms[k.label] = class_ms.get(k.label, 0.0) + _ms(us)
        if len(kernel_rows) < TOP_KERNELS:
            kernel_rows.append(row)
        if row.legacy and len(legacy) < TOP_KERNELS:
            legacy.append(row)
    d = total.copies_by_direction
    counts = Counts(total.kernels, total.launches, total.syncs, total.copies, total.copy_bytes,
                    int(d.get("DtoH", [0])[0]), int(d.get("HtoD", [0])[0]), total.pageable_copies,
                    total.memsets, total.cpu_ops)
    named_kernel = sum(b.kernel_us for (_, m), b in att.buckets.items() if m not in UNNAMED)
    # below the top-level forward: a real module path (not a forward body), else a user function (below_forward_us)
    named_kernel_below = sum(b.kernel_us for (_, m), b in att.buckets.items()  # real module paths
                             if m not in UNNAMED and _owner_path(m) == m)
    named_wall = sum(b.wall_us for (_, m), b in att.buckets.items() if m not in UNNAMED)
    outside = att.buckets.get((OUTSIDE_STAGES, OUTSIDE_STAGES), Bucket()).wall_us
    adapter = sum(b.wall_us for (stage, _), b in att.buckets.items() if stage in ADAPTER_STAGES)
    tracker_wall = att.wall_us - outside - adapter
    named_tracker = sum(b.wall_us for (stage, m), b in att.buckets.items()
                        if m not in UNNAMED and stage not in ADAPTER_STAGES)
    shares = Shares(named_kernel / total.kernel_us if total.kernel_us else None,
                    named_wall / att.wall_us if att.wall_us else None, _ms(named_kernel), _ms(named_wall),
                    (att.wall_us - outside) / att.wall_us if att.wall_us else None,
                    min(1.0, named_tracker / tracker_wall) if tracker_wall > 0 else None,
                    min(1.0, (named_kernel_below + below_forward_us) / total.kernel_us) if total.kernel_us else None,
                    *_below_forward(naming, total.kernel_us))
    sites = tuple(SyncSite(s, int(c), _ms(us)) for s, (c, us) in
                  sorted(att.sync_sites.items(), key=lambda kv: -kv[1][0])[:TOP_SITES])
    fp32: tuple[Fp32Op, ...] = ()
    if precision in AUTOCAST_PRECISIONS:
        fp32 = tuple(Fp32Op(op, module, int(c), _ms(g), _ms(cpu)) for (op, module), (c, g, cpu) in
                     sorted(att.fp32_ops.items(), key=lambda kv: -(kv[1][1] or kv[1][2]))[:TOP_FP32_OPS])
    by_cause: dict[str, float] = {}
    for g in att.gaps:
        by_cause[g.cause] = by_cause.get(g.cause, 0.0) + _ms(g.dur)
    listed = sum(by_cause.values())
    if att.has_gpu and _ms(att.idle_us) > listed:
        by_cause["short"] = _ms(att.idle_us) - listed  # gaps under GAP_LIST_MIN_US each
    gaps = tuple(GapRow(_ms(g.start - att.window[0]), _ms(g.dur), g.stage, g.module, g.cause, g.call_site)
                 for g in sorted(att.gaps, key=lambda g: -g.dur)[:TOP_GAPS])
    trips = tuple(RoundTripRow(r.stage, r.module, r.dtoh_bytes, r.htod_bytes, _ms(r.host_us), _ms(r.copy_us),
                               tuple(r.ops)) for r in att.round_trips[:TOP_GAPS])
    return CaptureSummary(**base, wall_ms=_ms(att.wall_us), kernel_ms=_ms(total.kernel_us),
                          gpu_busy_ms=_ms(att.busy_us), gpu_idle_ms=_ms(att.idle_us), has_gpu=att.has_gpu,
                          counts=counts, shares=shares, stages=stage_rows, modules=module_rows, cells=cells,
                          top_kernels=tuple(kernel_rows), kernel_class_ms=class_ms, legacy_kernels=tuple(legacy),
                          sync_sites=sites, fp32_ops=fp32, gaps=gaps, idle_by_cause_ms=by_cause, round_trips=trips,
                          evidence=evidence or Evidence())
