"""Compiled functions kept on disk per call signature, loaded on a later start: two kinds of package.

Why, beside Inductor's own caches (compile_cache.py): with those, a second start still runs dynamo (bytecode
tracing, guards), AOTAutograd and the cache lookups before the first compiled call; on the H200 that
second start had not switched to compiled code after 60 s (session 18), and 16.5 s with warm caches (session 19).

- ``aoti``: ``torch._inductor.aoti_compile_and_package`` of a ``torch.export`` of the function at the run's fixed
  shapes: a shared library plus its constants, loaded by ``torch._inductor.aoti_load_package`` without tracing
  anything. On the H200 (torch 2.11, CUDA 13) that loader segfaulted for every CUDA package
  (scripts/aoti_load_probe.py); CPU packages load.
- ``precompile`` (torch >= 2.13, ``available_precompile``; 2.11 lacks it): dynamo's own precompile,
  ``torch.compile(fn, fullgraph=True).aot_compile((args, {}))`` saved with ``save_compiled_function`` and read
  back with ``torch.compiler.load_compiled_function``: dynamo's transformed bytecode, its guards and the bundled
  AOTAutograd/Inductor output, loaded without tracing. A bound method's module is not in the file (it is
  ``external_data``): the loader is handed the function it was made from (``load(key, fn)``), whose module the
  compiled code then reads its weights from. A call that fails the loaded function's guards (what the key does
  not record: an inference tensor where the trace had a plain one, another thread count, a module put in training
  mode...) runs that plain function instead, said once (``Precompiled``); nothing recompiles.

What a package is keyed on (``call_key``): the function's name and the digest of its module folder's sources, the
call's pytree (tensor shapes, strides, dtypes, devices; other leaves by repr, e.g. the polish config), the
autocast state it was called under, the digest of the owning module's weights (aoti freezes them into the
package as constants: a package belongs to one set of weights; precompile reads them from the module, kept in the
key all the same) and the kind's version (PACKAGE_VERSION,
PRECOMPILE_VERSION); a precompile key adds the grad mode and autocast cache its guards check. The environment
(torch, CUDA, Triton, Python, GPU) is the folder's key (``CompileCache``); each kind has its own subfolder
(``KINDS``), so kinds never mix. A call whose key has no loaded package runs the plain function.

Trust: an aoti package is a shared library and a precompile package is a pickle: loading either runs code from
this folder. It is the same trust model as Inductor's cache (which torch unpickles): the folder is the keyed
private one (0700, owned by this user); ``PackageStore`` also refuses a package file that is not this user's or
that others may write, and one whose sha256 is not the one its side file recorded when it was built (a torn or
replaced file; a precompile file is read once, checked, and unpickled from those bytes). A refused, corrupt or
foreign entry is ignored with a log line (``notes``), never raised: the function is then built again.
"""

from __future__ import annotations

import inspect
import io
import json
import logging
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager, nullcontext
from dataclasses import dataclass
from hashlib import sha256
from pathlib import Path
from typing import Any

import torch
from torch.utils import _pytree as pytree

from engine.core.atomic import atomic_open, atomic_path
from engine.trackers.compile_cache import ownership_problem, private_folder_problem

log = logging.getLogger(__name__)

#: the aoti packages' folder inside a keyed compile-cache folder
PACKAGE_FOLDER = "aoti"
#: bumped when what an aoti package holds or how it is called changes (old ones are then not found)
PACKAGE_VERSION = 1
#: an aoti package file and its side file (JSON: key, sha256, seconds)
PACKAGE_SUFFIX = ".pt2"
SIDE_SUFFIX = ".json"
#: the precompile packages' folder, version (as PACKAGE_VERSION) and file suffix (a pickle)
PRECOMPILE_FOLDER = "precompile"
PRECOMPILE_VERSION = 1
PRECOMPILE_SUFFIX = ".pkl"
#: the index of one tracker variant (which packages its batches call)
INDEX_PREFIX = "variant-"
#: hex digits of a key's sha256 in file names
DIGEST_DIGITS = 24
#: the most notes a store keeps
MAX_NOTES = 32


