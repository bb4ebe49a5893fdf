"""Training losses of CorrTrack: Huber on position, BCE on visibility, BCE on "error < ACCURACY_PX"."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from engine.trackers.corrtrack.model import ACCURACY_PX, FEATURE_STRIDE, INIT_LEVEL, POOL_FACTORS

HUBER_DELTA_PX = 4.0  # quadratic below, linear above (pixels at the model's 256x256 resolution)
# The loss is huber / delta, so above delta every pixel of error weighs the same whatever delta is; a
# smaller delta only strengthens the pull on errors below it (sub-pixel precision).
POSITION_WEIGHT = 0.05  # a 20 px error weighs about as much as a confident visibility mistake
VISIBILITY_WEIGHT = 1.0
ACCURACY_WEIGHT = 0.5
MATCH_WEIGHT = 1.0
ITERATION_DECAY = 0.8  # iteration k of K weighs ITERATION_DECAY ** (K - k), as RAFT does


@dataclass
class LossTerms:
    """The total and its parts (detached parts, for logging)."""

    total: torch.Tensor
    position: torch.Tensor
    visibility: torch.Tensor
    accuracy: torch.Tensor
    match: torch.Tensor


def _masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    mask = mask.to(x.dtype)
    return (x * mask).sum() / mask.sum().clamp_min(1.0)


def match_loss(logits: torch.Tensor, gt_tracks: torch.Tensor, gt_visible: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of the global match: softmax over each frame's map against the true cell.

    logits [B, N, T, s, s] (scaled correlation at the init level); the target is the ground-truth position
    spread bilinearly over its four cells. Counts visible points only.
    """
    s = logits.shape[-1]
    stride = FEATURE_STRIDE * POOL_FACTORS[INIT_LEVEL]
    flat = logits.float().flatten(-2)  # [B, N, T, s*s]
    cell = ((gt_tracks + 0.5) / stride - 0.5).clamp(0, s - 1)
    base = torch.floor(cell).clamp(max=s - 2)
    frac = cell - base
    x0 = base[..., 0].long()
    y0 = base[..., 1].long()
    fx, fy = frac[..., 0], frac[..., 1]
    target = torch.zeros_like(flat[..., 0])
    for dy, dx, w in ((0, 0, (1 - fx) * (1 - fy)), (0, 1, fx * (1 - fy)), (1, 0, (1 - fx) * fy), (1, 1, fx * fy)):
        idx = ((y0 + dy) * s + (x0 + dx)).unsqueeze(-1)
        target = target + w * torch.gather(flat, -1, idx).squeeze(-1)
    ce = torch.logsumexp(flat, dim=-1) - target
    return _masked_mean(ce, gt_visible)


def track_losses(outputs: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]], match_logits: torch.Tensor,
                 gt_tracks: torch.Tensor, gt_visible: torch.Tensor, huber_delta: float = HUBER_DELTA_PX
                 ) -> LossTerms:
    """Losses over every estimate (initial + iterations) and the global match.

    outputs: [(pos [B, N, T, 2], vis logit [B, N, T], acc logit [B, N, T])]; match_logits [B, N, T, s, s];
    gt_tracks [B, N, T, 2], gt_visible bool [B, N, T]. Positions count only where the point is visible.
    """
    gt_vis = gt_visible.float()
    k = len(outputs) - 1
    pos_sum = torch.zeros((), device=gt_tracks.device)
    vis_sum = torch.zeros((), device=gt_tracks.device)
    acc_sum = torch.zeros((), device=gt_tracks.device)
    for i, (pos, vis, acc) in enumerate(outputs):
        weight = ITERATION_DECAY ** (k - i)
        err = pos.float() - gt_tracks
        huber = F.huber_loss(err, torch.zeros_like(err), reduction="none", delta=huber_delta).sum(-1)
        pos_sum = pos_sum + weight * _masked_mean(huber / huber_delta, gt_visible)
        vis_sum = vis_sum + weight * F.binary_cross_entropy_with_logits(vis.float(), gt_vis)
        accurate = (err.detach().norm(dim=-1) < ACCURACY_PX).float()
        acc_bce = F.binary_cross_entropy_with_logits(acc.float(), accurate, reduction="none")
        acc_sum = acc_sum + weight * _masked_mean(acc_bce, gt_visible)
    match = match_loss(match_logits, gt_tracks, gt_visible)
    total = (POSITION_WEIGHT * pos_sum + VISIBILITY_WEIGHT * vis_sum + ACCURACY_WEIGHT * acc_sum
             + MATCH_WEIGHT * match)
    return LossTerms(total, pos_sum.detach(), vis_sum.detach(), acc_sum.detach(), match.detach())
