"""Boolean environment variables, parsed one way for the whole program.

"1", "true", "yes", "on" are true; "0", "false", "no", "off" and "" (set but empty) are false, any case,
surrounding spaces ignored. An unset variable gives the default; any other value warns once, naming the
variable and the accepted words, and gives the default.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping

TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off", "")

NO_NVML = "TRACKSCOPE_NO_NVML"  # true: telemetry without NVML (reason shown per metric)
NO_CUDA_GRAPHS = "TRACKSCOPE_NO_CUDA_GRAPHS"  # true: CorrTrack runs eagerly on CUDA
CORRTRACK_POLISH = "TRACKSCOPE_CORRTRACK_POLISH"  # false: CorrTrack skips its NCC sub-pixel polish
CORRTRACK_FINE_POLISH = "TRACKSCOPE_CORRTRACK_FINE_POLISH"  # false: the polish skips its video-resolution stage
CORRTRACK_COMPILE = "TRACKSCOPE_CORRTRACK_COMPILE"  # true: CorrTrack torch.compiles its hot functions (CUDA)
CORRTRACK_COMPILE_BACKEND = "TRACKSCOPE_CORRTRACK_COMPILE_BACKEND"  # aoti (packages) or dynamo (torch.compile)
CORRTRACK_COMPILE_CPU = "TRACKSCOPE_CORRTRACK_COMPILE_CPU"  # true: CorrTrack's compile also runs on the CPU
CORRTRACK_FUSED = "TRACKSCOPE_CORRTRACK_FUSED"  # false: CorrTrack's refinement skips its fused Triton kernels


class FlagWarning(UserWarning):
    """An environment flag with a value that is neither true nor false."""


def env_flag(name: str, default: bool, environ: Mapping[str, str] | None = None) -> bool:
    """The boolean value of environment variable ``name`` (``default`` when unset or unreadable)."""
    env = os.environ if environ is None else environ
    raw = env.get(name)
    if raw is None:
        return default
    word = raw.strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    warnings.warn(f"{name}={raw!r} is neither true ({'/'.join(TRUE_WORDS)}) nor false "
                  f"({'/'.join(w for w in FALSE_WORDS if w)} or empty): using the default, {default}",
                  FlagWarning, stacklevel=2)
    return default
