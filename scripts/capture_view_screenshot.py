"""Open the capture panel on a committed H200 capture and save a PNG of it.

    QT_QPA_PLATFORM=offscreen python scripts/capture_view_screenshot.py --out /tmp/x.png
    # docs/capture_view.png: --select updater.blocks.2 --whole
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DATA = ROOT / "tests" / "data" / "capture" / "call1"
TRACES = {"deep_nested": "trace_deep_nested.json.gz", "corrtrack bf16 q1024": "trace_corrtrack_bf16_q1024.json.gz"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--run", default="deep_nested", choices=sorted(TRACES))
    parser.add_argument("--expand", action="store_true", help="expand every row of the tree (the function rows)")
    parser.add_argument("--size", default="1600x1000")
    parser.add_argument("--finding", type=int, default=None, help="select this finding before the shot")
    parser.add_argument("--select", default=None, help="select this module/stage/kernel name before the shot")
    parser.add_argument("--whole", action="store_true", help="show the whole run after selecting")
    parser.add_argument("--report", type=Path, default=None,
                        help="a deep run report (its capture, the trace beside it) instead of a committed run")
    parser.add_argument("--summary", type=Path, default=None,
                        help='a JSON {"summary": capture summary, "findings": [...]} with --trace (a capture made '
                             "outside a report, e.g. scripts/capture_lines_cpu.py)")
    parser.add_argument("--trace", type=Path, default=None, help="the trace of --summary")
    args = parser.parse_args(argv)

    from PySide6.QtCore import QEventLoop, QTimer
    from PySide6.QtWidgets import QApplication

    from gui.panels.capture_panel import CapturePanel

    app = QApplication.instance() or QApplication([])
    if args.summary is not None:
        run = json.loads(args.summary.read_text())
        trace = args.trace
        args.run = args.summary.stem
    elif args.report is not None:
        from engine.api import analyse, load_report, trace_path_for

        report = load_report(args.report)
        analysis = analyse(report)
        run = {"summary": report.capture.get("summary", report.capture), "findings": list(analysis.capture_findings)}
        trace = trace_path_for(args.report)
        args.run = report.label or args.report.stem
    else:
        runs = {r["label"]: r for r in json.loads((DATA / "summaries.json").read_text())["runs"]}
        run = runs[args.run]
        trace = DATA / TRACES[args.run]
    panel = CapturePanel()
    width, height = (int(v) for v in args.size.split("x"))
    panel.resize(width, height)
    panel.setWindowTitle(f"trackscope capture: {args.run}")
    panel.show()
    loop = QEventLoop()
    panel.trace_loaded.connect(lambda _data: loop.quit())
    panel.trace_failed.connect(lambda _msg: loop.quit())
    QTimer.singleShot(30_000, loop.quit)
    panel.set_capture(run["summary"], run["findings"], trace)
    loop.exec()
    if args.finding is not None:
        panel.select_finding(args.finding)
    if args.select:
        panel.select_module(args.select)
    if args.whole:
        panel.timeline.show_all()
    if args.expand:
        panel.tree.expandToDepth(1)
    for _ in range(5):
        app.processEvents()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    ok = panel.grab().save(str(args.out))
    panel.shutdown()
    print(f"{'wrote' if ok else 'could not write'} {args.out}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
