"""Micro-benchmarks of CorrTrack's refinement pieces on one GPU, each CUDA-graph captured and replayed (as the
tracker runs them): formulations side by side at the shapes of a 1024-query, 47-frame batch, so a change to
model.py or support.py is chosen by measurement. Usage (device machine):
    python3 scripts/refine_micro.py [--queries 1024] [--frames 47] [--reps 50] [--json OUT.json]
Prints one line per variant: median and p10-p90 milliseconds of one replay; the variants of a piece compute the
same numbers (checked, max difference printed)."""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any, Callable

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.core.atomic import atomic_open  # noqa: E402
from engine.trackers.corrtrack import fused  # noqa: E402


def graph_time(fn: Callable[[], Any], reps: int) -> tuple[float, float, float, Any]:
    """(median, p10, p90 ms, output) of replaying fn's captured graph."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    return statistics.median(times), times[len(times) // 10], times[(9 * len(times)) // 10], out


def layer_norm_manual(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, eps: float) -> torch.Tensor:
    var, mean = torch.var_mean(x, dim=-1, keepdim=True, correction=0)
    return torch.addcmul(b, (x - mean), torch.rsqrt(var + eps) * w)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--queries", type=int, default=1024)
    p.add_argument("--frames", type=int, default=47)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--reps", type=int, default=50)
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    dev = torch.device("cuda")
    torch.manual_seed(0)
    n, t, d = args.queries, args.frames, args.dim
    dt = torch.bfloat16
    x = torch.randn(n, t, d, device=dev, dtype=dt)
    w = torch.randn(d, device=dev, dtype=dt)
    b = torch.randn(d, device=dev, dtype=dt)
    taps = torch.randn(3, d, device=dev, dtype=dt)
    results: dict[str, dict] = {}

    def report(piece: str, name: str, fn: Callable[[], torch.Tensor], ref: torch.Tensor | None) -> torch.Tensor:
        med, lo, hi, out = graph_time(fn, args.reps)
        diff = float((out.float() - ref.float()).abs().max()) if ref is not None else 0.0
        results[f"{piece}/{name}"] = {"median_ms": round(med, 4), "p10_ms": round(lo, 4), "p90_ms": round(hi, 4),
                                      "max_diff": diff}
        print(f"{piece:12s} {name:34s} {med * 1e3:8.1f} us (p10 {lo * 1e3:.1f}, p90 {hi * 1e3:.1f}) "
              f"max diff {diff:.3g}", flush=True)
        return out

    # layer norm over D at [N, T, D] bf16
    ref = report("layer_norm", "F.layer_norm bf16", lambda: F.layer_norm(x, (d,), w, b, 1e-5), None)
    report("layer_norm", "F.layer_norm 2-D view", lambda: F.layer_norm(x.view(-1, d), (d,), w, b, 1e-5).view(n, t, d),
           ref)
    report("layer_norm", "var_mean + addcmul", lambda: layer_norm_manual(x, w, b, 1e-5), ref)
    report("layer_norm", "F.layer_norm fp32 in (autocast)", lambda: F.layer_norm(x.float(), (d,), w.float(),
                                                                                 b.float(), 1e-5), ref)

    # the dilated 3-tap temporal mix (frames beyond the ends count as zero)
    for dil in (1, 8):
        def addcmul3(dil: int = dil) -> torch.Tensor:
            m = torch.addcmul(b, x, taps[1])
            m[:, dil:].addcmul_(x[:, :-dil], taps[0])
            m[:, :-dil].addcmul_(x[:, dil:], taps[2])
            return m

        def padded(dil: int = dil) -> torch.Tensor:
            yp = F.pad(x, (0, 0, dil, dil))
            return yp[:, :t] * taps[0] + yp[:, dil:dil + t] * taps[1] + yp[:, 2 * dil:2 * dil + t] * taps[2] + b

        weight = taps.t().contiguous().view(d, 1, 1, 3)

        def conv_cl(dil: int = dil, weight: torch.Tensor = weight) -> torch.Tensor:
            # [N, T, D] memory is [N, D, 1, T] in channels_last: a depthwise (1, 3) conv with dilation, no copy
            inp = x.permute(0, 2, 1).unsqueeze(2)
            out = F.conv2d(inp, weight, b, padding=(0, dil), dilation=(1, dil), groups=d)
            return out.squeeze(2).permute(0, 2, 1)

        ref = report(f"taps d={dil}", "padded copy (before)", padded, None)
        report(f"taps d={dil}", "3 addcmul (now)", addcmul3, ref)
        report(f"taps d={dil}", "depthwise conv2d channels_last", conv_cl, ref)

    # a TemporalBlock's norm and taps: the eager code against fused.py's kernel (tile rows x warps variants)
    norm = torch.nn.LayerNorm(d).to(dev)
    with torch.no_grad():
        norm.weight.normal_()
        norm.bias.normal_()
    taps32, bias32 = taps.float(), b.float()
    for dil in (1, 8):
        def eager_block(dil: int = dil) -> torch.Tensor:
            y = F.layer_norm(x, (d,), norm.weight.to(dt), norm.bias.to(dt), norm.eps)
            m = torch.addcmul(bias32.to(dt), y, taps32[1].to(dt))
            m[:, dil:].addcmul_(y[:, :-dil], taps32[0].to(dt))
            m[:, :-dil].addcmul_(y[:, dil:], taps32[2].to(dt))
            return m

        ref = report(f"ln+taps d={dil}", "eager: layer norm + 3 addcmul", eager_block, None)
        for rows, warps in ((8, 2), (16, 4), (32, 4), (32, 8), (64, 8)):
            fused.ROWS_PER_PROGRAM, fused.NUM_WARPS = rows, warps
            report(f"ln+taps d={dil}", f"fused kernel {rows} rows {warps} warps",
                   lambda dil=dil: fused.ln_taps(x, norm, taps32, bias32, dil, dt), ref)
    fused.ROWS_PER_PROGRAM, fused.NUM_WARPS = 16, 4
    ref = report("layer_norm", "F.layer_norm, bf16 weights", lambda: F.layer_norm(x, (d,), norm.weight.to(dt),
                                                                                   norm.bias.to(dt), norm.eps), None)
    report("layer_norm", "fused kernel, no taps", lambda: fused.ln_taps(x, norm, None, None, 0, dt), ref)

    # attention across tracks: tokens [T, N + 64, D], 4 heads, a key bias
    h, s = 4, n + 64
    dh = d // h
    q = torch.randn(t, h, s, dh, device=dev, dtype=dt)
    k = torch.randn(t, h, s, dh, device=dev, dtype=dt)
    v = torch.randn(t, h, s, dh, device=dev, dtype=dt)
    bias = -torch.rand(t, h, 1, s, device=dev, dtype=dt) * 4
    ref = report("track_attn", "SDPA + broadcast key mask (now)",
                 lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=bias), None)
    report("track_attn", "SDPA + expanded mask", lambda: F.scaled_dot_product_attention(
        q, k, v, attn_mask=bias.expand(t, h, s, s)), ref)
    report("track_attn", "SDPA no mask (lower bound)", lambda: F.scaled_dot_product_attention(q, k, v), None)
    pad = 8  # head dim 32 -> 40: the key bias as one more channel, so no mask (flash attention)

    def bias_channel() -> torch.Tensor:
        ones = torch.ones(t, h, s, 1, device=dev, dtype=dt)
        zeros = torch.zeros(t, h, s, pad - 1, device=dev, dtype=dt)
        q2 = torch.cat([q, ones, zeros], dim=-1)
        k2 = torch.cat([k, bias.transpose(-1, -2) * math.sqrt(dh), zeros], dim=-1)
        v2 = torch.cat([v, torch.zeros(t, h, s, pad, device=dev, dtype=dt)], dim=-1)
        return F.scaled_dot_product_attention(q2, k2, v2, scale=1 / math.sqrt(dh))[..., :dh]

    report("track_attn", "SDPA, key bias as a channel", bias_channel, ref)
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}, N={n} T={t} D={d}, bf16, graph replays")
    if args.json:
        with atomic_open(args.json, "w") as f:
            json.dump({"torch": torch.__version__, "gpu": torch.cuda.get_device_name(0), "queries": n, "frames": t,
                       "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
