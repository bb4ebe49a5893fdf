"""The field table again, from recorded reports, with today's rules: no GPU, no run.

Usage (from the repo root):

    python3 scripts/rediagnose_field.py DIR [--findings]

DIR: a folder ``scripts/diagnose_field.py`` wrote (``NAME.json`` per plugin, each report with its deep-capture
summary in ``capture``; ``NAME_TAG.json`` is read as another report of plugin NAME). Each report is opened the
way the app and ``trackscope diagnose`` open one (``engine.analysis.analyse.analyse_many``: the report rules and
today's capture rules over the recorded summary) and judged as ``diagnose_field`` judges a fresh run (the
expected rule from ``PLANTED``; controls, CorrTrack and ``clean``, expect nothing above info). Prints the
markdown table ``diagnose_field`` prints; ``--findings`` adds every finding above info per plugin under it.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine.analysis.analyse import analyse_many  # noqa: E402
from engine.core.errors import ReportError  # noqa: E402
from engine.report.files import load_report  # noqa: E402
from tests.plugins.field import PLANTED  # noqa: E402

SKIPPED = ("table.json",)


def _field_script() -> Any:
    """scripts/diagnose_field.py as a module: its judging and its table, so both tables read alike."""
    spec = importlib.util.spec_from_file_location("diagnose_field", ROOT / "scripts" / "diagnose_field.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def planted_name(stem: str) -> str | None:
    """The field plugin a report file is of: ``NAME.json``, or ``NAME_TAG.json`` (a re-run, tagged); None for a
    control (CorrTrack, any other tracker)."""
    if stem in PLANTED:
        return stem
    return max((n for n in PLANTED if stem.startswith(f"{n}_")), key=len, default=None)


def rediagnose(path: Path, field: Any) -> dict[str, Any]:
    """One recorded report -> its table row by today's rules."""
    name = path.stem
    plugin = planted_name(name)
    expected = PLANTED[plugin].rule if plugin else None
    report = load_report(path)
    analysis = analyse_many([report])
    warm = report.totals.warm_ms_median
    found = field.ranked([field.normalise(f, "capture", warm) for f in analysis.capture_findings]
                         + [field.normalise(f, "report", warm) for f in analysis.findings])
    above = [f for f in found if f["severity"] != "info"]
    top = found[0] if found else None
    row: dict[str, Any] = {"plugin": name, "expected": expected, "precision": report.precision,
                           "warm_ms_median": warm, "findings": above, "top": top,
                           "names_trackscope": [f["rule"] for f in above if field.names_trackscope(f)],
                           "expected_found": expected is None or any(f["rule"] == expected for f in above)}
    if expected is None:
        row["top_is_expected"] = not above
    else:
        row["top_is_expected"] = bool(top and top["rule"] == expected and top["severity"] != "info")
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", type=Path, help="a folder of field reports (NAME.json) from diagnose_field.py")
    parser.add_argument("--findings", action="store_true", help="list every finding above info per plugin")
    args = parser.parse_args(argv)
    paths = sorted(p for p in args.dir.glob("*.json") if p.name not in SKIPPED) if args.dir.is_dir() else []
    if not paths:
        print(f"rediagnose_field: no reports (NAME.json) in {args.dir}", file=sys.stderr)
        return 2
    field = _field_script()
    order = {n: i for i, n in enumerate(PLANTED)}
    rows = []
    for path in sorted(paths, key=lambda p: (order.get(planted_name(p.stem) or "", len(order)), p.stem)):
        try:
            rows.append(rediagnose(path, field))
        except ReportError as exc:
            plugin = planted_name(path.stem)
            rows.append({"plugin": path.stem, "expected": PLANTED[plugin].rule if plugin else None,
                         "error": exc.message})
    print(field.format_table(rows))
    if args.findings:
        for r in rows:
            print(f"\n{r['plugin']}:")
            for f in r.get("findings") or []:
                share = f["share"]
                print(f"  {f['severity']:8s} {f['rule']:24s} {'-' if share is None else f'{100 * share:5.1f}%'}"
                      f"  {f['call_site'] or '-'}  {f['title'][:140]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
