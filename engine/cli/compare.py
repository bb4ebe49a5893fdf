"""`trackscope compare A.json B.json [--what-if GPU]`: two reports stage by stage, or a projection.

A report without a cost model (a live run's, a ``track --report`` file) has it counted on demand for
the what-if: its tracker rebuilt and run once on ``--count-device`` (engine.workflows.count). A report
with only a cold run (``track --report``) has a few warm runs timed first, on its own device, when this
machine has it (engine.workflows.warm_runs); on another machine it is refused with the bench command.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from engine.analysis.compare import compare_reports, format_compare
from engine.analysis.whatif import format_projection
from engine.analysis.whatif_by_batch import project_by_batch
from engine.core.atomic import atomic_open
from engine.core.errors import ReportError, UserError
from engine.core.outputs import check_output_path, write_error
from engine.report.files import load_reports
from engine.report.projection import Projection
from engine.report.schema import Report
from engine.workflows.warm_runs import WARM_RUNS


def _select(spec: str) -> Report:
    """Load ``path`` or ``path#N`` / ``path#label`` (one report of a bench file)."""
    path, _, pick = spec.partition("#")
    reports = load_reports(path)
    if not pick:
        if len(reports) == 1:
            return reports[0]
        labels = ", ".join(f"#{i} {r.short_label()}" for i, r in enumerate(reports))
        raise UserError(f"{path} holds {len(reports)} reports; pick one as {path}#N", f"reports: {labels}")
    if pick.isdigit():
        if int(pick) >= len(reports):
            raise ReportError(f"{path} holds {len(reports)} reports, there is no #{pick}")
        return reports[int(pick)]
    matches = [r for r in reports if pick in r.short_label()]
    if len(matches) != 1:
        raise UserError(f"{len(matches)} reports of {path} match {pick!r}", "pick one by number: FILE#N")
    return matches[0]


def _note(text: str) -> None:
    print(f"trackscope compare: {text}", file=sys.stderr)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("reports", nargs="+", metavar="REPORT",
                        help="report JSON files (A and B); FILE#N picks report N of a bench file")
    parser.add_argument("--what-if", metavar="GPU", dest="what_if",
                        help="project each report onto this GPU from the spec table (e.g. 'Tesla T4')")
    parser.add_argument("--count-device", default="cpu", metavar="DEVICE",
                        help="where the what-if counts the cost model of a report that has none (one pass of "
                             "its tracker; default: cpu)")
    parser.add_argument("--warm-runs", type=int, default=WARM_RUNS, metavar="N",
                        help="warm runs timed for a report that holds only a cold run (on the report's device; "
                             f"default {WARM_RUNS})")
    parser.add_argument("--json", metavar="PATH", help="also write the comparison (or projection) as JSON")


def run(args: argparse.Namespace) -> int:
    if args.json:
        check_output_path(Path(args.json), "--json")  # before reading anything: exit 2 with the reason
    reports = [_select(s) for s in args.reports]
    if args.what_if:
        from engine.analysis.whatif import target_spec
        from engine.workflows.count import with_counted_work
        from engine.workflows.warm_runs import with_warm_runs

        target_spec(args.what_if)  # an unknown GPU fails before any counting
        if args.warm_runs < 1:
            raise UserError(f"--warm-runs must be at least 1, not {args.warm_runs}")
        reports = [with_warm_runs(r, runs=args.warm_runs, log=_note) for r in reports]
        reports = [with_counted_work(r, device=args.count_device, log=_note) for r in reports]
        results = [project_by_batch(r, args.what_if) for r in reports]  # each batch at its precision
        print("\n\n".join(format_projection(r) for r in results))
        typed = [Projection.from_dict(r).to_dict() for r in results]  # marked: `trackscope diff` opens it
        payload: Any = typed if len(typed) > 1 else typed[0]
    else:
        if len(reports) != 2:
            raise UserError(f"compare needs two reports (got {len(reports)})",
                            "give A.json B.json, or one report with --what-if GPU")
        payload = compare_reports(reports[0], reports[1])
        print(format_compare(payload))
    if args.json:
        try:
            with atomic_open(Path(args.json), "w", encoding="utf-8") as fh:
                fh.write(json.dumps(payload, indent=1, default=str))
        except OSError as exc:
            raise write_error(args.json, "comparison", exc) from exc
    return 0
