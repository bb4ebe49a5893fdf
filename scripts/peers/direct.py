"""The peers timed four ways in one process, and the cause of a thread per call, as one table.

Usage (repo root): python3 scripts/peers/direct.py [--device cuda] [--json OUT.json]
CPU check: python3 scripts/peers/direct.py --device cpu --max-frames 8 --size 64 --points 8 --repeat 2

For each peer (TAPIR, CoTracker3: random weights, scripts/peers/*_plugin.py) and precision (tf32, bf16), on
the same frames and queries (the sample video, 256 random points on frame 0), warm medians of:

- ``calling thread``: the module called directly in this thread (inference_mode + precision_context entered
  here, inputs on the device, synchronised before each clock read);
- ``fresh thread/call``: the same call in a new thread per call, the contexts entered inside it (what the
  plugin guard did before it kept one worker per plugin);
- ``guard worker``: through ``engine.trackers.guard.call_plugin`` (today's guard: one long-lived worker);
- ``bench session``: ``engine.workflows.bench`` (full Sessions: guard, stage timing, hooks, upload and
  download, telemetry), with its own direct reference and the session/direct ratio.

Then the cause: a conv-only and a matmul-only toy net, each in a fresh thread per call against one thread.
PyTorch's cuDNN v8 execution-plan cache is thread_local (aten/src/ATen/native/cudnn/Conv_v8.cpp), so the
conv net should pay for every fresh thread while the matmul net (cuBLAS handles from a pool) barely does.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from engine.core.precision import gate, precision_context  # noqa: E402
from engine.trackers.guard import call_plugin  # noqa: E402
from engine.workflows.bench import Bench, BenchInput  # noqa: E402

PEERS = {"tapir": "scripts.peers.tapir_plugin:make", "cotracker": "scripts.peers.cotracker_plugin:make"}
QUERIES_SEED = 0
TOY_SEED = 0
#: toy nets: input batch, side, layers
TOY_BATCH = 8
TOY_SIDE = 64
TOY_LAYERS = 12
TOY_WIDTH = 512  # matmul net's features


def load_frames(video: Path, max_frames: int | None, size: int | None) -> np.ndarray:
    """uint8 [T, H, W, 3] of the video (first ``max_frames``; resized to size x size when given)."""
    import cv2

    from engine.io.video import open_video

    with open_video(video) as reader:
        frames = reader.read()
    if max_frames:
        frames = frames[:max_frames]
    if size:
        frames = np.stack([cv2.resize(f, (size, size), interpolation=cv2.INTER_AREA) for f in frames])
    return np.ascontiguousarray(frames)


def random_queries(num: int, width: int, height: int) -> np.ndarray:
    """float32 [N, 3] (t=0, x, y) pixels, seeded."""
    rng = np.random.default_rng(QUERIES_SEED)
    xy = rng.uniform([0, 0], [width - 1, height - 1], size=(num, 2))
    return np.concatenate([np.zeros((num, 1)), xy], axis=1).astype(np.float32)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _contexts_and_call(fn: Callable[[], Any], precision: str, device: torch.device) -> Callable[[], None]:
    """``fn`` run under inference_mode and the precision's context (entered by whichever thread runs it), then
    synchronised."""
    def call() -> None:
        with torch.inference_mode(), precision_context(precision, device):
            fn()
        _sync(device)

    return call


def _in_fresh_thread(call: Callable[[], None]) -> Callable[[], None]:
    def run() -> None:
        errors: list[BaseException] = []

        def target() -> None:
            try:
                call()
            except BaseException as exc:  # noqa: BLE001 - brought back to the timing thread
                errors.append(exc)

        thread = threading.Thread(target=target, name="direct fresh thread")
        thread.start()
        thread.join()
        if errors:
            raise errors[0]

    return run


def _through_guard(name: str, call: Callable[[], None]) -> Callable[[], None]:
    return lambda: call_plugin(name, "timed by direct.py", call)


def warm_median(run: Callable[[], None], device: torch.device, warmup: int, repeat: int) -> tuple[float, list[float]]:
    """(median ms, samples) of ``repeat`` timed calls after ``warmup`` untimed ones."""
    samples = []
    for i in range(warmup + repeat):
        _sync(device)
        t0 = time.perf_counter()
        run()
        _sync(device)
        if i >= warmup:
            samples.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(samples), samples


def _three_ways(name: str, precision: str, fn: Callable[[], Any], device: torch.device,
                args: argparse.Namespace) -> dict[str, Any]:
    """``fn`` timed in this thread, in a fresh thread per call and through the guard's worker."""
    call = _contexts_and_call(fn, precision, device)
    row: dict[str, Any] = {"what": name, "precision": precision}
    for way, run in (("calling thread", call), ("fresh thread/call", _in_fresh_thread(call)),
                     ("guard worker", _through_guard(f"direct.py {name}", call))):
        row[way], row[way + " samples"] = warm_median(run, device, args.warmup, args.repeat)
    return row


def _peer_three_ways(name: str, frames: np.ndarray, queries: np.ndarray, precision: str, device: torch.device,
                     args: argparse.Namespace) -> dict[str, Any]:
    """The peer's module called directly three ways (the bench loads its own copy afterwards)."""
    from engine.trackers import load_tracker

    module = load_tracker(PEERS[name]).plugin.to(device).eval()  # type: ignore[attr-defined]
    video = torch.from_numpy(frames).to(device)  # uint8 [T, H, W, 3]
    q = torch.from_numpy(queries).to(device)  # float32 [N, 3] (t, x, y)
    return _three_ways(name, precision, lambda: module(video, q), device, args)


