"""The runs an accuracy command (``eval``, ``cycle``) makes over several precisions, and the facts its
accuracy file records about the machine and the tracker.

Each tracker is loaded once. One with a precision setting runs once per precision asked; one without (LK: its
description's ``tunable`` leaves precision out) runs once, recorded as PRECISION_UNUSED, as the baseline it is.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from engine.core.config import DEFAULT_TUNABLE, PRECISION_UNUSED, REFERENCE_PRECISION, RunConfig
from engine.core.devices import device_name, resolve_device
from engine.core.errors import UserError
from engine.core.precision import check_runnable
from engine.trackers.base import Tracker
from engine.trackers.guard import call_plugin
from engine.trackers.plugin import is_plugin


@dataclass(frozen=True)
class TrackerFacts:
    """What an accuracy file says about a tracker, from its description."""

    name: str
    uses_precision: bool  # False: it has no precision to set (LK)
    untrained: bool  # a learned tracker without trained weights (its description's "weights" is empty)
    weights_sha256: str | None  # the weights' sha256, when the description has it

    @classmethod
    def of(cls, name: str, tracker: Tracker) -> TrackerFacts:
        described = call_plugin(name, "in describe()", tracker.describe) if is_plugin(tracker) else tracker.describe()
        described = described if isinstance(described, dict) else {}
        tunable = described.get("tunable", DEFAULT_TUNABLE)
        uses = "precision" in (tunable if isinstance(tunable, (list, tuple)) else DEFAULT_TUNABLE)
        sha = described.get("sha256") or described.get("weights_sha256")
        return cls(name, uses, "weights" in described and not described["weights"],
                   sha if isinstance(sha, str) and sha else None)


@dataclass(frozen=True)
class PlannedRun:
    """One run of the command: a tracker at one precision (PRECISION_UNUSED: a tracker without the setting)."""

    tracker: str
    precision: str
    label: str  # how tables name it: 'corrtrack bf16', 'lk'; the tracker's name alone when one precision is asked

    def config(self, base: RunConfig) -> RunConfig:
        """``base`` for this run (a tracker without a precision gets the reference one: it is not used)."""
        precision = REFERENCE_PRECISION if self.precision == PRECISION_UNUSED else self.precision
        return base.with_changes(tracker=self.tracker, precision=precision)


def plan_runs(facts: Iterable[TrackerFacts], precisions: list[str]) -> list[PlannedRun]:
    """Each tracker at each precision, in order; a tracker without a precision setting once."""
    out = []
    for f in facts:
        if not f.uses_precision:
            out.append(PlannedRun(f.name, PRECISION_UNUSED, f.name))
            continue
        out += [PlannedRun(f.name, p, f.name if len(precisions) == 1 else f"{f.name} {p}") for p in precisions]
    return out


def check_precisions(trackers: dict[str, Tracker], facts: dict[str, TrackerFacts], precisions: list[str],
                     config: RunConfig) -> None:
    """UserError, before any run, for a precision the session would refuse on this device (fp16 on the CPU),
    naming the option; the runs before it would be lost otherwise."""
    try:
        device = resolve_device(config.device)
    except (UserError, RuntimeError):
        return  # the session says why, with its own words
    for name, tracker in trackers.items():
        if not facts[name].uses_precision or device.type not in tuple(getattr(tracker, "device_types", ())):
            continue
        for precision in precisions:
            try:
                check_runnable(precision, device)
            except UserError as exc:
                if len(precisions) == 1:
                    raise
                raise UserError(exc.message, (exc.suggestion or "choose another") + ", or leave it out of --precisions"
                                ) from None


def baseline_config(config: RunConfig, tracker: Tracker) -> RunConfig:
    """A baseline's run config: on the CPU where it cannot run on the command's device (LK, OpenCV on the CPU,
    beside a CUDA run), so that ``--device cuda`` grades the tracker on the GPU with its baseline beside it."""
    try:
        device = resolve_device(config.device)
    except (UserError, RuntimeError):
        return config
    types = tuple(getattr(tracker, "device_types", ()))
    return config.with_changes(device="cpu") if device.type not in types and "cpu" in types else config


def machine_of(config: RunConfig) -> tuple[str, str]:
    """(the machine's name as a user calls it, the torch device) ``config.device`` resolves to here."""
    try:
        device = resolve_device(config.device)
    except (UserError, RuntimeError):
        return config.device, config.device
    return device_name(device), str(device)


def settings_of(config: RunConfig, precisions: list[str], baseline: str | None, **more: Any) -> dict[str, Any]:
    """The command's settings as an accuracy file records them."""
    return {"device": config.device, "precisions": list(precisions), "points_per_batch": config.points_per_batch,
            "frames_per_batch": config.frames_per_batch, "baseline": baseline, **more}
