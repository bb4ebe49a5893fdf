"""`trackscope gate RUN --baseline BASE`: a run held against a baseline, with tolerances; a pass/fail verdict.

Checked, per configuration: time (the typical run, the warm median, as a ratio to the baseline's), device
memory peak (the host's RSS where neither report has a device peak), accuracy (AJ, delta_avg, occlusion
accuracy, visibility agreement: absolute drops, when both reports measured them against the same thing),
and failed runs. Named beside the verdict: the stages that moved beyond the time tolerance (from the stage
alignment of ``engine.analysis.compare``) and the findings at warning or above that are new in the run or
gone from it, by rule.

Noise: when both reports have warm runs with a spread (at least NOISE_MIN_RUNS each, p90 above p10), a
slowdown that leaves the run's typical time within the baseline's own p10-p90 range is "within noise": it is
said, and it fails only under ``strict``. Two runs of different configurations or devices are refused
(naming what differs) unless ``allow_different``: comparing different machines is the diff verb's job.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from engine.analysis.analyse import analyse
from engine.analysis.compare import compare_reports
from engine.core.errors import UserError
from engine.core.units import format_bytes, ms_value
from engine.report.schema import Report

#: the JSON's format name and version
GATE_FORMAT = "trackscope-gate"
GATE_VERSION = 1
VERDICTS = ("pass", "fail")
#: default tolerances: time and memory as ratios to the baseline, accuracy as an absolute drop
DEFAULT_MAX_SLOWDOWN = 1.10
DEFAULT_MAX_MEMORY_GROWTH = 1.10
DEFAULT_MAX_ACCURACY_DROP = 0.01
#: warm runs each report needs before its spread counts as noise, and the percentiles of that spread
NOISE_MIN_RUNS = 3
NOISE_LOW_PCT = 10.0
NOISE_HIGH_PCT = 90.0
#: a stage is named as moved only when its change is at least this share of the baseline's typical run
#: (a 0.1 ms stage that doubles is noise beside a 5 ms run)
MOVED_MIN_SHARE = 0.02
#: severities whose findings the gate names as new or gone
GATED_SEVERITIES = ("critical", "warning")
#: accuracy scores a report may hold (engine.report.parts.Accuracy), higher is better, each a fraction
ACCURACY_SCORES = (("aj", "AJ"), ("delta_avg", "delta_avg"), ("oa", "occlusion accuracy"),
                   ("visibility_agreement", "visibility agreement"))
#: a time ratio this close to 1 reads "the baseline's time", an accuracy change this small "unchanged"
SAME_RATIO = 0.005
SAME_SCORE = 0.0005
#: a float's slack when comparing a drop or ratio to its limit
EPSILON = 1e-9


class GateRefused(UserError):
    """The two reports are not of one configuration on one device (exit 2 in the CLI)."""


@dataclass(frozen=True)
class GateTolerances:
    """How far the run may move from the baseline before the gate fails."""

    max_slowdown: float = DEFAULT_MAX_SLOWDOWN  # run time / baseline time
    max_memory_growth: float = DEFAULT_MAX_MEMORY_GROWTH  # run peak / baseline peak
    max_accuracy_drop: float = DEFAULT_MAX_ACCURACY_DROP  # baseline score - run score (absolute)
    strict: bool = False  # a slowdown within the baseline's own spread fails too
    allow_different: bool = False  # gate across devices or configurations instead of refusing
    fail_on_new_findings: bool = False  # a new finding at warning or above fails the gate

    def __post_init__(self) -> None:
        for name in ("max_slowdown", "max_memory_growth"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 1.0):
                raise UserError(f"--{name.replace('_', '-')} must be a ratio of at least 1.0 (1.10: 10 % more), "
                                f"not {value!r}")
        drop = self.max_accuracy_drop
        if not (isinstance(drop, (int, float)) and math.isfinite(drop) and 0.0 <= drop <= 1.0):
            raise UserError(f"--max-accuracy-drop must be an absolute score between 0 and 1 (0.01), not {drop!r}")

    def to_dict(self) -> dict[str, Any]:
        return {"max_slowdown": self.max_slowdown, "max_memory_growth": self.max_memory_growth,
                "max_accuracy_drop": self.max_accuracy_drop, "strict": self.strict,
                "allow_different": self.allow_different, "fail_on_new_findings": self.fail_on_new_findings}


@dataclass(frozen=True)
class GateCheck:
    """One thing held against its limit: the baseline's and the run's values, the limit, whether it passed."""

    what: str  # "time", "memory", "accuracy aj", "failed runs", "new findings"
    baseline: float | None
    run: float | None
    limit: float | None  # a ratio (time, memory), an absolute drop (accuracy), a count
    passed: bool
    detail: str  # one plain sentence
    within_noise: bool = False  # beyond the limit, but within the baseline's own p10-p90 spread

    def to_dict(self) -> dict[str, Any]:
        return {"what": self.what, "baseline": self.baseline, "run": self.run, "limit": self.limit,
                "passed": self.passed, "within_noise": self.within_noise, "detail": self.detail}


@dataclass(frozen=True)
class MovedStage:
    """A stage whose time moved beyond the time tolerance (or appeared, or went away)."""

    stage: str
    baseline_ms: float | None
    run_ms: float | None
    ratio: float | None  # run / baseline; None when one side lacks the stage

    @property
    def slower(self) -> bool:
        return (self.run_ms or 0.0) > (self.baseline_ms or 0.0)

    def text(self) -> str:
        if self.ratio is None:
            return f"{self.stage} new ({ms_value(self.run_ms)} ms)" if self.baseline_ms is None \
                else f"{self.stage} gone (was {ms_value(self.baseline_ms)} ms)"
        return f"{self.stage} {self.ratio:.2f}x"

    def to_dict(self) -> dict[str, Any]:
        return {"stage": self.stage, "baseline_ms": self.baseline_ms, "run_ms": self.run_ms, "ratio": self.ratio,
                "slower": self.slower}


@dataclass(frozen=True)
class GateFinding:
    """A finding the gate names: its rule, severity, title, and where (stage, call site) when known."""

    rule: str
    severity: str
    title: str
    stage: str | None = None
    call_site: str | None = None

    def text(self) -> str:
        where = ""
        if self.call_site:  # "model.py:88 forward (.item)" -> "model.py:88"
            short = re.match(r"(.+?:\d+)(?:\s|$)", self.call_site)
            where = f" at {short.group(1) if short else self.call_site}"
        elif self.stage:
            where = f" in {self.stage}"
        return f"{self.rule} ({self.severity}){where}"

    def to_dict(self) -> dict[str, Any]:
        return {"rule": self.rule, "severity": self.severity, "title": self.title, "stage": self.stage,
                "call_site": self.call_site}


def report_findings(report: Report) -> tuple[GateFinding, ...]:
    """Today's findings of a report at warning or above, most severe first: its rules' and its capture rules'.

    The one place the gate reads findings (swap it for typed finding parts when the report has them).
    Findings a writer froze into an older file (``Report.recorded_findings``) are left out on purpose: both
    reports are analysed by today's rules, so an old baseline's recorded findings would read as "gone".
    """
    analysis = analyse(report)
    out = [GateFinding(x.rule, x.severity, x.title, x.stage) for x in analysis.findings
           if x.severity in GATED_SEVERITIES]
    out += [GateFinding(str(f["rule"]), str(f["severity"]), str(f.get("title", "")), f.get("stage"),
                        f.get("call_site")) for f in analysis.capture_findings if f.get("severity") in GATED_SEVERITIES]
    return tuple(sorted(out, key=lambda x: GATED_SEVERITIES.index(x.severity)))


@dataclass(frozen=True)
class GateResult:
    """The verdict on one run against its baseline, with every check and what moved."""

    label: str  # the run's short label ("corrtrack bf16 p256 f16 on NVIDIA H200")
    baseline_label: str
    checks: tuple[GateCheck, ...]
    moved_stages: tuple[MovedStage, ...] = ()  # slower ones first (worst first), then faster ones
    new_findings: tuple[GateFinding, ...] = ()  # one per rule the baseline did not have
    gone_findings: tuple[GateFinding, ...] = ()  # one per rule the baseline had and the run has not
    differences: tuple[str, ...] = ()  # what differs between the two (gated anyway: allow_different)
    notes: tuple[str, ...] = ()

    @property
    def verdict(self) -> str:
        return "pass" if all(c.passed for c in self.checks) else "fail"

    @property
    def passed(self) -> bool:
        return self.verdict == "pass"

    def check(self, what: str) -> GateCheck | None:
        return next((c for c in self.checks if c.what == what), None)

    def summary(self) -> str:
        """The plain one-line verdict: 'FAIL: LABEL: 1.18x slower (limit 1.10x): cost_volume 1.41x; new ...'."""
        parts = []
        for c in self.checks:
            if c.what == "time":
                parts.append(self._time_text(c))
            elif not c.passed:
                parts.append(c.detail)
        parts += [f"new finding {x.text()}" for x in self.new_findings]
        parts += [f"gone: {x.text()}" for x in self.gone_findings]
        if self.differences:
            parts.append("gated across differences: " + ", ".join(self.differences))
        return f"{self.verdict.upper()}: {self.label}: " + "; ".join(parts)

    def _time_text(self, c: GateCheck) -> str:
        """The time check's detail with the stages that moved the same way after its ratio and limit."""
        if c.run is None or c.baseline is None or c.limit is None:
            return c.detail
        head = _time_head(c.run / c.baseline, c.limit)
        same_way = [m.text() for m in self.moved_stages if m.slower == (c.run > c.baseline)]
        if not same_way or not c.detail.startswith(head):
            return c.detail
        return f"{head}: {', '.join(same_way)}{c.detail[len(head):]}"

    def to_dict(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "label": self.label, "baseline_label": self.baseline_label,
                "summary": self.summary(), "checks": [c.to_dict() for c in self.checks],
                "moved_stages": [m.to_dict() for m in self.moved_stages],
                "new_findings": [x.to_dict() for x in self.new_findings],
                "gone_findings": [x.to_dict() for x in self.gone_findings],
                "differences": list(self.differences), "notes": list(self.notes)}


