"""`trackscope compare A.json B.json`: two run reports stage by stage, observed vs what the specs explain.

Per stage: ms in A and in B, the observed ratio B/A, and the ratio the specs explain: the stage's
roofline time in B over its roofline time in A (each from its own report's FLOPs, bytes, device
peaks and precision). A stage whose observed ratio is more than FLAG_RATIO times the explained one
(either way) is flagged: that is where something beyond the hardware is going on (the 170x case:
emulated bf16, TF32 off, a fallback, launches, syncs). ``--what-if GPU`` projects one report instead.
"""

from __future__ import annotations

from typing import Any

from engine.analysis.whatif import _table
from engine.report.recorder import report_label, run_ms, stage_ms

#: observed / explained beyond this factor (or below its inverse) flags a stage
FLAG_RATIO = 3.0
#: ... provided the time beyond what the specs explain is at least this share of that side's run
FLAG_MIN_EXCESS_SHARE = 0.02


def _ratio(b: float | None, a: float | None) -> float | None:
    if a is None or b is None or a <= 0 or b <= 0:
        return None
    return b / a


def _side(report: dict[str, Any]) -> dict[str, Any]:
    cost = report.get("cost") or {}
    return {"label": report_label(report), "precision": (report.get("config") or {}).get("precision"),
            "device": (cost.get("peak") or {}).get("device") or report.get("device_name") or "",
            "total_ms": run_ms(report)}


def compare_reports(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Per stage: ms A, ms B, observed ratio B/A, the ratio the specs explain, and a flag."""
    ms_a, ms_b = stage_ms(a), stage_ms(b)
    cost_a = ((a.get("cost") or {}).get("stages")) or {}
    cost_b = ((b.get("cost") or {}).get("stages")) or {}
    names = list(dict.fromkeys([*a.get("stages", []), *ms_a, *cost_a, *b.get("stages", []), *ms_b, *cost_b]))
    side_a, side_b = _side(a), _side(b)
    total_a = side_a["total_ms"] or sum(ms_a.values())
    total_b = side_b["total_ms"] or sum(ms_b.values())
    rows = []
    roof_sum_a = roof_sum_b = 0.0
    for name in names:
        sa, sb = ms_a.get(name), ms_b.get(name)
        if sa is None and sb is None:
            continue
        ca, cb = cost_a.get(name) or {}, cost_b.get(name) or {}
        observed = _ratio(sb, sa)
        explained = _ratio(cb.get("roofline_ms"), ca.get("roofline_ms"))
        if explained is not None:
            roof_sum_a += ca["roofline_ms"]
            roof_sum_b += cb["roofline_ms"]
        beyond = observed / explained if observed is not None and explained is not None else None
        flag, excess_ms = "", None
        if beyond is not None and beyond > FLAG_RATIO:
            excess_ms = sb - sa * explained  # B's time beyond what A's time and the specs predict
            flag = "B" if excess_ms >= FLAG_MIN_EXCESS_SHARE * total_b else ""
        elif beyond is not None and beyond < 1.0 / FLAG_RATIO:
            excess_ms = sa - sb / explained
            flag = "A" if excess_ms >= FLAG_MIN_EXCESS_SHARE * total_a else ""
        rows.append({"stage": name, "ms_a": sa, "ms_b": sb, "observed_ratio": observed,
                     "explained_ratio": explained, "beyond_specs": beyond, "flag": flag, "excess_ms": excess_ms,
                     "bound_a": ca.get("bound"), "bound_b": cb.get("bound"),
                     "precision_a": ca.get("precision"), "precision_b": cb.get("precision")})
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
        "findings": {"a": list(a.get("findings") or []), "b": list(b.get("findings") or [])},
        "notes": notes,
    }


def _fx(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.3g}x" if value < 100 else f"{value:.0f}x"


def _fms(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.3g}" if value < 10 else f"{value:.1f}"


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
    """Aligned text table of a comparison, then the findings of both reports."""
    lines = [f"A: {result['a']['label']}  ({_fms(result['a']['total_ms'])} ms per run)",
             f"B: {result['b']['label']}  ({_fms(result['b']['total_ms'])} ms per run)", ""]
    rows = [("stage", "A ms", "B ms", "B/A observed", "B/A specs", "bound A/B", "flag")]
    for r in result["stages"]:
        flag = ""
        if r["flag"] == "B":
            flag = f"<< B {_fx(r['beyond_specs'])} slower than specs explain (+{_fms(r['excess_ms'])} ms)"
        elif r["flag"] == "A":
            flag = f"<< A {_fx(1.0 / r['beyond_specs'])} slower than specs explain (+{_fms(r['excess_ms'])} ms)"
        bounds = f"{r['bound_a'] or '-'}/{r['bound_b'] or '-'}"
        rows.append((r["stage"], _fms(r["ms_a"]), _fms(r["ms_b"]), _fx(r["observed_ratio"]),
                     _fx(r["explained_ratio"]), bounds, flag))
    t = result["total"]
    rows.append(("total", _fms(t["ms_a"]), _fms(t["ms_b"]), _fx(t["observed_ratio"]), _fx(t["explained_ratio"]),
                 "", ""))
    lines.extend(_table(rows))
    lines.append("")
    lines.append(f"flag: observed beyond {result['flag_ratio']:g}x what the specs explain (roofline time from "
                 f"each report's FLOPs, bytes, device peaks and precision), costing at least "
                 f"{FLAG_MIN_EXCESS_SHARE:.0%} of that run")
    lines.extend(f"note: {n}" for n in result["notes"])
    lines.append("")
    lines.extend(_format_findings("A", result["findings"]["a"]))
    lines.extend(_format_findings("B", result["findings"]["b"]))
    return "\n".join(lines)
