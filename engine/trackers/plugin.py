"""Plugin trackers: wrap a ``module:factory`` (or entry point) result in the Tracker protocol.

``factory()`` returns one of:

- a :class:`Tracker` instance: used as is (its ``name`` becomes the plugin name, so a Session keeps it);
- a ``torch.nn.Module`` or a plain callable, called as
  ``fn(frames: uint8 [T, H, W, 3] on ctx.device, queries: float32 [N, 3] on ctx.device)
  -> (tracks [N, T, 2], visible [N, T])`` (tensors or numpy arrays).

Precision: int8/fp8 quantise a module plugin's nn.Linear layers (and 1x1 convs) through
``engine.trackers.quant.quantize_module`` on a **copy** made once per mode and device; the plugin itself
stays the float reference that fp32/tf32/fp16/bf16 run. A callable that is not an nn.Module, or a module
without such layers, is refused with a UserError saying why. A plugin that is a Tracker gets
``ctx.precision`` and quantises itself (or not).

Stages: a plugin that declares ``stages`` (a tuple of names) times itself through the ``timer``
attribute the adapter sets before each call (``timer.stage(name)`` or ``begin``/``end``). A module
that declares none is timed per top-level submodule through forward pre/post hooks. The adapter adds
its own ``upload`` (frames to the device) and ``download`` (results to the host) stages.

Isolation: the frames and queries a plugin gets are its own copies (a plugin writing into them cannot
change the app's video), and its factory runs through ``engine.trackers.guard.call_plugin``, as the
session runs its batches: an exit, an interrupt or a hang comes back as a TrackerError naming it.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import Any, Callable

import numpy as np
import torch

from engine.core.errors import TrackerError, UserError
from engine.core.precision import QUANT_MODES
from engine.core.stages import StageTimer
from engine.trackers.base import PreparedVideo, RunContext, Tracker, TrackResult, check_result_types
from engine.trackers.guard import call_plugin
from engine.trackers.quant import QuantReport, quantize_module, recipe_for

UPLOAD_STAGE = "upload"
DOWNLOAD_STAGE = "download"
#: a float visibility output above this counts as visible
VISIBLE_THRESHOLD = 0.5
#: the attribute marking a tracker as plugin code (set on a plugin's own Tracker; the adapter has it)
PLUGIN_MARK = "is_plugin"


def is_plugin(tracker: Tracker) -> bool:
    """Whether ``tracker`` is plugin code, which the session runs through ``call_plugin``."""
    return bool(getattr(tracker, PLUGIN_MARK, False))


def _plugin_stages(plugin: Any) -> tuple[str, ...]:
    declared = getattr(plugin, "stages", None)
    if declared is None:
        return ()
    if isinstance(declared, str) or not all(isinstance(s, str) for s in declared):
        raise TypeError(f"'stages' must be a tuple of names, got {declared!r}")
    return tuple(declared)


class _HookTimer:
    """Forward pre/post hooks on top-level submodules that open and close timer stages."""

    def __init__(self, module: torch.nn.Module):
        self.timer: StageTimer | None = None
        self.open: list[str] = []
        self.names: list[str] = []
        #: (child name, pre-hook handle id, post-hook handle id); a deep copy's children keep the same ids
        self.hook_ids: list[tuple[str, int, int]] = []
        for name, child in module.named_children():
            self.names.append(name)
            pre = child.register_forward_pre_hook(self._pre(name))
            post = child.register_forward_hook(self._post(name))
            self.hook_ids.append((name, pre.id, post.id))

    @contextmanager
    def removed(self, module: torch.nn.Module) -> Iterator[None]:
        """These hooks off ``module``'s top-level children (the plugin, or its quantised deep copy) for the
        block, so its calls take torch's hook-free path; put back as they were (order kept) after it."""
        children = dict(module.named_children())
        saved: list[tuple[dict[int, Any], dict[int, Any]]] = []
        for name, pre_id, post_id in self.hook_ids:
            child = children.get(name)
            if child is None:
                continue
            for hooks, key in ((child._forward_pre_hooks, pre_id), (child._forward_hooks, post_id)):
                if key in hooks:
                    saved.append((hooks, dict(hooks)))
                    del hooks[key]
        try:
            yield
        finally:
            for hooks, before in reversed(saved):
                hooks.clear()
                hooks.update(before)

    def _pre(self, name: str) -> Callable:
        def hook(_module: torch.nn.Module, _inputs: Any) -> None:
            if self.timer is not None and not self.open:  # only the outermost submodule call is timed
                self.timer.begin(name)
                self.open.append(name)
            elif self.open:
                self.open.append("")  # nested call of a top-level child from another: not a new stage

        return hook

    def _post(self, name: str) -> Callable:
        def hook(_module: torch.nn.Module, _inputs: Any, _output: Any) -> None:
            if not self.open:
                return
            opened = self.open.pop()
            if opened and self.timer is not None:
                self.timer.end(opened)

        return hook

    def close_all(self) -> None:
        """Close stages left open by an exception inside a submodule."""
        while self.open:
            opened = self.open.pop()
            if opened and self.timer is not None:
                self.timer.end(opened)


