"""Where torch.compile's artefacts persist between starts: Inductor's own on-disk caches in a keyed folder.

Kept libraries, no home-made cache: Inductor already keeps every compiled graph (the FX graph cache), its
AOTAutograd wrapper, its Triton kernels and their autotuning results on disk under
``TORCHINDUCTOR_CACHE_DIR`` (``torch._inductor.config.fx_graph_cache`` and ``autotune_local_cache``, on by
default). By default that folder is ``/tmp/torchinductor_$USER``, which a reboot empties and another local
user may have made first. ``activate`` points it at a private folder of the user's cache dir instead
(``$XDG_CACHE_HOME/trackscope/compile/<key>``, else ``~/.cache/...``), made 0700, so the cache survives
restarts and only this user writes it. torch's "mega-cache" (``torch.compiler.save_cache_artifacts`` /
``load_cache_artifacts``) serialises the same artefacts into one blob for moving them to another machine;
with the folder itself kept, it would only duplicate them, so it is not used.

What the folder is keyed on (``environment_key``), and why: the torch version, its CUDA and Triton
versions, the Python version (dynamo traces bytecode), the GPU's name and compute capability (Triton
kernels are built for one architecture). Changing any of them needs a fresh folder: Inductor's per-graph
key covers most of it, but a folder per environment keeps a driver or torch upgrade from piling stale
kernels into one place and makes the key visible. Precision and shapes are NOT in the folder key: they are
in Inductor's own key for each graph (input shapes, strides and dtypes, the autocast-lowered graph, the
global TF32 flags), so one folder holds every variant and a shared part (the backbone) is kept once. The
model's weights are not either: they are graph inputs, not constants (Inductor's freezing is off), so a
compiled graph is valid for any weights of the same shapes. The manifest (``MANIFEST``, JSON, written
atomically by ``engine.core.atomic``) lists what was compiled (precision, shapes, weights sha256, seconds)
so a later start can say "cached"; an unreadable or foreign manifest is ignored with a log line.

Trust: Inductor reads its cache entries with ``pickle`` (so does the mega-cache). Nothing in trackscope
unpickles anything; torch does, from this folder, which only this user's trackscope writes. ``activate``
refuses a folder that is not owned by the user or that others may write (log line; compiles then go to
torch's default place, as without trackscope).
"""

from __future__ import annotations

import json
import logging
import os
import stat
import sys
from dataclasses import dataclass, field
from hashlib import sha256
from pathlib import Path
from typing import Any

from engine.core.atomic import atomic_open

log = logging.getLogger(__name__)

#: the environment variable Inductor reads for its cache folder
INDUCTOR_CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"
#: trackscope's folder under the user's cache dir, and the compile cache's under it
APP_FOLDER = "trackscope"
COMPILE_FOLDER = "compile"
#: the manifest's name inside a keyed folder
MANIFEST = "trackscope-compile.json"
MANIFEST_VERSION = 1
#: hex digits of the key's sha256 in the folder name
KEY_DIGITS = 16
#: the most variants a manifest keeps (oldest dropped)
MAX_VARIANTS = 64
#: mode of the folders this module makes
PRIVATE_MODE = 0o700


def user_cache_dir(environ: dict[str, str] | None = None) -> Path:
    """The user's cache folder for trackscope: $XDG_CACHE_HOME/trackscope, else ~/.cache/trackscope."""
    env = os.environ if environ is None else environ
    base = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / APP_FOLDER


def environment_key(device: Any = None) -> dict[str, str]:
    """What invalidates compiled artefacts (see the module docstring): versions and the GPU of ``device``."""
    import torch

    key = {"torch": torch.__version__, "cuda": str(torch.version.cuda), "python": sys.version.split()[0],
           "triton": _triton_version(), "gpu": "cpu", "capability": ""}
    if device is not None and torch.device(device).type == "cuda" and torch.cuda.is_available():
        index = torch.device(device).index or 0
        key["gpu"] = torch.cuda.get_device_name(index)
        major, minor = torch.cuda.get_device_capability(index)
        key["capability"] = f"{major}.{minor}"
    return key


def _triton_version() -> str:
    try:
        import triton  # type: ignore[import-not-found]

        return str(getattr(triton, "__version__", "unknown"))
    except Exception:  # no Triton (CPU builds): part of the key all the same
        return "none"


def key_digest(key: dict[str, Any]) -> str:
    """The folder name of ``key``: the first KEY_DIGITS hex digits of its canonical JSON's sha256."""
    return sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:KEY_DIGITS]


@dataclass
class Variant:
    """One compiled configuration, as the manifest records it."""

    precision: str
    shapes: str  # the tracker's own description of the shapes it compiled for
    weights_sha256: str = ""
    seconds: float = 0.0
    from_cache: bool = False

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def from_dict(cls, data: Any) -> Variant:
        if not isinstance(data, dict):
            raise ValueError(f"a variant must be an object, not {type(data).__name__}")
        return cls(precision=str(data["precision"]), shapes=str(data["shapes"]),
                   weights_sha256=str(data.get("weights_sha256", "")), seconds=float(data.get("seconds", 0.0)),
                   from_cache=bool(data.get("from_cache", False)))

    def same(self, other: Variant) -> bool:
        return (self.precision, self.shapes, self.weights_sha256) == (other.precision, other.shapes,
                                                                      other.weights_sha256)


