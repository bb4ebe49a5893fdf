"""AOTInductor packages: a compiled function kept on disk per call signature, loaded on a later start.

Why, beside Inductor's own caches (compile_cache.py): with those, a second start still runs dynamo (bytecode
tracing, guards), AOTAutograd and the cache lookups before the first compiled call; on the H200 that
second start had not switched to compiled code after 60 s (session 18). A package made by
``torch._inductor.aoti_compile_and_package`` from a ``torch.export`` of the function at the run's fixed shapes
is a shared library plus its constants: ``torch._inductor.aoti_load_package`` loads it without tracing
anything, so a start with the package on disk can run compiled code from its first batch.

What a package is keyed on (``call_key``): the function's name and the digest of its module's source, the
call's pytree (tensor shapes, strides, dtypes, devices; other leaves by repr, e.g. the polish config), the
autocast state it was called under, the digest of the owning module's weights (they are frozen into the
package as constants: a package belongs to one set of weights) and PACKAGE_VERSION. The environment
(torch, CUDA, Triton, Python, GPU) is the folder's key (``CompileCache``). A call whose key has no loaded
package runs the plain function.

Trust: a package is a shared library: loading one runs code from this folder. It is the same trust model as
Inductor's cache (which torch unpickles): the folder is the keyed private one (0700, owned by this user);
``PackageStore`` also refuses a package file that is not this user's or that others may write, and one whose
sha256 is not the one its side file recorded when it was built (a torn or replaced file). A refused, corrupt
or foreign entry is ignored with a log line (``notes``), never raised: the function is then built again.
"""

from __future__ import annotations

import inspect
import json
import logging
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from hashlib import sha256
from pathlib import Path
from typing import Any

import torch
from torch.utils import _pytree as pytree

from engine.core.atomic import atomic_open, atomic_path
from engine.trackers.compile_cache import ownership_problem, private_folder_problem

log = logging.getLogger(__name__)

#: the packages' folder inside a keyed compile-cache folder
PACKAGE_FOLDER = "aoti"
#: bumped when what a package holds or how it is called changes (old ones are then not found)
PACKAGE_VERSION = 1
#: a package file and its side file (JSON: key, sha256, seconds)
PACKAGE_SUFFIX = ".pt2"
SIDE_SUFFIX = ".json"
#: the index of one tracker variant (which packages its batches call)
INDEX_PREFIX = "variant-"
#: hex digits of a key's sha256 in file names
DIGEST_DIGITS = 24
#: the most notes a store keeps
MAX_NOTES = 32


#: the first torch with ``aoti_compile_and_package`` / ``aoti_load_package`` (2.6; 2.11 and 2.13 checked)
FIRST_TORCH = (2, 6)


def available(version: str | None = None) -> bool:
    """Whether this torch can export and package (by its version: importing torch._inductor to look would
    cost a second at every start and set TORCHINDUCTOR_CACHE_DIR before the compile cache is chosen)."""
    text = torch.__version__ if version is None else version
    try:
        major, minor = (int(part) for part in text.split("+")[0].split(".")[:2])
    except ValueError:
        return False
    return (major, minor) >= FIRST_TORCH


class PackageCallError(RuntimeError):
    """A loaded package failed when called (the tracker falls back to the plain code, as for a compile error)."""


def digest(data: Any) -> str:
    """The first DIGEST_DIGITS hex digits of the sha256 of ``data``'s canonical JSON."""
    return sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:DIGEST_DIGITS]


_SOURCE_DIGESTS: dict[str, str] = {}


def source_digest(fn: Callable[..., Any]) -> str:
    """The sha256 (16 digits) of the source file of ``fn``'s module: a code change makes new packages."""
    target = getattr(fn, "__func__", fn)
    module = sys.modules.get(getattr(target, "__module__", "") or "")
    path = getattr(module, "__file__", None) if module is not None else None
    key = str(path or getattr(target, "__qualname__", repr(target)))
    if key not in _SOURCE_DIGESTS:
        try:
            text = Path(path).read_bytes() if path else inspect.getsource(target).encode()
        except (OSError, TypeError):
            text = key.encode()
        _SOURCE_DIGESTS[key] = sha256(text).hexdigest()[:16]
    return _SOURCE_DIGESTS[key]