# -- what differs -------------------------------------------------------------------------------
def differences(run: Report, baseline: Report) -> list[str]:
    """What makes the two not one configuration on one device: 'device: NVIDIA H200 (baseline), Tesla T4 (run)'."""
    out = []

    def differ(what: str, b: Any, r: Any) -> None:
        if b != r:
            out.append(f"{what}: {b} (baseline), {r} (run)")

    differ("device", baseline.device_name, run.device_name)
    for key in ("tracker", "precision", "points_per_batch", "frames_per_batch"):
        differ(key.replace("_", " "), getattr(baseline.config, key), getattr(run.config, key))
    for key in ("num_points", "num_frames"):
        b, r = getattr(baseline.totals, key), getattr(run.totals, key)
        if b and r:  # 0: not recorded
            differ(key.replace("num_", ""), b, r)
    gb, gr = baseline.video.geometry, run.video.geometry
    if gb is not None and gr is not None:
        differ("frame size", f"{gb.frame_width}x{gb.frame_height}", f"{gr.frame_width}x{gr.frame_height}")
    return out


def _software_notes(run: Report, baseline: Report) -> list[str]:
    """Software that changed between the two: what a gate is there to catch, so said, never refused."""
    out = []
    for key in ("torch", "cuda", "driver"):
        b, r = getattr(baseline.environment, key), getattr(run.environment, key)
        if b and r and b != r:
            out.append(f"{key} {b} (baseline), {r} (run)")
    return [f"software changed: {', '.join(out)}"] if out else []