@dataclass
class CompileCache:
    """The keyed folder for one environment and its manifest; ``activate`` makes torch use it."""

    root: Path
    key: dict[str, str]
    variants: list[Variant] = field(default_factory=list)
    note: str = ""  # why the folder is not used, or what was ignored on load

    @property
    def folder(self) -> Path:
        return self.root / key_digest(self.key)

    @property
    def manifest_path(self) -> Path:
        return self.folder / MANIFEST

    @classmethod
    def for_device(cls, device: Any, root: Path | None = None) -> CompileCache:
        """The cache of this environment and ``device`` (its manifest loaded, if there is a usable one)."""
        cache = cls(root=Path(root) if root is not None else user_cache_dir() / COMPILE_FOLDER,
                    key=environment_key(device))
        cache.load()
        return cache

    def load(self) -> None:
        """Read the manifest; an unreadable, corrupt or foreign one is ignored (log line, ``note``)."""
        self.variants = []
        path = self.manifest_path
        if not path.exists():
            return
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if not isinstance(data, dict) or data.get("version") != MANIFEST_VERSION:
                raise ValueError(f"not a version-{MANIFEST_VERSION} trackscope compile manifest")
            if data.get("key") != self.key:
                raise ValueError(f"its key {data.get('key')!r} is not this environment's {self.key!r}")
            self.variants = [Variant.from_dict(v) for v in data.get("variants", [])][-MAX_VARIANTS:]
        except (OSError, ValueError, KeyError, TypeError) as exc:  # json.JSONDecodeError is a ValueError
            self.note = f"compile cache manifest {path} ignored: {exc}"
            log.warning(self.note)
            self.variants = []

    def cached(self, variant: Variant) -> bool:
        """Whether the manifest says ``variant`` was compiled into this folder before."""
        return any(v.same(variant) for v in self.variants)

    def record(self, variant: Variant) -> None:
        """Add ``variant`` to the manifest and write it atomically (a failure to write is logged, not raised)."""
        self.variants = [v for v in self.variants if not v.same(variant)] + [variant]
        self.variants = self.variants[-MAX_VARIANTS:]
        data = {"version": MANIFEST_VERSION, "key": self.key, "variants": [v.to_dict() for v in self.variants]}
        try:
            self.folder.mkdir(parents=True, exist_ok=True, mode=PRIVATE_MODE)
            with atomic_open(self.manifest_path, "w", encoding="utf-8") as f:
                json.dump(data, f, indent=1)
        except OSError as exc:
            log.warning("compile cache manifest %s not written: %s", self.manifest_path, exc)

    def activate(self, environ: dict[str, str] | None = None) -> bool:
        """Point Inductor's on-disk caches at this folder (a process-wide setting, made before the first
        compile); False, with ``note`` saying why, when the user set TORCHINDUCTOR_CACHE_DIR already (theirs
        is kept; torch's own default, which importing torch._dynamo sets, is not the user's) or the folder is
        not private to this user."""
        env = os.environ if environ is None else environ
        current = env.get(INDUCTOR_CACHE_ENV)
        if current and Path(current) != self.folder and not _torch_default(current):
            self.note = f"{INDUCTOR_CACHE_ENV}={current} is set: torch's compile cache stays there"
            log.info(self.note)
            return False
        problem = private_folder_problem(self.folder)
        if problem:
            self.note = f"compile cache {self.folder} not used: {problem}"
            log.warning(self.note)
            return False
        env[INDUCTOR_CACHE_ENV] = str(self.folder)
        _inductor_caches_on()
        return True


def _torch_default(folder: str) -> bool:
    """Whether ``folder`` is torch's default cache folder: importing torch._dynamo or torch._inductor sets
    TORCHINDUCTOR_CACHE_DIR to it (torch/_inductor/runtime/cache_dir_utils.py ``cache_dir``), so an eager run
    that imported them first is not a user's choice and the keyed folder replaces it."""
    try:
        from torch._inductor.runtime.cache_dir_utils import default_cache_dir

        return Path(folder).resolve() == Path(default_cache_dir()).resolve()
    except Exception:  # another torch layout: keep what is set
        return False


def private_folder_problem(folder: Path) -> str:
    """Make ``folder`` (0700) if missing; why it may not hold a cache torch unpickles, or ""."""
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=PRIVATE_MODE)
        info = folder.stat()
    except OSError as exc:
        return f"cannot make it: {exc.strerror or exc}"
    if not stat.S_ISDIR(info.st_mode):
        return "not a folder"
    return ownership_problem(info, "; chmod 700 it to use it")


def ownership_problem(info: os.stat_result, fix: str = "") -> str:
    """Why a file or folder with this stat is not this user's alone (another owner, writable by others), or ""."""
    getuid = getattr(os, "getuid", None)
    if getuid is not None and info.st_uid != getuid():
        return f"owned by uid {info.st_uid}, not this user ({getuid()})"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"others may write it (mode {stat.S_IMODE(info.st_mode):o}){fix}"
    return ""


def _inductor_caches_on() -> None:
    """Inductor's local FX graph and autotune caches on (their defaults; said here so a changed default or a
    user's config does not turn persistence off silently)."""
    try:
        import torch._inductor.config as inductor_config

        inductor_config.fx_graph_cache = True
        inductor_config.autotune_local_cache = True
    except Exception as exc:  # an inductor without these settings: torch's own defaults apply
        log.info("inductor cache settings not set: %s", exc)


def inductor_cache_counts() -> dict[str, int]:
    """Inductor's FX graph cache hits and misses so far in this process (dynamo's counters)."""
    from torch._dynamo.utils import counters

    inductor = counters["inductor"]
    return {"hit": int(inductor.get("fxgraph_cache_hit", 0)), "miss": int(inductor.get("fxgraph_cache_miss", 0))}
