"""Analysis on load: a report's roofline and today's findings, derived from its measurements.

Recording writes measurements only; the CLI and the app run ``analyse`` (one report) or
``analyse_many`` (a bench sweep: growth across batch sizes too) on every report they open, so a
replayed report shows today's rules, today's capture rules on its deep-capture summary included.
Findings a writer froze into an older file stay visible as recorded: ``Analysis.recorded_only()``
lists those today's rules no longer give.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from engine.analysis.facts import Finding
from engine.analysis.roofline import Cost, report_cost
from engine.analysis.rules import diagnose, diagnose_many
from engine.capture.rules import IDLE_CAUSES, diagnose_capture
from engine.report.finding import as_finding
from engine.report.parts import RecordedFinding
from engine.report.schema import Report, as_report

log = logging.getLogger(__name__)
#: severities, most severe first, as sort keys
SEVERITY_RANK = {"critical": 0, "warning": 1, "info": 2}


def _key(rule: str, stage: str | None, label: str | None) -> tuple[str, str | None, str | None]:
    return rule, stage or None, label or None


@dataclass(frozen=True)
class Analysis:
    """Today's analysis of one or more reports: each one's roofline, the findings, and the recorded ones."""

    reports: tuple[Report, ...]
    costs: tuple[Cost | None, ...]  # per report: its stages on the roofline (None: nothing counted)
    findings: tuple[Finding, ...]  # today's rules, most severe first
    recorded_findings: tuple[RecordedFinding, ...] = ()  # what the files' writers froze into them
    capture_findings: tuple[Finding, ...] = ()  # today's capture rules on the deep-capture summaries

    @property
    def cost(self) -> Cost | None:
        """The roofline of the first (usually the only) report."""
        return self.costs[0] if self.costs else None

    def all_findings(self) -> tuple[Finding, ...]:
        """Every finding in one list: today's rules and today's capture rules (most severe first), then the
        recorded ones today's rules no longer give; each says its ``source``."""
        today = sorted((*self.findings, *self.capture_findings),
                       key=lambda f: SEVERITY_RANK.get(f.severity, len(SEVERITY_RANK)))
        return (*today, *self.recorded_only())

    def recorded_only(self) -> tuple[RecordedFinding, ...]:
        """Recorded findings that today's rules no longer give (same rule, stage and report)."""
        today = {_key(x.rule, x.stage, x.label) for x in self.findings}
        seen: set[tuple[str, str | None, str | None]] = set()
        out = []
        for x in self.recorded_findings:
            key = _key(x.rule, x.stage, x.label)
            if key not in today and key not in seen:
                seen.add(key)
                out.append(x)
        return tuple(out)


def _recorded(reports: Iterable[Report], extra: Iterable[RecordedFinding]) -> tuple[RecordedFinding, ...]:
    """Each report's recorded findings, labelled with its report where the writer did not say."""
    out = [x if x.label else replace(x, label=r.label or None)
           for r in reports for x in r.recorded_findings]
    return (*out, *extra)


def capture_findings(report: Report) -> tuple[Finding, ...]:
    """Today's capture rules on a report's deep-capture summary (none without one, or with one this
    version cannot read), each labelled with its report; the rules' dicts become Findings here."""
    part = report.capture_part if report.capture else None
    if part is None:
        return ()
    summary = part.summary
    if summary is None:
        log.warning("capture section of %s not analysed: %s", report.short_label(), part.read_error)
        return ()
    found = diagnose_capture(summary, precision=report.precision, capability=report.capability,
                             typical_wall_ms=report.totals.warm_ms_median, device_name=report.device_name)
    return tuple(Finding.from_capture(f, label=report.label or None) for f in found)


#: telemetry- and op-count rules a capture answers precisely: where a report's capture names a host-side
#: cause (syncs, a round trip, launches), these guesses about the same run give way to it
SUPERSEDED_BY_CAPTURE = ("host_bound", "launch_bound", "untimed_work")
#: the capture rules that name a host-side cause: the syncs, copies, launches, Python, CPU ops and thread count the
#: GPU waited on (engine.capture.rules.IDLE_CAUSES), and the idle rule itself
HOST_CAUSES = (*IDLE_CAUSES, "gpu_idle_gaps")


def _defer_to_captures(findings: Sequence[Finding], captured: Sequence[Finding | Mapping[str, Any]]
                       ) -> tuple[Finding, ...]:
    """Existing rules use the capture when there is one: host_bound / launch_bound / untimed_work of a report
    whose capture names the host-side cause are dropped (the capture finding says it with module and call
    site), and so are those whose capture found the idle to be the session's own; otherwise they stay."""
    typed = [as_finding(f) for f in captured]
    explained = {f.label for f in typed if f.rule in HOST_CAUSES and f.severity != "info"}
    # a capture that measured the idle and found it the session's own (the tracker's host side under 1 % of the
    # run) answers the guess too: keeping it would put trackscope's loop, upload and download on the tracker
    explained |= {f.label for f in typed if f.rule == "gpu_idle_gaps" and f.evidence.get("scope") == "session"}
    return tuple(x for x in findings if not (x.rule in SUPERSEDED_BY_CAPTURE and (x.label or None) in explained))


def analyse(report: Report | Mapping[str, Any]) -> Analysis:
    """One report's roofline and findings by today's rules."""
    r = as_report(report)
    cost = report_cost(r)
    captured = capture_findings(r)
    return Analysis(reports=(r,), costs=(cost,), findings=_defer_to_captures(diagnose(r, cost), captured),
                    recorded_findings=_recorded((r,), ()), capture_findings=captured)


def analyse_many(reports: Sequence[Report | Mapping[str, Any]],
                 recorded_findings: Iterable[RecordedFinding] = ()) -> Analysis:
    """Several reports (a bench sweep): each one's findings and growth across batch sizes within a
    configuration. recorded_findings: more recorded ones (a bench file's own)."""
    typed = tuple(as_report(r) for r in reports)
    costs = tuple(report_cost(r) for r in typed)
    captured = tuple(f for r in typed for f in capture_findings(r))
    return Analysis(reports=typed, costs=costs, findings=_defer_to_captures(diagnose_many(typed, costs), captured),
                    recorded_findings=_recorded(typed, recorded_findings), capture_findings=captured)


def format_recorded(findings: Sequence[RecordedFinding]) -> str:
    """Recorded findings as indented text, one block each (as format_findings prints today's)."""
    lines = []
    for x in findings:
        where = f" [{x.label}]" if x.label else ""
        lines.append(f"{x.severity.upper():8s} {x.rule}{where}: {x.title}")
        if x.suggestion:
            lines.append(f"         suggestion: {x.suggestion}")
    return "\n".join(lines)


def format_capture_findings(findings: Sequence[Finding | Mapping[str, Any]]) -> str:
    """Capture findings as text, one block each (rule, title, where, suggestion)."""
    lines = []
    for f in (as_finding(x) for x in findings):
        where = " ".join(str(x) for x in (f.module, f.call_site) if x)
        label = f" [{f.label}]" if f.label else ""
        where = f" ({where})" if where else ""
        lines.append(f"{f.severity.upper():8s} {f.rule}{label}: {f.title}{where}")
        if f.suggestion:
            lines.append(f"         suggestion: {f.suggestion}")
    return "\n".join(lines)