# -- the checks ---------------------------------------------------------------------------------
def _spread(report: Report) -> tuple[float, float] | None:
    """(p10, p90) of the warm runs' wall ms; None with fewer than NOISE_MIN_RUNS or no spread."""
    walls = [r.wall_ms for r in report.warm_runs]
    if len(walls) < NOISE_MIN_RUNS:
        return None
    low, high = (float(v) for v in np.percentile(walls, [NOISE_LOW_PCT, NOISE_HIGH_PCT]))
    return (low, high) if high > low else None


def _times(ratio: float) -> str:
    """'1.18x slower', '1.25x faster', '1.00x the baseline's time' (within half a percent)."""
    if abs(ratio - 1.0) < SAME_RATIO:
        return f"{ratio:.2f}x the baseline's time"
    return f"{ratio:.2f}x slower" if ratio > 1.0 else f"{1.0 / ratio:.2f}x faster"


def _time_head(ratio: float, limit: float) -> str:
    return f"{_times(ratio)} (limit {limit:.2f}x)"


def _time_check(run: Report, baseline: Report, tol: GateTolerances) -> GateCheck:
    base_ms, run_ms = baseline.typical_run_ms, run.typical_run_ms
    limit = tol.max_slowdown
    if base_ms is None or base_ms <= 0:
        raise UserError(f"the baseline {baseline.short_label()} has no finished run to gate against")
    if run_ms is None:
        return GateCheck("time", base_ms, None, limit, False, "no finished run")
    ratio = run_ms / base_ms
    head = _time_head(ratio, limit)
    if ratio <= limit + EPSILON:
        return GateCheck("time", base_ms, run_ms, limit, True, head)
    spread_base, spread_run = _spread(baseline), _spread(run)
    if spread_base is not None and spread_run is not None and run_ms <= spread_base[1]:
        band = f"{ms_value(spread_base[0])}-{ms_value(spread_base[1])} ms"
        if tol.strict:
            detail = f"{head}, failed by --strict although within the baseline's own p10-p90 spread ({band})"
            return GateCheck("time", base_ms, run_ms, limit, False, detail, within_noise=True)
        detail = (f"{head}, but within noise: inside the baseline's own p10-p90 spread ({band}), so not a failure "
                  "(--strict fails it)")
        return GateCheck("time", base_ms, run_ms, limit, True, detail, within_noise=True)
    return GateCheck("time", base_ms, run_ms, limit, False, head)


