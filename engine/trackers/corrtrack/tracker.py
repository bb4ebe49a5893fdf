"""CorrTrackTracker: the built-in tracker, CorrTrackNet behind the Tracker protocol with timed stages.

prepare: upload (host -> device copy of the uint8 frames), backbone (resize + CNN, in chunks of
``frames_per_batch``; with the polish on it also keeps grey frames at 256x256 and, for a video larger than that,
uint8 grey frames at the video's resolution for the polish's fine stage). track: query_features,
cost_volume, init_head, refine (all iterations, then the NCC polish of polish.py unless ``polish=False``
or the environment sets TRACKSCOPE_CORRTRACK_POLISH=0), download.
Nothing inside a batch waits for the device: the only sync is the final copy back to the host.
On CUDA each stage runs as a captured CUDA graph (graphs.py) unless ``cuda_graphs=False`` or the
environment sets TRACKSCOPE_NO_CUDA_GRAPHS=1; a capture that fails falls back to eager for good.
CUDA only: ``compile="on"`` (or True, or TRACKSCOPE_CORRTRACK_COMPILE=1) runs the backbone's features, each
refinement iteration and the polish through torch.compile (inductor, static shapes): on the H200 the
warm call took about half the time, but first runs took 16-62 s to compile, so it is off by default
(cold start). ``compile="background"`` (TRACKSCOPE_CORRTRACK_COMPILE=background; opt-in) runs eagerly at
once and compiles in a background thread (engine.trackers.compiled_switch), switching to the compiled functions
from the batch after it is done; Inductor's caches persist in a keyed private folder
(engine.trackers.compile_cache) for a later start. On the H200 (session 19, scripts/compile_second_start_h200.py)
the default backend, "dynamo", compiled in 45.7 s on an empty cache and reached compiled code 16.5 s after a
second start's tracker was made (its compile 13 s, all from the disk cache): faster, not the 2 s aimed at. The
opt-in "aoti" backend (compile_packages) keeps an AOTInductor package per call signature and loads it before a
later start's first batch (1 s on the CPU), but on the H200 every CUDA package crashed the process in torch's
loader. The opt-in "precompile" backend (torch >= 2.13) takes the same record-then-package path with dynamo's
precompile (``aot_compile``; a pickle of the compiled function and its guards, loaded without tracing) instead of
AOTInductor. A compile that fails falls back to the uncompiled code for good. How the two threads stay
off each other: ``_compile_job``.
int8/fp8 (engine.trackers.quant): a quantised copy of the network, made once per mode and device, runs
them; the float model is never touched, so fp32/tf32/fp16/bf16 run as before.
v3 (attention across tracks): every track batch gets ``support_grid`` x ``support_grid`` support queries on frame 0
appended (support.py; a fixed count, so a batch's shapes stay static for graphs and compile), and their rows are
dropped at the end of the refine stage, before the polish, the download and the query-frame overwrite: the
result holds the user's rows only. v1/v2 nets get none (the same code path as before). Quantised: the backbone's
1x1 projections, the correlation volume's matmul (per-query x per-position dynamic scales), query_in, the
temporal blocks' MLPs and corr_in (kept in float for fp8: KEEP_FLOAT says why); NOT_QUANTISED_STAGES
lists the rest. Quantised stages are captured in CUDA graphs like the others (dynamic scales are device
ops, shapes static, the kernel check runs before any capture); a failing capture falls back to eager.
"""

from __future__ import annotations

import copy
import logging
import os
import threading
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from engine.core import flags
from engine.core.flags import env_flag
from engine.core.pixels import resample_coordinates
from engine.core.precision import QUANT_MODES, autocast_dtype
from engine.core.stages import BUILTIN_STAGES, StageTimer
from engine.trackers import compile_packages
from engine.trackers.base import PreparedVideo, RunContext, Tracker, TrackResult
from engine.trackers.compile_cache import INDUCTOR_CACHE_ENV, CompileCache, Variant, inductor_cache_counts
from engine.trackers.compile_packages import (
    PackageCallError,
    Packaged,
    PackageStore,
    Precompiled,
    call_key,
    describe_call,
)
from engine.trackers.compiled_switch import (
    COMPILE_MODES,
    FAILED,
    CompiledSwitch,
    CompileStatus,
    JobLog,
    RetryLater,
)
from engine.trackers.corrtrack import casts, fused
from engine.trackers.corrtrack.graphs import GraphCache, GraphCaptureError
from engine.trackers.corrtrack.model import MODEL_SIZE, CorrTrackNet, count_parameters, visible_from_logits
from engine.trackers.corrtrack.polish import FineConfig, PolishConfig, fine_grey, fine_polish, grey_frames, ncc_polish
from engine.trackers.corrtrack.support import SUPPORT_FRAME, SUPPORT_GRID, support_count, with_support
from engine.trackers.corrtrack.weights import DEFAULT_WEIGHTS, load_model
from engine.trackers.quant import QuantReport, quantize_module, recipe_for

NO_GRAPHS_ENV = flags.NO_CUDA_GRAPHS
POLISH_ENV = flags.CORRTRACK_POLISH  # false turns the NCC polish off
FINE_POLISH_ENV = flags.CORRTRACK_FINE_POLISH  # false turns the polish's fine stage (video resolution) off
COMPILE_ENV = flags.CORRTRACK_COMPILE  # true/on: torch.compile on (CUDA); "background": compile in a thread
COMPILE_BACKEND_ENV = flags.CORRTRACK_COMPILE_BACKEND  # dynamo (default), aoti or precompile (opt-in)
COMPILE_CPU_ENV = flags.CORRTRACK_COMPILE_CPU  # true: compile on the CPU too (tests; C++ from gcc)
#: how the compiled functions are made: AOTInductor packages (torch.export, no tracing on a later start),
#: torch.compile (dynamo; Inductor's caches on disk, but dynamo traces again on every start) or dynamo's
#: precompile (aot_compile: packages of the compiled function and its guards, no tracing on a later start)
COMPILE_BACKENDS = ("aoti", "dynamo", "precompile")
#: the backends that record a job's calls and keep a package per call (compile_packages.KINDS)
PACKAGE_BACKENDS = ("aoti", "precompile")
#: the word of COMPILE_ENV (beside the true/false words) that picks the background compile
BACKGROUND_WORD = "background"
#: precisions the background compile covers: their TF32 flags are off, as between batches (``_compile_job``)
BACKGROUND_PRECISIONS = ("fp32", "fp16", "bf16")
#: seed of the stand-in frames and queries a compile job runs on (only their shapes matter)
COMPILE_JOB_SEED = 0
#: a compiled call in a job (dynamo) slower than this is logged even without an FX-cache event
SLOW_COMPILED_CALL_S = 0.5
RECOMPILE_LIMIT = 64  # dynamo's variants per compiled function, raised to this while compiling is on
#: layers a mode keeps in float, with the measured reason
KEEP_FLOAT = {
    "int8": {},
    "fp8": {"corr_in": "its rows mix correlation windows with motion features (positions / 64, frame offsets, "
                       "logits); e4m3's 3 mantissa bits there cost AJ 0.006 on the sample (CPU: 0.928 -> 0.934)"},
}
#: what int8/fp8 leave in float (beside the layers quantize_module lists)
log = logging.getLogger(__name__)

