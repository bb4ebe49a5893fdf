"""Whose code a captured event ran for: code layers, Python stacks and the user's call site.

Every CPU op, runtime call and (through its launching call) GPU kernel of a capture happened under a
Python stack the profiler's tracer recorded (``python_function`` events, nested per thread). Walking
that stack from the innermost frame outwards, the first frame that is neither library code (torch,
other infrastructure packages, the standard library, built-ins) says whose work it is:

- a frame of the **user's** code (the tracker: any file outside site-packages and the standard
  library, and the packages that define the captured modules even when pip-installed): the event is
  the user's, and that frame is its call site and its function;
- a frame of **trackscope**'s own code (``engine/`` or ``gui/`` of this install, or of the machine that
  recorded the trace, recognised by its package layout): the event is trackscope's own work (the
  session, the plugin adapter's upload and download, the stage timer), shown as such and never a
  finding about the user's code. The built-in trackers (CorrTrack, LK, the int8/fp8 layers) are the
  tracker under test, so their files count as the user's;
- no such frame (no Python stack recorded): ``unknown``.

The profiler's Python tracer names a frame ``file(line): function`` with the line the function starts
on, so a call site is the user's function (its file and first line), not the line inside it.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from engine.capture.evidence import TRACKSCOPE, UNKNOWN, USER
from engine.capture.trace import PyFrame, builtin_name, frame_site

#: trackscope's own packages (their files are trackscope's work wherever the trace was recorded)
ENGINE_DIR = str(Path(__file__).resolve().parents[1]) + os.sep
GUI_DIR = str(Path(__file__).resolve().parents[2] / "gui") + os.sep
#: the built-in trackers are the tracker under test, not trackscope's harness: their code is the "user" layer
TRACKER_PARTS = ("engine/trackers/corrtrack/", "engine/trackers/lk.py", "engine/trackers/quant.py")
#: engine's sub-packages: a recorded path ``.../engine/<one of these>/...`` is trackscope's on any machine
ENGINE_PACKAGES = ("core", "io", "trackers", "telemetry", "capture", "run", "report", "analysis", "workflows",
                   "training", "cli")
TORCH_DIR = str(Path(torch.__file__).resolve().parent) + os.sep
STDLIB_DIR = str(Path(os.__file__).resolve().parent) + os.sep
PACKAGE_DIRS = (f"{os.sep}site-packages{os.sep}", f"{os.sep}dist-packages{os.sep}")
#: packages never taken for the user's own, even when a captured module's class comes from them
LIBRARY_PACKAGES = ("torch", "torchvision", "torchaudio", "functorch", "triton", "numpy", "einops", "typing_extensions")
#: how far up a stack is walked before giving up (recursion in user code)
MAX_DEPTH = 256

LIBRARY = "library"
#: folders of code torch writes at run time (inductor's kernels and wrappers): never the user's
GENERATED_PREFIXES = ("torchinductor_", "tmp_torchinductor")


def _package_dirs(module_names: Iterable[str]) -> tuple[str, ...]:
    """The folders of the top-level packages of ``module_names`` (the captured modules' classes)."""
    out = set()
    for name in module_names:
        top = name.split(".")[0]
        module = sys.modules.get(top)
        path = getattr(module, "__file__", None)
        if not path or top in LIBRARY_PACKAGES or top in ("engine", "gui", "builtins", "__main__"):
            continue
        p = Path(path).resolve()
        out.add(str(p.parent if p.name == "__init__.py" else p.parent) + os.sep)
    return tuple(sorted(out))


@dataclass(frozen=True)
class CodeLayers:
    """Classifies source files: user, trackscope, or library (``user_dirs``: folders that are always the user's)."""

    user_dirs: tuple[str, ...] = ()

    @classmethod
    def for_modules(cls, modules: Iterable[object]) -> CodeLayers:
        """Layers for a capture of these modules: their classes' packages are the user's even when installed."""
        return cls(_package_dirs(type(m).__module__ for m in modules))

    def layer(self, path: str) -> str:
        if not path or path.startswith("<"):
            return LIBRARY
        path = resolve_recorded(path)
        if self.user_dirs and path.startswith(self.user_dirs):
            return USER
        if any(part in path.replace("\\", "/") for part in TRACKER_PARTS):
            return USER  # a built-in tracker is the tracker being diagnosed
        if path.startswith((ENGINE_DIR, GUI_DIR)) or _recorded_trackscope(path):
            return TRACKSCOPE
        if path.startswith(TORCH_DIR) or any(part in path for part in PACKAGE_DIRS):
            return LIBRARY
        if path.startswith(STDLIB_DIR) or _relative_library(path):
            return LIBRARY
        return USER  # a user's folder named like a library (tapnet/torch/) is still the user's


def _recorded_trackscope(path: str) -> bool:
    """True for ``.../engine/<sub-package>/x.py`` or ``.../gui/...py`` of a trackscope tree on another machine."""
    parts = path.replace("\\", "/").split("/")
    for i, part in enumerate(parts[:-2]):
        if part == "engine" and parts[i + 1] in ENGINE_PACKAGES:
            return True
    top_level = len(parts) >= 2 and parts[-2] == "engine" and parts[-1] in ("api.py", "__init__.py")
    return top_level and "site-packages" not in parts


@functools.lru_cache(maxsize=4096)
def resolve_recorded(path: str) -> str:
    """The absolute file of a path as torch's Python tracer records it: it trims the longest ``sys.path``-like
    prefix (site-packages, the script's folder, the working folder), so ``einops/einops.py`` and
    ``mytracker/model.py`` look alike until resolved against those folders. Unresolved (a trace recorded on
    another machine) it stays as it is."""
    if os.path.isabs(path):
        return path
    try:
        from torch.profiler.python_tracer import _prefix_regex

        prefixes = list(_prefix_regex())
    except Exception:  # noqa: BLE001 - another torch: sys.path alone
        prefixes = []
    for prefix in [os.getcwd(), *prefixes, *sys.path]:
        if not prefix:
            continue
        candidate = os.path.join(prefix, path)
        if os.path.isfile(candidate):
            return str(Path(candidate).resolve())
    return path


def _relative_library(path: str) -> bool:
    """A slimmed trace's relative path (``torch/cuda/streams.py``, ``contextlib.py``) of library code, or code
    torch generated (inductor's cache folder ``torchinductor_USER/``, FX's ``<eval_with_key>``)."""
    if any(part.startswith(GENERATED_PREFIXES) for part in path.replace("\\", "/").split("/")):
        return True
    if os.path.isabs(path):
        return False
    first = path.replace("\\", "/").split("/")[0]
    name = first[:-3] if first.endswith(".py") else first
    return name in LIBRARY_PACKAGES or name in getattr(sys, "stdlib_module_names", ())


def short_path(path: str) -> str:
    """A path as a user reads it: relative to the working folder when inside it, else its last 3 parts."""
    try:
        rel = os.path.relpath(path)
        if not rel.startswith(".."):
            return rel
    except ValueError:
        pass
    return "/".join(path.replace("\\", "/").split("/")[-3:])


@dataclass(frozen=True)
class Site:
    """Where an event came from: its layer, the first non-library frame, and the Python builtin it went through."""

    layer: str
    label: str | None = None  # "file:line function" of the user's (or trackscope's) frame
    function: str | None = None  # "function (file:line)"
    frame: int = -1  # index of that frame in the thread's frame list
    via: str | None = None  # the innermost Python builtin (".item", ".cpu", "synchronize")
    outermost_user: bool = False  # the frame is the outermost user frame of the stack (the tracker's entry)


NO_SITE = Site(UNKNOWN)


def nest_parents(spans: Sequence[object]) -> list[int]:
    """For spans sorted by (start, -dur), each one's innermost enclosing span's index, or -1."""
    parents = [-1] * len(spans)
    stack: list[int] = []
    for i, s in enumerate(spans):
        start = s.start  # type: ignore[attr-defined]
        while stack and spans[stack[-1]].end <= start:  # type: ignore[attr-defined]
            stack.pop()
        parents[i] = stack[-1] if stack else -1
        stack.append(i)
    return parents


class ThreadStacks:
    """The Python frames of one thread with their nesting, and the site of any point in time on it."""

    def __init__(self, frames: list[PyFrame], layers: CodeLayers):
        self.frames = frames
        self.parents = nest_parents(frames)
        self.layers = layers
        self._starts = [f.start for f in frames]
        self._cache: dict[int, Site] = {}
        self._layer_of: dict[int, tuple[str, tuple[str, int, str] | None]] = {}

    def _frame_layer(self, i: int) -> tuple[str, tuple[str, int, str] | None]:
        found = self._layer_of.get(i)
        if found is None:
            site = frame_site(self.frames[i])
            found = (self.layers.layer(site[0]) if site else LIBRARY, site)
            self._layer_of[i] = found
        return found

    def is_code(self, i: int) -> bool:
        """Whether frame ``i`` is the user's or trackscope's code (a frame a site can name), not library code."""
        layer, site = self._frame_layer(i)
        return layer != LIBRARY and site is not None

    def innermost(self, t: float) -> int:
        """The innermost frame containing time ``t``, or -1."""
        from bisect import bisect_right

        i = bisect_right(self._starts, t) - 1
        while i >= 0 and self.frames[i].end < t:
            i = self.parents[i]
        return i

    def site_of_frame(self, i: int) -> Site:
        if i < 0:
            return NO_SITE
        cached = self._cache.get(i)
        if cached is not None:
            return cached
        via = None
        j, depth = i, 0
        found: Site | None = None
        while j >= 0 and depth < MAX_DEPTH:
            layer, site = self._frame_layer(j)
            if via is None:
                via = builtin_name(self.frames[j])
            if layer != LIBRARY and site is not None:
                label = f"{short_path(site[0])}:{site[1]} {site[2]}"
                function = f"{site[2]} ({short_path(site[0])}:{site[1]})"
                found = Site(layer, label, function, j, via, self._outermost_user(j))
                break
            j = self.parents[j]
            depth += 1
        result = found or Site(UNKNOWN, via=via)
        self._cache[i] = result
        return result

    def _outermost_user(self, j: int) -> bool:
        k, depth = self.parents[j], 0
        while k >= 0 and depth < MAX_DEPTH:
            if self._frame_layer(k)[0] == USER:
                return False
            k = self.parents[k]
            depth += 1
        return True

    def site(self, t: float) -> Site:
        """The site of an event at time ``t`` on this thread."""
        return self.site_of_frame(self.innermost(t))

    def functions_above(self, i: int) -> list[str]:
        """Function names of frame ``i`` and its ancestors, innermost first (library ones included)."""
        out: list[str] = []
        j, depth = i, 0
        while j >= 0 and depth < MAX_DEPTH:
            site = frame_site(self.frames[j])
            out.append(site[2] if site else (builtin_name(self.frames[j]) or self.frames[j].name))
            j = self.parents[j]
            depth += 1
        return out


class Stacks:
    """ThreadStacks for every thread of a capture."""

    def __init__(self, frames: Sequence[PyFrame], layers: CodeLayers):
        by_tid: dict[int, list[PyFrame]] = {}
        for f in frames:
            by_tid.setdefault(f.tid, []).append(f)
        self.layers = layers
        self.threads = {tid: ThreadStacks(fs, layers) for tid, fs in by_tid.items()}

    def site(self, tid: int, t: float) -> Site:
        stacks = self.threads.get(tid)
        return stacks.site(t) if stacks is not None else NO_SITE

    def __bool__(self) -> bool:
        return bool(self.threads)
