"""`trackscope compare A.json B.json`: two run reports stage by stage, observed vs what the specs explain.

Per stage: ms in A and in B, the observed ratio B/A, and the ratio the specs explain: the stage's
roofline time in B over its roofline time in A (each from its own report's FLOPs, bytes, device
peaks and precision). A stage whose observed ratio is more than FLAG_RATIO times the explained one
(either way) is flagged: that is where something beyond the hardware is going on (the 170x case:
emulated bf16, TF32 off, a fallback, launches, syncs). ``--what-if GPU`` projects one report instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.analysis.analyse import Analysis, analyse
from engine.analysis.whatif import _table
from engine.core.units import ms_value
from engine.report.schema import Report, as_report

#: observed / explained beyond this factor (or below its inverse) flags a stage
FLAG_RATIO = 3.0
#: ... provided the time beyond what the specs explain is at least this share of that side's run
FLAG_MIN_EXCESS_SHARE = 0.02


def _ratio(b: float | None, a: float | None) -> float | None:
    if a is None or b is None or a <= 0 or b <= 0:
        return None
    return b / a


def _side(report: Report, analysis: Analysis) -> dict[str, Any]:
    cost = analysis.cost
    return {"label": report.short_label(), "precision": report.precision,
            "device": cost.spec.name if cost else report.device_name, "total_ms": report.typical_run_ms}


def compare_reports(a: Report | Mapping[str, Any], b: Report | Mapping[str, Any]) -> dict[str, Any]:
    """Per stage: ms A, ms B, observed ratio B/A, the ratio the specs explain, and a flag; then each
    report's findings by today's rules."""
    a, b = as_report(a), as_report(b)
    analysis_a, analysis_b = analyse(a), analyse(b)
    ms_a, ms_b = a.stage_ms, b.stage_ms
    cost_a = analysis_a.cost.stages if analysis_a.cost else {}
    cost_b = analysis_b.cost.stages if analysis_b.cost else {}
    names = list(dict.fromkeys([*a.stages, *ms_a, *cost_a, *b.stages, *ms_b, *cost_b]))
    side_a, side_b = _side(a, analysis_a), _side(b, analysis_b)
    total_a = side_a["total_ms"] or sum(ms_a.values())
    total_b = side_b["total_ms"] or sum(ms_b.values())
    rows = []
    roof_sum_a = roof_sum_b = 0.0
    for name in names:
        sa, sb = ms_a.get(name), ms_b.get(name)
        if sa is None and sb is None:
            continue
        ca, cb = cost_a.get(name), cost_b.get(name)
        roof_a, roof_b = ca.roofline_ms if ca else None, cb.roofline_ms if cb else None
        observed = _ratio(sb, sa)
        explained = _ratio(roof_b, roof_a)
        if explained is not None and roof_a is not None and roof_b is not None:
            roof_sum_a += roof_a
            roof_sum_b += roof_b
        beyond = observed / explained if observed is not None and explained is not None else None
        flag, excess_ms = "", None
        if beyond is not None and explained is not None and sa is not None and sb is not None \
                and beyond > FLAG_RATIO:
            excess_ms = sb - sa * explained  # B's time beyond what A's time and the specs predict
            flag = "B" if excess_ms >= FLAG_MIN_EXCESS_SHARE * total_b else ""
        elif beyond is not None and explained is not None and sa is not None and sb is not None \
                and beyond < 1.0 / FLAG_RATIO:
            excess_ms = sa - sb / explained
            flag = "A" if excess_ms >= FLAG_MIN_EXCESS_SHARE * total_a else ""
        rows.append({"stage": name, "ms_a": sa, "ms_b": sb, "observed_ratio": observed,
                     "explained_ratio": explained, "beyond_specs": beyond, "flag": flag, "excess_ms": excess_ms,
                     "bound_a": ca.bound if ca else None, "bound_b": cb.bound if cb else None,
                     "precision_a": ca.precision if ca else None, "precision_b": cb.precision if cb else None})
    total_observed = _ratio(side_b["total_ms"], side_a["total_ms"])
    total_explained = _ratio(roof_sum_b, roof_sum_a) if roof_sum_a and roof_sum_b else None
    notes = []
    if not cost_a or not cost_b:
        notes.append("the explained ratio needs the cost model in both reports (FLOPs and bytes per stage); "
                     "record them with the cost pass")
    return {
        "a": side_a, "b": side_b, "stages": rows, "flag_ratio": FLAG_RATIO,
        "total": {"ms_a": side_a["total_ms"], "ms_b": side_b["total_ms"], "observed_ratio": total_observed,
                  "explained_ratio": total_explained},
        "flagged": [r["stage"] for r in rows if r["flag"]],
        "findings": {"a": [x.to_dict() for x in analysis_a.findings],
                     "b": [x.to_dict() for x in analysis_b.findings]},
        "recorded": {"a": [x.to_dict() for x in analysis_a.recorded_only()],
                     "b": [x.to_dict() for x in analysis_b.recorded_only()]},
        "notes": notes,
    }


def _fx(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.3g}x" if value < 100 else f"{value:.0f}x"


def _format_findings(title: str, findings: list[dict[str, Any]]) -> list[str]:
    lines = [f"findings {title}:"]
    if not findings:
        return lines + ["  (none)"]
    for f in findings:
        lines.append(f"  [{f.get('severity', 'info')}] {f.get('title', f.get('rule', ''))}")
        if f.get("suggestion"):
            lines.append(f"      -> {f['suggestion']}")
    return lines


def format_compare(result: dict[str, Any]) -> str:
    """Aligned text table of a comparison, then both reports' findings (today's, then recorded-only ones)."""
    lines = [f"A: {result['a']['label']}  ({ms_value(result['a']['total_ms'])} ms per run)",
             f"B: {result['b']['label']}  ({ms_value(result['b']['total_ms'])} ms per run)", ""]
    rows = [("stage", "A ms", "B ms", "B/A observed", "B/A specs", "bound A/B", "flag")]
    for r in result["stages"]:
        flag = ""
        if r["flag"] == "B":
            flag = f"<< B {_fx(r['beyond_specs'])} slower than specs explain (+{ms_value(r['excess_ms'])} ms)"
        elif r["flag"] == "A":
            flag = f"<< A {_fx(1.0 / r['beyond_specs'])} slower than specs explain (+{ms_value(r['excess_ms'])} ms)"
        bounds = f"{r['bound_a'] or '-'}/{r['bound_b'] or '-'}"
        rows.append((r["stage"], ms_value(r["ms_a"]), ms_value(r["ms_b"]), _fx(r["observed_ratio"]),
                     _fx(r["explained_ratio"]), bounds, flag))
    t = result["total"]
    rows.append(("total", ms_value(t["ms_a"]), ms_value(t["ms_b"]), _fx(t["observed_ratio"]), _fx(t["explained_ratio"]),
                 "", ""))
    lines.extend(_table(rows))
    lines.append("")
    lines.append(f"flag: observed beyond {result['flag_ratio']:g}x what the specs explain (roofline time from "
                 f"each report's FLOPs, bytes, device peaks and precision), costing at least "
                 f"{FLAG_MIN_EXCESS_SHARE:.0%} of that run")
    lines.extend(f"note: {n}" for n in result["notes"])
    lines.append("")
    for side in ("a", "b"):
        lines.extend(_format_findings(side.upper(), result["findings"][side]))
    for side in ("a", "b"):
        if result["recorded"][side]:
            lines.extend(_format_findings(f"recorded in {side.upper()}, no longer given by today's rules",
                                          result["recorded"][side]))
    return "\n".join(lines)
