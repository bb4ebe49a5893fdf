"""`trackscope gate RUN --baseline BASE`: hold a run against a baseline with tolerances; exit 0 pass, 1 fail.

RUN and BASE are each a report file (a fleet entry is one), a bench file (each configuration of RUN is held
against BASE's of the same label), or ``FILE#N`` (report N of a bench file). The verdict is printed, one
line per configuration, then the checks; ``--json PATH`` writes it for CI (``--json -`` prints the JSON
alone on stdout and the verdict lines on stderr). The analysis is engine.analysis.gate.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from engine.analysis.gate import (
    DEFAULT_MAX_ACCURACY_DROP,
    DEFAULT_MAX_MEMORY_GROWTH,
    DEFAULT_MAX_SLOWDOWN,
    GateSuite,
    GateTolerances,
    format_gate,
    gate_all,
)
from engine.core.atomic import atomic_open
from engine.core.errors import ReportError, UserError
from engine.core.outputs import check_output_path, write_error
from engine.report.fields import to_json
from engine.report.files import read_json
from engine.report.migrate import BENCH_FORMAT
from engine.report.schema import BenchFile, Report

#: the exit code of a failed gate (0: passed; 2: bad input, as every verb)
EXIT_FAIL = 1
EXIT_CODES = """\
exit codes:
  0  the gate passed (every configuration within the tolerances)
  1  the gate failed: the verdict ("FAIL: ...") is on stdout and in the --json file, whose "verdict" is "fail"
  2  bad input: a missing or malformed file, refused reports (different devices or configurations without
     --allow-different), a bad tolerance; one line on stderr, no verdict, no --json file written
  An internal error (a bug in trackscope) also exits 1, as in every verb, but prints a traceback and
  "internal error" on stderr and writes no --json file: in CI, a "verdict" in the JSON tells a failed gate
  from a crash.

time is the typical run (the warm median); a slowdown within the baseline's own p10-p90 spread of warm
runs (both reports need 3 or more) is reported "within noise" and passes unless --strict."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = EXIT_CODES
    parser.add_argument("run", metavar="RUN",
                        help="the run: a report, a bench file (every configuration) or FILE#N (one of a bench file)")
    parser.add_argument("--baseline", required=True, metavar="BASE",
                        help="the baseline, in the same forms (a bench file: configurations matched by label)")
    parser.add_argument("--max-slowdown", type=float, default=DEFAULT_MAX_SLOWDOWN, metavar="RATIO",
                        help=f"run time / baseline time allowed (default {DEFAULT_MAX_SLOWDOWN:.2f}: 10 %% slower)")
    parser.add_argument("--max-memory-growth", type=float, default=DEFAULT_MAX_MEMORY_GROWTH, metavar="RATIO",
                        help=f"memory peak / baseline's allowed (default {DEFAULT_MAX_MEMORY_GROWTH:.2f})")
    parser.add_argument("--max-accuracy-drop", type=float, default=DEFAULT_MAX_ACCURACY_DROP, metavar="SCORE",
                        help="absolute drop of AJ, delta_avg, occlusion accuracy or visibility agreement allowed "
                             f"(default {DEFAULT_MAX_ACCURACY_DROP})")
    parser.add_argument("--strict", action="store_true",
                        help="a slowdown within the baseline's own run-to-run spread fails too")
    parser.add_argument("--allow-different", action="store_true",
                        help="gate across devices or configurations instead of refusing (what differs is named)")
    parser.add_argument("--fail-on-new-findings", action="store_true",
                        help="a finding at warning or above that the baseline did not have fails the gate "
                             "(without it, new findings are named but do not fail)")
    parser.add_argument("--json", metavar="PATH",
                        help="write the verdict as JSON (atomically); '-' prints it on stdout instead of the text")


def load_side(spec: str, what: str) -> tuple[list[Report], bool]:
    """(the reports of ``spec``, whether it is a whole bench file). ``FILE#N`` picks report N of a bench file."""
    path, pick = spec, ""
    if "#" in spec and not Path(spec).exists():
        path, _, pick = spec.rpartition("#")
    data = read_json(path)
    is_bench = isinstance(data, dict) and data.get("format") == BENCH_FORMAT
    try:
        reports = list(BenchFile.from_dict(data).reports) if is_bench else [Report.from_dict(data)]
    except ReportError as exc:
        raise ReportError(f"{what} {path}: {exc.message}", exc.suggestion) from None
    if not pick:
        return reports, is_bench
    if not pick.isdigit():
        raise UserError(f"{what} {spec}: #{pick} is not a report number", f"write {path}#N, N from 0")
    if int(pick) >= len(reports):
        raise UserError(f"{what} {path} holds {len(reports)} report(s), there is no #{pick}")
    return [reports[int(pick)]], False


def _write_json(suite: GateSuite, target: str) -> None:
    text = json.dumps(to_json(suite.to_dict()), indent=1, allow_nan=False)
    if target == "-":
        print(text)
        return
    try:
        with atomic_open(Path(target), "w", encoding="utf-8") as fh:
            fh.write(text + "\n")
    except OSError as exc:
        raise write_error(target, "gate verdict", exc) from exc


def run(args: argparse.Namespace) -> int:
    if args.json and args.json != "-":
        check_output_path(Path(args.json), "--json")  # before reading anything: exit 2 with the reason
    tolerances = GateTolerances(max_slowdown=args.max_slowdown, max_memory_growth=args.max_memory_growth,
                                max_accuracy_drop=args.max_accuracy_drop, strict=args.strict,
                                allow_different=args.allow_different, fail_on_new_findings=args.fail_on_new_findings)
    runs, whole_sweep = load_side(args.run, "run")
    baselines, _ = load_side(args.baseline, "baseline")
    suite = gate_all(runs, baselines, tolerances, require_all=whole_sweep)
    if args.json == "-":
        print("\n".join(suite.summary_lines()), file=sys.stderr)
    else:
        print(format_gate(suite))
    if args.json:
        _write_json(suite, args.json)
    return 0 if suite.verdict == "pass" else EXIT_FAIL