def time_peer(name: str, frames: np.ndarray, queries: np.ndarray, precision: str, device: torch.device,
              args: argparse.Namespace) -> dict[str, Any]:
    """One peer at one precision, four ways; a row of the table."""
    row = _peer_three_ways(name, frames, queries, precision, device, args)  # its module is freed on return
    height, width = frames.shape[1:3]
    data = BenchInput(frames, queries, {"name": "direct.py", "num_frames": len(frames), "width": width,
                                        "height": height}, None, f"{len(queries)} random points")
    bench = Bench(data, PEERS[name], str(device), telemetry=not args.no_telemetry, cost=False,
                  log=lambda text: print(text, file=sys.stderr))
    try:
        (bench_row,) = bench.sweep([precision], [len(queries)], [len(frames)], args.warmup, args.repeat)
    finally:
        bench.close()
    row["bench session"] = bench_row.ms_median
    row["bench direct"] = bench_row.direct_ms_median
    row["session/direct"] = bench_row.vs_direct
    row["bench note"] = bench_row.note or bench_row.extra.get("direct_error", "")
    return row


def _conv_net() -> nn.Module:
    """Convolutions of several shapes (each its own cuDNN plan)."""
    layers: list[nn.Module] = [nn.Conv2d(3, 32, 3, padding=1)]
    channels = 32
    for i in range(TOY_LAYERS - 1):
        out = 32 + 16 * (i % 4)
        layers += [nn.Conv2d(channels, out, 3 + 2 * (i % 2), padding=1 + i % 2), nn.ReLU()]
        channels = out
    return nn.Sequential(*layers)


def _matmul_net() -> nn.Module:
    layers: list[nn.Module] = []
    for _ in range(TOY_LAYERS):
        layers += [nn.Linear(TOY_WIDTH, TOY_WIDTH), nn.ReLU()]
    return nn.Sequential(*layers)


def time_toys(precision: str, device: torch.device, args: argparse.Namespace) -> list[dict[str, Any]]:
    """The conv-only and matmul-only nets, one thread against a fresh thread per call."""
    torch.manual_seed(TOY_SEED)
    rows = []
    for name, net, shape in (("toy conv net", _conv_net(), (TOY_BATCH, 3, TOY_SIDE, TOY_SIDE)),
                             ("toy matmul net", _matmul_net(), (TOY_BATCH * TOY_SIDE, TOY_WIDTH))):
        net = net.to(device).eval()
        x = torch.randn(shape, device=device)
        rows.append(_three_ways(name, precision, lambda net=net, x=x: net(x), device, args))
    return rows


COLUMNS = ("what", "precision", "calling thread", "fresh thread/call", "guard worker", "bench session",
           "bench direct", "session/direct")


def format_rows(rows: list[dict[str, Any]]) -> str:
    """Milliseconds (warm medians) and ratios as an aligned table; fresh/calling beside each."""
    head = [*COLUMNS, "fresh/calling", "worker/calling"]
    cells = [head]
    for r in rows:
        line = []
        for c in COLUMNS:
            v = r.get(c)
            line.append("-" if v is None else f"{v:.2f}x" if c == "session/direct" else
                        f"{v:.1f}" if isinstance(v, float) else str(v))
        base = r.get("calling thread")
        for c in ("fresh thread/call", "guard worker"):
            line.append(f"{r[c] / base:.2f}x" if base and r.get(c) else "-")
        cells.append(line)
    widths = [max(len(row[i]) for row in cells) for i in range(len(head))]
    return "\n".join(" | ".join(c.ljust(w) for c, w in zip(row, widths)) for row in cells)


def main(argv: list[str] | None = None) -> int:
    from engine.core.paths import SAMPLE_VIDEO

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--video", type=Path, default=SAMPLE_VIDEO)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--peers", default=",".join(PEERS))
    p.add_argument("--precisions", default="tf32,bf16")
    p.add_argument("--points", type=int, default=256)
    p.add_argument("--max-frames", type=int, default=None)
    p.add_argument("--size", type=int, default=None, help="resize frames to SIZE x SIZE (CPU checks)")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--no-telemetry", action="store_true", help="bench session without the sampler")
    p.add_argument("--no-toys", action="store_true")
    p.add_argument("--json", type=Path, help="write the rows (with every sample) here")
    args = p.parse_args(argv)
    device = torch.device(args.device)
    frames = load_frames(args.video, args.max_frames, args.size)
    queries = random_queries(args.points, frames.shape[2], frames.shape[1])
    print(f"direct.py: {device} ({torch.cuda.get_device_name(device) if device.type == 'cuda' else 'CPU'}), torch "
          f"{torch.__version__}, {frames.shape[0]} frames {frames.shape[2]}x{frames.shape[1]}, {len(queries)} "
          f"queries, {args.warmup} warm-up + {args.repeat} runs each", flush=True)
    rows: list[dict[str, Any]] = []
    for precision in [v.strip() for v in args.precisions.split(",") if v.strip()]:
        if not gate(precision, device).runnable:
            print(f"direct.py: {precision} not runnable on {device}: skipped", flush=True)
            continue
        for name in [v.strip() for v in args.peers.split(",") if v.strip()]:
            print(f"direct.py: {name} {precision} ...", file=sys.stderr, flush=True)
            try:
                rows.append(time_peer(name, frames, queries, precision, device, args))
            except Exception as exc:  # one peer failing leaves the others' rows
                print(f"direct.py: {name} {precision} failed: {type(exc).__name__}: {exc}", flush=True)
                rows.append({"what": name, "precision": precision, "error": f"{type(exc).__name__}: {exc}"})
        if not args.no_toys:
            rows.extend(time_toys(precision, device, args))
        print(format_rows(rows), flush=True)  # the table so far: a timeout still leaves it in the log
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
