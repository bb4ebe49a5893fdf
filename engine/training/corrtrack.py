"""`trackscope train`: train CorrTrack on synthetic videos rendered on the fly on the device.

Batches of B videos go through the network together. The learning rate warms up, then follows a
cosine to zero over the run, measured in steps (``--steps``) or in wall-clock time (``--minutes``,
for fixed-length device leases). Validation (AJ, delta_avg, OA on a fixed set rendered from the "val"
texture split with a fixed seed) runs every ``--val-every`` seconds and at the end; each validation
writes ``last.safetensors`` + manifest into ``--out``, so an interrupted run still leaves weights.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import shlex
import statistics
import sys
import time
from datetime import datetime, timezone
from typing import Any

import torch

from engine.core.atomic import atomic_open
from engine.core.devices import device_name, resolve_device
from engine.core.errors import UserError
from engine.trackers.corrtrack.model import CorrTrackNet, count_parameters, visible_from_logits
from engine.trackers.corrtrack.weights import load_model, save_model
from engine.training.losses import track_losses

VAL_SEED = 20261130
VAL_TEXTURE_SEED = 1
VAL_BATCH = 16  # videos per validation batch (fixed: the set depends on how it is batched)
TRAIN_TEXTURE_SEED = 0
TEXTURE_SIZE = 512
PROCEDURAL_TEXTURES = 64
LOG_EVERY = 50
PROBE_STEPS = range(100, 110)  # steps timed apart (with syncs) to split data generation from the update
GRAD_CLIP = 1.0
ADAM_BETAS = (0.9, 0.99)
MIN_LR_SHARE = 0.02  # the cosine ends at this share of the peak


def lr_share(progress: float, step: int, warmup: int) -> float:
    """Learning-rate multiplier: linear warm-up over ``warmup`` steps, then cosine from 1 to MIN_LR_SHARE."""
    warm = min(1.0, (step + 1) / max(1, warmup))
    progress = min(max(progress, 0.0), 1.0)
    return warm * (MIN_LR_SHARE + (1 - MIN_LR_SHARE) * 0.5 * (1 + math.cos(math.pi * progress)))


def _autocast(device: torch.device, precision: str):
    if precision == "bf16":
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return torch.autocast(device_type=device.type, enabled=False)


def make_val_set(device: torch.device, num_videos: int, num_frames: int, num_points: int, batch_size: int,
                 texture_size: int = TEXTURE_SIZE, procedural: int = PROCEDURAL_TEXTURES) -> list[Any]:
    """The fixed validation batches (val texture split, VAL_SEED)."""
    from engine.training.synthetic import SynthConfig, TextureBank, generate_batch

    textures = TextureBank.build(device, size=texture_size, photos=True, procedural=procedural,
                                 seed=VAL_TEXTURE_SEED, split="val")
    cfg = SynthConfig(num_frames=num_frames, num_points=num_points)
    gen = torch.Generator(device=device)
    gen.manual_seed(VAL_SEED)
    batches = []
    for start in range(0, num_videos, batch_size):
        batches.append(generate_batch(min(batch_size, num_videos - start), cfg, textures, gen, device))
    return batches


@torch.no_grad()
def validate(model: CorrTrackNet, batches: list[Any], device: torch.device, precision: str) -> dict[str, float]:
    """Mean TAP-Vid AJ / delta_avg / OA (query mode "first") over the validation videos."""
    from engine.analysis.metrics import mean_scores, tapvid_metrics

    was_training = model.training
    model.eval()
    scores = []
    for batch in batches:
        with _autocast(device, precision):
            pos, vis, acc = model(batch.video, batch.queries)[0][-1]
        pred = pos.float().cpu().numpy()
        pred_vis = visible_from_logits(vis, acc).cpu().numpy()
        gt = batch.tracks.cpu().numpy()
        gt_vis = batch.visible.cpu().numpy()
        qt = batch.queries[..., 0].round().long().cpu().numpy()
        h, w = batch.video.shape[2:4]
        for i in range(pred.shape[0]):
            scores.append(tapvid_metrics(pred[i], pred_vis[i], gt[i], gt_vis[i], qt[i], size=(w, h),
                                         query_mode="first"))
    model.train(was_training)
    mean = mean_scores(scores)
    return {"aj": float(mean["aj"]), "delta_avg": float(mean["delta_avg"]), "oa": float(mean["oa"])}


def train(args: argparse.Namespace) -> int:
    from engine.training.synthetic import SynthConfig, TextureBank, generate_batch
    from engine.training.synthetic.views import ALL_VIEWS, batch_view

    if args.batch_size < 1 or args.num_points < 1 or args.num_frames < 2:
        raise UserError("batch size and points must be >= 1 and frames >= 2")
    if args.echo < 1 or args.huber_delta <= 0:
        raise UserError("--echo must be >= 1 and --huber-delta > 0")
    if args.steps <= 0 and args.minutes <= 0:
        raise UserError("give --steps or a positive --minutes")
    device = resolve_device(args.device)
    torch.manual_seed(args.seed)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        torch.backends.cudnn.benchmark = True
    t_setup = time.perf_counter()
    prior_steps, prior_curve, prior_runs = 0, [], []
    if args.resume is not None:
        model, manifest = load_model(args.resume, device)
        prior_steps = int(manifest.get("training", {}).get("total_steps", 0))
        prior_curve = list(manifest.get("curve", []))
        prior_runs = list(manifest.get("runs", [manifest["training"]] if "training" in manifest else []))
    else:
        model = CorrTrackNet().to(device)
    model.backbone.to(memory_format=torch.channels_last)  # type: ignore[call-overload]  # torch's stubs lack it
    model.train()
    step_fn = torch.compile(model) if args.compile else model
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay, betas=ADAM_BETAS,
                            fused=device.type == "cuda")
    textures = TextureBank.build(device, size=args.texture_size, photos=True, procedural=PROCEDURAL_TEXTURES,
                                 seed=TRAIN_TEXTURE_SEED, split="train")
    cfg = SynthConfig(num_frames=args.num_frames, num_points=args.num_points)
    gen = torch.Generator(device=device)
    gen.manual_seed(args.seed * 7919 + 17)
    view_rng = random.Random(args.seed)
    val_batches = make_val_set(device, args.val_videos, args.num_frames, args.num_points, VAL_BATCH,
                               args.texture_size)
    args.out.mkdir(parents=True, exist_ok=True)
    command = "trackscope train " + " ".join(shlex.quote(a) for a in sys.argv[2:]) if len(sys.argv) > 1 else ""
    print(f"setup {time.perf_counter() - t_setup:.1f} s; {count_parameters(model)} parameters; "
          f"{len(textures)} train textures; device {device}", flush=True)

    curve: list[dict[str, float]] = prior_curve
    args.prior_steps = prior_steps
    args.prior_runs = prior_runs
    log: list[dict[str, float]] = []
    budget_s = args.minutes * 60.0
    t0 = time.perf_counter()
    last_val = t0
    step = 0
    probes: list[float] = []
    while True:
        elapsed = time.perf_counter() - t0
        progress = step / args.steps if args.steps > 0 else elapsed / budget_s
        if progress >= 1.0:
            break
        share = lr_share(progress, step, args.warmup_steps)
        for group in opt.param_groups:
            group["lr"] = args.lr * share
        probe = step in PROBE_STEPS and device.type == "cuda"
        if probe:
            torch.cuda.synchronize(device)
            t_gen = time.perf_counter()
        if step % args.echo == 0:
            rendered = generate_batch(args.batch_size, cfg, textures, gen, device)
            batch = rendered
        else:
            batch = batch_view(rendered, view_rng.randrange(1, ALL_VIEWS))
        if probe:
            torch.cuda.synchronize(device)
            t_step = time.perf_counter()
            probes.append((t_step - t_gen) * 1e3)
        with _autocast(device, args.precision):
            outputs, match_logits = step_fn(batch.video, batch.queries)
        terms = track_losses(outputs, match_logits, batch.tracks, batch.visible, args.huber_delta)
        opt.zero_grad(set_to_none=True)
        terms.total.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), GRAD_CLIP)
        opt.step()
        if probe:
            torch.cuda.synchronize(device)
            probes.append((time.perf_counter() - t_step) * 1e3)
            if step == PROBE_STEPS[-1]:
                print(f"probe: batch (render or view) {statistics.median(probes[0::2]):.1f} ms, update "
                      f"{statistics.median(probes[1::2]):.1f} ms per step (median of {len(PROBE_STEPS)})", flush=True)
        step += 1
        if step % LOG_EVERY == 0:
            row = {"step": step, "time_s": time.perf_counter() - t0, "lr": args.lr * share,
                   "loss": terms.total.item(), "position": terms.position.item(),
                   "visibility": terms.visibility.item(), "accuracy": terms.accuracy.item(),
                   "match": terms.match.item()}
            log.append(row)
            print(" ".join(f"{k} {v:.4g}" for k, v in row.items()), flush=True)
        if time.perf_counter() - last_val >= args.val_every:
            curve.append(_validate_and_save(model, val_batches, device, args, step, t0, curve, log, command))
            last_val = time.perf_counter()
    curve.append(_validate_and_save(model, val_batches, device, args, step, t0, curve, log, command))
    print(f"done: {step} steps in {time.perf_counter() - t0:.0f} s; final validation {curve[-1]}", flush=True)
    return 0


def _validate_and_save(model: CorrTrackNet, val_batches: list[Any], device: torch.device, args: argparse.Namespace,
                       step: int, t0: float, curve: list[dict[str, float]], log: list[dict[str, float]],
                       command: str) -> dict[str, float]:
    scores = validate(model, val_batches, device, args.precision)
    point = {"step": args.prior_steps + step, "time_s": round(time.perf_counter() - t0, 1),
             **{k: round(v, 4) for k, v in scores.items()}}
    print(f"validation step {point['step']}: AJ {scores['aj']:.4f} delta_avg {scores['delta_avg']:.4f} "
          f"OA {scores['oa']:.4f}", flush=True)
    history = curve + [point]
    training = {
        "command": command,
        "steps": step,
        "total_steps": args.prior_steps + step,
        "resumed_from": str(args.resume) if args.resume else None,
        "batch_size": args.batch_size, "num_frames": args.num_frames, "num_points": args.num_points,
        "lr": args.lr, "precision": args.precision, "seed": args.seed, "echo": args.echo,
        "huber_delta": args.huber_delta,
        "device": device_name(device),
        "seconds": point["time_s"],
    }
    extra = {
        "training": training,
        "runs": args.prior_runs + [training],
        "validation": {"aj": point["aj"], "delta_avg": point["delta_avg"], "oa": point["oa"],
                       "videos": args.val_videos, "seed": VAL_SEED, "query_mode": "first",
                       "num_frames": args.num_frames, "num_points": args.num_points},
        "curve": history,
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    save_model(model, args.out / "last.safetensors", extra)
    with atomic_open(args.out / "train_log.json") as f:
        f.write(json.dumps({"curve": history, "log": log}, indent=1) + "\n")
    return point
