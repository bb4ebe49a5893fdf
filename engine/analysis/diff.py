"""`trackscope diff A B`: two runs (reports, deep captures, fleet entries, or a run and its projection) aligned
by stage, module, function and kernel class; the deltas ranked by time, each with its reason from the kernel
facts; the total ratio split into what the two devices' specs explain and the named rest (a waterfall).

This module's types are the model that the CLI verb, the gate and the app's diff view read. (The interface
was fixed first so the engine and the app could be built side by side; ``diff_runs`` fills it.)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from engine.analysis import diff_reasons as reasons
from engine.analysis.diff_side import KINDS, Side, read_side
from engine.analysis.diff_split import Explained, explain
from engine.capture.gather import TOP_FUNCTIONS
from engine.capture.summary import TOP_MODULES
from engine.core.errors import ReportError
from engine.core.units import ms_value, ratio_of, ratio_value
from engine.report.fields import Fields
from engine.report.projection import Projection
from engine.report.schema import Report

#: the levels a row is aligned at, coarse to fine
LEVELS = ("total", "stage", "module", "function", "kernel_class")
#: kinds of waterfall step: where it starts (A's time), what the specs explain, a named delta, the unnamed
#: rest, where it ends (B's time)
STEP_KINDS = ("start", "spec", "named", "rest", "end")
DIFF_FORMAT = "trackscope-diff"
DIFF_VERSION = 1
#: most rows and waterfall steps a diff's JSON may hold
MAX_ROWS = 100_000
MAX_STEPS = 1_000


@dataclass(frozen=True)
class DiffRow:
    """One aligned item of the two runs: per-run milliseconds on each side (None: absent on that side)."""

    level: str  # one of LEVELS
    name: str  # "cost_volume", "backbone.conv1", "model.py:88 bilinear_sampler", "gemm fp32 (SIMT)"
    a_ms: float | None
    b_ms: float | None
    reason: str = ""  # why it moved, from the kernel facts ("fp32 SIMT GEMMs on A, bf16 tensor cores on B")
    evidence: dict[str, Any] = field(default_factory=dict)  # plain JSON: counts, kernels, precisions, syncs
    parent: str = ""  # the name of the coarser row it belongs to ("" at the top)
    explained_ms: float | None = None  # the part of delta_ms the two devices' specs explain (None: not placed)

    @property
    def delta_ms(self) -> float:
        """B minus A (a missing side counts 0)."""
        return (self.b_ms or 0.0) - (self.a_ms or 0.0)

    @property
    def ratio(self) -> float | None:
        """B over A; None when either side is missing or zero."""
        return ratio_of(self.b_ms, self.a_ms)

    @property
    def beyond_ms(self) -> float:
        """What moved beyond the specs: delta_ms less the explained part (all of it when not placed)."""
        return self.delta_ms - (self.explained_ms or 0.0)

    def to_dict(self) -> dict[str, Any]:
        return {"level": self.level, "name": self.name, "a_ms": self.a_ms, "b_ms": self.b_ms,
                "delta_ms": self.delta_ms, "ratio": self.ratio, "explained_ms": self.explained_ms,
                "reason": self.reason, "evidence": dict(self.evidence), "parent": self.parent}

    @classmethod
    def from_dict(cls, data: Any, path: str = "row") -> DiffRow:
        f = Fields(data, path)
        f.raw("delta_ms")  # derived
        f.raw("ratio")
        return cls(level=f.choice("level", LEVELS, "stage"), name=f.string("name"), a_ms=f.opt_number("a_ms"),
                   b_ms=f.opt_number("b_ms"), reason=f.string("reason", ""), evidence=f.opaque_map("evidence") or {},
                   parent=f.string("parent", ""), explained_ms=f.opt_number("explained_ms"))


@dataclass(frozen=True)
class WaterfallStep:
    """One bar of the waterfall from A's time to B's: its kind (STEP_KINDS), label and ms (signed for deltas)."""

    kind: str
    label: str
    ms: float

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "label": self.label, "ms": self.ms}

    @classmethod
    def from_dict(cls, data: Any, path: str = "step") -> WaterfallStep:
        f = Fields(data, path)
        return cls(kind=f.choice("kind", STEP_KINDS, "named"), label=f.string("label", ""), ms=f.number("ms"))


@dataclass(frozen=True)
class SpecSplit:
    """How much of B/A the two devices' datasheets explain, and what is left to the named deltas."""

    total_ratio: float | None  # B's typical run over A's
    spec_ratio: float | None  # what peak FLOP/s and bandwidth, per precision, explain (None: same device/unknown)
    explained_ms: float  # the part of the delta the specs explain
    rest_ms: float  # the part they do not
    basis: str = ""  # how spec_ratio was formed, in words
    steps: tuple[WaterfallStep, ...] = ()
    peaks: str = ""  # the peaks compared ("fp32 peak 67 vs 8.1 TF/s, bandwidth 4.8 vs 0.32 TB/s")

    def to_dict(self) -> dict[str, Any]:
        return {"total_ratio": self.total_ratio, "spec_ratio": self.spec_ratio, "explained_ms": self.explained_ms,
                "rest_ms": self.rest_ms, "basis": self.basis, "peaks": self.peaks,
                "steps": [x.to_dict() for x in self.steps]}

    @classmethod
    def from_dict(cls, data: Any, path: str = "split") -> SpecSplit:
        f = Fields(data, path)
        return cls(total_ratio=f.opt_number("total_ratio"), spec_ratio=f.opt_number("spec_ratio"),
                   explained_ms=f.number("explained_ms", 0.0), rest_ms=f.number("rest_ms", 0.0),
                   basis=f.string("basis", ""), peaks=f.string("peaks", ""),
                   steps=tuple(WaterfallStep.from_dict(v, p) for p, v in f.items("steps", MAX_STEPS)))


