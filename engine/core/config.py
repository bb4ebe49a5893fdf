"""The configuration of one run, as the user chose it, and a change to it made while a run goes on.

``RunConfig`` owns its limits: the precision names, the batch-size bounds and the device string's shape
(whether that device exists here is ``engine.core.devices.resolve_device``'s to say). Unknown keys are
refused, naming the closest valid one, so a misspelt setting (``precison``) fails where it is typed, not at
the next batch as an internal error. ``ConfigChange`` is a typed, validated change (the fields it sets); the
session takes it in ``update_config`` and the app's toggles emit one.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from engine.core.errors import UserError

PRECISIONS = ("fp32", "tf32", "fp16", "bf16", "int8", "fp8")  # int8/fp8: quantised recipes (engine.trackers.quant)
#: the reference precision: a list of precisions runs it first
REFERENCE_PRECISION = "fp32"
#: the precision of a tracker that has none to set (LK: OpenCV on the CPU), wherever one is shown or recorded
PRECISION_UNUSED = "n/a"
DEFAULT_POINTS_PER_BATCH = 256
DEFAULT_FRAMES_PER_BATCH = 16
#: the most points one batch may hold (a 65536-point batch of 47 frames is ~3 GiB of CorrTrack's volume per 256 px)
MAX_POINTS_PER_BATCH = 65536
#: the most frames one batch may hold
MAX_FRAMES_PER_BATCH = 4096
#: the shape of a device name: auto, cpu, cuda or cuda:N (case and surrounding spaces aside)
DEVICE_PATTERN = re.compile(r"auto|cpu|cuda(:\d+)?")
#: the settings a tracker's description (``tunable``) may list; those a tracker uses unless it says otherwise
DEFAULT_TUNABLE = ("precision", "points_per_batch", "frames_per_batch")
#: how each tunable field reads in a run's label
_LABEL_PARTS = {"precision": "{}", "points_per_batch": "p{}", "frames_per_batch": "f{}"}
#: how close (difflib ratio) a misspelt key must be to a valid one to be suggested
_SUGGEST_CUTOFF = 0.6


class ConfigError(UserError, ValueError):
    """A run setting that does not exist or has a value it cannot take (a UserError: exit 2 from the CLI)."""


def _check_tracker(value: Any) -> None:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"tracker must be a tracker name, not {value!r}", "e.g. corrtrack, lk or module:factory")


def _check_device(value: Any) -> None:
    if not isinstance(value, str) or not DEVICE_PATTERN.fullmatch(value.strip().lower()):
        raise ConfigError(f"device must be auto, cpu, cuda or cuda:N, not {value!r}", "e.g. cuda:0")


def _check_precision(value: Any) -> None:
    if value not in PRECISIONS:
        close = difflib.get_close_matches(str(value), PRECISIONS, n=1, cutoff=_SUGGEST_CUTOFF)
        raise ConfigError(f"precision must be one of {', '.join(PRECISIONS)}, not {value!r}",
                          f"did you mean {close[0]}?" if close else None)


def parse_precisions(text: str, flag: str = "--precisions") -> list[str]:
    """A comma list of precision names, deduplicated, fp32 first (the reference); ConfigError naming the unknown
    ones (or an empty list)."""
    values = [v.strip().lower() for v in str(text).split(",") if v.strip()]
    bad = [v for v in values if v not in PRECISIONS]
    if bad or not values:
        close = difflib.get_close_matches(bad[0], PRECISIONS, n=1, cutoff=_SUGGEST_CUTOFF) if bad else []
        raise ConfigError(f"{flag}: unknown {', '.join(bad) or 'empty list'}",
                          (f"did you mean {close[0]}? " if close else "") + f"use {', '.join(PRECISIONS)}")
    return sorted(set(values), key=lambda p: (p != REFERENCE_PRECISION, values.index(p)))


def _batch_check(name: str, limit: int) -> Any:
    def check(value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{name} must be a whole number, not {value!r}")
        if not 1 <= value <= limit:
            raise ConfigError(f"{name} must be 1 to {limit}, not {value}",
                              f"at most {limit}" if value > limit else "at least 1")
    return check


#: each setting's check, raising ConfigError (the one place RunConfig's values are validated)
_CHECKS = {
    "tracker": _check_tracker,
    "device": _check_device,
    "precision": _check_precision,
    "points_per_batch": _batch_check("points_per_batch", MAX_POINTS_PER_BATCH),
    "frames_per_batch": _batch_check("frames_per_batch", MAX_FRAMES_PER_BATCH),
}
#: the keys of a run configuration, in order
CONFIG_KEYS = tuple(_CHECKS)


def check_keys(keys: Any, what: str = "run setting") -> None:
    """ConfigError naming the first key that is not a run setting, and the closest one that is."""
    for key in keys:
        if key not in _CHECKS:
            close = difflib.get_close_matches(str(key), CONFIG_KEYS, n=1, cutoff=_SUGGEST_CUTOFF)
            raise ConfigError(f"{key!r} is not a {what}",
                              f"did you mean {close[0]}?" if close else f"the settings are {', '.join(CONFIG_KEYS)}")


@dataclass(frozen=True)
class RunConfig:
    """What to run and how: tracker, device, precision and batch sizes (validated at construction)."""

    tracker: str = "corrtrack"
    device: str = "auto"  # auto | cpu | cuda | cuda:i
    precision: str = "fp32"
    points_per_batch: int = DEFAULT_POINTS_PER_BATCH
    frames_per_batch: int = DEFAULT_FRAMES_PER_BATCH

    def __post_init__(self) -> None:
        for name, check in _CHECKS.items():
            check(getattr(self, name))

    def with_changes(self, **changes: Any) -> RunConfig:
        """This config with ``changes`` applied; ConfigError for an unknown key or a bad value."""
        check_keys(changes)
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunConfig:
        """From ``to_dict``'s keys (missing ones take their defaults); ConfigError for an unknown key.

        A report's config is read by ``engine.report.parts.read_config``, which keeps loading files whose
        writers recorded keys this version does not know.
        """
        check_keys(data)
        return cls(**data)

    def label(self, tunable: Any = DEFAULT_TUNABLE) -> str:
        """Short human label with the settings the tracker uses (``tunable``, from its description): e.g.
        'corrtrack fp16 p256 f16', or 'lk' for a tracker that uses none of them."""
        used = tunable if isinstance(tunable, (list, tuple)) else DEFAULT_TUNABLE
        return " ".join([self.tracker] + [_LABEL_PARTS[k].format(getattr(self, k)) for k in DEFAULT_TUNABLE
                                          if k in used])


@dataclass(frozen=True)
class ConfigChange:
    """A change to a run's settings: the fields it sets (None: unchanged), each validated at construction."""

    tracker: str | None = None
    device: str | None = None
    precision: str | None = None
    points_per_batch: int | None = None
    frames_per_batch: int | None = None

    def __post_init__(self) -> None:
        for name, value in self.changes().items():
            _CHECKS[name](value)

    @classmethod
    def of(cls, changes: dict[str, Any]) -> ConfigChange:
        """From a mapping of setting -> value; ConfigError naming an unknown key and the closest valid one."""
        check_keys(changes)
        return cls(**changes)

    def changes(self) -> dict[str, Any]:
        """{setting: value} of the fields this change sets."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}

    def __bool__(self) -> bool:
        return bool(self.changes())

    def applied_to(self, config: RunConfig) -> RunConfig:
        """``config`` with this change applied (validated again as a whole)."""
        return replace(config, **self.changes())

    def then(self, later: ConfigChange) -> ConfigChange:
        """This change followed by ``later`` (later's fields win)."""
        return ConfigChange(**{**self.changes(), **later.changes()})

    def describe(self) -> str:
        """'precision bf16, points_per_batch 512' (for the app's messages)."""
        return ", ".join(f"{k} {v}" for k, v in self.changes().items()) or "no change"