#: the first torch with ``aoti_compile_and_package`` / ``aoti_load_package`` (2.6; 2.11 and 2.13 checked)
FIRST_TORCH = (2, 6)
#: the first torch whose compiled functions have ``aot_compile`` (with ``torch.compiler.load_compiled_function``):
#: 2.13 has it; 2.11 (the H200's, session 20 GPU call C) has not ("'function' object has no attribute 'aot_compile'")
FIRST_PRECOMPILE_TORCH = (2, 13)


@dataclass(frozen=True)
class PackageKind:
    """What one kind of package is: its subfolder, key version and file suffix."""

    name: str
    folder: str
    version: int
    suffix: str


KINDS = {
    "aoti": PackageKind("aoti", PACKAGE_FOLDER, PACKAGE_VERSION, PACKAGE_SUFFIX),
    "precompile": PackageKind("precompile", PRECOMPILE_FOLDER, PRECOMPILE_VERSION, PRECOMPILE_SUFFIX),
}


def _at_least(first: tuple[int, int], version: str | None) -> bool:
    text = torch.__version__ if version is None else version
    try:
        major, minor = (int(part) for part in text.split("+")[0].split(".")[:2])
    except ValueError:
        return False
    return (major, minor) >= first


def available(version: str | None = None) -> bool:
    """Whether this torch can export and package (by its version: importing torch._inductor to look would
    cost a second at every start and set TORCHINDUCTOR_CACHE_DIR before the compile cache is chosen)."""
    return _at_least(FIRST_TORCH, version)


def available_precompile(version: str | None = None) -> bool:
    """Whether this torch has dynamo's precompile (by its version, for the reason ``available`` gives)."""
    return _at_least(FIRST_PRECOMPILE_TORCH, version)


class PackageCallError(RuntimeError):
    """A loaded package failed when called (the tracker falls back to the plain code, as for a compile error)."""


def digest(data: Any) -> str:
    """The first DIGEST_DIGITS hex digits of the sha256 of ``data``'s canonical JSON."""
    return sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:DIGEST_DIGITS]


_SOURCE_DIGESTS: dict[str, str] = {}


def source_digest(fn: Callable[..., Any]) -> str:
    """The sha256 (16 digits) of the source files of the folder of ``fn``'s module (its ``*.py``, sorted by name):
    a code change there makes new packages. The folder, not the one file: a traced function runs code from its
    neighbours too (CorrTrack's refine_step calls support.py's TrackAttention and model.py's helpers)."""
    target = getattr(fn, "__func__", fn)
    module = sys.modules.get(getattr(target, "__module__", "") or "")
    path = getattr(module, "__file__", None) if module is not None else None
    key = str(Path(path).parent if path else getattr(target, "__qualname__", repr(target)))
    if key not in _SOURCE_DIGESTS:
        digest = sha256()
        try:
            if path:
                for file in sorted(Path(path).parent.glob("*.py")):
                    digest.update(file.name.encode() + b"\0" + file.read_bytes() + b"\0")
            else:
                digest.update(inspect.getsource(target).encode())
        except (OSError, TypeError):
            digest.update(key.encode())
        _SOURCE_DIGESTS[key] = digest.hexdigest()[:16]
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


def grad_mode() -> str:
    """inference / no_grad / grad: this thread's mode (a precompiled function's guards check it)."""
    if torch.is_inference_mode_enabled():
        return "inference"
    return "grad" if torch.is_grad_enabled() else "no_grad"


def call_key(name: str, fn: Callable[..., Any], args: Sequence[Any], device_type: str, weights: str,
             kind: str = "aoti") -> dict[str, Any]:
    """What a package of ``kind`` of ``fn(*args)`` is valid for (module docstring); JSON-able."""
    leaves, spec = pytree.tree_flatten(tuple(args))
    key = {"version": KINDS[kind].version, "name": name, "source": source_digest(fn), "spec": str(spec),
           "leaves": [_leaf_text(x) for x in leaves], "autocast": autocast_state(device_type), "weights": weights}
    if kind != "aoti":  # aoti's keys stay as they were (its packages on disk are still found)
        key.update(kind=kind, device_type=device_type, grad_mode=grad_mode(),
                   autocast_cache=torch.is_autocast_cache_enabled())
    return key


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
    """A loaded aoti package: called with the same arguments as the function it was made from."""

    name: str
    path: Path
    runner: Any  # torch._inductor.package's AOTICompiledModel

    def __call__(self, *args: Any) -> Any:
        tensors = [x for x in pytree.tree_leaves(tuple(args)) if isinstance(x, torch.Tensor)]
        return self._run(*tensors)

    def _run(self, *args: Any) -> Any:
        try:
            return self.runner(*args)
        except Exception as exc:
            if "out of memory" in str(exc).lower():
                raise
            raise PackageCallError(f"package {self.path.name} ({self.name}) failed: {exc}") from exc


