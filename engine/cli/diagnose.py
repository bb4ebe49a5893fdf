"""`trackscope diagnose REPORT.json`: the findings of a run report or bench file, with evidence."""

from __future__ import annotations

import argparse
import json

from engine.analysis.rules import diagnose_many, format_findings


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("report", help="a run report or bench file (JSON)")
    parser.add_argument("--json", action="store_true", help="print the findings as JSON")


def run(args: argparse.Namespace) -> int:
    from engine.report.recorder import load_reports

    reports = load_reports(args.report)
    findings = diagnose_many(reports)
    if args.json:
        print(json.dumps([x.to_dict() for x in findings], indent=1))
    else:
        print(format_findings(findings))
    return 0