def _memory_check(run: Report, baseline: Report, tol: GateTolerances) -> GateCheck | None:
    """Device memory peak (torch's allocator), else the host's peak RSS; None when the two lack a common one."""
    pairs = (("memory", "device memory peak", baseline.totals.peak_memory_bytes, run.totals.peak_memory_bytes),
             ("host memory", "host memory peak (RSS)", baseline.totals.peak_rss_bytes, run.totals.peak_rss_bytes))
    for what, name, base, now in pairs:
        if base and now:
            ratio, limit = now / base, tol.max_memory_growth
            passed = ratio <= limit + EPSILON
            detail = (f"{name} {ratio:.2f}x (limit {limit:.2f}x): {format_bytes(base)} -> {format_bytes(now)}")
            return GateCheck(what, float(base), float(now), limit, passed, detail)
    return None


def _accuracy_checks(run: Report, baseline: Report, tol: GateTolerances) -> tuple[list[GateCheck], list[str]]:
    """One check per score both reports hold against the same reference; notes where they cannot be held."""
    a, b = run.accuracy, baseline.accuracy
    if a is None and b is None:
        return [], []
    if a is None or b is None:
        which = "the run" if a is None else "the baseline"
        return [], [f"accuracy not gated: {which} has none"]
    if a.vs != b.vs:
        return [], [f"accuracy not gated: the baseline's is against {b.vs or 'an unnamed reference'}, the run's "
                    f"against {a.vs or 'an unnamed reference'}"]
    checks = []
    limit = tol.max_accuracy_drop
    for key, name in ACCURACY_SCORES:
        base, now = getattr(b, key), getattr(a, key)
        if base is None or now is None:
            continue
        drop = base - now
        passed = drop <= limit + EPSILON
        change = "unchanged" if abs(drop) < SAME_SCORE else f"dropped {drop:.3f}" if drop > 0 else f"rose {-drop:.3f}"
        checks.append(GateCheck(f"accuracy {key}", base, now, limit, passed,
                                f"{name} {change} ({base:.3f} -> {now:.3f}; limit a drop of {limit:.3f})"))
    notes = [] if checks else ["accuracy not gated: the two hold no score in common"]
    return checks, notes


def _failed_runs(report: Report) -> int:
    return max(report.totals.num_failed_runs, sum(1 for r in report.runs if r.status == "failed"))