@dataclass
class Precompiled(Packaged):
    """A loaded precompile package (runner: torch._dynamo's AOTCompiledFunction, its own guard check off).

    Its guards are checked here before each call: a loaded function that fails them raises (``GuardManager check
    failed``; it neither recompiles nor falls back), so a call that does not fit runs ``plain``, the function it
    was made from, with one log line per package (``guard_failure`` keeps why)."""

    plain: Callable[..., Any]
    guard_failure: str = ""

    def __call__(self, *args: Any) -> Any:
        if not self.fits(args):
            return self.plain(*args)
        return self._run(*args)

    def fits(self, args: Sequence[Any]) -> bool:
        """Whether ``args`` pass the loaded function's guards (a failure is noted once)."""
        try:
            if self.runner.guard_check(*args):
                return True
            reason = _guard_reason(self.runner, args)
        except Exception as exc:  # a guard check that cannot even run: the plain function
            reason = f"{type(exc).__name__}: {_first_line(exc)}"
        if not self.guard_failure:
            self.guard_failure = reason
            log.warning("compiled %s (%s) does not fit this call: %s; it runs uncompiled", self.name, self.path.name,
                        reason)
        return False


def _guard_reason(runner: Any, args: Sequence[Any]) -> str:
    """The first failed guard of a precompiled function for ``args`` (torch internals: a plain line otherwise)."""
    try:
        verbose = runner._artifacts.guard_manager.check_verbose(runner.prepare_f_locals(*args))
        parts = list(getattr(verbose, "verbose_code_parts", []) or [])
        return str(parts[0]).strip() if parts else "its guards failed"
    except Exception:
        return "its guards failed"