NOT_QUANTISED_STAGES = (
    "backbone 3x3 convs: no int8/fp8 conv kernel in torch (autocast dtype)",
    "query_features, local correlation windows: gathers and bilinear blends",
    "cost volume pooling (avg_pool2d), init_head (max, logsumexp, softmax), LayerNorm, GELU, temporal taps",
    "polish: NCC in fp32 (autocast off)",
)


def to_model_xy(xy: torch.Tensor, width: int, height: int) -> torch.Tensor:
    """Frame pixels [..., 2] of a width x height frame -> model pixels [..., 2], centre-aligned as the
    model's resize (``F.interpolate(align_corners=False)`` in ``CorrTrackNet.normalise``) is."""
    return _resample_xy(xy, MODEL_SIZE / width, MODEL_SIZE / height)


def from_model_xy(xy: torch.Tensor, width: int, height: int) -> torch.Tensor:
    """Model pixels [..., 2] -> frame pixels [..., 2] of a width x height frame (to_model_xy's inverse)."""
    return _resample_xy(xy, width / MODEL_SIZE, height / MODEL_SIZE)


def _resample_xy(xy: torch.Tensor, sx: float, sy: float) -> torch.Tensor:
    """Per-axis centre-aligned rescale with Python scalars (no factor tensor: no host -> device copy in a batch)."""
    return torch.stack([resample_coordinates(xy[..., 0], sx), resample_coordinates(xy[..., 1], sy)], dim=-1)


