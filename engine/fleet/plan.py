"""What a fleet runs, and where, decided before Ray is asked anything (no Ray import here).

``--gpus "T4:1,A100:2"`` -> GPU requests by Ray accelerator type (the names Ray detects from NVML on each
node: "NVIDIA A100-SXM4-80GB" -> "A100", "NVIDIA H200" -> "H200", "Tesla T4" -> "T4"); no ``--gpus``: every
GPU of the cluster. The configurations are bench's own, in bench's order (fp32 first within each pair of batch
sizes: the non-fp32 rows' accuracy is measured against it), so each GPU's actor runs them exactly as
``trackscope bench`` would.
"""

from __future__ import annotations

import importlib.util
import re
import site
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from engine.core.config import RunConfig
from engine.core.errors import UserError

#: Ray's resource that marks a node's accelerator type (``accelerator_type:T4``); an actor asks a sliver of it
ACCELERATOR_PREFIX = "accelerator_type:"
ACCELERATOR_SLIVER = 0.001  # what Ray's own ``accelerator_type=`` option asks: placement, not a share
_TYPE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")


@dataclass(frozen=True)
class GpuRequest:
    """``count`` GPUs of Ray accelerator type ``type``."""

    type: str
    count: int

    def __str__(self) -> str:
        return f"{self.type}:{self.count}"


def parse_gpus(text: str | None) -> list[GpuRequest]:
    """'T4:1,A100:2' -> requests ('T4' alone means one); [] for None/empty (every GPU of the cluster)."""
    if text is None or not text.strip():
        return []
    requests: dict[str, int] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        name, sep, count_text = part.partition(":")
        name = name.strip()
        if not _TYPE_NAME.match(name):
            raise UserError(f"--gpus: {part!r} is not TYPE[:COUNT]", 'e.g. --gpus "T4:1,A100:2" (Ray accelerator '
                            "types, as `ray status` lists them)")
        try:
            count = int(count_text) if sep else 1
        except ValueError:
            raise UserError(f"--gpus: the count in {part!r} is not a whole number") from None
        if count < 1:
            raise UserError(f"--gpus: the count in {part!r} must be at least 1")
        requests[name] = requests.get(name, 0) + count
    if not requests:
        raise UserError(f"--gpus: no GPU type in {text!r}", 'e.g. --gpus "T4:1,A100:2"')
    return [GpuRequest(name, count) for name, count in requests.items()]


def configurations(tracker: str, device: str, precisions: list[str], points: list[int],
                   frames: list[int]) -> list[RunConfig]:
    """The sweep's configurations in bench's order (``Bench.sweep``): points, then frames, then precision."""
    return [RunConfig(tracker=tracker, device=device, precision=prec, points_per_batch=ppb, frames_per_batch=fpb)
            for ppb in points for fpb in frames for prec in precisions]


def check_fleet_device(device: str) -> str:
    """The --device a fleet passes to each actor: auto, cpu or cuda (each actor sees its one GPU as cuda:0)."""
    name = (device or "auto").strip().lower()
    if name in ("auto", "cpu", "cuda", "cuda:0"):
        return name
    raise UserError(f"--device {device!r}: a fleet worker sees only the GPU Ray gave it (as cuda:0)",
                    "use --device auto (default), cuda or cpu; pick GPUs with --gpus")


def _installed_roots() -> list[Path]:
    """Where installed packages and the standard library live: code there is on every node already."""
    roots = {sysconfig.get_paths().get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    roots |= set(getattr(site, "getsitepackages", lambda: [])())
    user = getattr(site, "getusersitepackages", lambda: None)()
    roots.add(user if isinstance(user, str) else None)
    roots.add(sys.prefix)
    return [Path(r).resolve() for r in roots if r]


def plugin_code_paths(tracker: str) -> list[Path]:
    """The local code a ``module:factory`` plugin needs on every node, for Ray's ``runtime_env["py_modules"]``:
    the folder of its top-level package (or its one file). [] for built-in trackers, entry points (an installed
    package, on every node already), trackscope's own modules and installed ones. UserError when the module
    cannot be found here."""
    if ":" not in tracker:
        return []
    module_name = tracker.partition(":")[0]
    top = module_name.split(".")[0]
    if top in ("engine", "gui", "resources"):
        return []
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError) as exc:
        raise UserError(f"--tracker {tracker!r}: cannot find {top!r}: {exc}") from None
    if spec is None:
        raise UserError(f"--tracker {tracker!r}: no module {top!r} on this machine's path",
                        "run from the folder that holds it, or put it on PYTHONPATH")
    if spec.submodule_search_locations:
        path = Path(next(iter(spec.submodule_search_locations)))
    elif spec.origin and spec.origin not in ("built-in", "frozen"):
        path = Path(spec.origin)
    else:
        return []
    path = path.resolve()
    if any(path.is_relative_to(root) for root in _installed_roots()):
        return []
    return [path]