def weights_digest(module: torch.nn.Module | None) -> str:
    """The sha256 (16 digits) of a module's parameters and buffers, by name ("" for no module)."""
    if module is None:
        return ""
    h = sha256()
    for name, tensor in sorted(module.state_dict().items()):
        t = tensor.detach().to("cpu").contiguous()
        h.update(f"{name}:{t.dtype}:{tuple(t.shape)}".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()[:16]


def _leaf_text(leaf: Any) -> Any:
    if isinstance(leaf, torch.Tensor):
        return ["tensor", list(leaf.shape), list(leaf.stride()), str(leaf.dtype), str(leaf.device)]
    return ["const", type(leaf).__name__, repr(leaf)]


def autocast_state(device_type: str) -> list[Any]:
    """[enabled, dtype] of autocast for ``device_type`` in this thread (what a compiled call was made under)."""
    if not torch.is_autocast_enabled(device_type):
        return [False, ""]
    return [True, str(torch.get_autocast_dtype(device_type))]


def call_key(name: str, fn: Callable[..., Any], args: Sequence[Any], device_type: str, weights: str) -> dict[str, Any]:
    """What a package of ``fn(*args)`` is valid for (module docstring); JSON-able."""
    leaves, spec = pytree.tree_flatten(tuple(args))
    return {"version": PACKAGE_VERSION, "name": name, "source": source_digest(fn), "spec": str(spec),
            "leaves": [_leaf_text(x) for x in leaves], "autocast": autocast_state(device_type), "weights": weights}


def describe_call(key: dict[str, Any]) -> str:
    """A short line for logs: name and tensor shapes ('refine_step 1x256x24x64x64, ...')."""
    shapes = ["x".join(map(str, leaf[1])) for leaf in key["leaves"] if leaf[0] == "tensor"]
    cast = f", autocast {key['autocast'][1].replace('torch.', '')}" if key["autocast"][0] else ""
    more = f" +{len(shapes) - 3}" if len(shapes) > 3 else ""
    return f"{key['name']}({', '.join(shapes[:3])}{more}{cast})"


class _Exported(torch.nn.Module):
    """fn(*args) as a module of the call's tensors only (the other leaves are constants), under the autocast
    the call was made in: what torch.export traces. A bound method's module is a submodule (its weights
    become the package's constants)."""

    def __init__(self, fn: Callable[..., Any], args: Sequence[Any], device_type: str) -> None:
        super().__init__()
        owner = getattr(fn, "__self__", None)
        self.owner = owner if isinstance(owner, torch.nn.Module) else None
        self._method = fn.__name__ if self.owner is not None else ""
        self._fn = None if self.owner is not None else fn
        leaves, self._spec = pytree.tree_flatten(tuple(args))
        self._constants = [None if isinstance(x, torch.Tensor) else x for x in leaves]
        self._device_type = device_type
        enabled, _ = autocast_state(device_type)
        self._autocast = torch.get_autocast_dtype(device_type) if enabled else None

    def forward(self, *tensors: torch.Tensor) -> Any:
        it = iter(tensors)
        leaves = [next(it) if c is None else c for c in self._constants]
        args = pytree.tree_unflatten(leaves, self._spec)
        fn = getattr(self.owner, self._method) if self.owner is not None else self._fn
        assert fn is not None
        cast = (torch.autocast(self._device_type, dtype=self._autocast, cache_enabled=False)
                if self._autocast is not None else nullcontext())
        with cast:
            return fn(*args)


@dataclass
class Packaged:
    """A loaded package: called with the same arguments as the function it was made from."""

    name: str
    path: Path
    runner: Any  # torch._inductor.package's AOTICompiledModel

    def __call__(self, *args: Any) -> Any:
        tensors = [x for x in pytree.tree_leaves(tuple(args)) if isinstance(x, torch.Tensor)]
        try:
            return self.runner(*tensors)
        except Exception as exc:
            if "out of memory" in str(exc).lower():
                raise
            raise PackageCallError(f"package {self.path.name} ({self.name}) failed: {exc}") from exc


class PackageStore:
    """The package files of one keyed compile-cache folder: load (checked), build (export + AOTInductor)."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder) / PACKAGE_FOLDER
        self.notes: list[str] = []

    def _note(self, text: str) -> None:
        log.warning(text)
        self.notes = [*self.notes, text][-MAX_NOTES:]

    def paths(self, key_digest: str) -> tuple[Path, Path]:
        return self.folder / f"{key_digest}{PACKAGE_SUFFIX}", self.folder / f"{key_digest}{SIDE_SUFFIX}"

    def problem(self) -> str:
        """Why this folder may not hold packages (not private to this user), or ""."""
        return private_folder_problem(self.folder)

    def load(self, key: dict[str, Any]) -> Packaged | None:
        """The package of ``key`` from disk, or None (missing; refused, corrupt or foreign: with a note)."""
        key_digest = digest(key)
        package, side = self.paths(key_digest)
        if not package.exists():
            return None
        problem = self.problem() or _file_problem(package)
        if problem:
            self._note(f"compile package {package} ignored: {problem}")
            return None
        try:
            meta = json.loads(side.read_text(encoding="utf-8"))
            if not isinstance(meta, dict) or meta.get("key") != json.loads(json.dumps(key, default=str)):
                raise ValueError("its side file is not for this call (foreign or stale)")
            if meta.get("sha256") != _file_sha256(package):
                raise ValueError("its sha256 is not the one recorded when it was built (torn or replaced)")
            from torch import _inductor

            runner = _inductor.aoti_load_package(str(package))
        except Exception as exc:  # OSError, ValueError (JSON too), or anything the loader raises
            self._note(f"compile package {package} ignored: {type(exc).__name__}: {_first_line(exc)}")
            return None
        return Packaged(str(key["name"]), package, runner)

    def build(self, fn: Callable[..., Any], args: Sequence[Any], key: dict[str, Any], device_type: str,
              exclusive: Any = None) -> tuple[Packaged, dict[str, float]]:
        """Export ``fn(*args)``, compile it with AOTInductor into this folder, load it; -> (package, seconds of
        export and compile). Raises what export or the compile raise (the job fails with it); ``write`` says
        what ``exclusive`` is."""
        parts = self.write(fn, args, key, device_type, exclusive)
        loaded = self.load(key)
        if loaded is None:
            raise RuntimeError(f"compile package {self.paths(digest(key))[0]} was built but does not load: "
                               f"{self.notes[-1:]}")
        return loaded, parts

    def write(self, fn: Callable[..., Any], args: Sequence[Any], key: dict[str, Any], device_type: str,
              exclusive: Any = None, configs: dict[str, Any] | None = None) -> dict[str, float]:
        """Export ``fn(*args)`` and compile it with AOTInductor into this folder (not loaded); -> the seconds of
        export and compile.

        exclusive: a context manager held over the export. Non-strict torch.export patches process-wide
        state while it traces (``torch.nn.Module.__call__`` among it, torch/fx/_symbolic_trace.py): a module
        called in another thread meanwhile is traced into the export or fails inside it, so the caller pauses
        its other users of torch modules for that time (the tracker: its runs' batches). configs: Inductor
        options for this package (``inductor_configs``)."""
        problem = self.problem()
        if problem:
            raise RuntimeError(f"compile packages not kept in {self.folder}: {problem}")
        key_digest = digest(key)
        package, side = self.paths(key_digest)
        module = _Exported(fn, args, device_type).eval()
        # export traces outside inference mode (example inputs made there: plain tensors, same values)
        with torch.inference_mode(False), torch.no_grad():
            examples = tuple(x.clone() for x in pytree.tree_leaves(tuple(args)) if isinstance(x, torch.Tensor))
            with exclusive if exclusive is not None else nullcontext():
                t0 = time.perf_counter()
                exported = torch.export.export(module, examples, strict=False)
                t1 = time.perf_counter()
            from torch import _inductor

            with atomic_path(package) as tmp:
                _inductor.aoti_compile_and_package(exported, package_path=str(tmp), inductor_configs=configs)
            t2 = time.perf_counter()
        with atomic_open(side, "w", encoding="utf-8") as f:
            json.dump({"key": key, "sha256": _file_sha256(package), "export_s": round(t1 - t0, 3),
                       "compile_s": round(t2 - t1, 3)}, f, indent=1, default=str)
        return {"export_s": t1 - t0, "compile_s": t2 - t1}

    # -- variant indexes: which packages one tracker variant's batches call --------------------------------
    def remember(self, variant: Any, digests: Sequence[str]) -> None:
        """Record the package digests ``variant``'s batches call (a failure to write is logged, not raised)."""
        path = self.folder / f"{INDEX_PREFIX}{digest(variant)}{SIDE_SUFFIX}"
        try:
            self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
            with atomic_open(path, "w", encoding="utf-8") as f:
                json.dump({"version": PACKAGE_VERSION, "variant": variant, "packages": list(digests)}, f,
                          default=str)
        except OSError as exc:
            log.warning("compile package index %s not written: %s", path, exc)

    def recall(self, variant: Any) -> list[str] | None:
        """The package digests recorded for ``variant``, or None (none recorded; a bad index: with a note)."""
        path = self.folder / f"{INDEX_PREFIX}{digest(variant)}{SIDE_SUFFIX}"
        if not path.exists():
            return None
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if not isinstance(data, dict) or data.get("version") != PACKAGE_VERSION:
                raise ValueError(f"not a version-{PACKAGE_VERSION} index")
            if data.get("variant") != json.loads(json.dumps(variant, default=str)):
                raise ValueError("it is another variant's (foreign)")
            packages = data.get("packages")
            if not isinstance(packages, list) or not all(isinstance(p, str) for p in packages):
                raise ValueError("its package list is not a list of names")
            return list(packages)
        except (OSError, ValueError) as exc:
            self._note(f"compile package index {path} ignored: {exc}")
            return None

    def load_digest(self, key_digest: str) -> tuple[dict[str, Any], Packaged] | None:
        """The package named ``key_digest`` with the key its side file records (checked as ``load``), or None."""
        _, side = self.paths(key_digest)
        try:
            key = json.loads(side.read_text(encoding="utf-8"))["key"]
            if not isinstance(key, dict) or digest(key) != key_digest:
                raise ValueError("its key is not the one its name says")
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            self._note(f"compile package {side} ignored: {type(exc).__name__}: {_first_line(exc)}")
            return None
        loaded = self.load(key)
        return (key, loaded) if loaded is not None else None


def _file_problem(path: Path) -> str:
    return ownership_problem(path.stat())


def _file_sha256(path: Path) -> str:
    h = sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _first_line(exc: BaseException) -> str:
    text = str(exc)
    return text.splitlines()[0] if text else ""
