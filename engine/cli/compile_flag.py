"""`--compile {off,on,background}` of `bench` and `track`: whether CorrTrack runs through torch.compile.

The flag sets TRACKSCOPE_CORRTRACK_COMPILE for this process before the tracker loads (the variable the
tracker reads, so a plugin launcher or the environment can set the same); unset, the variable decides, and
without it CorrTrack runs eagerly (off: bench timings stay reproducible, no compile in the cold run).
"""

from __future__ import annotations

import argparse
import os

from engine.core.flags import CORRTRACK_COMPILE, CORRTRACK_COMPILE_BACKEND

COMPILE_CHOICES = ("off", "on", "background")
#: how the compiled code is made (engine.trackers.corrtrack.tracker.COMPILE_BACKENDS)
BACKEND_CHOICES = ("aoti", "dynamo", "precompile")


def add_compile_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--compile", choices=COMPILE_CHOICES, default=None,
                   help="CorrTrack through torch.compile (CUDA): off (default), on (compile before the first "
                        "batch), background (eager at once, compiled from the batch after the compile ends); "
                        "Inductor's caches are kept on disk for a later start")
    p.add_argument("--compile-backend", choices=BACKEND_CHOICES, default=None,
                   help="how: dynamo (torch.compile, the default), aoti (AOTInductor packages kept on disk, "
                        "loaded without tracing on a later start; experimental: on an H200 with torch 2.11 loading "
                        "a CUDA package crashed the process) or precompile (dynamo's precompile, torch >= 2.13: "
                        "the compiled functions and their guards kept on disk, loaded without tracing on a later "
                        "start; experimental)")


def apply_compile_flag(args: argparse.Namespace) -> None:
    """Set TRACKSCOPE_CORRTRACK_COMPILE (and _BACKEND) from ``--compile`` (``--compile-backend``) when given."""
    value = getattr(args, "compile", None)
    if value is not None:
        os.environ[CORRTRACK_COMPILE] = value
    backend = getattr(args, "compile_backend", None)
    if backend is not None:
        os.environ[CORRTRACK_COMPILE_BACKEND] = backend
