"""`--compile {off,on,background}` of `bench` and `track`: whether CorrTrack runs through torch.compile.

The flag sets TRACKSCOPE_CORRTRACK_COMPILE for this process before the tracker loads (the variable the
tracker reads, so a plugin launcher or the environment can set the same); unset, the variable decides, and
without it CorrTrack runs eagerly (off: bench timings stay reproducible, no compile in the cold run).
"""

from __future__ import annotations

import argparse
import os

from engine.core.flags import CORRTRACK_COMPILE

COMPILE_CHOICES = ("off", "on", "background")


def add_compile_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--compile", choices=COMPILE_CHOICES, default=None,
                   help="CorrTrack through torch.compile (CUDA): off (default), on (compile before the first "
                        "batch), background (eager at once, compiled from the batch after the compile ends); "
                        "Inductor's caches are kept on disk for a later start")


def apply_compile_flag(args: argparse.Namespace) -> None:
    """Set TRACKSCOPE_CORRTRACK_COMPILE from ``--compile`` when it was given."""
    value = getattr(args, "compile", None)
    if value is not None:
        os.environ[CORRTRACK_COMPILE] = value
