"""Finding trackers by name: built-ins, ``module:factory`` plugins, ``trackscope.trackers`` entry points."""

from __future__ import annotations

import importlib
import logging
import threading
from importlib import metadata
from typing import Callable

from engine.core.errors import TrackerError
from engine.trackers.base import Tracker
from engine.trackers.guard import call_plugin

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "trackscope.trackers"


def _builtin() -> dict[str, Callable[[], Tracker]]:
    def lk() -> Tracker:
        from engine.trackers.lk import LKTracker

        return LKTracker()

    def corrtrack() -> Tracker:
        from engine.trackers.corrtrack import CorrTrackTracker

        return CorrTrackTracker()

    def corrtrack_v1() -> Tracker:
        """The v1 network (temporal convolutions; resources/corrtrack.safetensors), by its version's name."""
        from engine.trackers.corrtrack import CorrTrackTracker
        from engine.trackers.corrtrack import weights as W

        tracker = CorrTrackTracker(weights=W.DEFAULT_WEIGHTS)
        tracker.name = "corrtrack-v1"
        return tracker

    def corrtrack_v2() -> Tracker:
        """The v2 network (temporal attention in the refinement; resources/corrtrack_v2.safetensors)."""
        from engine.trackers.corrtrack import CorrTrackTracker
        from engine.trackers.corrtrack import weights as W

        if not W.V2_WEIGHTS.is_file():
            raise TrackerError(f"corrtrack-v2: its weights {W.V2_WEIGHTS} are not installed (v2 is trained with "
                               "scripts/device_train_v2.sh, see docs/corrtrack.md)",
                               "use corrtrack (v1), or ship trained v2 weights with weights.ship(checkpoint, "
                               "weights.V2_WEIGHTS)")
        tracker = CorrTrackTracker(weights=W.V2_WEIGHTS)
        tracker.name = "corrtrack-v2"
        return tracker

    def corrtrack_v3() -> Tracker:
        """The v3 network (v2 + attention across tracks, with support points; resources/corrtrack_v3.safetensors)."""
        from engine.trackers.corrtrack import CorrTrackTracker
        from engine.trackers.corrtrack import weights as W

        if not W.V3_WEIGHTS.is_file():
            raise TrackerError(f"corrtrack-v3: its weights {W.V3_WEIGHTS} are not installed (v3 is trained with "
                               "`trackscope train --init-from resources/corrtrack_v2.safetensors "
                               "--track-attention-layers 1`, see docs/corrtrack.md)",
                               "use corrtrack-v2 or corrtrack (v1), or ship trained v3 weights with "
                               "weights.ship(checkpoint, weights.V3_WEIGHTS)")
        tracker = CorrTrackTracker(weights=W.V3_WEIGHTS)
        tracker.name = "corrtrack-v3"
        return tracker

    def corrtrack_nopolish() -> Tracker:
        """CorrTrack without its NCC sub-pixel polish: faster, less precise (an A/B and bench pairing)."""
        from engine.trackers.corrtrack import CorrTrackTracker

        tracker = CorrTrackTracker(polish=False)
        tracker.name = "corrtrack-nopolish"
        return tracker

    return {"corrtrack": corrtrack, "corrtrack-v1": corrtrack_v1, "corrtrack-v2": corrtrack_v2,
            "corrtrack-v3": corrtrack_v3,
            "corrtrack-nopolish": corrtrack_nopolish, "lk": lk}


def available_trackers() -> list[str]:
    """Names a user can pick: built-ins, then installed entry points."""
    names = list(_builtin())
    try:
        names += [ep.name for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)]
    except Exception:  # a broken distribution must not hide the built-ins
        log.info("installed tracker entry points could not be listed", exc_info=True)
    return names


def load_tracker(name: str) -> Tracker:
    """Load a tracker by name; a plugin that fails to load raises TrackerError naming it."""
    builtins = _builtin()
    if name in builtins:
        return builtins[name]()
    factory: object
    if ":" in name:
        module_name, _, attr = name.partition(":")
        try:
            module = call_plugin(name, "while being imported", lambda: importlib.import_module(module_name))
        except TrackerError:  # it exited, was interrupted or hung: already says so
            raise
        except Exception as exc:
            raise TrackerError(f"plugin tracker {name!r}: cannot import {module_name!r}: {type(exc).__name__}: {exc}",
                               "check the module is on PYTHONPATH (the current folder is not searched unless "
                               "asked: PYTHONPATH=. trackscope ...)") from exc
        try:
            factory = getattr(module, attr)
        except AttributeError as exc:
            raise TrackerError(f"plugin tracker {name!r}: module {module_name!r} has no {attr!r}") from exc
    else:
        eps = [ep for ep in metadata.entry_points(group=ENTRY_POINT_GROUP) if ep.name == name]
        if not eps:
            raise TrackerError(f"unknown tracker {name!r}",
                               f"choose one of {', '.join(available_trackers())} or give module:factory")
        try:
            factory = call_plugin(name, "while being loaded", eps[0].load)
        except TrackerError:
            raise
        except Exception as exc:
            raise TrackerError(
                f"plugin tracker {name!r}: entry point failed to load: {type(exc).__name__}: {exc}") from exc
    from engine.trackers.plugin import wrap_plugin

    return wrap_plugin(name, factory)


class TrackerCache:
    """Loaded trackers by name, kept between runs (weights loaded, CUDA graphs captured once).

    Callable as a Session's ``tracker_loader``. Thread-safe; a tracker that fails to load is not kept, and
    one whose call was abandoned (``forget``) is loaded afresh next time.
    """

    def __init__(self, loader: Callable[[str], Tracker] = load_tracker):
        self._loader = loader
        self._trackers: dict[str, Tracker] = {}
        self._lock = threading.Lock()

    def __call__(self, name: str) -> Tracker:
        with self._lock:
            tracker = self._trackers.get(name)
            if tracker is None:
                tracker = self._trackers[name] = self._loader(name)
            return tracker

    def forget(self, name: str) -> None:
        """Drop ``name``'s tracker (its abandoned call may still be using it): the next run loads a new one."""
        with self._lock:
            self._trackers.pop(name, None)
