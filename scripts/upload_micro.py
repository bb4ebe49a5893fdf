"""Where a frame upload's time goes on this GPU: the host's pinning copy, the DMA from pinned memory, and a copy
from pageable memory, per chunk size; and how much of a chunked upload a side stream hides behind a GPU kernel
standing in for the backbone.

    python3 scripts/upload_micro.py --frames 16 47 --size 256 256

Prints one JSON object per line. CUDA only.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np
import torch


def _median_ms(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def chunk_costs(frames: np.ndarray, repeats: int) -> dict:
    host = torch.from_numpy(frames)
    pinned = host.pin_memory()
    dev = torch.device("cuda")
    pin_ms = _median_ms(lambda: host.pin_memory(), repeats)
    dma_ms = _median_ms(lambda: pinned.to(dev, non_blocking=True), repeats)
    pageable_ms = _median_ms(lambda: host.to(dev), repeats)
    mb = frames.nbytes / 1e6
    return {"what": "chunk", "frames": int(frames.shape[0]), "mb": round(mb, 2), "pin_ms": round(pin_ms, 3),
            "dma_ms": round(dma_ms, 3), "dma_gb_s": round(mb / dma_ms, 1), "pageable_ms": round(pageable_ms, 3)}


def overlap(frames: np.ndarray, chunk: int, work_ms: float, repeats: int) -> dict:
    """A chunked upload with a stand-in kernel of about work_ms per chunk, on one stream and with a side stream."""
    dev = torch.device("cuda")
    a = torch.randn(2048, 2048, device=dev)
    per = max(1, round(work_ms / max(_median_ms(lambda: a @ a, 5), 1e-3)))
    side = torch.cuda.Stream()

    def run(use_side: bool) -> None:
        main = torch.cuda.current_stream()
        for start in range(0, len(frames), chunk):
            host = torch.from_numpy(frames[start:start + chunk])
            if use_side:
                with torch.cuda.stream(side):
                    part = host.pin_memory().to(dev, non_blocking=True)
                main.wait_stream(side)
                part.record_stream(main)
            else:
                part = host.pin_memory().to(dev, non_blocking=True)
            part.float().sum()
            for _ in range(per):
                a @ a

    one, two = _median_ms(lambda: run(False), repeats), _median_ms(lambda: run(True), repeats)
    return {"what": "overlap", "frames": int(len(frames)), "chunk": chunk, "matmuls_per_chunk": per,
            "one_stream_ms": round(one, 3), "side_stream_ms": round(two, 3), "saved_ms": round(one - two, 3)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--frames", type=int, nargs="+", default=[16, 47])
    p.add_argument("--size", type=int, nargs=2, default=[256, 256], metavar=("W", "H"))
    p.add_argument("--chunk", type=int, default=16)
    p.add_argument("--work-ms", type=float, default=0.35, help="stand-in backbone time per chunk")
    p.add_argument("--repeats", type=int, default=30)
    args = p.parse_args()
    rng = np.random.default_rng(0)
    w, h = args.size
    print(json.dumps({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__}))
    for n in args.frames:
        frames = rng.integers(0, 255, (n, h, w, 3), dtype=np.uint8)
        print(json.dumps(chunk_costs(frames, args.repeats)))
    frames = rng.integers(0, 255, (max(args.frames), h, w, 3), dtype=np.uint8)
    print(json.dumps(overlap(frames, args.chunk, args.work_ms, args.repeats)))


if __name__ == "__main__":
    main()