def _to_numpy(value: Any) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        value = value.detach()
        if value.is_floating_point() and value.dtype != torch.float32:
            value = value.float()
        return value.cpu().numpy()
    return np.asarray(value)


class PluginTracker(Tracker):
    """Adapter running a module or callable plugin as a Tracker."""

    is_plugin = True

    def __init__(self, name: str, plugin: Callable[..., Any]):
        self.name = name
        self.plugin = plugin
        self.kind = "module" if isinstance(plugin, torch.nn.Module) else "callable"
        declared = _plugin_stages(plugin)
        self._hooks: _HookTimer | None = None
        if not declared and isinstance(plugin, torch.nn.Module):
            self._hooks = _HookTimer(plugin)
            declared = tuple(self._hooks.names)
        self.plugin_stages = declared
        self.stages = (UPLOAD_STAGE, *declared, DOWNLOAD_STAGE)
        self._device: torch.device | None = None
        self._quantised: dict[str, tuple[torch.nn.Module, QuantReport]] = {}  # mode -> copy on self._device

    def describe(self) -> dict[str, Any]:
        info: dict[str, Any] = {
            "name": self.name,
            "stages": list(self.stages),
            "plugin": True,
            "kind": self.kind,
            "class": type(self.plugin).__qualname__,
            "timing": "submodule hooks" if self._hooks is not None else "declared" if self.plugin_stages else "none",
        }
        if isinstance(self.plugin, torch.nn.Module):
            info["parameters"] = int(sum(p.numel() for p in self.plugin.parameters()))
        if self._quantised:
            info["quantisation"] = {mode: report.describe() for mode, (_, report) in self._quantised.items()}
        return info

    def _refuse_quantising(self, precision: str) -> None:
        if not isinstance(self.plugin, torch.nn.Module):
            raise UserError(f"plugin {self.name!r}: cannot quantise a plugin that is not an nn.Module "
                            f"({type(self.plugin).__name__}); {precision} needs its nn.Linear layers",
                            "return a torch.nn.Module from the factory, or run fp32/bf16")

    def _quantise(self, precision: str, device: torch.device | str, check: bool = True
                  ) -> tuple[torch.nn.Module, QuantReport]:
        self._refuse_quantising(precision)
        assert isinstance(self.plugin, torch.nn.Module)
        qmodule = copy.deepcopy(self.plugin)  # the hooks' closures are shared: the copy is timed as well
        report = quantize_module(qmodule, recipe_for(precision, device), check=check)
        if not report.quantised:
            skipped = "; ".join(f"{e['name']}: {e['reason']}" for e in report.not_quantised[:4]) or "none found"
            raise UserError(f"plugin {self.name!r}: cannot quantise it for {precision}: it has no nn.Linear or 1x1 "
                            f"Conv2d layers to quantise ({skipped})",
                            "build its matmuls from nn.Linear layers, or run fp32/bf16")
        return qmodule, report

    def describe_precision(self, precision: str, device: torch.device | str) -> dict[str, Any]:
        """For int8/fp8: the recipe and what it quantises in this plugin (a dry run on a CPU copy before the
        first run); UserError when the plugin cannot be quantised."""
        if precision not in QUANT_MODES:
            return {}
        done = self._quantised.get(precision)
        if done is None:
            self._refuse_quantising(precision)
            probe = copy.deepcopy(self.plugin).cpu()  # type: ignore[union-attr,attr-defined]  # a module: checked above
            report = quantize_module(probe, recipe_for(precision, device), check=False)
        else:
            report = done[1]
        return {"quantisation": report.describe()}

    def _callee(self, ctx: RunContext) -> Callable[..., Any]:
        """The plugin, or for int8/fp8 its quantised copy (made once per mode and device)."""
        if ctx.precision not in QUANT_MODES:
            return self.plugin
        done = self._quantised.get(ctx.precision)
        if done is None:
            done = self._quantised[ctx.precision] = self._quantise(ctx.precision, ctx.device)
        return done[0]

    def call_direct(self, frames: torch.Tensor, queries: torch.Tensor, ctx: RunContext) -> Any:
        """The plugin's own callable (for int8/fp8 its quantised copy) on device tensors, with the adapter's
        submodule hooks off and ``ctx.timer`` as a declared-stages plugin's timer: what a user timing their
        model by hand runs (the bench's direct reference). Its output is returned as it is, on the device."""
        fn = self._callee(ctx)
        if self.plugin_stages:
            fn.timer = ctx.timer  # type: ignore[attr-defined]
        bypass = (self._hooks.removed(fn) if self._hooks is not None and isinstance(fn, torch.nn.Module)
                  else nullcontext())
        with bypass:
            return fn(frames, queries)

    def prepare(self, frames: np.ndarray, ctx: RunContext) -> PreparedVideo:
        """Upload the frames to the device (and move a module plugin there); on the CPU a copy, never a view
        of the caller's frames."""
        if isinstance(self.plugin, torch.nn.Module) and self._device != ctx.device:
            self.plugin.to(ctx.device).eval()
            self._device = ctx.device
            self._quantised.clear()
        self._callee(ctx)  # refuses a plugin that cannot be quantised before any work
        with ctx.timer.stage(UPLOAD_STAGE):
            video = torch.from_numpy(np.ascontiguousarray(frames)).to(ctx.device, non_blocking=True, copy=True)
        num_frames, height, width = frames.shape[:3]
        return PreparedVideo(int(num_frames), int(height), int(width), {"frames": video})

    def track(self, prepared: PreparedVideo, queries: np.ndarray, ctx: RunContext) -> TrackResult:
        """Call the plugin on one batch of queries and bring its results to the host."""
        q = torch.from_numpy(np.array(queries, dtype=np.float32, copy=True)).to(ctx.device)  # the plugin's own
        fn = self._callee(ctx)
        if self._hooks is not None:
            self._hooks.timer = ctx.timer
        elif self.plugin_stages:
            fn.timer = ctx.timer  # type: ignore[attr-defined]
        try:
            out = fn(prepared.data["frames"], q)
        finally:
            if self._hooks is not None:
                self._hooks.close_all()
                self._hooks.timer = None
        if not isinstance(out, (tuple, list)) or len(out) != 2:
            raise TypeError(f"plugin must return (tracks [N, T, 2], visible [N, T]), got {type(out).__name__}")
        with ctx.timer.stage(DOWNLOAD_STAGE):
            tracks = _to_numpy(out[0])  # TrackResult makes it float32 [N, T, 2]
            visible = _to_numpy(out[1])
        tracks, visible = check_result_types(tracks, visible)  # before the threshold hides a NaN or a complex
        if visible.dtype != bool:
            visible = visible.astype(np.float32) > VISIBLE_THRESHOLD
        return TrackResult(tracks, visible)