@dataclass(frozen=True)
class Diff:
    """Two runs side by side: the labels, their typical run ms, the aligned rows ranked by |delta|, the split."""

    a_label: str
    b_label: str
    a_ms: float | None
    b_ms: float | None
    rows: tuple[DiffRow, ...]
    split: SpecSplit
    a_is_projection: bool = False
    b_is_projection: bool = False
    notes: tuple[str, ...] = ()
    a_device: str = ""
    b_device: str = ""

    def top(self, n: int = 10, level: str | None = None) -> list[DiffRow]:
        """The ``n`` rows with the largest |delta| (of one level when given)."""
        rows = [r for r in self.rows if level is None or r.level == level]
        return sorted(rows, key=lambda r: -abs(r.delta_ms))[:n]

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON (for CI and ``--json``), read back by ``from_dict``."""
        return {"format": DIFF_FORMAT, "version": DIFF_VERSION, "a_label": self.a_label, "b_label": self.b_label,
                "a_device": self.a_device, "b_device": self.b_device, "a_ms": self.a_ms, "b_ms": self.b_ms,
                "a_is_projection": self.a_is_projection, "b_is_projection": self.b_is_projection,
                "split": self.split.to_dict(), "rows": [r.to_dict() for r in self.rows], "notes": list(self.notes)}

    @classmethod
    def from_dict(cls, data: Any, path: str = "") -> Diff:
        """A diff from its JSON; ReportError naming the bad field."""
        f = Fields(data, path)
        fmt, version = f.raw("format"), f.raw("version")
        if fmt != DIFF_FORMAT:
            raise ReportError(f"{path or 'the diff'} has format {fmt!r}, expected {DIFF_FORMAT!r}")
        if version != DIFF_VERSION:
            raise ReportError(f"{path or 'the diff'} is diff version {version!r}; this trackscope reads "
                              f"version {DIFF_VERSION}")
        split = f.obj("split")
        assert split is not None  # required: Fields.obj raised otherwise
        return cls(a_label=f.string("a_label", ""), b_label=f.string("b_label", ""), a_ms=f.opt_number("a_ms"),
                   b_ms=f.opt_number("b_ms"),
                   rows=tuple(DiffRow.from_dict(v, p) for p, v in f.items("rows", MAX_ROWS)),
                   split=SpecSplit.from_dict(split.data, split.path),
                   a_is_projection=f.boolean("a_is_projection", False),
                   b_is_projection=f.boolean("b_is_projection", False),
                   notes=f.strings("notes", MAX_ROWS), a_device=f.string("a_device", ""),
                   b_device=f.string("b_device", ""))


# -- building a diff ------------------------------------------------------------------------------------------
#: named deltas the waterfall shows between the specs' part and the unnamed rest
NAMED_STEPS = 3
#: the top rows format_diff prints by default
TOP_ROWS = 10
#: the rest's label when every kernel kind is named: the change in time no kernel ran
OUTSIDE_KERNELS = "outside the kernels (host, syncs, idle)"
#: rows whose two sides are both under this (ms) are left out (nothing ran there)
MIN_ROW_MS = 1e-6


def _row(level: str, name: str, a_ms: float | None, b_ms: float | None, clauses: list[str],
         evidence: dict[str, Any] | None = None, parent: str = "", explained_ms: float | None = None,
         kept: tuple[int | None, int | None] = (None, None)) -> DiffRow:
    """One row; ``kept``: how many rows of this level each side's capture keeps when its list is full (then a
    row missing there may have run below its cut: said so, not "only in")."""
    for missing, other, side, cap in ((a_ms, b_ms, "A", kept[0]), (b_ms, a_ms, "B", kept[1])):
        if missing is None and other is not None:
            clauses = [f"below {side}'s top {cap} recorded rows" if cap else f"only in {'B' if side == 'A' else 'A'}",
                       *clauses]
    return DiffRow(level, name, a_ms, b_ms, reasons.joined(clauses), evidence or {}, parent, explained_ms)


def _ordered(*names: Any) -> list[str]:
    return list(dict.fromkeys(n for group in names for n in group))


def _stage_rows(a: Side, b: Side, ex: Explained) -> list[DiffRow]:
    cap_a = {r.stage: r for r in a.capture.stages} if a.capture else {}
    cap_b = {r.stage: r for r in b.capture.stages} if b.capture else {}
    rows = []
    for name in _ordered(a.stage_ms, b.stage_ms):
        sa, sb = a.stage_ms.get(name), b.stage_ms.get(name)
        if max(sa or 0.0, sb or 0.0) < MIN_ROW_MS:
            continue
        explained = ex.by_stage.get(name) if ex.ratio is not None else None
        evidence: dict[str, Any] = {k: v for k, v in (("a_precision", a.stage_precision.get(name)),
                                      ("b_precision", b.stage_precision.get(name)),
                                      ("a_bound", a.stage_bound.get(name)), ("b_bound", b.stage_bound.get(name)))
                    if v}
        for side, cap in (("a", cap_a), ("b", cap_b)):
            evidence.update({f"{side}_{k}": v for k, v in reasons.row_counts(cap.get(name)).items()})
        clauses = reasons.stage_reasons(name, a, b, cap_a.get(name), cap_b.get(name))
        if explained is not None and abs(explained) >= MIN_ROW_MS:
            bound = a.stage_bound.get(name) or b.stage_bound.get(name)  # a projection says how it priced it
            clauses.append(reasons.spec_clause(bound, a.stage_precision.get(name) or a.precision, explained))
        rows.append(_row("stage", name, sa, sb, clauses, evidence, explained_ms=explained))
    return rows


def _kind_rows(a: Side, b: Side, ex: Explained) -> list[DiffRow]:
    ka, kb = a.kinds(), b.kinds()
    rows = []
    for kind in _ordered([k for k in KINDS if k in ka or k in kb]):
        fa, fb = ka.get(kind), kb.get(kind)
        evidence: dict[str, Any] = {}
        for side, facts in (("a", fa), ("b", fb)):
            if facts is not None:
                evidence.update({f"{side}_classes": facts.classes, f"{side}_precision": facts.precision,
                                 f"{side}_tensor_core_share": facts.tensor_core_share,
                                 f"{side}_legacy_ms": facts.legacy_ms})
        explained = ex.by_kind.get(kind) if ex.ratio is not None and ex.by_kind else None
        rows.append(_row("kernel_class", kind, fa.ms if fa else None, fb.ms if fb else None,
                         reasons.kind_reasons(kind, a, b, fa, fb), evidence, explained_ms=explained))
    return rows


def _parent_module(label: str, names: set[str]) -> str:
    owner = label.removeprefix("(forward body of ").removesuffix(")") if label.startswith("(forward body of ") \
        else label
    if owner != label and owner in names:
        return owner
    parent = owner.rpartition(".")[0]
    while parent:
        if parent in names:
            return parent
        if f"(forward body of {parent})" in names:
            return f"(forward body of {parent})"
        parent = parent.rpartition(".")[0]
    return ""


def _module_rows(a: Side, b: Side) -> list[DiffRow]:
    assert a.capture is not None and b.capture is not None
    ma = {r.module: r for r in a.capture.modules}
    mb = {r.module: r for r in b.capture.modules}
    kept = (_full(len(a.capture.modules), TOP_MODULES), _full(len(b.capture.modules), TOP_MODULES))
    names = set(ma) | set(mb)
    rows = []
    for name in _ordered(ma, mb):
        ra, rb = ma.get(name), mb.get(name)
        if max(ra.kernel_ms if ra else 0.0, rb.kernel_ms if rb else 0.0) < MIN_ROW_MS:
            continue
        ca, cb = reasons.row_counts(ra), reasons.row_counts(rb)
        evidence = {**{f"a_{k}": v for k, v in ca.items()}, **{f"b_{k}": v for k, v in cb.items()}}
        if ra:
            evidence["a_wall_ms_profiled"] = ra.wall_ms
        if rb:
            evidence["b_wall_ms_profiled"] = rb.wall_ms
        rows.append(_row("module", name, ra.kernel_ms if ra else None, rb.kernel_ms if rb else None,
                         reasons.count_changes(ca, cb) if ra and rb else [], evidence, _parent_module(name, names),
                         kept=kept))
    return rows


def _full(count: int, cap: int) -> int | None:
    """``cap`` when a capture kept that many rows of a kind (rows below its cut were not recorded), else None."""
    return cap if count >= cap else None


def _functions(side: Side) -> dict[str, dict[str, Any]]:
    """A capture's function rows summed by call site ('file:line name')."""
    out: dict[str, dict[str, Any]] = {}
    assert side.capture is not None
    for f in side.capture.evidence.functions:
        entry = out.setdefault(f.site or f.function, {"kernel_ms": 0.0, "syncs": 0, "launches": 0, "kernels": 0,
                                                      "module": f.module})
        entry["kernel_ms"] += f.kernel_ms
        for key in ("syncs", "launches", "kernels"):
            entry[key] += getattr(f, key)
    return out


