"""What the telemetry sampler costs a tracker: each NVML call's time, and the session slowdown per sampler variant.

Usage (repo root, on a GPU): python3 scripts/sampler_cost.py [--repeat 30]

1. One TelemetrySampler with every NVML function wrapped in a timer: 40 samples at its rate, then per function
   the median and max microseconds and the share of a sample.
2. CorrTrack bf16, 256 points on the sample: ``engine.workflows.bench.Bench.overhead`` (3 alternating sets of
   on/off blocks) with the sampler as it is, with GPM off, with the slow metrics read every sample, and at 2 Hz.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.telemetry.sampler import TelemetrySampler  # noqa: E402

SAMPLES = 40


class TimedNvml:
    """pynvml with every callable wrapped in a timer (seconds per call, by name)."""

    def __init__(self, nvml: Any):
        self._nvml = nvml
        self.calls: dict[str, list[float]] = defaultdict(list)

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._nvml, name)
        if not callable(value) or not name.startswith("nvml"):
            return value

        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return value(*args, **kwargs)
            finally:
                self.calls[name].append(time.perf_counter() - t0)

        return timed


def nvml_calls() -> None:
    sampler = TelemetrySampler(device_index=0)
    timed = TimedNvml(sampler._reader.nvml)
    sampler._reader.nvml = timed
    for _ in range(SAMPLES):
        sampler.sample_once()
        time.sleep(1.0 / sampler.rate_hz)
    cost = sampler.sample_cost()
    per_sample = cost["median_s"] * 1e6
    print(f"one sample: median {per_sample:.0f} us, max {cost['max_s'] * 1e6:.0f} us ({SAMPLES} samples)")
    print(f"{'NVML call':44s} {'calls':>5s} {'median us':>9s} {'max us':>8s} {'us/sample':>9s}")
    for name, times in sorted(timed.calls.items(), key=lambda kv: -sum(kv[1])):
        print(f"{name:44s} {len(times):5d} {statistics.median(times) * 1e6:9.0f} {max(times) * 1e6:8.0f} "
              f"{sum(times) / SAMPLES * 1e6:9.0f}")
    sampler.close()


def overhead(repeat: int) -> None:
    from engine.core.config import RunConfig
    from engine.workflows.bench import Bench, load_input

    args = argparse.Namespace(video=None, queries=None, grid=None, points=256)
    data = load_input(args)
    config = RunConfig(tracker="corrtrack", device="cuda", precision="bf16", points_per_batch=256)
    def no_psutil(s: Any) -> Any:
        s._cpu = None
        return s

    def no_nvml(s: Any) -> Any:
        s._reader.read = lambda now, out: None
        return s

    variants: list[tuple[str, Any]] = [
        ("as it is (10 Hz)", lambda s: s),
        ("NVML only (no psutil)", no_psutil),
        ("psutil only (no NVML)", no_nvml),
        ("idle thread (neither)", lambda s: no_nvml(no_psutil(s))),
        ("as it is again", lambda s: s),
    ]
    print(f"\nsession slowdown, CorrTrack bf16 256 points, {repeat} runs each way per set (3 sets, median)")
    for label, change in variants:
        bench = Bench(data, "corrtrack", "cuda", telemetry=True, cost=False, direct=False)
        if bench.sampler is not None:
            bench.sampler._ensure_open()
            change(bench.sampler)
        result = bench.overhead(config, warmup=2, repeat=repeat)
        bench.close()
        sets = ", ".join(f"{r:.4f}" for r in result["set_ratios"])
        print(f"  {label:24s} ratio {result['ratio']:.4f} (sets {sets}); on {result['on_ms_median']:.2f} ms, "
              f"off {result['off_ms_median']:.2f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--overhead-only", action="store_true", help="skip the per-call NVML timing")
    args = parser.parse_args()
    if not args.overhead_only:
        nvml_calls()
    overhead(args.repeat)


if __name__ == "__main__":
    main()
