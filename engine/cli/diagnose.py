"""`trackscope diagnose REPORT.json`: today's findings of a run report or bench file, with evidence.

The file is analysed on load (engine.analysis.analyse), so an old report shows today's rules (and
today's capture rules on its deep-capture summary); findings its writer recorded that today's rules no
longer give are printed under their own heading.
"""

from __future__ import annotations

import argparse
import json

from engine.analysis.analyse import analyse_many, format_capture_findings, format_recorded
from engine.analysis.rules import format_findings

RECORDED_HEADING = "recorded in the file, no longer given by today's rules:"
CAPTURE_HEADING = "from the deep capture:"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("report", help="a run report or bench file (JSON)")
    parser.add_argument("--json", action="store_true", help="print the findings as JSON")


def run(args: argparse.Namespace) -> int:
    from engine.report.files import load_any

    reports, recorded = load_any(args.report)
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
    return 0