def wrap_plugin(name: str, factory: Any) -> Tracker:
    """Call ``factory`` and adapt its result; any failure raises TrackerError naming the plugin."""
    if not callable(factory):
        raise TrackerError(f"plugin tracker {name!r}: {type(factory).__name__} object is not callable",
                           "point module:factory at a function or class returning a tracker")
    try:
        plugin = call_plugin(name, "in its factory", factory)
    except TrackerError:  # it exited, was interrupted or hung: already says so
        raise
    except Exception as exc:
        raise TrackerError(f"plugin tracker {name!r}: factory raised {type(exc).__name__}: {exc}",
                           "check the plugin's code, or choose another tracker") from exc
    if isinstance(plugin, Tracker):
        plugin.name = name
        try:
            setattr(plugin, PLUGIN_MARK, True)  # the session runs it guarded, on its own copy of the frames
        except (AttributeError, TypeError) as exc:  # __slots__ or a frozen class
            raise TrackerError(f"plugin tracker {name!r}: cannot mark it as a plugin: {exc}",
                               "let the tracker's class accept an 'is_plugin' attribute") from exc
        return plugin
    if not callable(plugin):
        raise TrackerError(f"plugin tracker {name!r}: factory returned {type(plugin).__name__}, "
                           "expected a Tracker, a torch.nn.Module or a callable")
    try:
        return PluginTracker(name, plugin)
    except Exception as exc:
        raise TrackerError(f"plugin tracker {name!r}: cannot wrap it: {type(exc).__name__}: {exc}") from exc
