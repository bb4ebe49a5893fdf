"""`trackscope diagnose REPORT.json`: today's findings of a run report or bench file, with evidence.

The file is analysed on load (engine.analysis.analyse), so an old report shows today's rules (and
today's capture rules on its deep-capture summary); findings its writer recorded that today's rules no
longer give are printed under their own heading.

``--roofline`` also prints each counted stage's place on its device's roofline. It is asked for, not
automatic: a report without a cost model (a live run's, a ``track --report`` file) has it counted on
demand, one pass of its tracker on ``--count-device`` (engine.workflows.count), and the findings are
then those of the counted report (the roofline rules see its work too).
"""

from __future__ import annotations

import argparse
import json
import sys

from engine.analysis.analyse import analyse_many, format_capture_findings, format_recorded
from engine.analysis.rules import format_findings

RECORDED_HEADING = "recorded in the file, no longer given by today's rules:"
CAPTURE_HEADING = "from the deep capture:"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("report", help="a run report or bench file (JSON)")
    parser.add_argument("--json", action="store_true", help="print the findings as JSON")
    parser.add_argument("--roofline", action="store_true",
                        help="also print each stage's place on the roofline, counting the cost model first where "
                             "the report has none (one pass of its tracker)")
    parser.add_argument("--count-device", default="cpu", metavar="DEVICE",
                        help="where --roofline counts a missing cost model (default: cpu)")


def _note(text: str) -> None:
    print(f"trackscope diagnose: {text}", file=sys.stderr)


def _counted(reports: list, device: str) -> tuple[list, list[str]]:
    """The reports with their work counted where missing, and one line per report that could not be counted."""
    from engine.core.errors import UserError
    from engine.workflows.count import with_counted_work

    out, failed = [], []
    for r in reports:
        try:
            out.append(with_counted_work(r, device=device, log=_note))
        except UserError as exc:  # the findings still stand without it
            out.append(r)
            failed.append(f"{r.short_label()}: no roofline: {exc}")
    return out, failed


def run(args: argparse.Namespace) -> int:
    from engine.report.files import load_any

    reports, recorded = load_any(args.report)
    failed: list[str] = []
    if args.roofline:
        reports, failed = _counted(reports, args.count_device)
    analysis = analyse_many(reports, recorded)
    old = analysis.recorded_only()
    if args.json:
        print(json.dumps([x.to_dict() for x in analysis.findings], indent=1))
    else:
        if analysis.findings or not analysis.capture_findings:
            print(format_findings(list(analysis.findings)))
        else:
            print("no findings from the run's timings and telemetry")
        if analysis.capture_findings:
            print(f"\n{CAPTURE_HEADING}")
            print(format_capture_findings(analysis.capture_findings))
        if old:
            print(f"\n{RECORDED_HEADING}")
            print(format_recorded(old))
        if args.roofline:
            _print_roofline(analysis, failed)
    return 0


def _print_roofline(analysis, failed: list[str]) -> None:
    from engine.analysis.roofline import format_roofline

    for report, cost in zip(analysis.reports, analysis.costs):
        if cost is not None:
            print(f"\n{report.short_label()}:")
            print(format_roofline(cost))
    for line in failed:
        print(f"\n{line}")