def _function_rows(a: Side, b: Side) -> list[DiffRow]:
    assert a.capture is not None and b.capture is not None
    fa, fb = _functions(a), _functions(b)
    kept = (_full(len(a.capture.evidence.functions), TOP_FUNCTIONS),
            _full(len(b.capture.evidence.functions), TOP_FUNCTIONS))
    rows = []
    for name in _ordered(fa, fb):
        ea, eb = fa.get(name), fb.get(name)
        if max(ea["kernel_ms"] if ea else 0.0, eb["kernel_ms"] if eb else 0.0) < MIN_ROW_MS:
            continue
        ca = {k: ea[k] for k in ("syncs", "launches", "kernels")} if ea else {}
        cb = {k: eb[k] for k in ("syncs", "launches", "kernels")} if eb else {}
        evidence = {**{f"a_{k}": v for k, v in ca.items()}, **{f"b_{k}": v for k, v in cb.items()}}
        parent = (ea or eb or {}).get("module", "")
        rows.append(_row("function", name, ea["kernel_ms"] if ea else None, eb["kernel_ms"] if eb else None,
                         reasons.count_changes(ca, cb) if ea and eb else [], evidence, parent, kept=kept))
    return rows


def _steps(a_ms: float, b_ms: float, explained: float, rows: list[DiffRow]) -> tuple[WaterfallStep, ...]:
    """start(A) -> specs -> the largest named deltas beyond the specs -> the unnamed rest -> end(B)."""
    named = sorted((r for r in rows if abs(r.beyond_ms) > MIN_ROW_MS), key=lambda r: -abs(r.beyond_ms))
    steps = [WaterfallStep("start", "A", a_ms), WaterfallStep("spec", "specs", explained)]
    steps += [WaterfallStep("named", r.name, r.beyond_ms) for r in named[:NAMED_STEPS]]
    rest = (b_ms - a_ms) - explained - sum(s.ms for s in steps[2:])
    # every kernel kind named: what is left is the time outside the kernels (host work, syncs, idle gaps)
    kinds_named = rows and all(r.level == "kernel_class" for r in rows) and len(named) <= NAMED_STEPS
    steps += [WaterfallStep("rest", OUTSIDE_KERNELS if kinds_named else "rest", rest), WaterfallStep("end", "B", b_ms)]
    return tuple(steps)


