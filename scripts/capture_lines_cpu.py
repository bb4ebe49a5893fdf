"""Do the capture's line marks name CoTracker3's forward body? A CPU capture of the peer (random weights, tiny input).

    TRACKSCOPE_PEERS=.../peers PYTHONPATH=. python scripts/capture_lines_cpu.py --out /tmp/cot_cpu
    # then: scripts/capture_view_screenshot.py --summary /tmp/cot_cpu/summary.json --trace /tmp/cot_cpu/trace.json.gz

A CPU run launches no kernels, so the check is on the host side: the top-level ATen ops run in the tracker's
own forward bodies (the plugin's and CoTracker3's, ``engine.capture.lines.roots_of``) are split by what names
them: a helper function below the forward (a function row), a line mark (a line row), or neither (what a GPU
capture would leave named no finer than the tracker's forward). The same Python path launches the kernels on
a GPU, so "neither" near 0 here means the line rows cover the forward body there too.
"""

from __future__ import annotations

import argparse
import bisect
import json
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

FRAMES, SIDE, POINTS = 8, 96, 32  # small enough for a 2-core CPU: a run takes about half a second


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for summary.json and trace.json.gz")
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="bf16")
    args = parser.parse_args(argv)

    import torch

    from engine.capture.attribution import attribute
    from engine.capture.export import write_trace
    from engine.capture.gather import is_helper
    from engine.capture.lines import roots_of
    from engine.capture.profile import capture_run
    from engine.capture.sites import CodeLayers
    from engine.capture.summary import summarize
    from engine.core.atomic import atomic_open
    from scripts.peers.cotracker_plugin import make

    model = make()
    frames = (torch.rand(FRAMES, SIDE, SIDE, 3, generator=torch.Generator().manual_seed(0)) * 255).to(torch.uint8)
    xy = torch.rand(POINTS, 2, generator=torch.Generator().manual_seed(1)) * (SIDE - 1)
    queries = torch.cat([torch.zeros(POINTS, 1), xy], 1)

    def run() -> None:
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.precision == "bf16"):
            model(frames, queries)

    result = capture_run(run, device="cpu", roots={"": model})
    if result.error:
        print(f"capture_lines_cpu: {result.error}", file=sys.stderr)
        return 1
    trace = result.trace
    summary = summarize(result, precision=args.precision)
    att = attribute(trace, result.module_parents, CodeLayers(result.user_dirs))
    main_tid = trace.main_tid
    tops, end = [], float("-inf")
    for op in (o for o in trace.cpu_ops if o.tid == main_tid):
        if op.start >= end:
            tops.append(op)
            end = op.end
    marks = trace.lines
    mark_starts = [m.start for m in marks]

    def marked(op: object) -> bool:
        i = bisect.bisect_right(mark_starts, op.start) - 1  # type: ignore[attr-defined]
        return i >= 0 and marks[i].end >= op.end  # type: ignore[attr-defined]

    bodies = {f"(forward body of {r})" for r in roots_of(trace.modules)}
    split: dict[str, float] = defaultdict(float)
    neither: dict[tuple[str, str], float] = defaultdict(float)
    for op, (_, module) in zip(tops, att.locate(main_tid, [o.start + o.dur / 2 for o in tops])):
        if module not in bodies:
            continue
        site = att.stacks.site(main_tid, op.start + op.dur / 2)
        if is_helper(site):
            split["a helper function"] += op.dur
        elif marked(op):
            split["a line mark"] += op.dur
        else:
            split["neither"] += op.dur
            neither[(op.name, site.function or "(no Python stack)")] += op.dur
    total = sum(split.values()) or 1.0
    print(f"CoTracker3 on the CPU ({args.precision}, {FRAMES}x{SIDE}x{SIDE}, {POINTS} points): {len(marks)} line "
          f"marks; the tracker's forward bodies ({', '.join(sorted(bodies))})"
          f" ran {total / 1e3:.1f} ms of top-level ops:")
    for name in ("a helper function", "a line mark", "neither"):
        print(f"  named by {name}: {split[name] / 1e3:.1f} ms ({split[name] / total:.1%})")
    for (op, function), us in sorted(neither.items(), key=lambda kv: -kv[1])[:5]:
        print(f"    neither: {us / 1e3:.2f} ms {op} in {function}")
    print("line rows (host ms on the CPU):")
    for row in summary.evidence.lines[:10]:
        print(f"  {row.line:64s} {row.wall_ms:7.2f} ms  {', '.join(row.ops)}  [{row.module}]")
    args.out.mkdir(parents=True, exist_ok=True)
    with atomic_open(args.out / "summary.json", "w", encoding="utf-8") as fh:
        json.dump({"summary": summary.to_dict(), "findings": []}, fh)
    write_trace(result.chrome, args.out / "trace.json.gz")
    print(f"wrote {args.out / 'summary.json'} and {args.out / 'trace.json.gz'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
