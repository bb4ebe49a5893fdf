"""Plugin trackers whose results or side effects are hostile: wrong types, absurd values, huge messages.

Use as ``--tracker tests.plugins.hostile:NAME``:

| factory          | what it does while tracking                                                     |
| returns_str      | a Tracker whose ``track()`` returns a str                                      |
| complex_tracks   | returns complex64 tracks                                                        |
| int_tracks       | returns int64 tracks                                                            |
| far_tracks       | returns tracks at 1e38 pixels                                                   |
| nan_visible      | returns float visibility holding NaN                                            |
| huge_message     | raises a ValueError whose message is 20 MiB                                    |
| closes_stdout    | closes ``sys.stdout``, then tracks normally                                    |
"""

from __future__ import annotations

import sys

import numpy as np
import torch
from torch import nn

from engine.trackers.base import PreparedVideo, RunContext, Tracker

#: the size of huge_message's exception text, characters
HUGE_MESSAGE_CHARS = 20 * 2**20


def _still(frames: torch.Tensor, queries: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Every point stays where it was queried: tracks [N, T, 2], visible [N, T]."""
    t = frames.shape[0]
    return queries[:, None, 1:].expand(-1, t, -1).clone(), torch.ones(queries.shape[0], t, dtype=torch.bool)


class ReturnsStr(Tracker):
    name = "returns-str"

    def prepare(self, frames: np.ndarray, ctx: RunContext) -> PreparedVideo:
        return PreparedVideo(frames.shape[0], frames.shape[1], frames.shape[2], {})

    def track(self, prepared, queries, ctx):  # type: ignore[override]
        return "tracks"


class _Outputs(nn.Module):
    """Tracks and visibility from ``_still``, passed through ``change``."""

    def __init__(self, change) -> None:
        super().__init__()
        self.change = change

    def forward(self, frames: torch.Tensor, queries: torch.Tensor):
        return self.change(*_still(frames, queries))


class _HugeMessage(nn.Module):
    def forward(self, frames: torch.Tensor, queries: torch.Tensor):
        raise ValueError("x" * HUGE_MESSAGE_CHARS)


class _ClosesStdout(nn.Module):
    def forward(self, frames: torch.Tensor, queries: torch.Tensor):
        sys.stdout.close()
        return _still(frames, queries)


def returns_str() -> Tracker:
    return ReturnsStr()


def complex_tracks() -> nn.Module:
    return _Outputs(lambda tracks, visible: (tracks.to(torch.complex64), visible))


def int_tracks() -> nn.Module:
    return _Outputs(lambda tracks, visible: (tracks.to(torch.int64), visible))


def far_tracks() -> nn.Module:
    return _Outputs(lambda tracks, visible: (torch.full_like(tracks, 1e38), visible))


def nan_visible() -> nn.Module:
    def change(tracks, visible):
        visible = visible.float()
        visible[0, 0] = float("nan")
        return tracks, visible

    return _Outputs(change)


def huge_message() -> nn.Module:
    return _HugeMessage()


def closes_stdout() -> nn.Module:
    return _ClosesStdout()
