"""`trackscope train`: train CorrTrack on synthetic videos rendered on the fly on the device.

Batches of B videos go through the network together. The learning rate warms up, then follows a
cosine to zero over the run, measured in steps (``--steps``) or in wall-clock time (``--minutes``,
for fixed-length device leases). Validation (AJ, delta_avg, OA on a fixed set rendered from the "val"
texture split with a fixed seed) runs every ``--val-every`` seconds and at the end; each validation
writes ``last.safetensors`` + manifest into ``--out``, so an interrupted run still leaves weights.

v2 (temporal attention, ``--attention-layers``): ``--init-from`` warm-starts it from v1 weights (every v1
tensor, the new attention layers at zero output), ``--resume`` continues a v2 checkpoint (its config from
its manifest). Training data for a v2 net gets texture-poor surfaces and motion blur by default
(V2_DATA_DEFAULTS). Beside the v1 validation set (unchanged, so curves compare) a second, "hard" set is
scored: texture-poor surfaces and motion blur in longer clips (HARD_VAL_*), logged as ``hard_aj`` etc.

v3 (attention across tracks, ``--track-attention-layers``): ``--init-from`` warm-starts it from v2 (or v1) weights
the same way (the track attention at zero output), ``--resume`` keeps a v3 checkpoint's config. The N training
points of a video are the tracks that attend to each other; as at test time (the tracker) each video's queries
get ``--support-grid``^2 support queries on frame 0 appended (support.py), with no loss on their rows; the
validation runs with them too.
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
from engine.trackers.corrtrack.model import (
    MODEL_SIZE,
    CorrTrackConfig,
    CorrTrackNet,
    count_parameters,
    visible_from_logits,
)
from engine.trackers.corrtrack.support import SUPPORT_GRID, support_count, with_support
from engine.trackers.corrtrack.weights import load_model, save_model, warm_start
from engine.training.losses import track_losses

VAL_SEED = 20261130
VAL_TEXTURE_SEED = 1
VAL_BATCH = 16  # videos per validation batch (fixed: the set depends on how it is batched)
VAL_FRAMES = 24  # frames of the v1 validation videos (every v1 run validated at 24)
HARD_VAL_SEED = 20261201
HARD_VAL_BATCH = 8
HARD_VAL_FRAMES = 48
#: the hard validation set's look: texture-poor backgrounds and some sprites, motion blur, longer clips
HARD_VAL_KNOBS: dict[str, Any] = {"texture_poor_share": 0.5, "texture_poor_sprite_share": 0.25, "motion_blur_prob": 0.5}
#: synthetic-data knobs a v2 net trains with unless the command sets them (a v1 net: all 0, as before)
V2_DATA_DEFAULTS = {"texture_poor_share": 0.3, "texture_poor_sprite_share": 0.15, "motion_blur_prob": 0.25,
                    "anchored_sprite_share": 0.0}
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
                 texture_size: int = TEXTURE_SIZE, procedural: int = PROCEDURAL_TEXTURES, seed: int = VAL_SEED,
                 textures: Any = None, **knobs: Any) -> list[Any]:
    """The fixed validation batches (val texture split, ``seed``; ``knobs``: more SynthConfig fields)."""
    from engine.training.synthetic import SynthConfig, TextureBank, generate_batch

    if textures is None:
        textures = TextureBank.build(device, size=texture_size, photos=True, procedural=procedural,
                                     seed=VAL_TEXTURE_SEED, split="val")
    cfg = SynthConfig(num_frames=num_frames, num_points=num_points, **knobs)
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    batches = []
    for start in range(0, num_videos, batch_size):
        batches.append(generate_batch(min(batch_size, num_videos - start), cfg, textures, gen, device))
    return batches


def support_grid_for(cfg: CorrTrackConfig, grid: int) -> int:
    """Support points per side a net of ``cfg`` trains and validates with: ``grid`` for v3, 0 for v1/v2."""
    return grid if cfg.track_attention_layers > 0 else 0


def run_with_support(model: Any, video: torch.Tensor, queries: torch.Tensor, grid: int
                     ) -> tuple[list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]], torch.Tensor]:
    """``model(video, queries)`` with grid^2 support queries appended to each video's (as the tracker does), their
    rows dropped from the estimates and match logits: -> the outputs for ``queries`` [B, N, 3] only."""
    if grid <= 0:
        return model(video, queries)
    n = queries.shape[1]
    outputs, match_logits = model(video, with_support(queries, grid, MODEL_SIZE))
    return [(pos[:, :n], vis[:, :n], acc[:, :n]) for pos, vis, acc in outputs], match_logits[:, :n]


@torch.no_grad()
def validate(model: CorrTrackNet, batches: list[Any], device: torch.device, precision: str,
             support_grid: int = 0) -> dict[str, float]:
    """Mean TAP-Vid AJ / delta_avg / OA (query mode "first") over the validation videos (``support_grid``: support
    points per side appended to each video's queries, as a v3 tracker does)."""
    from engine.analysis.metrics import mean_scores, tapvid_metrics

    was_training = model.training
    model.eval()
    scores = []
    for batch in batches:
        with _autocast(device, precision):
            pos, vis, acc = run_with_support(model, batch.video, batch.queries, support_grid)[0][-1]
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

    for name, default in (("init_from", None), ("attention_layers", None), ("attention_heads", None),
                          ("track_attention_layers", None), ("support_grid", SUPPORT_GRID),
                          ("val_frames", VAL_FRAMES), ("hard_val_videos", 0), ("hard_val_frames", HARD_VAL_FRAMES)):
        if not hasattr(args, name):  # a Namespace built before these options existed
            setattr(args, name, default)
    if args.batch_size < 1 or args.num_points < 1 or args.num_frames < 2:
        raise UserError("batch size and points must be >= 1 and frames >= 2")
    if args.support_grid < 0 or (args.track_attention_layers is not None and args.track_attention_layers < 0):
        raise UserError("--support-grid and --track-attention-layers must be >= 0")
    if args.echo < 1 or args.huber_delta <= 0:
        raise UserError("--echo must be >= 1 and --huber-delta > 0")
    if args.steps <= 0 and args.minutes <= 0:
        raise UserError("give --steps or a positive --minutes")
    if args.resume is not None and args.init_from is not None:
        raise UserError("give --resume (continue a checkpoint) or --init-from (warm-start a new net), not both")
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
        layers = getattr(args, "attention_layers", None)
        if layers is not None and layers != model.cfg.attention_layers:
            raise UserError(f"{args.resume} has {model.cfg.attention_layers} attention layer(s), --attention-layers "
                            f"says {layers}", "to add attention to v1 weights use --init-from instead of --resume")
        track_layers = getattr(args, "track_attention_layers", None)
        if track_layers is not None and track_layers != model.cfg.track_attention_layers:
            raise UserError(f"{args.resume} has {model.cfg.track_attention_layers} track attention layer(s), "
                            f"--track-attention-layers says {track_layers}",
                            "to add track attention to v2 weights use --init-from instead of --resume")
        prior_steps = int(manifest.get("training", {}).get("total_steps", 0))
        prior_curve = list(manifest.get("curve", []))
        prior_runs = list(manifest.get("runs", [manifest["training"]] if "training" in manifest else []))
    elif args.init_from is not None:  # its history carries over: the new layers start by changing nothing
        model, manifest = warm_start(args.init_from, args.attention_layers or 0, args.attention_heads, device,
                                     track_attention_layers=args.track_attention_layers or 0)
        prior_steps = int(manifest.get("training", {}).get("total_steps", 0))
        prior_curve = list(manifest.get("curve", []))
        prior_runs = list(manifest.get("runs", [manifest["training"]] if "training" in manifest else []))
    else:
        model = CorrTrackNet(CorrTrackConfig(attention_layers=args.attention_layers or 0,
                                             attention_heads=args.attention_heads or 4,
                                             track_attention_layers=args.track_attention_layers or 0)).to(device)
    args.data_knobs = data_knobs(args, model.cfg)
    args.run_support_grid = grid = support_grid_for(model.cfg, args.support_grid)
    model.backbone.to(memory_format=torch.channels_last)  # type: ignore[call-overload]  # torch's stubs lack it
    model.train()
    step_fn = torch.compile(model) if args.compile else model
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay, betas=ADAM_BETAS,
                            fused=device.type == "cuda")
    textures = TextureBank.build(device, size=args.texture_size, photos=True, procedural=PROCEDURAL_TEXTURES,
                                 seed=TRAIN_TEXTURE_SEED, split="train")
    cfg = SynthConfig(num_frames=args.num_frames, num_points=args.num_points, **args.data_knobs)
    gen = torch.Generator(device=device)
    gen.manual_seed(args.seed * 7919 + 17)
    view_rng = random.Random(args.seed)
    val_textures = TextureBank.build(device, size=args.texture_size, photos=True, procedural=PROCEDURAL_TEXTURES,
                                     seed=VAL_TEXTURE_SEED, split="val")
    val_batches = {"": make_val_set(device, args.val_videos, args.val_frames, args.num_points, VAL_BATCH,
                                    textures=val_textures)}
    if args.hard_val_videos > 0:
        val_batches["hard_"] = make_val_set(device, args.hard_val_videos, args.hard_val_frames, args.num_points,
                                            HARD_VAL_BATCH, seed=HARD_VAL_SEED, textures=val_textures,
                                            **HARD_VAL_KNOBS)
    args.out.mkdir(parents=True, exist_ok=True)
    command = "trackscope train " + " ".join(shlex.quote(a) for a in sys.argv[2:]) if len(sys.argv) > 1 else ""
    print(f"setup {time.perf_counter() - t_setup:.1f} s; {count_parameters(model)} parameters (CorrTrack "
          f"{model.cfg.version}, {model.cfg.attention_layers} attention layer(s){_v3_words(model.cfg, grid)}); "
          f"{len(textures)} train textures; "
          f"data {args.data_knobs}; device {device}", flush=True)

    curve: list[dict[str, float]] = prior_curve
    args.prior_steps = prior_steps
    args.prior_runs = prior_runs
    log: list[dict[str, float]] = []
    budget_s = args.minutes * 60.0
    t0 = time.perf_counter()
    last_val = t0
    step = 0
    probes: list[float] = []
    if args.init_from is not None:  # the warm start's score before any step (v2 from v1: v1's score)
        curve.append(_validate_and_save(model, val_batches, device, args, step, t0, curve, log, command))
        t0 = last_val = time.perf_counter()
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
            outputs, match_logits = run_with_support(step_fn, batch.video, batch.queries, grid)  # no loss on support
        terms = track_losses(outputs, match_logits, batch.tracks, batch.visible, args.huber_delta)
        opt.zero_grad(set_to_none=True)
        terms.total.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), GRAD_CLIP)
        opt.step()
        if probe:
            torch.cuda.synchronize(device)
            probes.append((time.perf_counter() - t_step) * 1e3)
            if step == PROBE_STEPS[-1]:
                peak = torch.cuda.max_memory_allocated(device) / 2**30
                print(f"probe: batch (render or view) {statistics.median(probes[0::2]):.1f} ms, update "
                      f"{statistics.median(probes[1::2]):.1f} ms per step (median of {len(PROBE_STEPS)}); peak "
                      f"memory {peak:.1f} GiB", flush=True)
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


