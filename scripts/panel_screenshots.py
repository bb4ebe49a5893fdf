"""Screenshots of the A/B view, the trade-off panel and the diagnosis panel, built from real runs.

Runs the trackers on the bundled sample (resources/sample.mp4 with its queries and ground truth; a
synthetic video when the sample is missing) and saves docs/ab_view.png, docs/tradeoff_panel.png and
docs/diagnosis_panel.png. A/B: LK against CorrTrack (fp32, CPU) when CorrTrack's weights are present,
else against LK with a smaller window. Trade-off and diagnosis: a short bench on this machine, or the
reports of ``--bench FILE`` (a recorded bench, e.g. from a GPU machine).

    xvfb-run -s "-screen 0 1600x1000x24" python scripts/panel_screenshots.py [--bench bench.json]

``--record-bench OUT.json --device cuda`` (no Qt needed) records such a bench: CorrTrack at every
precision and several points per batch on random queries of the sample, accuracy as px divergence
from fp32. Without trained weights it uses a randomly initialised network, and says so in the labels:
the timings are real, the tracks only show what precision changes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine.bench import Bench, BenchInput  # noqa: E402
from engine.config import RunConfig  # noqa: E402
from engine.report import load_reports  # noqa: E402
from engine.session import Finished, Session  # noqa: E402
from engine.trackers.lk import LKTracker  # noqa: E402

SAMPLE = ROOT / "resources" / "sample.mp4"
DOCS = ROOT / "docs"
SIZES = {"ab_view": (1500, 820), "tradeoff_panel": (1300, 820), "diagnosis_panel": (1100, 1000)}
SMALL_LK_WINDOW = 9  # the A/B fallback: LK with a small search window loses fast points
SMALL_LK_LEVELS = 1
BENCH_WARMUP = 1
BENCH_REPEAT = 3
CORRTRACK_PRECISIONS = ("fp32", "bf16")  # what the CPU runs natively
POINTS_PER_BATCH = (16, 40, 80)
SYNTHETIC_SEED = 7
RECORD_PRECISIONS = ("fp32", "tf32", "fp16", "bf16")
RECORD_POINTS = 1024
RECORD_POINTS_PER_BATCH = (256, 1024)
RECORD_REPEAT = 10
RANDOM_SEED = 0


def load_input() -> BenchInput:
    """The bundled sample with queries and ground truth; a synthetic video when it is missing."""
    if SAMPLE.exists():
        from engine.trackio import load_ground_truth, read_queries_csv
        from engine.video import load_video

        frames, info = load_video(SAMPLE)
        queries = read_queries_csv(SAMPLE.with_suffix(".queries.csv"))
        gt = load_ground_truth(SAMPLE.with_suffix(".gt.npz"))
        info_dict = {**info.to_dict(), "path": str(SAMPLE)}
        return BenchInput(frames, queries, info_dict, gt, str(SAMPLE.with_suffix(".queries.csv")))
    from engine.synthetic import SynthConfig, generate_video

    video = generate_video(SYNTHETIC_SEED, SynthConfig(num_frames=24, height=192, width=192, num_points=48))
    frames = video["video"]
    gt = {"tracks": video["tracks"], "visible": video["visible"], "query_t": video["query_t"]}
    info = {"name": "synthetic", "num_frames": len(frames), "width": frames.shape[2], "height": frames.shape[1],
            "fps": 24.0}
    return BenchInput(frames, video["queries"], info, gt, "synthetic ground truth")


def run(data: BenchInput, config: RunConfig, tracker: Any = None) -> Finished | None:
    result = Session(data.frames, data.queries, config, tracker=tracker, video_info=dict(data.info)).run()
    if not isinstance(result, Finished):
        print(f"  {config.label()}: {result.message}", file=sys.stderr)
        return None
    return result


def ab_runs(data: BenchInput) -> tuple[Any, Any]:
    from gui.model import RunData

    lk = run(data, RunConfig(tracker="lk", device="cpu"))
    assert lk is not None, "LK must run on the sample"
    a = RunData("LK (window 21, 3 levels)", {"tracker": "lk"}, data.queries, lk.tracks, lk.visible)
    corr = run(data, RunConfig(tracker="corrtrack", device="cpu"))
    if corr is not None:
        return a, RunData("CorrTrack fp32 (CPU)", {"tracker": "corrtrack"}, data.queries, corr.tracks, corr.visible)
    small = run(data, RunConfig(tracker="lk", device="cpu"),
                tracker=LKTracker(window=SMALL_LK_WINDOW, levels=SMALL_LK_LEVELS))
    assert small is not None
    label = f"LK (window {SMALL_LK_WINDOW}, {SMALL_LK_LEVELS} level)"
    return a, RunData(label, {"tracker": "lk"}, data.queries, small.tracks, small.visible)


def bench_reports(data: BenchInput) -> list[dict[str, Any]]:
    """A short bench here: CorrTrack at the CPU's precisions when it loads, else LK at several batch sizes."""
    corr_ok = run(data, RunConfig(tracker="corrtrack", device="cpu")) is not None
    tracker, precisions = ("corrtrack", CORRTRACK_PRECISIONS) if corr_ok else ("lk", ("fp32",))
    bench = Bench(data, tracker, "cpu", log=lambda text: print(text, file=sys.stderr))
    try:
        bench.sweep(list(precisions), list(POINTS_PER_BATCH), [16], BENCH_WARMUP, BENCH_REPEAT)
    finally:
        bench.close()
    return bench.reports