class PackageStore:
    """The package files of one kind in one keyed compile-cache folder: load (checked) and build, for ``kind``
    aoti (torch.export + AOTInductor) or precompile (dynamo's aot_compile); each kind in its own subfolder."""

    def __init__(self, folder: Path, kind: str = "aoti") -> None:
        if kind not in KINDS:
            raise ValueError(f"package kind must be one of {', '.join(KINDS)}, not {kind!r}")
        self.kind = KINDS[kind]
        self.folder = Path(folder) / self.kind.folder
        self.notes: list[str] = []

    def _note(self, text: str) -> None:
        log.warning(text)
        self.notes = [*self.notes, text][-MAX_NOTES:]

    def paths(self, key_digest: str) -> tuple[Path, Path]:
        return self.folder / f"{key_digest}{self.kind.suffix}", self.folder / f"{key_digest}{SIDE_SUFFIX}"

    def problem(self) -> str:
        """Why this folder may not hold packages (not private to this user), or ""."""
        return private_folder_problem(self.folder)

    def load(self, key: dict[str, Any], fn: Callable[..., Any] | None = None) -> Packaged | None:
        """The package of ``key`` from disk, or None (missing; refused, corrupt or foreign: with a note).

        fn: the function the package was made from; a precompile package needs it (its module is the compiled
        code's ``external_data``, and a call that fails the guards runs it); aoti ignores it. Loaded in the grad
        mode and autocast ``key`` records: the guards a precompiled function rebuilds here read them."""
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
            if self.kind.name == "precompile":
                return self._load_precompiled(package, meta, key, fn)
            if meta.get("sha256") != _file_sha256(package):
                raise ValueError(_SHA_MISMATCH)
            from torch import _inductor

            runner = _inductor.aoti_load_package(str(package))
        except Exception as exc:  # OSError, ValueError (JSON too), or anything the loader raises
            self._note(f"compile package {package} ignored: {type(exc).__name__}: {_first_line(exc)}")
            return None
        return Packaged(str(key["name"]), package, runner)

    def _load_precompiled(self, package: Path, meta: dict[str, Any], key: dict[str, Any],
                          fn: Callable[..., Any] | None) -> Precompiled:
        if not available_precompile():
            raise RuntimeError(f"precompile needs torch >= {'.'.join(map(str, FIRST_PRECOMPILE_TORCH))}")
        if fn is None:
            raise ValueError("a precompiled function loads only beside the function it was made from")
        owner = _owner(fn)
        if meta.get("function") != _qualname(fn) or meta.get("owner") != _class_name(owner):
            raise ValueError(f"it was made from {meta.get('function')} of {meta.get('owner') or 'no module'}, "
                             f"not {_qualname(fn)} (foreign)")
        data = package.read_bytes()  # read once: the bytes checked are the bytes unpickled
        if meta.get("sha256") != sha256(data).hexdigest():
            raise ValueError(_SHA_MISMATCH)
        with _call_state(key):
            runner: Any = torch.compiler.load_compiled_function(io.BytesIO(data), external_data=_external(owner))
        runner.disable_guard_check()  # checked by Precompiled.fits, which falls back instead of raising
        return Precompiled(str(key["name"]), package, runner, plain=fn)

    def build(self, fn: Callable[..., Any], args: Sequence[Any], key: dict[str, Any], device_type: str,
              exclusive: Any = None) -> tuple[Packaged, dict[str, float]]:
        """Make the package of ``fn(*args)`` in this folder (``write``) and load it; -> (package, seconds of its
        parts). Raises what export or the compile raise (the job fails with it); ``write`` says what
        ``exclusive`` is."""
        parts = self.write(fn, args, key, device_type, exclusive)
        loaded = self.load(key, fn)
        if loaded is None:
            raise RuntimeError(f"compile package {self.paths(digest(key))[0]} was built but does not load: "
                               f"{self.notes[-1:]}")
        return loaded, parts

    def write(self, fn: Callable[..., Any], args: Sequence[Any], key: dict[str, Any], device_type: str,
              exclusive: Any = None, configs: dict[str, Any] | None = None) -> dict[str, float]:
        """Make the package of ``fn(*args)`` in this folder (not loaded); -> the seconds of its parts (aoti:
        export_s, compile_s; precompile: compile_s, save_s).

        exclusive (aoti): a context manager held over the export. Non-strict torch.export patches process-wide
        state while it traces (``torch.nn.Module.__call__`` among it, torch/fx/_symbolic_trace.py): a module
        called in another thread meanwhile is traced into the export or fails inside it, so the caller pauses
        its other users of torch modules for that time (the tracker: its runs' batches). Precompile does not
        hold it: dynamo traces the bytecode symbolically and patches no module (the same tracing that the
        dynamo backend's background job runs beside eager batches, unlocked). configs: Inductor options for
        this package (aoti's ``inductor_configs``; precompile: ``torch.compile``'s options)."""
        problem = self.problem()
        if problem:
            raise RuntimeError(f"compile packages not kept in {self.folder}: {problem}")
        if self.kind.name == "precompile":
            return self._write_precompiled(fn, args, key, configs)
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

    def _write_precompiled(self, fn: Callable[..., Any], args: Sequence[Any], key: dict[str, Any],
                           configs: dict[str, Any] | None) -> dict[str, float]:
        """aot_compile ``fn(*args)`` in the grad mode and autocast ``key`` records (what its guards will check)
        and save it, the owning module left out as external data."""
        if not available_precompile():
            raise RuntimeError(f"precompile needs torch >= {'.'.join(map(str, FIRST_PRECOMPILE_TORCH))}")
        package, side = self.paths(digest(key))
        owner = _owner(fn)
        with _call_state(key):
            t0 = time.perf_counter()
            compiled = torch.compile(_traced(fn), fullgraph=True, dynamic=False, options=configs)
            aot = compiled.aot_compile((tuple(args), {}))  # type: ignore[attr-defined]  # torch's stubs lack it
            t1 = time.perf_counter()
        with atomic_path(package) as tmp:
            aot.save_compiled_function(str(tmp), external_data=_external(owner))
        t2 = time.perf_counter()
        with atomic_open(side, "w", encoding="utf-8") as f:
            json.dump({"key": key, "sha256": _file_sha256(package), "function": _qualname(fn),
                       "owner": _class_name(owner), "compile_s": round(t1 - t0, 3), "save_s": round(t2 - t1, 3)},
                      f, indent=1, default=str)
        return {"compile_s": t1 - t0, "save_s": t2 - t1}

    # -- variant indexes: which packages one tracker variant's batches call --------------------------------
    def remember(self, variant: Any, digests: Sequence[str]) -> None:
        """Record the package digests ``variant``'s batches call (a failure to write is logged, not raised)."""
        path = self.folder / f"{INDEX_PREFIX}{digest(variant)}{SIDE_SUFFIX}"
        try:
            self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
            with atomic_open(path, "w", encoding="utf-8") as f:
                json.dump({"version": self.kind.version, "variant": variant, "packages": list(digests)}, f,
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
            if not isinstance(data, dict) or data.get("version") != self.kind.version:
                raise ValueError(f"not a version-{self.kind.version} index")
            if data.get("variant") != json.loads(json.dumps(variant, default=str)):
                raise ValueError("it is another variant's (foreign)")
            packages = data.get("packages")
            if not isinstance(packages, list) or not all(isinstance(p, str) for p in packages):
                raise ValueError("its package list is not a list of names")
            return list(packages)
        except (OSError, ValueError) as exc:
            self._note(f"compile package index {path} ignored: {exc}")
            return None

    def load_digest(self, key_digest: str, resolve: Callable[[dict[str, Any]], Callable[..., Any] | None] | None = None
                    ) -> tuple[dict[str, Any], Packaged] | None:
        """The package named ``key_digest`` with the key its side file records (checked as ``load``), or None.
        resolve: the function a key was made from (``load``'s fn; precompile needs it), or None."""
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
        loaded = self.load(key, resolve(key) if resolve is not None else None)
        return (key, loaded) if loaded is not None else None


_SHA_MISMATCH = "its sha256 is not the one recorded when it was built (torn or replaced)"


def _owner(fn: Callable[..., Any]) -> torch.nn.Module | None:
    """The module ``fn`` is a bound method of, or None."""
    owner = getattr(fn, "__self__", None)
    return owner if isinstance(owner, torch.nn.Module) else None


def _traced(fn: Callable[..., Any]) -> Callable[..., Any]:
    """fn behind a function of its arguments only: what aot_compile traces. Traced directly, a bound method
    becomes its class's function of (self, *args), and the loaded function would have to be called with the
    module first; behind this one every kind of fn is called as fn is, its module reached through the closure
    (saved as external data)."""

    def call(*args: Any) -> Any:
        return fn(*args)

    return call


def _external(owner: torch.nn.Module | None) -> dict[str, Any]:
    """A precompiled function's external data: the module its bound method reads (weights, submodules)."""
    return {"owner": owner} if owner is not None else {}


def _qualname(fn: Callable[..., Any]) -> str:
    target = getattr(fn, "__func__", fn)
    return f"{getattr(target, '__module__', '')}.{getattr(target, '__qualname__', repr(target))}"


def _class_name(owner: torch.nn.Module | None) -> str:
    return "" if owner is None else f"{type(owner).__module__}.{type(owner).__qualname__}"


@contextmanager
def _call_state(key: dict[str, Any]) -> Iterator[None]:
    """The grad mode and autocast (with its cache setting) a precompile ``key`` records: what the compiled
    function's guards were built under, at its compile and at its load (the tensor guards' dispatch keys are
    taken from this thread's state when they are rebuilt on load)."""
    mode = key.get("grad_mode", "inference")
    device_type = str(key.get("device_type", "cpu"))
    enabled, dtype = key.get("autocast", [False, ""])
    cache = bool(key.get("autocast_cache", True))
    with ExitStack() as stack:
        stack.enter_context(torch.inference_mode(mode == "inference"))
        if mode != "inference":
            stack.enter_context(torch.set_grad_enabled(mode == "grad"))
        if autocast_state(device_type) != [enabled, dtype] or torch.is_autocast_cache_enabled() != cache:
            cast_dtype = getattr(torch, str(dtype).replace("torch.", "")) if enabled else None
            stack.enter_context(torch.autocast(device_type, dtype=cast_dtype, enabled=bool(enabled),
                                               cache_enabled=cache))
        yield


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
