"""`trackscope train`: train CorrTrack on synthetic videos (a GPU is strongly advised)."""

from __future__ import annotations

import argparse
from pathlib import Path

from engine.core.outputs import check_output_folder
from engine.trackers.corrtrack.support import SUPPORT_GRID
from engine.training.corrtrack import HARD_VAL_FRAMES, TEXTURE_SIZE, VAL_FRAMES, train
from engine.training.losses import HUBER_DELTA_PX


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", type=Path, default=Path("out/corrtrack"), help="folder for weights and the log")
    p.add_argument("--minutes", type=float, default=8.0, help="training time budget (ignored with --steps)")
    p.add_argument("--steps", type=int, default=0, help="train this many steps (0: use --minutes)")
    p.add_argument("--batch-size", type=int, default=16, help="videos per step")
    p.add_argument("--num-points", type=int, default=128)
    p.add_argument("--num-frames", type=int, default=24)
    p.add_argument("--lr", type=float, default=1e-3, help="peak learning rate")
    p.add_argument("--weight-decay", type=float, default=1e-4)
    p.add_argument("--warmup-steps", type=int, default=200)
    p.add_argument("--huber-delta", type=float, default=HUBER_DELTA_PX,
                   help="pixels where the position loss turns from quadratic to linear")
    p.add_argument("--echo", type=int, default=1,
                   help="steps per rendered batch: each reuse sees a random flip/transpose/time-reversed view")
    p.add_argument("--resume", type=Path, default=None,
                   help="continue from these weights (safetensors + manifest; the network's config is theirs)")
    p.add_argument("--init-from", type=Path, default=None,
                   help="warm-start a new network from these weights (e.g. v1's resources/corrtrack.safetensors "
                        "with --attention-layers 1: every v1 tensor loaded, the attention added at zero output)")
    p.add_argument("--attention-layers", type=int, default=None,
                   help="temporal attention layers per refinement iteration (0: v1, the default; 1: v2)")
    p.add_argument("--attention-heads", type=int, default=None, help="heads of each attention layer (default 4)")
    p.add_argument("--track-attention-layers", type=int, default=None,
                   help="attention layers across tracks per refinement iteration (0: v1/v2, the default; 1: v3); "
                        "with --init-from resources/corrtrack_v2.safetensors: every v2 tensor loaded, the track "
                        "attention added at zero output")
    p.add_argument("--support-grid", type=int, default=SUPPORT_GRID,
                   help=f"v3: support points per side appended to each video's queries on frame 0, no loss on them "
                        f"(default {SUPPORT_GRID}, as the tracker; 0: none)")
    p.add_argument("--texture-poor-share", type=float, default=None,
                   help="share of training backgrounds with a texture-poor surface (default 0.3 for v2/v3, 0 for v1)")
    p.add_argument("--texture-poor-sprite-share", type=float, default=None,
                   help="share of training sprites with one (default 0.15 for v2 and v3, 0 for v1)")
    p.add_argument("--motion-blur-prob", type=float, default=None,
                   help="share of training videos with motion blur (default 0.25 for v2 and v3, 0 for v1)")
    p.add_argument("--anchored-sprite-share", type=float, default=None,
                   help="share of training sprites fixed to the background plane, moving with the camera (context "
                        "for texture-poor backgrounds; default 0)")
    p.add_argument("--val-every", type=float, default=60.0, help="seconds between validations")
    p.add_argument("--val-videos", type=int, default=32)
    p.add_argument("--val-frames", type=int, default=VAL_FRAMES, help="frames of the (v1) validation videos")
    p.add_argument("--hard-val-videos", type=int, default=16,
                   help="videos of the second validation set (texture-poor + motion blur; 0: none)")
    p.add_argument("--hard-val-frames", type=int, default=HARD_VAL_FRAMES, help="frames of its videos")
    p.add_argument("--precision", choices=("fp32", "bf16"), default="bf16", help="autocast dtype for training")
    p.add_argument("--compile", action="store_true", help="torch.compile the network")
    p.add_argument("--device", default="auto")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--texture-size", type=int, default=TEXTURE_SIZE)


def run(args: argparse.Namespace) -> int:
    check_output_folder(args.out, "--out")  # before any training: a file, a read-only or impossible place
    return train(args)
