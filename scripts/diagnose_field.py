"""The field plugins' diagnosis: a deep bench of each planted plugin, and the table of what the rules named.

Usage (from the repo root; the lead runs it on the GPU through scripts/device_diagnosis.sh):

    python3 scripts/diagnose_field.py --out DIR [--device cuda|cpu] [--video V] [--grid 16] [NAME ...]

NAME: field modules of ``tests/plugins/field`` (default: all of ``PLANTED``), a built-in tracker
(``corrtrack``) or any ``module:factory`` plugin; the last two are run as controls (no rule expected) in
``--control-precision``; ``--controls`` adds CorrTrack. One process: for each plugin, what
``trackscope bench --deep --diagnose`` does in one configuration (``engine.workflows.bench.Bench`` with
``deep=True``: warm-up, timed runs, the counted pass, one captured warm run; then
``engine.analysis.analyse.analyse_many``), in the precision PLANTED gives, all queries in one batch. The
torch settings a plugin can change (threads, TF32, cuDNN flags, dynamo's recompile limit) are saved
before each plugin and restored after it, and its module's ``release()`` is called. Each plugin runs
under ``--time-limit-s`` (SIGALRM); ``--isolate`` runs each in its own subprocess instead (for a plugin
that hangs where a signal cannot reach it); ``--resume`` skips the plugins already in DIR's table.

Writes into DIR, after every plugin: ``NAME.json`` (the configuration's report, its capture summary in
``capture``), ``table.json`` (environment, and per plugin: expected rule, every finding above info,
the top finding, whether it is the expected rule, whether a finding above info names trackscope's own
code) and ``table.md``; prints the table last.
"""

from __future__ import annotations

import argparse
import gc
import json
import re
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from engine.core.paths import SAMPLE_VIDEO  # noqa: E402
from tests.plugins.field import PLANTED, Planted, load, tracker_name  # noqa: E402
from tests.plugins.field.torch_state import TorchState  # noqa: E402

TABLE_JSON = "table.json"
TABLE_MD = "table.md"
DEFAULT_GRID = 16  # 16 x 16 = 256 grid queries on frame 0
DEFAULT_WARMUP = 1
DEFAULT_REPEAT = 3
DEFAULT_TIME_LIMIT_S = 90
FRAMES_PER_BATCH = 16
CONTROLS = ("corrtrack",)  # built-in trackers accepted as names: negative controls
SEVERITY_RANK = {"critical": 0, "warning": 1, "info": 2}
#: a finding naming trackscope's own code: a path under engine/ in its call site, module or title
TRACKSCOPE_CODE = re.compile(r"(?:^|[\s(/\[])engine/")


class TimeLimit(BaseException):
    """The plugin ran past its time limit (a BaseException, so no ``except Exception`` swallows it)."""


@contextmanager
def time_limit(seconds: int) -> Iterator[dict[str, bool]]:
    """SIGALRM after ``seconds``; the yielded dict's "fired" says whether it went off (the plugin's guard may
    have turned the exception into a failed run)."""
    state = {"fired": False}

    def on_alarm(_signum: int, _frame: Any) -> None:
        state["fired"] = True
        raise TimeLimit(f"past the time limit of {seconds} s")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(max(1, int(seconds)))
    try:
        yield state
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def is_control(name: str) -> bool:
    """A built-in tracker or a ``module:factory`` spec: a control, not a field module."""
    return name in CONTROLS or ":" in name


def planned(name: str, control_precision: str) -> Planted:
    if is_control(name):
        return Planted(None, control_precision, True)
    if name not in PLANTED:
        raise SystemExit(f"diagnose_field: no field plugin {name!r}; known: {', '.join([*PLANTED, *CONTROLS])}")
    return PLANTED[name]


def spec_for(name: str) -> str:
    return name if is_control(name) else tracker_name(name)


def load_data(video: Path, grid: int) -> Any:
    from engine.workflows.bench import load_input

    return load_input(argparse.Namespace(video=video, queries=None, grid=grid, points=None))


def normalise(finding: Any, source: str, warm_ms: float | None) -> dict[str, Any]:
    """A capture finding (dict) or a report finding (Finding) as one row: rule, severity, share, ms, where."""
    if source == "capture":
        ev = finding.get("evidence", {})
        share, ms = ev.get("share"), ev.get("ms_at_stake")
        return {"rule": finding["rule"], "severity": finding["severity"], "share": share, "ms_at_stake": ms,
                "call_site": finding.get("call_site"), "module": finding.get("module"),
                "stage": finding.get("stage"), "title": finding.get("title", ""), "source": source}
    ms = finding.stake_ms
    share = ms / warm_ms if ms is not None and warm_ms else None
    return {"rule": finding.rule, "severity": finding.severity, "share": share, "ms_at_stake": ms,
            "call_site": None, "module": None, "stage": finding.stage, "title": finding.title, "source": source}


