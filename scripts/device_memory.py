"""CorrTrack's device memory against the run's shape: the data behind the device-memory estimate.

Usage (device machine, repo root): python3 scripts/device_memory.py --out OUT

For each (frame size, frame count, points per batch, frames per batch, precision) it runs one Session of
CorrTrack (a fresh tracker each time) on a random-texture video (seeded) and records the allocator's peak
(torch.cuda.max_memory_allocated, reset before each run), the peak the session's batches report, the reserved
peak, what the warm tracker still holds after the run, and the free / total memory before the run
(torch.cuda.mem_get_info). Writes OUT/device_memory.json and prints one line per run.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine.core.config import RunConfig  # noqa: E402
from engine.run.events import BatchDone, Failed, Finished, Started  # noqa: E402
from engine.run.session import Session  # noqa: E402
from engine.trackers import load_tracker  # noqa: E402

SIZES = [(256, 256), (480, 640), (1080, 1920)]
FRAMES = [24, 47, 120, 480]
POINTS = [256, 1024, 4096]
FRAMES_PER_BATCH = [16, 47]
PRECISIONS = ["fp32", "bf16"]


def video(t: int, h: int, w: int) -> np.ndarray:
    rng = np.random.default_rng(t * 7 + h)
    base = rng.integers(0, 255, (h // 8 + 1, w // 8 + 1, 3), np.uint8).repeat(8, 0).repeat(8, 1)[:h, :w]
    return np.stack([np.roll(base, (i, 2 * i), (0, 1)) for i in range(t)])


def queries(n: int, t: int, h: int, w: int) -> np.ndarray:
    rng = np.random.default_rng(n)
    return np.stack([rng.integers(0, t, n), rng.uniform(0, w - 1, n), rng.uniform(0, h - 1, n)], 1).astype(np.float32)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for (h, w), t in itertools.product(SIZES, FRAMES):
        frames = video(t, h, w)
        info = {"width": w, "height": h, "num_frames": t, "fps": 30.0}
        for n, fpb, prec in itertools.product(POINTS, FRAMES_PER_BATCH, PRECISIONS):
            q = queries(n, t, h, w)
            config = RunConfig(tracker="corrtrack", device="cuda", precision=prec, points_per_batch=n,
                               frames_per_batch=fpb)
            tracker = load_tracker("corrtrack")  # fresh: a warm tracker keeps its CUDA graphs' buffers
            gc.collect()
            torch.cuda.empty_cache()
            free, total = torch.cuda.mem_get_info()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            row = {"height": h, "width": w, "frames": t, "points": n, "frames_per_batch": fpb, "precision": prec,
                   "free_before": free, "total": total, "allocated_before": base}
            t0 = time.perf_counter()
            batch_peaks = []
            for ev in Session(frames, q, config, tracker=tracker, video_info=info).events():
                if isinstance(ev, Started):
                    row["model_size"] = ev.video.get("frame_width"), ev.video.get("frame_height")
                    row["video"] = {k: v for k, v in ev.video.items() if isinstance(v, (int, float, str))}
                elif isinstance(ev, BatchDone) and ev.peak_memory_bytes:
                    batch_peaks.append(ev.peak_memory_bytes)
                elif isinstance(ev, Failed):
                    row["failed"] = ev.message
                elif isinstance(ev, Finished):
                    row["wall_ms"] = ev.wall_ms
            torch.cuda.synchronize()
            row["seconds"] = time.perf_counter() - t0
            row["peak_allocated"] = torch.cuda.max_memory_allocated()
            row["peak_reserved"] = torch.cuda.max_memory_reserved()
            row["batch_peaks"] = batch_peaks
            row["held_after"] = torch.cuda.memory_allocated()  # what the warm tracker keeps
            rows.append(row)
            del tracker
            print(f"{h}x{w} T={t} N={n} fpb={fpb} {prec}: peak {row['peak_allocated'] / 2**20:.0f} MiB "
                  f"(base {base / 2**20:.0f}, held {row['held_after'] / 2**20:.0f}) {row.get('failed', '')}",
                  flush=True)
        (out / "device_memory.json").write_text(json.dumps({"device": torch.cuda.get_device_name(),
                                                             "torch": torch.__version__, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
