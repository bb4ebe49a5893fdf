"""Recompute a deep report's kernel-time attribution from its trace file, with this tree's code.

    PYTHONPATH=. python scripts/recompute_attribution.py REPORT.json [--trace T.trace.json.gz] [--write OUT.json]

The attribution is computed at capture time (``engine.capture.summary.summarize`` over the full
trace); the trace file beside a report is slimmed (``engine.capture.export``: Python frames shorter
than 200 us are dropped unless they enclose a sync; since this tree also the user frames above each
launch are kept), so a recompute from a file written before that names fewer helper functions than
the capture did: the recorded share is printed beside the recomputed one. Line rows need the line
marks, recorded only by captures made with this tree (``engine.capture.lines``); an older trace has
none and its "with lines" share equals the share without them. ``--write`` saves a copy of the report
with the recomputed capture summary (the trace beside it is linked by name: copy it next to OUT).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TOP_SOURCES = 8  # the largest sources of kernel time named no finer than the tracker's forward


def _pct(value: float | None) -> str:
    return f"{value:.1%}" if value is not None else "-"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", type=Path)
    parser.add_argument("--trace", type=Path, default=None, help="the trace file (default: beside the report)")
    parser.add_argument("--write", type=Path, default=None, help="write the report with the recomputed summary")
    args = parser.parse_args(argv)

    from engine.capture.attribution import attribute
    from engine.capture.gather import _Context, gather, is_helper
    from engine.capture.lines import owner_of, roots_of
    from engine.capture.sites import CodeLayers
    from engine.capture.summary import UNNAMED, CaptureSummary, _owner_path, summarize
    from engine.capture.trace import read_trace
    from engine.core.atomic import atomic_open
    from engine.workflows.deep import format_shares, trace_path_for

    try:
        report = json.loads(args.report.read_text())
    except (OSError, ValueError) as exc:
        print(f"recompute_attribution: cannot read {args.report}: {exc}", file=sys.stderr)
        return 2
    capture = report.get("capture") or {}
    recorded = CaptureSummary.from_dict({k: v for k, v in capture.items() if k in CaptureSummary.__dataclass_fields__})
    trace_file = args.trace or trace_path_for(args.report)
    trace = read_trace(trace_file)
    roots = sorted(roots_of(trace.modules))
    result = SimpleNamespace(device=recorded.device, trace=trace, capability=recorded.capability,
                             torch_version=recorded.torch_version, profiled_wall_ms=recorded.profiled_wall_ms,
                             unprofiled_wall_ms=recorded.unprofiled_wall_ms, error=None, module_parents=frozenset(),
                             root_labels={"": roots[0]} if len(roots) == 1 else {}, user_dirs=(),
                             settings=dict(recorded.evidence.settings))
    summary = summarize(result, precision=recorded.precision)
    att = attribute(trace, frozenset(), CodeLayers())
    opaque = frozenset(UNNAMED) | {m for _, m in att.buckets if _owner_path(m) not in (None, m)}
    _, _, naming = gather(trace, att, precision=recorded.precision, opaque=opaque)

    print(f"{args.report.name}: {recorded.device} {recorded.precision}, kernels {recorded.kernel_ms:.1f} ms, "
          f"trace {trace_file.name} ({len(trace.lines)} line marks, {len(trace.python)} Python frames kept)")
    print(f"  recorded at capture time:   by a module {_pct(recorded.shares.kernel_named)}, by a leaf module or "
          f"a function below a forward {_pct(recorded.shares.kernel_named_or_function)}")
    if not trace.lines:
        print("  note: no line marks in this trace (recorded before them): the line rows and their share need a new "
              "capture; and a file written before the launch frames were kept lost the helper frames under 200 us, so "
              "its function rows can differ from the capture's either way")
    sh = summary.shares
    print(f"  recomputed from the trace:  by a module {_pct(sh.kernel_named)}, by a leaf module or a function "
          f"below a forward {_pct(sh.kernel_named_or_function)}; below the tracker's forward "
          f"{_pct(sh.kernel_below_forward)} (a module or a function), {_pct(sh.kernel_below_forward_or_line)} "
          "with the lines of its forward body")
    total = naming.total or 1.0
    print("  kernel ms by the finest name: " + ", ".join(
        f"{name} {us / 1e3:.2f} ({us / total:.1%})" for name, us in (
            ("module path", naming.module), ("submodule forward body", naming.submodule_body),
            ("helper function", naming.function), ("line of the tracker's forward", naming.line),
            ("nothing finer than the tracker's forward", naming.opaque))))
    # where the unnamed rest comes from: the top-level ATen op each kernel's launch ran under, and its user frame
    ctx = _Context.build(trace, att)
    sources: dict[tuple[str, str, str], float] = defaultdict(float)
    root_bodies = {f"(forward body of {r})" for r in roots}
    for k in trace.kernels:
        call = ctx.launcher(k.correlation)
        key = att.call_keys.get(call.correlation) if call is not None and call.correlation is not None else None
        if key is None:
            sources[("(no launching call)", "", "")] += k.dur
            continue
        if owner_of(key[1]) is not None and key[1] not in root_bodies:
            continue
        mid = call.start + call.dur / 2
        site = ctx.site(call.tid, mid)
        if is_helper(site) or ctx.trace.lines and any(r.start <= mid <= r.end for r in ctx.trace.lines):
            continue
        chain = ctx.op_chain(call.tid, mid)
        sources[(key[1], site.function or "(no Python stack)", chain[-1].name if chain else "(no op)")] += k.dur
    if sources:
        print("  the unnamed rest, by bucket, user frame and top-level op:")
        for (module, function, op), us in sorted(sources.items(), key=lambda kv: -kv[1])[:TOP_SOURCES]:
            print(f"    {us / 1e3:7.2f} ms {us / total:6.1%}  {module} | {function} | {op}")
    for line in format_shares(summary):
        print(line)
    if args.write is not None:
        out = dict(report)
        out["capture"] = {**capture, **summary.to_dict()}
        with atomic_open(args.write, "w", encoding="utf-8") as fh:
            json.dump(out, fh)
        print(f"  wrote {args.write}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