def diff_runs(a: Report | Projection | Mapping[str, Any], b: Report | Projection | Mapping[str, Any]) -> Diff:
    """Two runs aligned by stage (and, when both have a deep capture, by module, function and kernel kind),
    the rows ranked by |delta|, and B/A split into what the devices' specs explain and the named rest."""
    sa, sb = read_side(a), read_side(b)
    ex = explain(sa, sb)
    notes = [*sa.notes, *sb.notes, *ex.notes]
    if sa.tracker and sb.tracker and sa.tracker != sb.tracker:
        notes.append(f"different trackers ({sa.tracker} vs {sb.tracker}): rows are aligned by name where they "
                     "share one; the others are listed on their side only")
    rows = [_row("total", "total", sa.total_ms, sb.total_ms, reasons.total_reasons(sa, sb),
                 explained_ms=ex.ms if ex.ratio is not None else None)]
    rows += _stage_rows(sa, sb, ex)
    if sa.capture is not None and sb.capture is not None:
        kinds = _kind_rows(sa, sb, ex)
        finer = _module_rows(sa, sb) + _function_rows(sa, sb)
        cut = [r for r in finer if "recorded rows" in r.reason]
        if cut:  # their delta is not known: one side ran them below its capture's cut
            notes.append(f"{len(cut)} module or function rows left out: below one side's recorded top rows "
                         "(a capture keeps the largest), so their delta is not known")
        rows += kinds + [r for r in finer if r not in cut]
        notes.append("module, function and kernel-class rows are GPU kernel ms of each side's captured run "
                     "(the profiler slows the host, hardly the kernels)")
    else:
        kinds = []
        for name, side in (("A", sa), ("B", sb)):
            if side.capture is None:
                what = "is a projection" if side.is_projection else "has no deep capture"
                notes.append(f"{name} {what}: module, function and kernel-class rows need a capture on both "
                             "sides; stages only")
    for name, side in (("A", sa), ("B", sb)):
        if side.total_ms is None:
            notes.append(f"{name} has no finished run (no typical time): no ratio and no waterfall")
    if ex.ratio is None:
        notes.append("the specs' part is not placed: every delta is beyond the specs")
    ranked = tuple(sorted(rows, key=lambda r: -abs(r.delta_ms)))
    total_ratio = sb.total_ms / sa.total_ms if sa.total_ms and sb.total_ms is not None else None
    delta = (sb.total_ms or 0.0) - (sa.total_ms or 0.0)
    steps: tuple[WaterfallStep, ...] = ()
    if sa.total_ms is not None and sb.total_ms is not None:
        named_level = kinds if kinds and ex.how in ("capture", "same_device") else \
            [r for r in rows if r.level == "stage"]
        steps = _steps(sa.total_ms, sb.total_ms, ex.ms, named_level)
    split = SpecSplit(total_ratio=total_ratio, spec_ratio=ex.ratio, explained_ms=ex.ms, rest_ms=delta - ex.ms,
                      basis=ex.basis, steps=steps, peaks=ex.peaks)
    return Diff(a_label=sa.label, b_label=sb.label, a_ms=sa.total_ms, b_ms=sb.total_ms, rows=ranked, split=split,
                a_is_projection=sa.is_projection, b_is_projection=sb.is_projection, notes=tuple(notes),
                a_device=sa.device_name, b_device=sb.device_name)