def _v3_words(cfg: CorrTrackConfig, grid: int) -> str:
    """The setup line's words on a v3 net's track attention and support points ('' for v1/v2)."""
    if cfg.track_attention_layers <= 0:
        return ""
    return f", {cfg.track_attention_layers} track attention layer(s), {support_count(grid)} support points"


def data_knobs(args: argparse.Namespace, cfg: CorrTrackConfig) -> dict[str, float]:
    """The synthetic-data knobs of this run: the command's, else V2_DATA_DEFAULTS for a v2 or v3 net, 0 for v1."""
    defaults = V2_DATA_DEFAULTS if cfg.version != "v1" else dict.fromkeys(V2_DATA_DEFAULTS, 0.0)
    knobs = {}
    for name, default in defaults.items():
        value = getattr(args, name, None)
        knobs[name] = float(default if value is None else value)
        if not 0.0 <= knobs[name] <= 1.0:
            raise UserError(f"--{name.replace('_', '-')} must lie in [0, 1], got {value}")
    return knobs


def _validate_and_save(model: CorrTrackNet, val_batches: dict[str, list[Any]], device: torch.device,
                       args: argparse.Namespace, step: int, t0: float, curve: list[dict[str, float]],
                       log: list[dict[str, float]], command: str) -> dict[str, float]:
    point: dict[str, float] = {"step": args.prior_steps + step, "time_s": round(time.perf_counter() - t0, 1)}
    words = []
    for prefix, batches in val_batches.items():
        scores = validate(model, batches, device, args.precision, getattr(args, "run_support_grid", 0))
        point.update({prefix + k: round(v, 4) for k, v in scores.items()})
        label = "hard (texture-poor + motion blur, " f"{args.hard_val_frames} frames): " if prefix else ""
        words.append(f"{label}AJ {scores['aj']:.4f} delta_avg {scores['delta_avg']:.4f} OA {scores['oa']:.4f}")
    print(f"validation step {point['step']}: " + " | ".join(words), flush=True)
    history = curve + [point]
    training = {
        "command": command,
        "steps": step,
        "total_steps": args.prior_steps + step,
        "resumed_from": str(args.resume) if args.resume else None,
        "batch_size": args.batch_size, "num_frames": args.num_frames, "num_points": args.num_points,
        "lr": args.lr, "precision": args.precision, "seed": args.seed, "echo": args.echo,
        "huber_delta": args.huber_delta,
        "init_from": str(args.init_from) if getattr(args, "init_from", None) else None,
        "data": args.data_knobs,
        **({"support_grid": args.run_support_grid} if getattr(args, "run_support_grid", 0) else {}),
        "device": device_name(device),
        "seconds": point["time_s"],
    }
    extra = {
        "training": training,
        "runs": args.prior_runs + [training],
        "validation": {"aj": point["aj"], "delta_avg": point["delta_avg"], "oa": point["oa"],
                       "videos": args.val_videos, "seed": VAL_SEED, "query_mode": "first",
                       "num_frames": args.val_frames, "num_points": args.num_points},
        **({"validation_hard": {"aj": point["hard_aj"], "delta_avg": point["hard_delta_avg"],
                                "oa": point["hard_oa"], "videos": args.hard_val_videos, "seed": HARD_VAL_SEED,
                                "query_mode": "first", "num_frames": args.hard_val_frames,
                                "num_points": args.num_points, **HARD_VAL_KNOBS}}
           if "hard_aj" in point else {}),
        "curve": history,
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    save_model(model, args.out / "last.safetensors", extra)
    with atomic_open(args.out / "train_log.json") as f:
        f.write(json.dumps({"curve": history, "log": log}, indent=1) + "\n")
    return point