def _moved(run: Report, baseline: Report, limit: float) -> tuple[MovedStage, ...]:
    """Stages whose time moved beyond ``limit`` either way, by compare's stage alignment; worst first."""
    rows = compare_reports(baseline, run)["stages"]  # A = baseline, B = run
    floor = MOVED_MIN_SHARE * (baseline.typical_run_ms or 0.0)
    moved = []
    for row in rows:
        base, now, ratio = row["ms_a"], row["ms_b"], row["observed_ratio"]
        if abs((now or 0.0) - (base or 0.0)) < floor:
            continue
        if ratio is None or ratio > limit + EPSILON or ratio < 1.0 / limit - EPSILON:
            moved.append(MovedStage(row["stage"], base, now, ratio))

    def worst(m: MovedStage) -> tuple[int, float]:
        if m.slower:
            return 0, -(m.ratio if m.ratio is not None else math.inf)
        return 1, m.ratio if m.ratio is not None else 0.0
    return tuple(sorted(moved, key=worst))


def _by_rule(findings: Sequence[GateFinding]) -> dict[str, GateFinding]:
    out: dict[str, GateFinding] = {}
    for x in findings:
        out.setdefault(x.rule, x)  # the most severe of each rule (report_findings sorts)
    return out


def gate(run: Report, baseline: Report, tolerances: GateTolerances | None = None) -> GateResult:
    """The run held against the baseline; GateRefused when they differ in device or configuration (unless
    ``tolerances.allow_different``), UserError when the baseline has no finished run."""
    tol = tolerances or GateTolerances()
    differ = differences(run, baseline)
    if differ and not tol.allow_different:
        raise GateRefused(f"{run.short_label()} and the baseline {baseline.short_label()} differ: "
                          + "; ".join(differ),
                          "gate a run against a baseline of the same configuration on the same device; "
                          "to compare different machines or settings use compare (or diff), or pass "
                          "--allow-different")
    checks = [_time_check(run, baseline, tol)]
    notes = _software_notes(run, baseline)
    if baseline.totals.warm_ms_median is None and not baseline.warm_runs:
        notes.append("the baseline has no warm runs: its time is its cold run's")
    if run.totals.warm_ms_median is None and not run.warm_runs:
        notes.append("the run has no warm runs: its time is its cold run's")
    if bool(run.capture) != bool(baseline.capture):
        deep, plain = ("the baseline", "the run") if baseline.capture else ("the run", "the baseline")
        notes.append(f"{deep} has a deep capture and {plain} has not: the capture answers some telemetry guesses "
                     "(host_bound, launch_bound, untimed_work), so those may read as new or gone; gate like with "
                     "like (both --deep or neither)")
    memory = _memory_check(run, baseline, tol)
    if memory is None:
        notes.append("memory not gated: the two reports hold no memory peak in common")
    else:
        checks.append(memory)
    accuracy, accuracy_notes = _accuracy_checks(run, baseline, tol)
    checks += accuracy
    notes += accuracy_notes
    failed_base, failed_run = _failed_runs(baseline), _failed_runs(run)
    if failed_base or failed_run:
        checks.append(GateCheck("failed runs", failed_base, failed_run, failed_base, failed_run <= failed_base,
                                f"{failed_run} failed run(s) (the baseline had {failed_base})"))
    found_base, found_run = _by_rule(report_findings(baseline)), _by_rule(report_findings(run))
    new = tuple(x for rule, x in found_run.items() if rule not in found_base)
    gone = tuple(x for rule, x in found_base.items() if rule not in found_run)
    if tol.fail_on_new_findings:
        checks.append(GateCheck("new findings", 0, len(new), 0, not new,
                                f"{len(new)} new finding(s) at warning or above"))
    return GateResult(label=run.short_label(), baseline_label=baseline.short_label(), checks=tuple(checks),
                      moved_stages=_moved(run, baseline, tol.max_slowdown), new_findings=new, gone_findings=gone,
                      differences=tuple(differ), notes=tuple(notes))


# -- several configurations (bench files) -------------------------------------------------------
def config_label(report: Report) -> str:
    """The label a bench file matches configurations by: the report's own, else its configuration's."""
    return report.label or report.config.label()


