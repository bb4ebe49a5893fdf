"""Plugin trackers that misbehave the way real plugins do: hang, exit, interrupt, leave threads, write frames.

Use as ``--tracker tests.plugins.misbehaving:hangs`` (and so on):

| factory          | what it does while tracking                                               |
| hangs            | waits on ``RELEASE``, an Event only a test's clean-up sets (a hang)      |
| hangs_in_factory | its factory waits on ``RELEASE``                                          |
| exits            | calls ``sys.exit(3)``                                                     |
| interrupts       | raises ``KeyboardInterrupt``                                             |
| leaves_thread    | starts a non-daemon thread waiting on ``RELEASE``, then tracks normally  |
| writes_frames    | zeroes the frames it is given, then tracks normally                      |
| writes_numpy     | a Tracker whose ``prepare`` zeroes its numpy frames                       |
| exits_describing | a Tracker whose ``describe()`` calls ``sys.exit(4)``                      |

``RELEASE`` frees every waiting call, so a test ends its threads when it is done with them.
"""

from __future__ import annotations

import sys
import threading

import numpy as np
import torch
from torch import nn

from engine.trackers.base import PreparedVideo, RunContext, Tracker, TrackResult

#: set by a test's clean-up: every hung call and left thread returns
RELEASE = threading.Event()
#: set when a hung call has started waiting (so a test knows the plugin is inside it)
ENTERED = threading.Event()
#: the name of the thread ``leaves_thread`` starts
LEFT_THREAD_NAME = "plugin-left-thread"


def _still(frames: torch.Tensor, queries: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Every point stays where it was queried: tracks [N, T, 2], visible [N, T]."""
    t = frames.shape[0]
    return queries[:, None, 1:].expand(-1, t, -1).clone(), torch.ones(queries.shape[0], t, dtype=torch.bool)


class _Hangs(nn.Module):
    def forward(self, frames: torch.Tensor, queries: torch.Tensor):
        ENTERED.set()
        RELEASE.wait()
        return _still(frames, queries)


class _Exits(nn.Module):
    def forward(self, frames: torch.Tensor, queries: torch.Tensor):
        sys.exit(3)


class _Interrupts(nn.Module):
    def forward(self, frames: torch.Tensor, queries: torch.Tensor):
        raise KeyboardInterrupt


class _LeavesThread(nn.Module):
    def forward(self, frames: torch.Tensor, queries: torch.Tensor):
        if not any(t.name == LEFT_THREAD_NAME for t in threading.enumerate()):
            threading.Thread(target=RELEASE.wait, name=LEFT_THREAD_NAME, daemon=False).start()
        return _still(frames, queries)


class _WritesFrames(nn.Module):
    def forward(self, frames: torch.Tensor, queries: torch.Tensor):
        frames.zero_()
        queries[:, 1:] = -1.0
        t = frames.shape[0]
        return torch.zeros(queries.shape[0], t, 2), torch.ones(queries.shape[0], t, dtype=torch.bool)


class WritesNumpy(Tracker):
    """A Tracker plugin whose ``prepare`` zeroes the numpy frames it is handed."""

    name = "writes_numpy"
    stages = ("track",)

    def prepare(self, frames: np.ndarray, ctx: RunContext) -> PreparedVideo:
        frames[...] = 0
        return PreparedVideo(int(frames.shape[0]), int(frames.shape[1]), int(frames.shape[2]), {})

    def track(self, prepared: PreparedVideo, queries: np.ndarray, ctx: RunContext) -> TrackResult:
        tracks = np.repeat(queries[:, None, 1:], prepared.num_frames, axis=1)
        return TrackResult(tracks, np.ones(tracks.shape[:2], dtype=bool))


class ExitsDescribing(WritesNumpy):
    """A Tracker plugin whose ``describe()`` (asked before any batch) exits the process."""

    name = "exits_describing"

    def describe(self) -> dict:
        sys.exit(4)


def hangs_in_factory() -> nn.Module:
    ENTERED.set()
    RELEASE.wait()
    return _Hangs()


hangs = _Hangs
exits = _Exits
interrupts = _Interrupts
leaves_thread = _LeavesThread
writes_frames = _WritesFrames
writes_numpy = WritesNumpy
exits_describing = ExitsDescribing