def diff_to_dict(d: Diff) -> dict[str, Any]:
    """``d.to_dict()``: plain JSON for CI."""
    return d.to_dict()


# -- text -----------------------------------------------------------------------------------------------------
def _x(value: float | None) -> str:
    text = ratio_value(value) if value is None or value < 10 else f"{value:.3g}" if value < 100 else f"{value:.0f}"
    return text if text == "-" else f"{text}x"


def _signed(ms: float | None) -> str:
    if ms is None:
        return "-"
    if abs(ms) < MIN_ROW_MS:
        return "0"
    return ("+" if ms >= 0 else "-") + ms_value(abs(ms))


def split_line(d: Diff) -> str:
    """'B/A 3.4x: specs explain 2.1x (fp32 peak 67 vs 8.1 TF/s, ...), named rest: gemm +30 ms, ..., rest +3 ms'."""
    s = d.split
    if s.spec_ratio is None:
        specs_part = f"the specs cannot be placed ({s.basis})"
    elif s.spec_ratio == 1.0 and s.explained_ms == 0.0:
        specs_part = s.basis or "the specs explain nothing"
    else:
        specs_part = f"specs explain {_x(s.spec_ratio)}" + (f" ({s.peaks})" if s.peaks else "")
    named = [f"{x.label} {_signed(x.ms)} ms" for x in s.steps if x.kind in ("named", "rest") and
             abs(x.ms) >= MIN_ROW_MS]
    rest = f", named rest: {', '.join(named)}" if named else (", nothing beyond them" if s.steps else "")
    return f"B/A {_x(s.total_ratio)}: {specs_part}{rest}"