def ranked(findings: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Most severe first, then the most time at stake."""
    return sorted(findings, key=lambda f: (SEVERITY_RANK.get(f["severity"], 3), -(f["ms_at_stake"] or 0.0),
                                           -(f["share"] or 0.0)))


def names_trackscope(f: dict[str, Any]) -> bool:
    """Whether a finding points at trackscope's own code (engine/...) or its adapter's stages."""
    from engine.capture.summary import ADAPTER_STAGES

    texts = [str(f.get(k) or "") for k in ("call_site", "module", "title")]
    return any(TRACKSCOPE_CODE.search(t) for t in texts) or f.get("module") in ADAPTER_STAGES


def diagnose_one(name: str, args: argparse.Namespace, data: Any) -> dict[str, Any]:
    """One plugin's deep bench and diagnosis -> its table row (the report is written into args.out)."""
    from engine.analysis.analyse import analyse_many
    from engine.report.files import save
    from engine.workflows.bench import Bench

    plan = planned(name, args.control_precision)
    row: dict[str, Any] = {"plugin": name, "expected": plan.rule, "precision": plan.precision}
    before = TorchState.save()
    bench = None
    t0 = time.perf_counter()
    try:
        with time_limit(args.time_limit_s) as alarm:
            try:
                bench = Bench(data, spec_for(name), args.device, cost=not args.no_cost, deep=True,
                              trace_dir=args.out / "traces" if args.traces else None)
                bench.sweep([plan.precision], [len(data.queries)], [FRAMES_PER_BATCH], args.warmup, args.repeat)
            finally:
                if alarm["fired"]:
                    row["error"] = f"past the time limit of {args.time_limit_s} s"
    except TimeLimit as exc:
        row["error"] = str(exc)
    except Exception as exc:
        row["error"] = f"{type(exc).__name__}: {exc}"
        row["details"] = traceback.format_exc()[-2000:]
    finally:
        release = getattr(_module(name), "release", None)
        if release is not None:
            release()
        changed = TorchState.save().changes(before)
        if changed:
            row["torch_state_changed"] = {k: [str(v[0]), str(v[1])] for k, v in changed.items()}
        before.restore()
        if bench is not None:
            bench.close()
    row["seconds"] = round(time.perf_counter() - t0, 1)
    if bench is None or not bench.reports:
        note = bench.rows[0].note if bench is not None and bench.rows else ""
        row.setdefault("error", note or "no report")
        return row
    report = bench.reports[0]
    save(report, args.out / f"{file_stem(name)}.json")
    bench_row = bench.rows[0]
    row.update({"report": f"{file_stem(name)}.json", "warm_ms_median": bench_row.ms_median,
                "cold_ms": bench_row.cold_ms, "note": bench_row.note})
    capture = report.capture or {}
    if capture.get("error"):
        row["capture_error"] = capture["error"]
    analysis = analyse_many([report])
    warm = report.totals.warm_ms_median
    found = ranked([normalise(f, "capture", warm) for f in analysis.capture_findings]
                   + [normalise(f, "report", warm) for f in analysis.findings])
    above = [f for f in found if f["severity"] != "info"]
    row["findings"] = above
    row["info_rules"] = sorted({f["rule"] for f in found if f["severity"] == "info"})
    top = found[0] if found else None
    row["top"] = top
    if plan.rule is None:
        row["top_is_expected"] = not above
    else:
        row["top_is_expected"] = bool(top and top["rule"] == plan.rule and top["severity"] != "info")
    row["expected_found"] = plan.rule is None or any(f["rule"] == plan.rule for f in above)
    row["names_trackscope"] = [f["rule"] for f in above if names_trackscope(f)]
    return row


def file_stem(name: str) -> str:
    """A report's file name for a plugin name (a ``module:factory`` spec made safe)."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)


def _module(name: str) -> Any:
    return None if is_control(name) else load(name)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def format_table(rows: list[dict[str, Any]]) -> str:
    """The table as markdown: plugin, expected rule, top finding, whether it is the expected one, ..."""
    head = ("| plugin | expected | top finding | severity | share | ms at stake | call site | top = expected "
            "| trackscope named | warm ms | note |")
    lines = [head, "|" + "---|" * 11]
    for r in rows:
        top = r.get("top") or {}
        share = top.get("share")
        note = r.get("error") or r.get("capture_error") or ""
        if not note and not r.get("expected_found", True):
            note = "expected rule not above info"
        lines.append(
            f"| {r['plugin']} | {r.get('expected') or '(none)'} | {top.get('rule', '-')} | {top.get('severity', '-')} "
            f"| {'-' if share is None else f'{100 * share:.1f}%'} | {_ms(top.get('ms_at_stake'))} "
            f"| {top.get('call_site') or '-'} | {'yes' if r.get('top_is_expected') else 'NO'} "
            f"| {', '.join(r.get('names_trackscope') or []) or 'no'} | {_ms(r.get('warm_ms_median'))} "
            f"| {note[:80]} |")
    matched = sum(1 for r in rows if r.get("top_is_expected"))
    lines.append("")
    lines.append(f"{matched} of {len(rows)} named by their expected rule as the top finding "
                 f"(controls: no finding above info); "
                 f"{sum(1 for r in rows if r.get('names_trackscope'))} with a finding above info about trackscope")
    return "\n".join(lines)


def environment(device: str) -> dict[str, Any]:
    env: dict[str, Any] = {"device": device, "torch": torch.__version__, "cuda": torch.version.cuda,
                           "threads": torch.get_num_threads()}
    if device.startswith("cuda") and torch.cuda.is_available():
        env["gpu"] = torch.cuda.get_device_name(0)
        env["capability"] = list(torch.cuda.get_device_capability(0))
    return env


def read_table(out: Path) -> dict[str, Any]:
    path = out / TABLE_JSON
    if not path.exists():
        return {"rows": []}
    return json.loads(path.read_text())


def write_table(out: Path, table: dict[str, Any]) -> None:
    from engine.core.atomic import atomic_open

    with atomic_open(out / TABLE_JSON, "w") as fh:
        json.dump(table, fh, indent=1, default=str)
    with atomic_open(out / TABLE_MD, "w") as fh:
        fh.write(format_table(table["rows"]) + "\n")


def add_row(table: dict[str, Any], row: dict[str, Any]) -> None:
    table["rows"] = [r for r in table["rows"] if r["plugin"] != row["plugin"]] + [row]


def run_isolated(name: str, args: argparse.Namespace, table: dict[str, Any]) -> None:
    """``name`` in a subprocess of this script (it adds its row to the table); a hang is killed and noted."""
    cmd = [sys.executable, str(Path(__file__).resolve()), name, "--resume", "--out", str(args.out),
           "--device", args.device, "--video", str(args.video), "--grid", str(args.grid),
           "--warmup", str(args.warmup), "--repeat", str(args.repeat), "--time-limit-s", str(args.time_limit_s),
           "--control-precision", args.control_precision] + (["--no-cost"] if args.no_cost else []) \
        + (["--traces"] if args.traces else [])
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=ROOT, timeout=args.time_limit_s + 60)
        failed = f"exited with {proc.returncode}" if proc.returncode else None
    except subprocess.TimeoutExpired:
        failed = f"killed after {args.time_limit_s + 60} s (hung)"
    table.update(read_table(args.out))
    if failed and not any(r["plugin"] == name for r in table["rows"]):
        add_row(table, {"plugin": name, "expected": planned(name, args.control_precision).rule,
                        "error": failed, "seconds": round(time.perf_counter() - t0, 1)})
        write_table(args.out, table)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="field modules (default: all), corrtrack, or module:factory")
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--video", type=Path, default=SAMPLE_VIDEO)
    parser.add_argument("--grid", type=int, default=DEFAULT_GRID, help="K: a K x K grid of queries on frame 0")
    parser.add_argument("--warmup", type=int, default=DEFAULT_WARMUP)
    parser.add_argument("--repeat", type=int, default=DEFAULT_REPEAT)
    parser.add_argument("--time-limit-s", type=int, default=DEFAULT_TIME_LIMIT_S, help="per plugin")
    parser.add_argument("--controls", action="store_true", help=f"also run {', '.join(CONTROLS)} (negative controls)")
    parser.add_argument("--control-precision", default="bf16", help="precision of the built-in controls")
    parser.add_argument("--no-cost", action="store_true", help="skip the counted pass (FLOPs/bytes)")
    parser.add_argument("--traces", action="store_true", help="write each capture's trace under OUT/traces")
    parser.add_argument("--isolate", action="store_true", help="each plugin in its own subprocess")
    parser.add_argument("--resume", action="store_true", help="keep OUT's table; skip the plugins already in it")
    args = parser.parse_args(argv)
    names = args.names or list(PLANTED)
    if args.controls:
        names += [c for c in CONTROLS if c not in names]
    for name in names:
        planned(name, args.control_precision)  # an unknown name stops before any work
    args.out.mkdir(parents=True, exist_ok=True)
    table = read_table(args.out) if args.resume else {"rows": []}
    table["environment"] = environment(args.device)
    done = {r["plugin"] for r in table["rows"]} if args.resume else set()
    todo = [n for n in names if n not in done]
    print(json.dumps(table["environment"]), flush=True)
    data = None if args.isolate else load_data(args.video, args.grid)
    for name in todo:
        print(f"diagnose_field: {name} ...", file=sys.stderr, flush=True)
        if args.isolate:
            run_isolated(name, args, table)
        else:
            add_row(table, diagnose_one(name, args, data))
            write_table(args.out, table)
            gc.collect()
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        row = next(r for r in table["rows"] if r["plugin"] == name)
        top = row.get("top") or {}
        print(f"diagnose_field: {name}: top {top.get('rule', '-')} ({top.get('severity', '-')}), expected "
              f"{row.get('expected') or '(none)'}, {row.get('seconds', '-')} s"
              + (f"; {row['error']}" if row.get("error") else ""), file=sys.stderr, flush=True)
    write_table(args.out, table)
    order = {n: i for i, n in enumerate(names)}
    table["rows"].sort(key=lambda r: order.get(r["plugin"], len(order)))
    print(format_table(table["rows"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