class CorrTrackTracker(Tracker):
    """4D-correlation point tracker with trained weights (resources/corrtrack.safetensors)."""

    name = "corrtrack"
    stages = BUILTIN_STAGES
    device_types = ("cpu", "cuda")

    def __init__(self, weights: Path | str | None = None, model: CorrTrackNet | None = None,
                 cuda_graphs: bool | None = None, polish: bool | None = None,
                 polish_config: PolishConfig | None = None, compile: bool | str | None = None,
                 compile_cache_root: Path | None = None, compile_backend: str | None = None,
                 support_grid: int | None = None, fine_polish: FineConfig | bool | None = None):
        """Load checked weights (default: the shipped ones), or use ``model`` as given (tests).

        polish: NCC sub-pixel polish after refinement (default on, unless TRACKSCOPE_CORRTRACK_POLISH=0).
        fine_polish: the polish's second stage at the video's own resolution, for videos larger than the model's
        (polish.FineConfig; True: its defaults; default on, unless TRACKSCOPE_CORRTRACK_FINE_POLISH=0).
        compile: torch.compile the hot functions on CUDA: "off" (False), "on" (True) or "background"
        (default off, unless TRACKSCOPE_CORRTRACK_COMPILE says otherwise). compile_cache_root: where the
        keyed compile-cache folders go (default ~/.cache/trackscope/compile). compile_backend: "dynamo"
        (torch.compile, the default), "aoti" (AOTInductor packages) or "precompile" (dynamo's precompile
        packages, torch >= 2.13), both opt-in, unless TRACKSCOPE_CORRTRACK_COMPILE_BACKEND says otherwise.
        support_grid: a v3 net's support points per side (support_grid^2 per batch; 0: none); None: the grid its
        weights were trained with (the manifest's ``training.support_grid``), else SUPPORT_GRID; v1/v2 nets ignore it.
        """
        if support_grid is not None and support_grid < 0:
            raise ValueError(f"support_grid must be >= 0 (0: no support points), not {support_grid}")
        if model is not None:
            self.model = model.eval()
            self.manifest: dict[str, Any] = {}
            self.weights_path: Path | None = None
        else:
            self.weights_path = Path(weights) if weights is not None else DEFAULT_WEIGHTS
            self.model, self.manifest = load_model(self.weights_path)
        if cuda_graphs is None:
            cuda_graphs = not env_flag(NO_GRAPHS_ENV, default=False)
        self.cuda_graphs = cuda_graphs
        if polish is None:
            polish = env_flag(POLISH_ENV, default=True)
        self.polish = polish
        self.polish_config = polish_config or PolishConfig()
        if fine_polish is None:
            fine_polish = env_flag(FINE_POLISH_ENV, default=True)
        self.fine_config: FineConfig | None = (FineConfig() if fine_polish is True else fine_polish or None)
        if support_grid is None:
            trained = self.manifest.get("training", {}).get("support_grid")
            support_grid = int(trained) if isinstance(trained, int) and trained >= 0 else SUPPORT_GRID
        self.support_grid = int(support_grid)
        self.support_batches = 0  # track batches run with support points (v3)
        self.compile_mode = compile_mode(compile)
        self.compile = self.compile_mode != "off"
        self.compile_error = ""
        self.compile_backend = compile_backend_for(compile_backend)
        self._compile_cpu = env_flag(COMPILE_CPU_ENV, default=False)
        self._created = time.perf_counter()
        self.compile_ready_after_s: float | None = None  # tracker creation -> the first keys ready
        self.job_log: JobLog | None = None  # the last compile job's (or disk load's) events
        self._packages: dict[str, Packaged] = {}  # aoti/precompile: call-key digest -> loaded package
        self._package_store: PackageStore | None = None
        self._disk_tried: set[tuple] = set()  # aoti/precompile: key sets whose packages were looked for on disk
        self._package_misses: set[str] = set()  # aoti/precompile: calls with no package (ran the plain function)
        self._weights_digests: dict[int, str] = {}
        self._export_lock = threading.Lock()  # a run's batch body vs a background job's torch.export (build)
        self._compiled: dict[str, Callable[..., Any]] = {}
        self._run_only: dict[str, Callable[..., Any]] = {}
        self._compile_lock = threading.Lock()  # makes the compiled twins once, whichever thread asks first
        self._local = threading.local()  # per thread: .job (a compile job runs here), .use_compiled (this batch)
        self.switch = CompiledSwitch(self.compile_mode)
        self.compile_cache: CompileCache | None = None
        self._compile_cache_root = compile_cache_root
        self._tf32_batches = 0  # entries and exits of batches run with TF32 on (``_compile_job``)
        self._frames_ref: Callable[[], Any] = lambda: None  # the last prepared frames, for a compile job
        self._counting = False  # inside counting_mode: eager, and no compile asked for
        self.last_track_compiled = False  # whether the last track call (of a run, not a job) ran compiled code
        self.graph_error = ""
        self._track_graphs = GraphCache()
        self._backbone_graphs = GraphCache()
        self._device = torch.device("cpu")
        self._quantised: dict[str, tuple[CorrTrackNet, QuantReport]] = {}  # mode -> copy on self._device

    def describe(self) -> dict[str, Any]:
        info = {
            **super().describe(),
            "parameters": count_parameters(self.model),
            "model_size": MODEL_SIZE,
            "config": self.model.cfg.to_dict(),
            "model_version": self.model.cfg.version,
            "weights": str(self.weights_path) if self.weights_path else None,
            "cuda_graphs": self.cuda_graphs and not self.graph_error,
            "fused_kernels": fused.status(),
            "polish": self.polish,
            **self.compile_info(),
        }
        if self.polish:
            info["polish_config"] = self.polish_config.to_dict()
            info["fine_polish"] = self.fine_config.to_dict() if self.fine_config else None
        if self.model.cfg.track_attention_layers > 0:
            grid = self.support_grid
            info["support_points"] = {"count": support_count(grid), "grid": f"{grid}x{grid}", "frame": SUPPORT_FRAME,
                                      "batches_run": self.support_batches}
        if self.graph_error:
            info["cuda_graphs_error"] = self.graph_error
        for key in ("sha256", "validation", "training", "date"):
            if key in self.manifest:
                info[key] = self.manifest[key]
        if self._quantised:
            info["quantisation"] = {mode: self._quant_describe(report) for mode, (_, report) in self._quantised.items()}
        return info

    @staticmethod
    def _quant_describe(report: QuantReport) -> dict[str, Any]:
        info = report.describe()
        info["quantised"] = [*info["quantised"], "cost_volume matmul (queries x positions, rowwise x rowwise)"]
        info["not_quantised"] = [*info["not_quantised"], *NOT_QUANTISED_STAGES]
        return info

    def describe_precision(self, precision: str, device: torch.device | str) -> dict[str, Any]:
        """What ``precision`` runs on ``device``: for int8/fp8 the recipe and the layers it quantises (a dry
        run on a CPU copy when the mode has not run yet)."""
        if precision not in QUANT_MODES:
            return {}
        done = self._quantised.get(precision)
        if done is not None and str(self._device) == str(torch.device(device)):
            return {"quantisation": self._quant_describe(done[1])}
        probe = copy.deepcopy(self.model).cpu()
        report = quantize_module(probe, recipe_for(precision, device), check=False, keep=KEEP_FLOAT[precision])
        return {"quantisation": self._quant_describe(report)}

    @contextmanager
    def counting_mode(self) -> Iterator[None]:
        """Eager (no CUDA graphs, no compiled code, nothing compiled for it) while the cost model counts ops:
        graph replays and fused kernels hide them."""
        saved = self.cuda_graphs
        self.cuda_graphs = False
        self._counting = True
        try:
            with fused.disabled():
                yield
        finally:
            self.cuda_graphs = saved
            self._counting = False

    def _support_grid(self) -> int:
        """Support points per side a track batch adds: the knob for a v3 net, 0 for v1/v2."""
        return self.support_grid if self.model.cfg.track_attention_layers > 0 else 0

    def _model_on(self, device: torch.device) -> CorrTrackNet:
        if device != self._device:
            # outside inference mode even when the first batch is inside it (a session's run): moved there, the
            # parameters would become inference tensors, which torch.export (the aoti packages) refuses to trace
            with torch.inference_mode(False):
                self.model.to(device)
                self.model.backbone.to(memory_format=torch.channels_last)  # type: ignore[call-overload]  # torch's stubs lack it
            self._device = device
            self._track_graphs.clear()
            self._backbone_graphs.clear()
            self._quantised.clear()
            self.switch.forget()  # compiled code guards on the parameters' device
        return self.model

    def _model_for(self, ctx: RunContext) -> CorrTrackNet:
        """The float model, or for int8/fp8 its quantised copy (made once per mode and device; the float
        model stays as it is, so the other modes run exactly as before)."""
        model = self._model_on(ctx.device)
        if ctx.precision not in QUANT_MODES:
            return model
        done = self._quantised.get(ctx.precision)
        if done is None:
            qmodel = copy.deepcopy(model)
            recipe = recipe_for(ctx.precision, ctx.device)
            report = quantize_module(qmodel, recipe, keep=KEEP_FLOAT[ctx.precision])  # checks the kernel first
            qmodel.corr_recipe = recipe
            done = self._quantised[ctx.precision] = (qmodel.eval(), report)
        return done[0]

    def _runner(self, ctx: RunContext, cache: GraphCache, key: tuple) -> Callable[..., tuple]:
        """stage(name, fn, *inputs): replay a CUDA graph of fn when graphs are on, else call fn."""
        if ctx.device.type != "cuda" or not self.cuda_graphs or self.graph_error or getattr(self._local, "job", False):
            return lambda name, fn, *inputs: tuple(fn(*inputs))
        # a graph holds the kernels it captured: eager and compiled stages are captured apart
        full_key = (*key, str(ctx.device), ctx.precision, torch.backends.cuda.matmul.allow_tf32,
                    bool(getattr(self._local, "use_compiled", False)))
        return lambda name, fn, *inputs: cache.stage(full_key, name, fn, inputs)

    # -- compiling ------------------------------------------------------------------------------------------
    def compile_info(self) -> dict[str, Any]:
        """For the report: ``compile`` (what runs now: eager / eager, compiling in the background / compiled /
        compiled (from cache)), ``compile_mode``, ``compile_s`` (the last compile's seconds), the error of a
        failed one and the cache folder."""
        status = self.compile_status()
        info: dict[str, Any] = {"compile": status.label, "compile_mode": self.compile_mode}
        if self.compile_mode != "off":
            info["compile_backend"] = self.compile_backend
        if status.seconds is not None:
            info["compile_s"] = round(status.seconds, 2)
        if self.compile_ready_after_s is not None:
            info["compile_ready_after_s"] = round(self.compile_ready_after_s, 2)
        if status.retries:
            info["compile_retries"] = status.retries
        if self.compile_error:
            info["compile_error"] = self.compile_error
        if self.compile_cache is not None:
            info["compile_cache"] = str(self.compile_cache.folder)
            notes = [self.compile_cache.note] if self.compile_cache.note else []
            notes += self._package_store.notes if self._package_store is not None else []
            if notes:
                info["compile_cache_note"] = "; ".join(notes)
        if self.job_log is not None:
            info["compile_job"] = self.job_log.to_dict()
        if self._package_misses:
            info["compile_package_misses"] = sorted(self._package_misses)
        guard_failures = sorted({f"{p.name}: {p.guard_failure}" for p in list(self._packages.values())
                                 if isinstance(p, Precompiled) and p.guard_failure})
        if guard_failures:
            info["compile_guard_failures"] = guard_failures
        return info

    def compile_status(self) -> CompileStatus:
        """The switch's status, eager (with the error) once a compile failed, or where compiling cannot happen
        (no CUDA)."""
        status = self.switch.status
        if self.compile_mode == "off":
            return status
        if not self.compile_error and status.error:
            self.compile_error = status.error
        if self.compile_error:
            return CompileStatus(self.compile_mode, FAILED, status.seconds, False, self.compile_error)
        device = self._device if self._device.type == "cuda" or not torch.cuda.is_available() else torch.device("cuda")
        if not self._compiling(device):
            return CompileStatus("off", status.state)  # CUDA only: nothing compiles here
        return status

    def _compiling(self, device: torch.device) -> bool:
        on_device = device.type == "cuda" or (device.type == "cpu" and self._compile_cpu)
        return (self.compile_mode != "off" and on_device and not self.compile_error
                and self.switch.status.state != FAILED)

    def _fn(self, name: str, fn: Callable[..., Any], device: torch.device) -> Callable[..., Any]:
        """fn, or its compiled twin when this batch uses compiled code: in a compile job the torch.compile'd
        function itself (it compiles on this call), in a run the same code in dynamo's run-only mode (it
        runs what was compiled and never compiles: a run thread never stalls on a compile)."""
        if not self._compiling(device):
            return fn
        key = f"{name}@{id(getattr(fn, '__self__', fn))}"  # the float model and a quantised copy compile apart
        if self.compile_backend in PACKAGE_BACKENDS:
            if getattr(self._local, "job", False):
                return lambda *args: self._record_call(name, fn, device, args)
            if not getattr(self._local, "use_compiled", False):
                return fn
            return lambda *args: self._packaged_call(name, fn, device, args)
        if getattr(self._local, "job", False):
            with self._compile_lock:
                compiled = self._compiled.get(key)
                if compiled is None:
                    # each shape, dtype and autocast setting (graph capture vs eager) compiles once: 8 variants
                    # per function, dynamo's default, are used up by two batch sizes in two precisions
                    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit,
                                                               RECOMPILE_LIMIT)
                    compiled = self._compiled[key] = torch.compile(fn, dynamic=False)
            return lambda *args: self._timed_compile(name, compiled, args)
        if not getattr(self._local, "use_compiled", False):
            return fn
        with self._compile_lock:
            run_only = self._run_only.get(key)
            if run_only is None:
                run_only = self._run_only[key] = torch._dynamo.run(fn)
        return run_only

    def _use_compiled(self, keys: tuple[tuple, ...], job: Callable[[], bool] | None) -> bool:
        """Whether this batch runs compiled code (set for this thread): on, the job runs here first; in the
        background, it is requested (when ``job`` is given) and the batch runs eagerly until it is done."""
        use = False
        if self._compiling(keys[0][1]) and not getattr(self._local, "job", False) and not self._counting:
            if all(self.switch.ready(k) for k in keys):
                use = True
            elif self.compile_backend in PACKAGE_BACKENDS and keys[0][2] in QUANT_MODES:
                use = False  # packages are made of the float model only
            elif self.compile_backend in PACKAGE_BACKENDS and self._load_packages(keys):
                use = True
            elif job is not None and self.compile_mode == "on":
                use = self.switch.inline(keys, job)
            elif job is not None:
                self.switch.request(keys, job)
        self._local.use_compiled = use
        if use and len(keys) > 1 and self.compile_ready_after_s is None:  # a track call's: the whole batch
            self.compile_ready_after_s = time.perf_counter() - self._created
        return use

    # -- packages (compile_backend "aoti": AOTInductor, "precompile": dynamo's aot_compile) -------------------
    def _store_for(self, device: torch.device) -> PackageStore:
        if self._package_store is None:
            self._package_store = PackageStore(self._cache_for(device).folder, kind=self.compile_backend)
        return self._package_store

    def _function_for(self, key: dict[str, Any]) -> Callable[..., Any] | None:
        """The float model's function a package key was recorded from (by its name; ``_fn``'s names), or None:
        a precompile package is loaded beside it (its module's weights, the fallback of a failed guard)."""
        functions: dict[str, Callable[..., Any]] = {"features": self.model.features,
                                                   "refine_step": self.model.refine_step, "ncc_polish": ncc_polish}
        return functions.get(str(key.get("name", "")))

    def _weights_digest(self, fn: Callable[..., Any]) -> str:
        owner = getattr(fn, "__self__", None)
        if not isinstance(owner, torch.nn.Module):
            return ""
        with self._compile_lock:
            found = self._weights_digests.get(id(owner))
        if found is None:
            found = compile_packages.weights_digest(owner)
            with self._compile_lock:
                self._weights_digests[id(owner)] = found
        return found

    def _variant(self, key: tuple) -> list[Any]:
        """What a tracker key's package index is for: the key, the float model's weights and the code."""
        return [[str(k) for k in key], self._weights_digest(self.model.features),
                compile_packages.source_digest(self.model.refine_step), compile_packages.source_digest(ncc_polish),
                compile_packages.source_digest(_stand_in_queries)]

    def _load_packages(self, keys: tuple[tuple, ...]) -> bool:
        """Load the packages a variant's batches call, when an earlier start recorded them (once per key set);
        True (and the keys ready) when every one loaded: this batch runs compiled code."""
        if keys in self._disk_tried:
            return False
        self._disk_tried.add(keys)
        t0 = time.perf_counter()
        try:
            store = self._store_for(keys[0][1])
            lists = [store.recall(self._variant(k)) for k in keys]
            if any(found is None for found in lists):
                return False
            joblog = JobLog(log)
            loaded: dict[str, Packaged] = {}
            for key_digest in dict.fromkeys(d for found in lists for d in found or []):
                if key_digest in self._packages:
                    continue
                t1 = time.perf_counter()
                got = store.load_digest(key_digest, resolve=self._function_for)
                if got is None:
                    joblog.event(f"package {key_digest} missing or refused: compiling instead")
                    return False
                call, package = got
                loaded[key_digest] = package
                joblog.event(f"loaded {describe_call(call)} from disk", seconds=round(time.perf_counter() - t1, 3))
        except Exception as exc:  # a cache that cannot even be read: compile as if it were empty
            log.warning("compile packages not loaded: %s", _first_line(exc))
            return False
        with self._compile_lock:
            self._packages.update(loaded)
        seconds = time.perf_counter() - t0
        joblog.event("packages loaded from the disk cache: compiled from this batch", seconds=round(seconds, 3))
        joblog.set(backend=self.compile_backend, state="compiled", from_cache=True, seconds=round(seconds, 3))
        self.job_log = joblog
        self.switch.adopt(keys, seconds, from_cache=True)
        return True

    def _record_call(self, name: str, fn: Callable[..., Any], device: torch.device, args: tuple) -> Any:
        """In a compile job (aoti, precompile): note fn's call (its key under this thread's autocast) and run it
        plainly."""
        recorded = getattr(self._local, "recorded", None)
        if recorded is not None:
            key = call_key(name, fn, args, device.type, self._weights_digest(fn), kind=self.compile_backend)
            recorded.append((getattr(self._local, "phase", "track"), name, fn, args, key))
        return fn(*args)

    def _packaged_call(self, name: str, fn: Callable[..., Any], device: torch.device, args: tuple) -> Any:
        """In a run (aoti, precompile): the package made for this call's key, or fn where there is none (noted
        once); a precompiled package whose guards this call fails runs fn too (``Precompiled``)."""
        key = call_key(name, fn, args, device.type, self._weights_digest(fn), kind=self.compile_backend)
        package = self._packages.get(compile_packages.digest(key))
        if package is None:
            text = describe_call(key)
            if text not in self._package_misses:
                self._package_misses.add(text)
                log.warning("no compile package for %s: it runs uncompiled", text)
            return fn(*args)
        return package(*args)

    def _build_packages(self, device: torch.device, recorded: list[tuple], keys: tuple[tuple, ...],
                        joblog: JobLog) -> bool:
        """Load or build (aoti: export + AOTInductor; precompile: aot_compile) a package per distinct recorded
        call; index them per key. Returns whether every one came from the disk."""
        store = self._store_for(device)
        per_phase: dict[str, list[str]] = {"prepare": [], "track": []}
        built = 0
        for phase, _name, fn, args, key in recorded:
            key_digest = compile_packages.digest(key)
            if key_digest not in per_phase[phase]:
                per_phase[phase].append(key_digest)
            with self._compile_lock:
                have = key_digest in self._packages
            if have:
                continue
            t0 = time.perf_counter()
            package = store.load(key, fn)
            if package is not None:
                joblog.event(f"loaded {describe_call(key)} from disk", seconds=round(time.perf_counter() - t0, 3))
            else:
                joblog.event(f"building {describe_call(key)}")
                package, parts = store.build(fn, args, key, device.type, exclusive=self._export_lock)
                built += 1
                joblog.event(f"built {describe_call(key)}", **{k: round(v, 2) for k, v in parts.items()})
            with self._compile_lock:
                self._packages[key_digest] = package
        for k in keys:
            store.remember(self._variant(k), per_phase["prepare"] if k[0] == "backbone" else
                           per_phase["prepare"] + per_phase["track"])
        distinct = len(dict.fromkeys(per_phase["prepare"] + per_phase["track"]))
        joblog.set(packages_built=built, packages_reused=distinct - built)
        return built == 0

    def _timed_compile(self, name: str, compiled: Callable[..., Any], args: tuple) -> Any:
        """In a compile job (dynamo): call the compiled function, logging the calls that compiled (slow ones)."""
        joblog = getattr(self._local, "joblog", None)
        before = inductor_cache_counts()
        t0 = time.perf_counter()
        out = compiled(*args)
        after = inductor_cache_counts()
        if joblog is not None and (after != before or time.perf_counter() - t0 > SLOW_COMPILED_CALL_S):
            joblog.event(f"dynamo: {name} compiled", seconds=round(time.perf_counter() - t0, 2),
                         fx_cache_hits=after["hit"] - before["hit"], fx_cache_misses=after["miss"] - before["miss"])
        return out

    def _backbone_key(self, ctx: RunContext, video_shape: tuple[int, ...], keep_grey: bool) -> tuple:
        """What a prepare's compiled code depends on (the second item is the device: ``_compiling`` reads it)."""
        return ("backbone", ctx.device, ctx.precision, tuple(video_shape), ctx.frames_per_batch, bool(keep_grey),
                self.cuda_graphs and not self.graph_error)

    def _track_key(self, ctx: RunContext, video_shape: tuple[int, ...], num_points: int) -> tuple:
        """What a track call's compiled code depends on (the backbone's, and the batch's number of points, a v3
        net's support points included)."""
        return ("track", ctx.device, ctx.precision, tuple(video_shape), ctx.frames_per_batch, self.polish,
                self.cuda_graphs and not self.graph_error, int(num_points) + support_count(self._support_grid()))

    def _note_tf32(self) -> None:
        """Count a batch boundary run with matmul TF32 on (a background job compiling meanwhile is redone). The
        matmul flag is the one dynamo guards and Inductor keys on; cuDNN's is read when a conv runs."""
        if torch.backends.cuda.matmul.allow_tf32:
            self._tf32_batches += 1

    def _cache_for(self, device: torch.device) -> CompileCache:
        if self.compile_cache is None:
            self.compile_cache = CompileCache.for_device(device, self._compile_cache_root)
            self.compile_cache.activate()
        return self.compile_cache

    def _compile_job(self, device: torch.device, precision: str, video_shape: tuple[int, ...],
                     frames_per_batch: int, num_points: int | None, threaded: bool) -> Callable[[], bool]:
        """A job that compiles every function a batch of these shapes calls: prepare (and, with
        ``num_points``, track) on stand-in frames and queries of the same shapes, in the calls' own
        contexts, so the run finds the variants it needs. Returns whether they came from the disk cache.

        Two threads on one GPU, and why this is safe: the job runs on its own CUDA stream (never the run's),
        captures no CUDA graph (``_runner`` calls the stages plainly in a job), and the run's graph captures
        use thread-local capture mode (graphs.py), so the job's CUDA calls (allocations, syncs, kernel
        loads) cannot invalidate a capture in the run's thread; the allocator keeps the job's memory out of
        the capture's pool. No lock is held over the GPU work: it would stop the run for the whole compile.
        The job changes no global flag. TF32 is process-global and part of dynamo's guards, so a background
        job covers only modes that run with it off (BACKGROUND_PRECISIONS) and is redone (RetryLater) when a
        batch with TF32 on began or ended while it ran. Autocast and inference mode are per thread: the job
        enters its own, as the run's stages see them (autocast without its cache where graphs capture).
        """
        graphs = self.cuda_graphs and not self.graph_error
        polish = self.polish
        frames_ref = self._frames_ref
        key_ctx = RunContext(device, precision, frames_per_batch, StageTimer(device, enabled=False))
        keys: tuple[tuple, ...] = (self._backbone_key(key_ctx, video_shape, polish),)
        if num_points:
            keys += (self._track_key(key_ctx, video_shape, num_points),)

        def job() -> bool:
            t0 = time.perf_counter()
            joblog = JobLog(log)
            joblog.set(backend=self.compile_backend, threaded=threaded, precision=precision,
                       video=list(video_shape), points=num_points, state="compiling")
            self.job_log = joblog
            joblog.event(f"job started ({self.compile_backend}, {'background thread' if threaded else 'inline'}, "
                         f"{precision}, video {'x'.join(map(str, video_shape))}, points {num_points or '-'})")
            try:
                from_cache = run_job(t0, joblog)
            except RetryLater as exc:
                joblog.event(f"retry later: {exc}")
                joblog.set(state="retry")
                raise
            except Exception as exc:
                joblog.event(f"failed: {_first_line(exc)}", seconds=round(time.perf_counter() - t0, 2))
                joblog.set(state="failed", error=_first_line(exc))
                raise
            joblog.event(f"job done ({'all from the disk cache' if from_cache else 'compiled'})",
                         seconds=round(time.perf_counter() - t0, 2))
            joblog.set(state="compiled", from_cache=from_cache, seconds=round(time.perf_counter() - t0, 2))
            return from_cache

        def run_job(t0: float, joblog: JobLog) -> bool:
            cache = self._cache_for(device)
            joblog.set(cache=str(cache.folder), cache_in_use=os.environ.get(INDUCTOR_CACHE_ENV) == str(cache.folder))
            if threaded and torch.backends.cuda.matmul.allow_tf32:
                raise RetryLater("a batch with TF32 on is running (torch.backends.cuda.matmul.allow_tf32 is True)")
            tf32_before = self._tf32_batches
            counts = inductor_cache_counts()
            frames = frames_ref()
            if not isinstance(frames, np.ndarray) or frames.shape != video_shape:
                frames = np.random.default_rng(COMPILE_JOB_SEED).integers(0, 256, video_shape, dtype=np.uint8)
            stream = torch.cuda.Stream(device) if threaded and device.type == "cuda" else None
            dtype = autocast_dtype(precision, device)
            cast = (torch.autocast(device.type, dtype=dtype, cache_enabled=not graphs) if dtype is not None
                    else nullcontext())
            self._local.job = True
            self._local.joblog = joblog
            recorded: list[tuple] = []
            self._local.recorded = recorded
            packaged_from_cache = False
            try:
                with torch.inference_mode(), torch.cuda.stream(stream) if stream is not None else nullcontext(), \
                        cast:
                    ctx = RunContext(device, precision, frames_per_batch, StageTimer(device, enabled=False))
                    self._local.phase = "prepare"
                    prepared = self.prepare(frames, ctx)
                    if num_points:
                        self._local.phase = "track"
                        self.track(prepared, _stand_in_queries(num_points, video_shape), ctx)
                    if self.compile_backend in PACKAGE_BACKENDS:
                        joblog.event(f"stand-in batch ran eagerly: {len(recorded)} calls to package")
                        packaged_from_cache = self._build_packages(device, recorded, keys, joblog)
                if stream is not None:
                    stream.synchronize()
            finally:
                self._local.job = False
                self._local.joblog = None
                self._local.recorded = None
            if threaded and (self._tf32_batches != tf32_before or torch.backends.cuda.matmul.allow_tf32):
                raise RetryLater("a batch with TF32 on began or ended during the compile")
            after = inductor_cache_counts()
            joblog.set(fx_cache_hits=after["hit"] - counts["hit"], fx_cache_misses=after["miss"] - counts["miss"])
            if self.compile_backend in PACKAGE_BACKENDS:
                from_cache = packaged_from_cache
            else:
                from_cache = after["hit"] > counts["hit"] and after["miss"] == counts["miss"]
            shapes = f"video {'x'.join(map(str, video_shape))}, f{frames_per_batch}, points {num_points or '-'}, " \
                     f"graphs {graphs}, polish {polish}"
            cache.record(Variant(precision, shapes, str(self.manifest.get("sha256", "")),
                                 seconds=round(time.perf_counter() - t0, 2), from_cache=from_cache))
            return from_cache

        return job

    def _with_fallback(self, body: Callable[[], Any]) -> Any:
        """Run body with kept parameter casts (the weights are fixed once loaded: casts.py); if compiling fails,
        note why and run it again uncompiled; if a CUDA graph capture fails, likewise eagerly. Out-of-memory
        errors always propagate (the caller names the batch sizes). In a compile job nothing falls back: its
        error goes to the switch (which leaves runs eager)."""
        with casts.keeping():
            return self._run_with_fallback(body)

    def _run_with_fallback(self, body: Callable[[], Any]) -> Any:
        if getattr(self._local, "job", False):
            return body()
        try:
            if self.compile_mode == "background" and self.compile_backend == "aoti":
                # never while a background job exports (PackageStore.write; precompile's dynamo trace needs no lock)
                with self._export_lock:
                    return body()
            return body()
        except Exception as exc:
            if "out of memory" in str(exc).lower():
                raise
            if ((self._compiled or self._packages) and not self.compile_error
                    and (_from_compiler(exc) or isinstance(exc, PackageCallError))):
                self.compile_error = _first_line(exc)
                self._local.use_compiled = False
                self.switch.forget()
                with self._compile_lock:
                    self._compiled.clear()
                    self._run_only.clear()
                    self._packages.clear()
            elif isinstance(exc, GraphCaptureError) and not self.graph_error:
                self.graph_error = _first_line(exc)
            else:
                raise
            self._track_graphs.clear()
            self._backbone_graphs.clear()
            return self._with_fallback(body)

    def prepare(self, frames: np.ndarray, ctx: RunContext) -> PreparedVideo:
        """Upload the frames, run the backbone in chunks -> features [1, T, 64*64, C] and, with the polish
        on, grey frames [T, 256, 256] (float32) on the device, and for a video larger than the model's the fine
        stage's grey frames at its resolution (uint8, FineConfig.size_for)."""
        frames = np.asarray(frames)
        if frames.ndim != 4 or frames.shape[-1] != 3 or frames.dtype != np.uint8:
            raise ValueError(f"frames must be uint8 [T, H, W, 3], got {frames.dtype} {frames.shape}")
        num_frames, height, width = frames.shape[:3]
        model = self._model_for(ctx)
        self._note_tf32()
        keep_grey = self.polish  # grey frames only feed the polish
        fine_size = self.fine_config.size_for(width, height) if self.polish and self.fine_config else None
        if not getattr(self._local, "job", False):
            try:
                self._frames_ref = weakref.ref(frames)
            except TypeError:  # an array type without weak references: the job makes stand-in frames
                self._frames_ref = lambda: None
            job = None
            if self.compile_mode == "on":
                job = self._compile_job(ctx.device, ctx.precision, frames.shape, ctx.frames_per_batch, None, False)
            self._use_compiled((self._backbone_key(ctx, frames.shape, keep_grey),), job)

        copy_stream = self._copy_stream(ctx.device)

        def upload(start: int, stop: int) -> torch.Tensor:
            """Frames [start, stop) -> uint8 [n, H, W, 3] on the device, one backbone chunk at a time, so the device
            never holds the whole video (100 MB for 82 frames of 854x480). On CUDA the copy runs on a side stream:
            the host pins chunk k+1 and its copy runs while the backbone works on chunk k, and the current stream
            waits for the copy only where the backbone needs it. The pinned block stays the host allocator's until
            its copy ends; the device block is marked as used by the current stream, so the allocator does not hand
            it out again before the backbone has read it. The "upload" stage is timed on the current stream: from
            where it reaches the stage (the previous chunk's backbone done) to the end of its wait for this copy, so
            it holds the part of the upload the run pays for and the stages still add up to the run."""
            host = torch.from_numpy(np.ascontiguousarray(frames[start:stop]))
            if copy_stream is None:
                with ctx.timer.stage("upload"):
                    return host.to(ctx.device)
            main = torch.cuda.current_stream(ctx.device)
            with ctx.timer.stage("upload"):  # its events on the current stream, around the pin and the wait
                with torch.cuda.stream(copy_stream):
                    part = host.pin_memory().to(ctx.device, non_blocking=True)
                main.wait_stream(copy_stream)
            part.record_stream(main)
            return part

        def backbone(part: torch.Tensor) -> tuple[torch.Tensor, ...]:
            x = model.normalise(part.permute(0, 3, 1, 2))
            feats = self._fn("features", model.features, ctx.device)(x)  # looked up per call: see _with_fallback
            return (feats, grey_frames(x)) if keep_grey else (feats,)

        def body() -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
            feats: torch.Tensor | None = None
            grey: torch.Tensor | None = None
            fine: torch.Tensor | None = None
            chunk = max(1, int(ctx.frames_per_batch))
            for start in range(0, num_frames, chunk):  # upload and backbone stages alternate, summed per stage
                part = upload(start, min(num_frames, start + chunk))
                with ctx.timer.stage("backbone"):
                    if fine_size is not None:  # eager, outside the graph: its shape is the video's
                        if fine is None:
                            fine = torch.empty((num_frames, fine_size[1], fine_size[0]), device=ctx.device,
                                               dtype=torch.uint8)
                        fine[start:start + part.shape[0]] = fine_grey(part, fine_size)
                    run = self._runner(ctx, self._backbone_graphs, ("backbone", tuple(part.shape), keep_grey))
                    out, *out_grey = run("backbone", backbone, part)
                    if feats is None:
                        feats = torch.empty((num_frames, *out.shape[1:]), device=ctx.device, dtype=out.dtype)
                        if out_grey:
                            grey = torch.empty((num_frames, *out_grey[0].shape[1:]), device=ctx.device,
                                               dtype=torch.float32)
                    feats[start:start + out.shape[0]] = out
                    if grey is not None:
                        grey[start:start + out.shape[0]] = out_grey[0]
            assert feats is not None
            return feats, grey, fine

        feats, grey, fine = self._with_fallback(body)
        self._note_tf32()
        data = {"features": feats.unsqueeze(0)}
        if grey is not None:
            data["grey"] = grey
        if fine is not None:
            data["grey_fine"] = fine
        return PreparedVideo(num_frames, height, width, data=data)

    def _copy_stream(self, device: torch.device) -> torch.cuda.Stream | None:
        """The side stream frame uploads run on (one per thread and device: a background compile job's stand-in
        upload never queues behind a run's); None off CUDA."""
        if device.type != "cuda":
            return None
        streams = self._local.__dict__.setdefault("copy_streams", {})
        key = device.index if device.index is not None else torch.cuda.current_device()
        if key not in streams:
            streams[key] = torch.cuda.Stream(device=device)
        return streams[key]

    def _fine_stage(self, grey: torch.Tensor, q: torch.Tensor, pos: torch.Tensor, visible: torch.Tensor,
                    width: int, height: int) -> torch.Tensor:
        """The polish's fine stage: pos [1, N, T, 2] in model px -> polished on grey [T, h, w] (the video at the
        fine stage's resolution), back in model px. q [N, 3]: the queries in video px."""
        assert self.fine_config is not None
        fh, fw = grey.shape[1:]
        q_fine = torch.cat([q[:, :1], _resample_xy(q[:, 1:], fw / width, fh / height)], dim=1).unsqueeze(0)
        polished, _ = fine_polish(grey, q_fine, _resample_xy(pos.float(), fw / MODEL_SIZE, fh / MODEL_SIZE),
                                  visible, self.fine_config.ncc_for(fw, fh))
        return _resample_xy(polished, MODEL_SIZE / fw, MODEL_SIZE / fh)

    def track(self, prepared: PreparedVideo, queries: np.ndarray, ctx: RunContext) -> TrackResult:
        """Track queries [N, 3] (t, x, y) in original pixels through the prepared video."""
        model = self._model_for(ctx)
        self._note_tf32()
        if not getattr(self._local, "job", False):
            video_shape = (prepared.num_frames, prepared.height, prepared.width, 3)
            keys = (self._backbone_key(ctx, video_shape, self.polish and "grey" in prepared.data),
                    self._track_key(ctx, video_shape, len(queries)))
            job = None
            threaded = self.compile_mode == "background"
            if self.compile_mode == "on" or (threaded and ctx.precision in BACKGROUND_PRECISIONS):
                job = self._compile_job(ctx.device, ctx.precision, video_shape, ctx.frames_per_batch, len(queries),
                                        threaded)
            self.last_track_compiled = self._use_compiled(keys, job)
        feats = prepared.data["features"]  # [1, T, HW, C]
        grey = prepared.data.get("grey")  # [T, 256, 256] float32, when prepared with the polish on
        fine = prepared.data.get("grey_fine") if self.fine_config else None  # [T, h, w] uint8, large videos
        w, h = prepared.width, prepared.height
        # non_blocking: a blocking host -> device copy would wait for the backbone still queued by prepare
        q = torch.from_numpy(np.ascontiguousarray(queries, dtype=np.float32)).to(ctx.device, non_blocking=True)
        q_model = torch.cat([q[:, :1], to_model_xy(q[:, 1:], w, h)], dim=1).unsqueeze(0)  # [1, N, 3]
        grid = self._support_grid()
        num_queries = len(q)
        if grid:  # v3: [1, N + S, 3], the support queries after the user's; refine drops their rows
            q_model = with_support(q_model, grid, MODEL_SIZE)
        num_frames = prepared.num_frames
        iters = model.cfg.num_iters
        polish = self.polish_config if self.polish and grey is not None else None
        extra = (grey,) if polish is not None else ()  # the grey frames ride along only for the polish

        def refine(qm: torch.Tensor, qfeat: torch.Tensor, pos: torch.Tensor, vis: torch.Tensor,
                   acc: torch.Tensor, *rest: torch.Tensor) -> tuple[torch.Tensor, ...]:
            levels, g = (rest[:-1], rest[-1]) if polish is not None else (rest, None)
            refine_step = self._fn("refine_step", model.refine_step, ctx.device)
            polish_fn = self._fn("ncc_polish", ncc_polish, ctx.device)
            hidden = model.initial_hidden(qfeat, num_frames).contiguous()  # one stride layout for every iteration
            for _ in range(iters):
                hidden, pos, vis, acc = refine_step(list(levels), qm, hidden, pos, vis, acc)
            if grid:  # the support rows end here: nothing after (polish, download, query frames) sees them
                qm, pos, vis, acc = (x[:, :num_queries] for x in (qm, pos, vis, acc))
            if g is not None:
                pos, _ = polish_fn(g, qm, pos, visible_from_logits(vis, acc), polish)
            return pos, vis, acc

        def body() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
            timer = ctx.timer
            fine_key = (("fine", w, h, tuple(fine.shape)),) if fine is not None and polish is not None else ()
            run = self._runner(ctx, self._track_graphs, ("track", tuple(feats.shape), feats.dtype, len(q), polish,
                                                         *((grid,) if grid else ()), *fine_key))
            with timer.stage("query_features"):
                # hands the video's tensors on as the graphs' static inputs (copied once per batch)
                qfeat, f_s, q_s, *g_s = run("query_features",
                                            lambda f, qm, *g: (model.query_features(f, qm), f, qm, *g),
                                            feats, q_model, *extra)
            with timer.stage("cost_volume"):
                levels = run("cost_volume", lambda f, qf: model.cost_volume(f, qf), f_s, qfeat)
            with timer.stage("init_head"):
                pos, vis, acc = run("init_head", lambda *lv: model.init_head(list(lv)), *levels)
            with timer.stage("refine"):
                pos, vis, acc = run("refine", refine, q_s, qfeat, pos, vis, acc, *levels, *g_s)
                if fine_key:  # a graph of its own, keyed by the video's size (its shapes and scales)
                    (pos,) = run("fine_polish", lambda f, qq, p, v, a: (
                        self._fine_stage(f, qq, p, visible_from_logits(v, a), w, h),), fine, q, pos, vis, acc)
            return pos, vis, acc

        pos, vis, acc = self._with_fallback(body)
        self._note_tf32()
        if grid and not getattr(self._local, "job", False):
            self.support_batches += 1
        with ctx.timer.stage("download"):
            tracks = from_model_xy(pos[0].float(), w, h)  # [N, T, 2]
            visible = visible_from_logits(vis[0], acc[0])
            frame = q[:, 0].round().long()
            rows = torch.arange(len(q), device=ctx.device)
            tracks[rows, frame] = q[:, 1:]  # the query frame is known exactly
            visible[rows, frame] = True
            tracks_np = tracks.cpu().numpy()
            visible_np = visible.cpu().numpy()
        return TrackResult(tracks_np, visible_np)


