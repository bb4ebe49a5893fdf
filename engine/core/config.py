"""The configuration of one run, as the user chose it."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any

PRECISIONS = ("fp32", "tf32", "fp16", "bf16", "int8", "fp8")  # int8/fp8: quantised recipes (engine.trackers.quant)
DEFAULT_POINTS_PER_BATCH = 256
DEFAULT_FRAMES_PER_BATCH = 16


#: the RunConfig fields a tracker uses unless its description (``tunable``) lists others
DEFAULT_TUNABLE = ("precision", "points_per_batch", "frames_per_batch")
#: how each tunable field reads in a run's label
_LABEL_PARTS = {"precision": "{}", "points_per_batch": "p{}", "frames_per_batch": "f{}"}


@dataclass(frozen=True)
class RunConfig:
    """What to run and how: tracker, device, precision and batch sizes."""

    tracker: str = "corrtrack"
    device: str = "auto"  # auto | cpu | cuda | cuda:i
    precision: str = "fp32"
    points_per_batch: int = DEFAULT_POINTS_PER_BATCH
    frames_per_batch: int = DEFAULT_FRAMES_PER_BATCH

    def __post_init__(self) -> None:
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, not {self.precision!r}")
        if self.points_per_batch < 1 or self.frames_per_batch < 1:
            raise ValueError("points_per_batch and frames_per_batch must be at least 1")

    def with_changes(self, **changes: Any) -> RunConfig:
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunConfig:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    def label(self, tunable: Any = DEFAULT_TUNABLE) -> str:
        """Short human label with the settings the tracker uses (``tunable``, from its description): e.g.
        'corrtrack fp16 p256 f16', or 'lk' for a tracker that uses none of them."""
        used = tunable if isinstance(tunable, (list, tuple)) else DEFAULT_TUNABLE
        return " ".join([self.tracker] + [_LABEL_PARTS[k].format(getattr(self, k)) for k in DEFAULT_TUNABLE
                                          if k in used])
