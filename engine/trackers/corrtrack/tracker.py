"""CorrTrackTracker: the built-in tracker, CorrTrackNet behind the Tracker protocol with timed stages.

prepare: upload (host -> device copy of the uint8 frames), backbone (resize + CNN, in chunks of
``frames_per_batch``; with the polish on it also keeps grey frames at 256x256). track: query_features,
cost_volume, init_head, refine (all iterations, then the NCC polish of polish.py unless ``polish=False``
or the environment sets TRACKSCOPE_CORRTRACK_POLISH=0), download.
Nothing inside a batch waits for the device: the only sync is the final copy back to the host.
On CUDA each stage runs as a captured CUDA graph (graphs.py) unless ``cuda_graphs=False`` or the
environment sets TRACKSCOPE_NO_CUDA_GRAPHS=1; a capture that fails falls back to eager for good.
Opt-in, CUDA only: ``compile=True`` (or TRACKSCOPE_CORRTRACK_COMPILE=1) runs the backbone's features, each
refinement iteration and the polish through torch.compile (inductor, static shapes): on the H200 the
warm call took about half the time, but first runs took 16-62 s to compile, so it is off by default
(cold start). A compile that fails falls back to the uncompiled code for good.
int8/fp8 (engine.trackers.quant): a quantised copy of the network, made once per mode and device, runs
them; the float model is never touched, so fp32/tf32/fp16/bf16 run as before. Quantised: the backbone's
1x1 projections, the correlation volume's matmul (per-query x per-position dynamic scales), query_in, the
temporal blocks' MLPs and corr_in (kept in float for fp8: KEEP_FLOAT says why); NOT_QUANTISED_STAGES
lists the rest. Quantised stages are captured in CUDA graphs like the others (dynamic scales are device
ops, shapes static, the kernel check runs before any capture); a failing capture falls back to eager.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from engine.core import flags
from engine.core.flags import env_flag
from engine.core.pixels import resample_coordinates
from engine.core.precision import QUANT_MODES
from engine.core.stages import BUILTIN_STAGES
from engine.trackers.base import PreparedVideo, RunContext, Tracker, TrackResult
from engine.trackers.corrtrack.graphs import GraphCache, GraphCaptureError
from engine.trackers.corrtrack.model import MODEL_SIZE, CorrTrackNet, count_parameters, visible_from_logits
from engine.trackers.corrtrack.polish import PolishConfig, grey_frames, ncc_polish
from engine.trackers.corrtrack.weights import DEFAULT_WEIGHTS, load_model
from engine.trackers.quant import QuantReport, quantize_module, recipe_for

NO_GRAPHS_ENV = flags.NO_CUDA_GRAPHS
POLISH_ENV = flags.CORRTRACK_POLISH  # false turns the NCC polish off
COMPILE_ENV = flags.CORRTRACK_COMPILE  # true turns torch.compile on (CUDA)
RECOMPILE_LIMIT = 64  # dynamo's variants per compiled function, raised to this while compiling is on
#: layers a mode keeps in float, with the measured reason
KEEP_FLOAT = {
    "int8": {},
    "fp8": {"corr_in": "its rows mix correlation windows with motion features (positions / 64, frame offsets, "
                       "logits); e4m3's 3 mantissa bits there cost AJ 0.006 on the sample (CPU: 0.928 -> 0.934)"},
}
#: what int8/fp8 leave in float (beside the layers quantize_module lists)
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
                 polish_config: PolishConfig | None = None, compile: bool | None = None):
        """Load checked weights (default: the shipped ones), or use ``model`` as given (tests).

        polish: NCC sub-pixel polish after refinement (default on, unless TRACKSCOPE_CORRTRACK_POLISH=0).
        compile: torch.compile the hot functions on CUDA (default off, unless TRACKSCOPE_CORRTRACK_COMPILE=1).
        """
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
        if compile is None:
            compile = env_flag(COMPILE_ENV, default=False)
        self.compile = compile
        self.compile_error = ""
        self._compiled: dict[str, Callable[..., Any]] = {}
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
            "weights": str(self.weights_path) if self.weights_path else None,
            "cuda_graphs": self.cuda_graphs and not self.graph_error,
            "polish": self.polish,
            "compile": self._compiling(self._device),
        }
        if self.polish:
            info["polish_config"] = self.polish_config.to_dict()
        if self.graph_error:
            info["cuda_graphs_error"] = self.graph_error
        if self.compile_error:
            info["compile_error"] = self.compile_error
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
        """Eager (no CUDA graphs) while the cost model counts ops: graph replays hide them."""
        saved = self.cuda_graphs
        self.cuda_graphs = False
        try:
            yield
        finally:
            self.cuda_graphs = saved

    def _model_on(self, device: torch.device) -> CorrTrackNet:
        if device != self._device:
            self.model.to(device)
            self.model.backbone.to(memory_format=torch.channels_last)  # type: ignore[call-overload]  # torch's stubs lack it
            self._device = device
            self._track_graphs.clear()
            self._backbone_graphs.clear()
            self._quantised.clear()
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
        if ctx.device.type != "cuda" or not self.cuda_graphs or self.graph_error:
            return lambda name, fn, *inputs: tuple(fn(*inputs))
        full_key = (*key, str(ctx.device), ctx.precision, torch.backends.cuda.matmul.allow_tf32)
        return lambda name, fn, *inputs: cache.stage(full_key, name, fn, inputs)

    def _compiling(self, device: torch.device) -> bool:
        return self.compile and device.type == "cuda" and not self.compile_error

    def _fn(self, name: str, fn: Callable[..., Any], device: torch.device) -> Callable[..., Any]:
        """fn, or its torch.compile'd twin (made once per tracker) when compiling is on for this device."""
        if not self._compiling(device):
            return fn
        key = f"{name}@{id(getattr(fn, '__self__', fn))}"  # the float model and a quantised copy compile apart
        compiled = self._compiled.get(key)
        if compiled is None:
            # each shape, dtype and autocast setting (graph capture vs eager) compiles once: 8 variants
            # per function, dynamo's default, are used up by two batch sizes in two precisions
            torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, RECOMPILE_LIMIT)
            compiled = self._compiled[key] = torch.compile(fn, dynamic=False)
        return compiled

    def _with_fallback(self, body: Callable[[], Any]) -> Any:
        """Run body; if compiling fails, note why and run it again uncompiled; if a CUDA graph capture
        fails, likewise eagerly. Out-of-memory errors always propagate (the caller names the batch sizes)."""
        try:
            return body()
        except Exception as exc:
            if "out of memory" in str(exc).lower():
                raise
            if self._compiled and not self.compile_error and _from_compiler(exc):
                self.compile_error = _first_line(exc)
                self._compiled.clear()
            elif isinstance(exc, GraphCaptureError) and not self.graph_error:
                self.graph_error = _first_line(exc)
            else:
                raise
            self._track_graphs.clear()
            self._backbone_graphs.clear()
            return self._with_fallback(body)

    def prepare(self, frames: np.ndarray, ctx: RunContext) -> PreparedVideo:
        """Upload the frames, run the backbone in chunks -> features [1, T, 64*64, C] and, with the polish
        on, grey frames [T, 256, 256] (float32) on the device."""
        frames = np.asarray(frames)
        if frames.ndim != 4 or frames.shape[-1] != 3 or frames.dtype != np.uint8:
            raise ValueError(f"frames must be uint8 [T, H, W, 3], got {frames.dtype} {frames.shape}")
        num_frames, height, width = frames.shape[:3]
        model = self._model_for(ctx)
        with ctx.timer.stage("upload"):
            host = torch.from_numpy(np.ascontiguousarray(frames))
            if ctx.device.type == "cuda":
                host = host.pin_memory()
            video = host.to(ctx.device, non_blocking=True)  # uint8 [T, H, W, 3]

        keep_grey = self.polish  # grey frames only feed the polish

        def backbone(part: torch.Tensor) -> tuple[torch.Tensor, ...]:
            x = model.normalise(part.permute(0, 3, 1, 2))
            feats = self._fn("features", model.features, ctx.device)(x)  # looked up per call: see _with_fallback
            return (feats, grey_frames(x)) if keep_grey else (feats,)

        def body() -> tuple[torch.Tensor, torch.Tensor | None]:
            feats: torch.Tensor | None = None
            grey: torch.Tensor | None = None
            chunk = max(1, int(ctx.frames_per_batch))
            with ctx.timer.stage("backbone"):
                for start in range(0, num_frames, chunk):
                    part = video[start:start + chunk]
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
            return feats, grey

        feats, grey = self._with_fallback(body)
        data = {"features": feats.unsqueeze(0)}
        if grey is not None:
            data["grey"] = grey
        return PreparedVideo(num_frames, height, width, data=data)

    def track(self, prepared: PreparedVideo, queries: np.ndarray, ctx: RunContext) -> TrackResult:
        """Track queries [N, 3] (t, x, y) in original pixels through the prepared video."""
        model = self._model_for(ctx)
        feats = prepared.data["features"]  # [1, T, HW, C]
        grey = prepared.data.get("grey")  # [T, 256, 256] float32, when prepared with the polish on
        w, h = prepared.width, prepared.height
        # non_blocking: a blocking host -> device copy would wait for the backbone still queued by prepare
        q = torch.from_numpy(np.ascontiguousarray(queries, dtype=np.float32)).to(ctx.device, non_blocking=True)
        q_model = torch.cat([q[:, :1], to_model_xy(q[:, 1:], w, h)], dim=1).unsqueeze(0)  # [1, N, 3]
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
            if g is not None:
                pos, _ = polish_fn(g, qm, pos, visible_from_logits(vis, acc), polish)
            return pos, vis, acc

        def body() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
            timer = ctx.timer
            run = self._runner(ctx, self._track_graphs, ("track", tuple(feats.shape), feats.dtype, len(q), polish))
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
            return pos, vis, acc

        pos, vis, acc = self._with_fallback(body)
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