@dataclass(frozen=True)
class GateSuite:
    """The verdicts on every configuration of a run, matched by label to the baseline's."""

    results: tuple[GateResult, ...]
    tolerances: GateTolerances = field(default_factory=GateTolerances)
    not_gated: tuple[str, ...] = ()  # run configurations the baseline has no configuration of the same label for
    missing_from_run: tuple[str, ...] = ()  # baseline configurations a whole sweep lacks (require_all)
    require_all: bool = False  # the run is a whole sweep: every baseline configuration must be in it

    @property
    def verdict(self) -> str:
        failed = any(not r.passed for r in self.results) or bool(self.missing_from_run)
        return "fail" if failed else "pass"

    def summary_lines(self) -> list[str]:
        """One verdict line per configuration, then what was not gated or is missing."""
        lines = [r.summary() for r in self.results]
        if self.missing_from_run:
            lines.append(f"FAIL: in the baseline, missing from the run: {', '.join(self.missing_from_run)}")
        if self.not_gated:
            lines.append(f"NOTE: not gated, no baseline of the same label: {', '.join(self.not_gated)}")
        return lines

    def to_dict(self) -> dict[str, Any]:
        return {"format": GATE_FORMAT, "version": GATE_VERSION, "verdict": self.verdict,
                "tolerances": self.tolerances.to_dict(), "results": [r.to_dict() for r in self.results],
                "not_gated": list(self.not_gated), "missing_from_run": list(self.missing_from_run),
                "require_all": self.require_all}


def _by_label(reports: Sequence[Report], side: str) -> dict[str, Report]:
    out: dict[str, Report] = {}
    for r in reports:
        label = config_label(r)
        if label in out:
            raise UserError(f"the {side} holds two configurations labelled {label!r}", "pick one as FILE#N")
        out[label] = r
    return out


def gate_all(runs: Sequence[Report], baselines: Sequence[Report], tolerances: GateTolerances | None = None,
             require_all: bool = False) -> GateSuite:
    """Each run configuration against the baseline's of the same label (one against one: held directly).

    require_all: the run is a whole bench sweep, so a baseline configuration it lacks is named and fails the
    gate (one that failed to run, or was dropped from the sweep); otherwise (a report, or one picked from a
    sweep) the baseline's other configurations are not its concern. A run configuration with no baseline is
    named as not gated. UserError when nothing at all is gated.
    """
    tol = tolerances or GateTolerances()
    if not runs or not baselines:
        raise UserError(f"nothing to gate: the {'run' if not runs else 'baseline'} holds no report")
    if len(runs) == 1 and len(baselines) == 1:
        return GateSuite((gate(runs[0], baselines[0], tol),), tol)
    run_by, base_by = _by_label(runs, "run"), _by_label(baselines, "baseline")
    pairs = [(run_by[k], base_by[k]) for k in run_by if k in base_by]
    if not pairs:
        raise UserError("nothing to gate: no configuration of the run has a baseline of the same label",
                        f"run: {', '.join(run_by)}; baseline: {', '.join(base_by)}")
    return GateSuite(results=tuple(gate(r, b, tol) for r, b in pairs), tolerances=tol,
                     not_gated=tuple(k for k in run_by if k not in base_by),
                     missing_from_run=tuple(k for k in base_by if k not in run_by) if require_all else (),
                     require_all=require_all)


def format_gate(suite: GateSuite) -> str:
    """The verdict lines, then each configuration's checks, moved stages, findings and notes."""
    lines = suite.summary_lines()
    for r in suite.results:
        lines.append("")
        lines.append(f"{r.label} against {r.baseline_label}:")
        for c in r.checks:
            mark = "ok  " if c.passed and not c.within_noise else "noise" if c.passed else "FAIL"
            lines.append(f"  {mark:5s} {c.what}: {c.detail}")
        if r.moved_stages:
            lines.append("  moved stages: " + ", ".join(m.text() for m in r.moved_stages))
        for x in r.new_findings:
            lines.append(f"  new finding {x.text()}: {x.title}")
        for x in r.gone_findings:
            lines.append(f"  gone finding {x.text()}: {x.title}")
        lines.extend(f"  note: {n}" for n in r.notes)
    lines.append("")
    lines.append(f"verdict: {suite.verdict.upper()}")
    return "\n".join(lines)
