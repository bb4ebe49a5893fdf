"""`trackscope diff A B` (two runs) and `trackscope diff RUN --what-if GPU` (a run beside its projection).

A and B are report files, deep captures (a report with a ``capture``), fleet entries (a report file each),
a bench file holding one report (``bench.json#N`` picks the N-th of several), or a saved projection
(``trackscope compare REPORT --what-if GPU --json P.json``, or this verb's own projection). The two are aligned
by stage, module, function and kernel class; the deltas ranked by time with their reasons; B/A split into
what the two devices' specs explain and the named rest (engine.analysis.diff).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from engine.analysis.diff import TOP_ROWS, diff_runs, format_diff
from engine.analysis.diff_split import capture_projection
from engine.analysis.whatif import target_spec
from engine.analysis.whatif_by_batch import project_by_batch
from engine.core.atomic import atomic_open
from engine.core.errors import ReportError, UserError
from engine.core.outputs import check_output_path, write_error
from engine.report.fields import to_json
from engine.report.files import read_json
from engine.report.migrate import BENCH_FORMAT
from engine.report.projection import Projection, is_projection
from engine.report.schema import BenchFile, Report


def _pick(path: str, items: list[Any], pick: str, labels: list[str], what: str) -> Any:
    """Item ``#pick`` of a file holding several (a bench file's reports, a list of projections)."""
    if not pick:
        if len(items) == 1:
            return items[0]
        listed = ", ".join(f"#{i} {label}" for i, label in enumerate(labels))
        raise UserError(f"{path} holds {len(items)} {what}; pick one as {path}#N", f"{what}: {listed}")
    if not pick.isdigit():
        raise UserError(f"{path}#{pick}: N must be a whole number (the position of the {what[:-1]}, from 0)")
    if int(pick) >= len(items):
        raise UserError(f"{path} holds {len(items)} {what}, there is no #{pick}")
    return items[int(pick)]


def load_side(spec: str) -> Report | Projection:
    """A run or projection from ``PATH`` or ``PATH#N``; UserError (exit 2) for anything else."""
    path, _, pick = spec.partition("#")
    data = read_json(path)
    try:
        if isinstance(data, list):  # compare --what-if of several reports writes a list of projections
            if not data or not all(is_projection(x) for x in data):
                raise ReportError("a list that is not of what-if projections")
            projections = [Projection.from_dict(x, f"[{i}]") for i, x in enumerate(data)]
            return _pick(path, projections, pick, [p.short_label() for p in projections], "projections")
        if is_projection(data):
            if pick:
                raise UserError(f"{path} is one projection: drop #{pick}")
            return Projection.from_dict(data)
        if isinstance(data, dict) and data.get("format") == BENCH_FORMAT:
            reports = list(BenchFile.from_dict(data).reports)
            if not reports:
                raise ReportError("the bench file holds no report")
            return _pick(path, reports, pick, [r.short_label() for r in reports], "reports")
        if pick:
            raise UserError(f"{path} is one report: drop #{pick}")
        return Report.from_dict(data)
    except ReportError as exc:
        raise ReportError(f"{path}: {exc.message}", exc.suggestion) from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("runs", nargs="+", metavar="RUN",
                        help="A and B: report, deep-capture, fleet-entry or projection JSON files; FILE#N picks "
                             "report N of a bench file (or projection N of a list)")
    parser.add_argument("--what-if", metavar="GPU", dest="what_if",
                        help="with one RUN: B is its projection onto this GPU from the spec table (e.g. 'Tesla T4')")
    parser.add_argument("--top", type=int, default=TOP_ROWS, metavar="N",
                        help=f"rows to print, largest |delta| first (default {TOP_ROWS})")
    parser.add_argument("--json", metavar="PATH", help="also write the diff as JSON (for CI)")


def run(args: argparse.Namespace) -> int:
    if args.json:
        check_output_path(Path(args.json), "--json")  # before reading anything: exit 2 with the reason
    if args.top < 1:
        raise UserError(f"--top must be at least 1, not {args.top}")
    if args.what_if:
        target = target_spec(args.what_if)  # an unknown GPU fails before any file is read
        if len(args.runs) != 1:
            raise UserError(f"--what-if takes one run (got {len(args.runs)})",
                            "give RUN --what-if GPU, or A B without it")
        a = load_side(args.runs[0])
        if not isinstance(a, Report):
            raise UserError(f"{args.runs[0]} is a projection already; --what-if projects a measured run")
        b: Report | Projection
        try:
            b = Projection.from_dict(project_by_batch(a, target.name))
        except UserError:
            if a.work or a.capture_summary is None:
                raise  # the what-if's own reason (cold only, nothing movable, ...)
            b = capture_projection(a, target)  # no cost model: priced from its capture's kernel classes
    else:
        if len(args.runs) != 2:
            raise UserError(f"diff needs two runs (got {len(args.runs)})",
                            "give A.json B.json, or one run with --what-if GPU")
        a, b = load_side(args.runs[0]), load_side(args.runs[1])
    d = diff_runs(a, b)
    print(format_diff(d, top=args.top))
    if args.json:
        text = json.dumps(to_json(d.to_dict()), indent=1, allow_nan=False)  # NaN/inf as null
        try:
            with atomic_open(Path(args.json), "w", encoding="utf-8") as fh:
                fh.write(text)
        except OSError as exc:
            raise write_error(args.json, "diff", exc) from exc
    return 0