def compile_mode(value: bool | str | None, environ: Any = None) -> str:
    """off / on / background from a constructor argument (True: on, False: off) or, for None, from
    TRACKSCOPE_CORRTRACK_COMPILE (its true/false words, or "background"); ValueError for another word."""
    if value is None:
        env = os.environ if environ is None else environ
        raw = str(env.get(COMPILE_ENV, "")).strip().lower()
        if raw == BACKGROUND_WORD:
            return "background"
        return "on" if env_flag(COMPILE_ENV, default=False, environ=env) else "off"
    if isinstance(value, bool):
        return "on" if value else "off"
    word = str(value).strip().lower()
    if word not in COMPILE_MODES:
        raise ValueError(f"compile must be one of {', '.join(COMPILE_MODES)}, not {value!r}")
    return word


def compile_backend_for(value: str | None, environ: Any = None) -> str:
    """aoti / dynamo / precompile from a constructor argument or, for None, TRACKSCOPE_CORRTRACK_COMPILE_BACKEND;
    unset: dynamo. aoti is opt-in, and only where this torch can package (compile_packages.available): on the H200
    (torch 2.11, CUDA 13, sessions 19-20) loading a CUDA package crashed the process (a segfault in torch's
    ``aoti_load_package``), which no handler can catch. precompile is opt-in too (dynamo's precompile is
    experimental in torch); where torch lacks it (``available_precompile``) its job fails and runs stay eager,
    with ``compile_error`` saying why. ValueError for another word."""
    if value is None:
        env = os.environ if environ is None else environ
        value = str(env.get(COMPILE_BACKEND_ENV, "")).strip().lower() or None
        if value is None:
            return "dynamo"
    word = str(value).strip().lower()
    if word not in COMPILE_BACKENDS:
        raise ValueError(f"compile backend must be one of {', '.join(COMPILE_BACKENDS)}, not {value!r}")
    return word


def _stand_in_queries(num_points: int, video_shape: tuple[int, ...]) -> np.ndarray:
    """num_points queries [N, 3] on frame 0 inside a video of ``video_shape`` [T, H, W, 3] (a compile job's)."""
    rng = np.random.default_rng(COMPILE_JOB_SEED)
    height, width = video_shape[1], video_shape[2]
    xy = rng.uniform([0, 0], [width - 1, height - 1], size=(num_points, 2))
    return np.concatenate([np.zeros((num_points, 1)), xy], axis=1).astype(np.float32)


def _first_line(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"


def _from_compiler(exc: BaseException | None) -> bool:
    """Whether exc (or an exception it was raised from) comes from torch.compile (dynamo, inductor, or a
    Triton kernel it generated)."""
    seen = 0
    while exc is not None and seen < 8:
        if type(exc).__module__.startswith(("torch._dynamo", "torch._inductor", "triton")):
            return True
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return False
