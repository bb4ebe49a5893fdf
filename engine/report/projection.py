"""A what-if projection as a typed, frozen part: one run's stages priced on another GPU from the spec table.

``engine.analysis.whatif.project`` (and ``project_by_batch``) compute it as plain JSON; ``Projection.from_dict``
reads that JSON (written by ``trackscope compare --what-if ... --json``, with or without the
``trackscope-projection`` format marker) and ``to_dict`` writes it back with the marker, so a projection
saved beside a measured run can be opened by ``trackscope diff`` and the app like a report. Keys it does not
know stay in ``extra`` and are written back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from engine.core.errors import ReportError
from engine.core.units import ratio_of
from engine.report.fields import Fields, fail

PROJECTION_FORMAT = "trackscope-projection"
PROJECTION_VERSION = 1
#: most stages and assumptions a projection may hold
MAX_PROJECTED_STAGES = 10_000
MAX_ASSUMPTIONS = 10_000
#: the keys that make a plain JSON object a projection (what project() always writes)
PROJECTION_KEYS = ("source", "target", "stages", "projected_ms")
#: how a projection priced the stages: the what-if's roofline per stage, or a deep capture's kernel classes
PRICED_BY_ROOFLINE = "roofline"
PRICED_BY_KERNELS = "kernel classes"


@dataclass(frozen=True)
class ProjectedStage:
    """One stage: its observed ms on the source, projected ms on the target, how it was priced."""

    observed_ms: float | None
    projected_ms: float | None
    bound: str = "unknown"  # compute | memory | latency | host | unknown (a mixed run: "compute / memory")
    precision: str = ""
    target_path: str = ""  # how the target reaches the precision's peak: tensor, native, emulated, ...
    efficiency: float | None = None  # the share of its own roofline the stage reached on the source
    source_roofline_ms: float | None = None
    target_roofline_ms: float | None = None
    kept: bool = True  # kept at the observed time (launches, syncs and host work do not follow the peaks)
    by_precision: dict[str, ProjectedStage] = field(default_factory=dict)  # a run whose precision changed
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ratio(self) -> float | None:
        """Projected over observed; None without both."""
        return ratio_of(self.projected_ms, self.observed_ms)

    @classmethod
    def from_dict(cls, data: Any, path: str = "stage") -> ProjectedStage:
        f = Fields(data, path)
        sub = f.obj("by_precision", required=False)
        by_precision = {k: cls.from_dict(v, sub.at(k)) for k, v in sub.data.items()} if sub else {}
        return cls(observed_ms=f.opt_number("observed_ms"), projected_ms=f.opt_number("projected_ms"),
                   bound=f.string("bound", "unknown"), precision=f.string("precision", ""),
                   target_path=f.string("target_path", ""), efficiency=f.opt_number("efficiency"),
                   source_roofline_ms=f.opt_number("source_roofline_ms"),
                   target_roofline_ms=f.opt_number("target_roofline_ms"), kept=f.boolean("kept", True),
                   by_precision=by_precision, extra=f.rest())

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "observed_ms": self.observed_ms, "projected_ms": self.projected_ms, "bound": self.bound,
            "precision": self.precision, "target_path": self.target_path, "efficiency": self.efficiency,
            "source_roofline_ms": self.source_roofline_ms, "target_roofline_ms": self.target_roofline_ms,
            "kept": self.kept}
        if self.by_precision:
            out["by_precision"] = {k: v.to_dict() for k, v in self.by_precision.items()}
        return {**out, **self.extra}


@dataclass(frozen=True)
class Projection:
    """A run (``report``: its label) projected from ``source`` onto ``target``: per stage and in total."""

    report: str
    source: str  # the source device's spec name
    target: str  # the target GPU's spec name
    precision: str
    stages: dict[str, ProjectedStage]
    observed_ms: float | None
    projected_ms: float
    outside_stages_ms: float = 0.0  # the run's time outside every stage (kept, or placed as "(unstaged)")
    mode_path: str = ""  # a quantised mode's path on the target ("int8 instead")
    assumptions: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)
    priced_by: str = PRICED_BY_ROOFLINE  # how: each stage's roofline (the what-if), or a capture's kernel classes
    peaks: str = ""  # the peaks compared, in words ("fp32 peak 67 vs 8.1 TF/s, bandwidth 4.8 vs 0.32 TB/s")

    @property
    def stage_ms(self) -> dict[str, float]:
        """Projected ms per stage (stages without a time left out)."""
        return {k: v.projected_ms for k, v in self.stages.items() if v.projected_ms is not None}

    @property
    def observed_stage_ms(self) -> dict[str, float]:
        """The source's observed ms per stage."""
        return {k: v.observed_ms for k, v in self.stages.items() if v.observed_ms is not None}

    @property
    def ratio(self) -> float | None:
        """Projected total over observed total; None without an observed time."""
        return ratio_of(self.projected_ms, self.observed_ms)

    def short_label(self) -> str:
        """'corrtrack fp32 p256 f16 on H200, projected onto Tesla T4'."""
        return f"{self.report}, projected onto {self.target}"

    @classmethod
    def from_dict(cls, data: Any, path: str = "") -> Projection:
        """A projection from decoded JSON (``project``'s result, or a saved projection); ReportError naming
        the bad field."""
        where = path or "the projection"
        if not isinstance(data, Mapping):
            raise fail(where, "a what-if projection (an object)", data)
        fmt = data.get("format")
        if fmt is not None and fmt != PROJECTION_FORMAT:
            raise ReportError(f"{where} has format {fmt!r}, expected {PROJECTION_FORMAT!r}")
        if fmt is None and not is_projection(data):
            missing = ", ".join(k for k in PROJECTION_KEYS if k not in data)
            raise ReportError(f"{where} is not a what-if projection (it lacks {missing})")
        version = data.get("version", PROJECTION_VERSION)
        if version != PROJECTION_VERSION:
            raise ReportError(f"{where} is projection version {version!r}; this trackscope reads version "
                              f"{PROJECTION_VERSION}", "open it with the trackscope version that wrote it")
        f = Fields(data, path)
        f.raw("format")
        f.raw("version")
        sub = f.obj("stages")
        assert sub is not None  # required: Fields.obj raised otherwise
        if len(sub.data) > MAX_PROJECTED_STAGES:
            raise ReportError(f"{sub.path} holds {len(sub.data)} stages, more than {MAX_PROJECTED_STAGES}")
        stages = {name: ProjectedStage.from_dict(v, sub.at(name)) for name, v in sub.data.items()}
        return cls(report=f.string("report", ""), source=f.string("source"), target=f.string("target"),
                   precision=f.string("precision", ""), stages=stages, observed_ms=f.opt_number("observed_ms"),
                   projected_ms=f.number("projected_ms"), outside_stages_ms=f.number("outside_stages_ms", 0.0),
                   mode_path=f.string("mode_path", ""), assumptions=f.strings("assumptions", MAX_ASSUMPTIONS),
                   priced_by=f.string("priced_by", PRICED_BY_ROOFLINE), peaks=f.string("peaks", ""), extra=f.rest())

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON with the format marker (``trackscope diff`` and the app recognise it by that)."""
        return {"format": PROJECTION_FORMAT, "version": PROJECTION_VERSION, "report": self.report,
                "source": self.source, "target": self.target, "precision": self.precision,
                "mode_path": self.mode_path, "stages": {k: v.to_dict() for k, v in self.stages.items()},
                "observed_ms": self.observed_ms, "projected_ms": self.projected_ms,
                "outside_stages_ms": self.outside_stages_ms, "assumptions": list(self.assumptions),
                **({"priced_by": self.priced_by} if self.priced_by != PRICED_BY_ROOFLINE else {}),
                **({"peaks": self.peaks} if self.peaks else {}), **self.extra}


def is_projection(data: Any) -> bool:
    """Whether decoded JSON is a projection: the format marker, or every key ``project`` writes."""
    if not isinstance(data, Mapping):
        return False
    return data.get("format") == PROJECTION_FORMAT or (data.get("format") is None
                                                       and all(k in data for k in PROJECTION_KEYS))


def as_projection(value: Projection | Mapping[str, Any], path: str = "") -> Projection:
    """A Projection as is; a mapping (``project``'s result) parsed once."""
    return value if isinstance(value, Projection) else Projection.from_dict(value, path)
