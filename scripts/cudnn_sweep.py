"""cuDNN's benchmark search against its heuristics, on fixed-shape convolutions, on this GPU.

    python scripts/cudnn_sweep.py [--out sweep.json] [--budget-s 55] [--samples 20] [--family depthwise ...]

Per configuration: the conv's GPU time with ``torch.backends.cudnn.benchmark`` off and on (the median of
``--samples`` samples after warm-up; a sample is CUDA events around enough back-to-back calls for about
``SAMPLE_MS``, divided by the calls), then a table sorted by the gain ((off - on) / off) and a line per family
(best and median gain; families at or above ``FAMILY_GAIN`` are marked). Exits 0 with a line when there is no
CUDA.

Each mode runs in a fresh thread: cuDNN v8's execution-plan cache is ``thread_local`` and its key has no
benchmark flag (``aten/src/ATen/native/cudnn/Conv_v8.cpp``), so in a thread that already ran a shape with
benchmark off, switching it on serves the cached heuristic plan and searches nothing: a same-thread A/B reads
no difference whatever cuDNN would pick. The first configuration of each family is also timed that way
(``on_same_thread_ms``: "on" in the thread that ran "off"), to show the cache at work on this machine.

Families (what the session-18 sweep of 32 configurations did not cover): depthwise 3x3/5x5/7x7 (ConvNeXt-style,
groups = C) at C 64-512; conv_transpose2d stride 2; 1-D convs, kernel 5-15; a large batch of small images
(47 frames x 64 ch x 64x64); 3x3 convs with odd channel counts (3, 19, 33, 100); asymmetric 1x7 / 7x1;
stride-2 5x5 / 7x7 stems; and (session 19) ``plant_candidates``, aligned convs at the field plugin's own sizes
(``--family plant_candidates`` alone for a re-plant of cudnn_benchmark_off). Each in NCHW and channels_last
(2-D) and in fp32 (TF32 off), TF32, bf16 and fp16 where listed. The configurations run round-robin across
families, so a budget cut leaves every family sampled; the budget (``--budget-s``, default 55 s) is checked
before each configuration.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import statistics
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo's engine, run from anywhere

SAMPLE_MS = 0.5  # calls per sample are chosen so a sample takes about this long
MAX_CALLS_PER_SAMPLE = 256
WARMUP_CALLS = 3  # untimed calls after the first (the first does the search with benchmark on)
FAMILY_GAIN = 0.15  # a family whose best gain reaches this is worth a re-plant
DTYPES = ("fp32", "tf32", "bf16", "fp16")


@dataclass
class Config:
    family: str
    label: str
    op: str  # conv1d | conv2d | conv_transpose2d
    x_shape: tuple[int, ...]
    w_shape: tuple[int, ...]
    dtype: str
    channels_last: bool = False
    stride: int | tuple[int, int] = 1
    padding: int | tuple[int, int] = 0
    dilation: int = 1
    groups: int = 1
    output_padding: int = 0


@dataclass
class Result:
    config: Config
    off_ms: float = math.nan
    on_ms: float = math.nan
    on_same_thread_ms: float | None = None
    calls_per_sample: int = 0
    error: str = ""
    seconds: float = 0.0
    gain: float = field(init=False, default=math.nan)

    def finish(self) -> None:
        if self.off_ms > 0 and not math.isnan(self.on_ms):
            self.gain = (self.off_ms - self.on_ms) / self.off_ms


def _layouts(two_d: bool = True) -> tuple[bool, ...]:
    return (False, True) if two_d else (False,)


def depthwise() -> list[Config]:
    out = []
    for k, c, cl, dt in itertools.product((3, 5, 7), (64, 128, 256, 512), _layouts(), DTYPES):
        out.append(Config("depthwise", f"dw{k}x{k} C{c} 8x{c}x64x64", "conv2d", (8, c, 64, 64), (c, 1, k, k), dt,
                          cl, padding=k // 2, groups=c))
    return out


def transpose() -> list[Config]:
    out = []
    for k, c, cl, dt in itertools.product((2, 3, 4), (64, 128), _layouts(), ("tf32", "bf16")):
        pad, opad = {2: (0, 0), 3: (1, 1), 4: (1, 0)}[k]
        out.append(Config("conv_transpose_s2", f"convT{k}x{k} s2 C{c} 8x{c}x32x32", "conv_transpose2d",
                          (8, c, 32, 32), (c, c // 2, k, k), dt, cl, stride=2, padding=pad, output_padding=opad))
    return out


def one_d() -> list[Config]:
    out = []
    for k, c, dt in itertools.product((5, 7, 9, 11, 13, 15), (64, 128), ("fp32", "tf32", "bf16")):
        out.append(Config("conv1d", f"conv1d k{k} C{c} 16x{c}x4096", "conv1d", (16, c, 4096), (c, c, k), dt,
                          padding=k // 2))
    return out


def small_images() -> list[Config]:
    out = []
    for k, cl, dt in itertools.product((1, 3), _layouts(), ("tf32", "bf16", "fp16")):
        out.append(Config("batch_small_images", f"{k}x{k} 47x64x64x64", "conv2d", (47, 64, 64, 64), (64, 64, k, k),
                          dt, cl, padding=k // 2))
    return out


def odd_channels() -> list[Config]:
    out = []
    for c, cl, dt in itertools.product((3, 19, 33, 100), _layouts(), ("fp32", "tf32", "bf16")):
        c_out = 32 if c == 3 else c
        out.append(Config("odd_channels", f"3x3 {c}->{c_out} 8x{c}x128x128", "conv2d", (8, c, 128, 128),
                          (c_out, c, 3, 3), dt, cl, padding=1))
    return out


def asymmetric() -> list[Config]:
    out = []
    for (kh, kw), cl, dt in itertools.product(((1, 7), (7, 1)), _layouts(), ("tf32", "bf16")):
        out.append(Config("asymmetric", f"{kh}x{kw} C128 8x128x64x64", "conv2d", (8, 128, 64, 64),
                          (128, 128, kh, kw), dt, cl, padding=(kh // 2, kw // 2)))
    return out


def stems() -> list[Config]:
    out = []
    for k, cl, dt in itertools.product((5, 7), _layouts(), ("fp32", "tf32", "bf16")):
        out.append(Config("stem_s2", f"{k}x{k} s2 3->64 16x3x256x256", "conv2d", (16, 3, 256, 256), (64, 3, k, k),
                          dt, cl, stride=2, padding=k // 2))
    return out


def plant_candidates() -> list[Config]:
    """Convs with aligned channel counts (multiples of 8: no gemm_misaligned beside them) at the field plugin's
    own sizes (16 frames per batch at half of 256x256; 256 tracks x 47 frames), from the families session 19's
    sweep measured a gain for at other sizes: the shapes a re-plant of tests/plugins/field/cudnn_benchmark_off.py
    on aligned convs would run (its 33-channel body is also a tensor-core misalignment), its token mixers among
    them."""
    out = []
    for k, c, dt in itertools.product((13, 15), (64, 128), ("tf32", "fp32")):
        out.append(Config("plant_candidates", f"conv1d k{k} C{c} 256x{c}x47 (tracks x time)", "conv1d",
                          (256, c, 47), (c, c, k), dt, padding=k // 2))
    for k, c, cl, dt in itertools.product((5, 7), (64, 128), _layouts(), ("tf32", "fp16")):
        out.append(Config("plant_candidates", f"dw{k}x{k} C{c} 16x{c}x128x128", "conv2d", (16, c, 128, 128),
                          (c, 1, k, k), dt, cl, padding=k // 2, groups=c))
    for k, frames, dt in itertools.product((13, 15), (16, 15), ("tf32", "bf16")):  # the re-plant's token mixers
        out.append(Config("plant_candidates", f"conv1d k{k} C128 {frames}x128x4096 (tokens at H/4)", "conv1d",
                          (frames, 128, 4096), (128, 128, k), dt, padding=k // 2))
    for c, dt in itertools.product((32, 40, 48), ("tf32", "fp32")):
        out.append(Config("plant_candidates", f"3x3 {c}->{c} 16x{c}x128x128", "conv2d", (16, c, 128, 128),
                          (c, c, 3, 3), dt, False, padding=1))
    return out


FAMILIES = {"depthwise": depthwise, "conv_transpose_s2": transpose, "conv1d": one_d,
            "batch_small_images": small_images, "odd_channels": odd_channels, "asymmetric": asymmetric,
            "stem_s2": stems, "plant_candidates": plant_candidates}


def round_robin(families: list[list[Config]]) -> list[Config]:
    """One configuration of each family in turn."""
    out = []
    for row in itertools.zip_longest(*families):
        out.extend(c for c in row if c is not None)
    return out


def _conv(torch: Any, cfg: Config):
    """The conv as a no-argument callable on fresh device tensors of the configuration's dtype and layout."""
    import torch.nn.functional as F

    dtype = {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[cfg.dtype]
    x = torch.randn(cfg.x_shape, device="cuda", dtype=dtype)
    w = torch.randn(cfg.w_shape, device="cuda", dtype=dtype) * 0.05
    if cfg.channels_last:
        x, w = x.to(memory_format=torch.channels_last), w.to(memory_format=torch.channels_last)
    if cfg.op == "conv1d":
        return lambda: F.conv1d(x, w, None, cfg.stride, cfg.padding, cfg.dilation, cfg.groups)
    if cfg.op == "conv_transpose2d":
        return lambda: F.conv_transpose2d(x, w, None, cfg.stride, cfg.padding, cfg.output_padding, cfg.groups)
    return lambda: F.conv2d(x, w, None, cfg.stride, cfg.padding, cfg.dilation, cfg.groups)


def _per_call_ms(torch: Any, fn, calls: int) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / calls


def _measure(torch: Any, fn, samples: int, calls: int | None = None) -> tuple[float, int]:
    """Median per-call ms over ``samples`` samples (after the first call and a warm-up), and the calls per sample."""
    fn()
    for _ in range(WARMUP_CALLS):
        fn()
    torch.cuda.synchronize()
    if calls is None:
        one = _per_call_ms(torch, fn, 4)
        calls = max(1, min(MAX_CALLS_PER_SAMPLE, math.ceil(SAMPLE_MS / max(one, 1e-4))))
    times = [_per_call_ms(torch, fn, calls) for _ in range(samples)]
    return statistics.median(times), calls


def _in_fresh_thread(work):
    """``work()`` in a new thread (an empty cuDNN plan cache); its value, or its exception raised here."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = work()
        except BaseException as exc:  # noqa: BLE001 - brought back to the caller
            box["error"] = exc

    t = threading.Thread(target=run, name="cudnn-sweep", daemon=True)
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


def run_config(torch: Any, cfg: Config, samples: int, same_thread: bool) -> Result:
    res = Result(cfg)
    t0 = time.perf_counter()
    cudnn = torch.backends.cudnn
    cudnn.allow_tf32 = cfg.dtype == "tf32"
    try:
        def off_way():
            cudnn.benchmark = False
            fn = _conv(torch, cfg)
            off, calls = _measure(torch, fn, samples)
            on_same = None
            if same_thread:  # "on" where "off" already cached its plan: the cache serves the heuristic plan
                cudnn.benchmark = True
                on_same, _ = _measure(torch, fn, samples, calls)
                cudnn.benchmark = False
            return off, calls, on_same

        def on_way(calls: int):
            cudnn.benchmark = True
            return _measure(torch, _conv(torch, cfg), samples, calls)[0]

        res.off_ms, res.calls_per_sample, res.on_same_thread_ms = _in_fresh_thread(off_way)
        res.on_ms = _in_fresh_thread(lambda: on_way(res.calls_per_sample))
    except Exception as exc:  # noqa: BLE001 - a configuration cuDNN refuses is reported, not fatal
        res.error = f"{type(exc).__name__}: {exc}"[:200]
    finally:
        cudnn.benchmark = False
        torch.cuda.empty_cache()
    res.seconds = time.perf_counter() - t0
    res.finish()
    return res


def _row(r: Result) -> str:
    c = r.config
    layout = "cl" if c.channels_last else "nchw"
    if r.error:
        return f"{c.family:20s} {c.label:34s} {layout:4s} {c.dtype:4s}  error: {r.error}"
    same = f"  same-thread on {r.on_same_thread_ms:.4f}" if r.on_same_thread_ms is not None else ""
    return (f"{c.family:20s} {c.label:34s} {layout:4s} {c.dtype:4s}  off {r.off_ms:8.4f} ms  on {r.on_ms:8.4f} ms  "
            f"gain {100 * r.gain:+6.1f} %{same}")


def _num(x: float) -> float | None:
    return None if math.isnan(x) else x


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="write the results as JSON here")
    ap.add_argument("--budget-s", type=float, default=55.0, help="stop starting configurations after this long")
    ap.add_argument("--samples", type=int, default=20, help="timed samples per mode (median), at least 20")
    ap.add_argument("--family", action="append", choices=sorted(FAMILIES), help="only these families")
    args = ap.parse_args(argv)
    try:
        import torch
    except ImportError:
        print("cudnn_sweep: torch is not installed; nothing measured")
        return 0
    if not torch.cuda.is_available() or not torch.backends.cudnn.is_available():
        print("cudnn_sweep: no CUDA device with cuDNN here; nothing measured")
        return 0
    samples = max(20, args.samples)
    chosen = [FAMILIES[name]() for name in (args.family or FAMILIES)]
    configs = round_robin(chosen)
    firsts = {id(fam[0]) for fam in chosen if fam}
    print(f"cudnn_sweep: {torch.cuda.get_device_name(0)}, torch {torch.__version__}, cuDNN "
          f"{torch.backends.cudnn.version()}, {len(configs)} configurations, budget {args.budget_s:.0f} s", flush=True)
    saved = (torch.backends.cudnn.benchmark, torch.backends.cudnn.allow_tf32)
    t0 = time.perf_counter()
    results: list[Result] = []
    try:
        for i, cfg in enumerate(configs, 1):
            if time.perf_counter() - t0 > args.budget_s:
                print(f"budget reached: {len(configs) - i + 1} configurations not run", flush=True)
                break
            r = run_config(torch, cfg, samples, same_thread=id(cfg) in firsts)
            results.append(r)
            print(f"[{i}/{len(configs)} {time.perf_counter() - t0:5.1f} s] {_row(r)}", flush=True)
    finally:
        torch.backends.cudnn.benchmark, torch.backends.cudnn.allow_tf32 = saved
    done = [r for r in results if not r.error]
    print("\nsorted by gain (benchmark on against off; + is faster with it on):")
    for r in sorted(done, key=lambda r: -r.gain):
        print(_row(r))
    print("\nper family: best / median gain")
    families: dict[str, list[float]] = {}
    for r in done:
        families.setdefault(r.config.family, []).append(r.gain)
    for name, gains in families.items():
        mark = "  <- at or above 15 %: a re-plant candidate" if max(gains) >= FAMILY_GAIN else ""
        print(f"  {name:20s} {len(gains):3d} configs  best {100 * max(gains):+6.1f} %  "
              f"median {100 * statistics.median(gains):+6.1f} %{mark}")
    errors = [r for r in results if r.error]
    if errors:
        print(f"\n{len(errors)} configurations failed (listed above with their error)")
    print(f"\nelapsed {time.perf_counter() - t0:.1f} s")
    if args.out:
        payload = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__,
                   "cudnn": torch.backends.cudnn.version(), "samples": samples, "sample_ms": SAMPLE_MS,
                   "results": [{**asdict(r.config), "off_ms": _num(r.off_ms), "on_ms": _num(r.on_ms),
                                "gain": _num(r.gain),
                                "on_same_thread_ms": r.on_same_thread_ms, "calls_per_sample": r.calls_per_sample,
                                "error": r.error, "seconds": r.seconds} for r in results]}
        from engine.core.atomic import atomic_open

        args.out.parent.mkdir(parents=True, exist_ok=True)
        with atomic_open(args.out, "w", encoding="utf-8") as f:  # a cut call leaves no half-written JSON
            json.dump(payload, f, indent=1, default=str)
        print(f"written {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
