"""Exact geometric views of a rendered batch: flips, transpose and time reversal.

Training reuses each rendered batch for a few steps ("data echoing") when rendering costs as much as
the update; each reuse shows the network a different view, whose ground truth stays exact because the
transforms only permute pixels and frames.
"""

from __future__ import annotations

import torch

from engine.training.synthetic.config import SynthBatch

FLIP_X, FLIP_Y, TRANSPOSE, REVERSE = 1, 2, 4, 8
ALL_VIEWS = 16  # views are the 16 combinations of the four bits; 0 is the batch itself


def batch_view(batch: SynthBatch, view: int) -> SynthBatch:
    """The batch seen through ``view`` (a combination of FLIP_X, FLIP_Y, TRANSPOSE, REVERSE bits)."""
    if not 0 <= view < ALL_VIEWS:
        raise ValueError(f"view must be in [0, {ALL_VIEWS}), got {view}")
    video, tracks, visible, queries = batch.video, batch.tracks, batch.visible, batch.queries
    num_frames, height, width = video.shape[1:4]
    if view & TRANSPOSE:
        if height != width:
            raise ValueError("transpose needs square frames")
        video = video.transpose(2, 3)
        tracks = tracks.flip(-1)
        queries = torch.cat([queries[..., :1], queries[..., 1:].flip(-1)], dim=-1)
    if view & FLIP_X:
        video = video.flip(3)
        tracks = torch.stack([width - 1 - tracks[..., 0], tracks[..., 1]], dim=-1)
        queries = torch.stack([queries[..., 0], width - 1 - queries[..., 1], queries[..., 2]], dim=-1)
    if view & FLIP_Y:
        video = video.flip(2)
        tracks = torch.stack([tracks[..., 0], height - 1 - tracks[..., 1]], dim=-1)
        queries = torch.stack([queries[..., 0], queries[..., 1], height - 1 - queries[..., 2]], dim=-1)
    if view & REVERSE:
        video = video.flip(1)
        tracks = tracks.flip(2)
        visible = visible.flip(2)
        queries = torch.cat([num_frames - 1 - queries[..., :1], queries[..., 1:]], dim=-1)
    return SynthBatch(video=video.contiguous(), tracks=tracks.contiguous(), visible=visible.contiguous(),
                      queries=queries.contiguous())