def format_diff(d: Diff, top: int = TOP_ROWS) -> str:
    """A terminal table: the split in one line, the waterfall, then the top rows by |delta| with their reason."""
    mark = {True: " (projection)", False: ""}
    lines = [f"A: {d.a_label}{mark[d.a_is_projection]}  ({ms_value(d.a_ms)} ms per run)",
             f"B: {d.b_label}{mark[d.b_is_projection]}  ({ms_value(d.b_ms)} ms per run)", "", split_line(d)]
    if d.split.steps:
        lines.append("waterfall: " + " | ".join(
            f"{x.label} {ms_value(x.ms)} ms" if x.kind in ("start", "end") else f"{x.label} {_signed(x.ms)}"
            for x in d.split.steps))
    if d.split.basis and d.split.spec_ratio not in (None, 1.0):
        lines.append(f"specs basis: {d.split.basis}")
    lines.append("")
    table = [("level", "name", "A ms", "B ms", "delta", "B/A", "specs", "reason")]
    for r in [r for r in d.rows if r.level != "total"][:top]:
        table.append((r.level, _short(r.name), ms_value(r.a_ms), ms_value(r.b_ms), _signed(r.delta_ms), _x(r.ratio),
                      _signed(r.explained_ms) if r.explained_ms is not None else "-", r.reason))
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]) - 1)]
    for row in table:
        cells = [row[0].ljust(widths[0]), row[1].ljust(widths[1])]
        cells += [c.rjust(w) for c, w in zip(row[2:-1], widths[2:])]
        lines.append("  ".join([*cells, row[-1]]).rstrip())
    lines.extend(f"note: {n}" for n in d.notes)
    return "\n".join(lines)


#: longest row name format_diff prints (module paths and call sites can be long)
NAME_CHARS = 60


def _short(name: str) -> str:
    return name if len(name) <= NAME_CHARS else "…" + name[-(NAME_CHARS - 1):]