def record_bench(out: Path, device: str) -> Path:
    """Bench CorrTrack on ``device`` (random weights when none are shipped) and save the bench file."""
    import torch

    from engine.report import BENCH_FORMAT, REPORT_VERSION, save_report
    from engine.trackers.corrtrack.model import CorrTrackConfig, CorrTrackNet
    from engine.trackers.corrtrack.tracker import CorrTrackTracker
    from engine.trackers.corrtrack.weights import DEFAULT_WEIGHTS

    data = load_input()
    height, width = data.frames.shape[1:3]
    rng = np.random.default_rng(RANDOM_SEED)
    xy = rng.uniform([0, 0], [width - 1, height - 1], size=(RECORD_POINTS, 2))
    queries = np.concatenate([np.zeros((RECORD_POINTS, 1)), xy], axis=1).astype(np.float32)
    data = BenchInput(data.frames, queries, data.info, None, f"{RECORD_POINTS} random points")
    bench = Bench(data, "lk", device, log=lambda text: print(text, file=sys.stderr))
    if DEFAULT_WEIGHTS.exists():
        tracker, suffix = CorrTrackTracker(), ""
    else:
        torch.manual_seed(RANDOM_SEED)
        tracker, suffix = CorrTrackTracker(model=CorrTrackNet(CorrTrackConfig())), " (random weights)"
    bench.tracker, bench.tracker_name = tracker, "corrtrack"
    try:
        bench.sweep(list(RECORD_PRECISIONS), list(RECORD_POINTS_PER_BATCH), [16], BENCH_WARMUP, RECORD_REPEAT)
    finally:
        bench.close()
    for report in bench.reports:
        report["label"] += suffix
    env = bench.reports[0]["environment"] if bench.reports else {}
    return save_report(out, {"format": BENCH_FORMAT, "version": REPORT_VERSION, "environment": env,
                             "reports": bench.reports, "table": [r.to_dict() for r in bench.rows]})


def save(widget: Any, name: str, app: Any) -> Path:
    widget.resize(*SIZES[name])
    widget.show()
    for _ in range(5):
        app.processEvents()
    DOCS.mkdir(exist_ok=True)
    path = DOCS / f"{name}.png"
    widget.grab().save(str(path))
    print(f"wrote {path}")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bench", type=Path, action="append", help="bench or report file(s) to show instead "
                        "of a bench on this machine (repeatable)")
    parser.add_argument("--record-bench", type=Path, metavar="OUT", help="record a CorrTrack bench file and exit")
    parser.add_argument("--device", default="cuda", help="device of --record-bench (default cuda)")
    args = parser.parse_args(argv)
    if args.record_bench:
        print(f"wrote {record_bench(args.record_bench, args.device)}")
        return 0

    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication(sys.argv[:1])
    from gui.ab_view import ABView
    from gui.diagnosis_panel import DiagnosisPanel
    from gui.tradeoff_panel import TradeoffPanel

    data = load_input()
    a, b = ab_runs(data)
    ab = ABView()
    ab.set_frames(data.frames)
    ab.set_runs(a, b, ground_truth=data.ground_truth)
    worst = int(ab.divergence.most_divergent(1)[0]) if ab.divergence is not None else 0
    ab.select_point(worst)
    save(ab, "ab_view", app)

    reports = [r for path in args.bench for r in load_reports(path)] if args.bench else bench_reports(data)
    tradeoff = TradeoffPanel()
    for report in reports:
        tradeoff.add_report(report)
    save(tradeoff, "tradeoff_panel", app)

    diagnosis = DiagnosisPanel()
    diagnosis.set_report(max(reports, key=lambda r: (len(r.get("findings") or []),
                                                     (r.get("config") or {}).get("points_per_batch", 0))))
    save(diagnosis, "diagnosis_panel", app)
    for widget in (ab, tradeoff, diagnosis):
        widget.close()
    return 0


if __name__ == "__main__":
    np.set_printoptions(precision=3)
    raise SystemExit(main())
