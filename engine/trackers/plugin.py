"""Plugin trackers: wrap a ``module:factory`` (or entry point) result in the Tracker protocol.

``factory()`` returns one of:

- a :class:`Tracker` instance: used as is (its ``name`` becomes the plugin name, so a Session keeps it);
- a ``torch.nn.Module`` or a plain callable, called as
  ``fn(frames: uint8 [T, H, W, 3] on ctx.device, queries: float32 [N, 3] on ctx.device)
  -> (tracks [N, T, 2], visible [N, T])`` (tensors or numpy arrays).

Stages: a plugin that declares ``stages`` (a tuple of names) times itself through the ``timer``
attribute the adapter sets before each call (``timer.stage(name)`` or ``begin``/``end``). A module
that declares none is timed per top-level submodule through forward pre/post hooks. The adapter adds
its own ``upload`` (frames to the device) and ``download`` (results to the host) stages.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import torch

from engine.core.errors import TrackerError
from engine.core.stages import StageTimer
from engine.trackers.base import PreparedVideo, RunContext, Tracker, TrackResult

UPLOAD_STAGE = "upload"
DOWNLOAD_STAGE = "download"
#: a float visibility output above this counts as visible
VISIBLE_THRESHOLD = 0.5


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
        for name, child in module.named_children():
            self.names.append(name)
            child.register_forward_pre_hook(self._pre(name))
            child.register_forward_hook(self._post(name))

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
        return info

    def prepare(self, frames: np.ndarray, ctx: RunContext) -> PreparedVideo:
        """Upload the frames to the device (and move a module plugin there)."""
        if isinstance(self.plugin, torch.nn.Module) and self._device != ctx.device:
            self.plugin.to(ctx.device).eval()
            self._device = ctx.device
        with ctx.timer.stage(UPLOAD_STAGE):
            video = torch.from_numpy(np.ascontiguousarray(frames)).to(ctx.device, non_blocking=True)
        num_frames, height, width = frames.shape[:3]
        return PreparedVideo(int(num_frames), int(height), int(width), {"frames": video})

    def track(self, prepared: PreparedVideo, queries: np.ndarray, ctx: RunContext) -> TrackResult:
        """Call the plugin on one batch of queries and bring its results to the host."""
        q = torch.from_numpy(np.ascontiguousarray(queries, dtype=np.float32)).to(ctx.device)
        if self._hooks is not None:
            self._hooks.timer = ctx.timer
        elif self.plugin_stages:
            self.plugin.timer = ctx.timer  # type: ignore[attr-defined]
        try:
            out = self.plugin(prepared.data["frames"], q)
        finally:
            if self._hooks is not None:
                self._hooks.close_all()
                self._hooks.timer = None
        if not isinstance(out, (tuple, list)) or len(out) != 2:
            raise TypeError(f"plugin must return (tracks [N, T, 2], visible [N, T]), got {type(out).__name__}")
        with ctx.timer.stage(DOWNLOAD_STAGE):
            tracks = _to_numpy(out[0])  # TrackResult makes it float32 [N, T, 2]
            visible = _to_numpy(out[1])
        if visible.dtype != bool:
            visible = visible.astype(np.float32) > VISIBLE_THRESHOLD
        return TrackResult(tracks, visible)


def wrap_plugin(name: str, factory: Any) -> Tracker:
    """Call ``factory`` and adapt its result; any failure raises TrackerError naming the plugin."""
    if not callable(factory):
        raise TrackerError(f"plugin tracker {name!r}: {type(factory).__name__} object is not callable",
                           "point module:factory at a function or class returning a tracker")
    try:
        plugin = factory()
    except Exception as exc:
        raise TrackerError(f"plugin tracker {name!r}: factory raised {type(exc).__name__}: {exc}",
                           "check the plugin's code, or choose another tracker") from exc
    if isinstance(plugin, Tracker):
        plugin.name = name
        return plugin
    if not callable(plugin):
        raise TrackerError(f"plugin tracker {name!r}: factory returned {type(plugin).__name__}, "
                           "expected a Tracker, a torch.nn.Module or a callable")
    try:
        return PluginTracker(name, plugin)
    except Exception as exc:
        raise TrackerError(f"plugin tracker {name!r}: cannot wrap it: {type(exc).__name__}: {exc}") from exc
