"""The fleet folder's index (``index.json``, format "trackscope-fleet", version 1): one entry per GPU and configuration.

A fleet folder is ``DIR/index.json`` plus one folder per GPU slot (``DIR/00-A100/``) that is a ``trackscope bench
--out`` folder: a report per configuration and its ``bench.json``. An entry's ``report`` is a path relative to the
index's folder, so ``FleetIndex.report_path(entry)`` is a plain report path that ``diff``, ``gate`` and the app open
as any report. Read with ``load_index`` (ReportError naming the file and the field for a malformed one); no Ray.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from engine.core.errors import ReportError
from engine.report.fields import Fields, fail

FLEET_FORMAT = "trackscope-fleet"
FLEET_VERSION = 1
INDEX_FILE = "index.json"
STATUS_OK = "ok"
STATUS_FAILED = "failed"  # the configuration ran and failed (the tracker raised, ran out of memory, ...)
STATUS_LOST = "lost"  # its GPU's actor died (its node went away) or was never placed: nothing measured
STATUS_SKIPPED = "skipped"  # the precision is not runnable on this device (bench's own "skipped" row)
STATUSES = (STATUS_OK, STATUS_FAILED, STATUS_LOST, STATUS_SKIPPED)
MAX_ENTRIES = 100_000
MAX_GPUS = 10_000


@dataclass(frozen=True)
class FleetEntry:
    """One configuration on one GPU: where it ran, how it ended, its report, and what the fleet itself cost."""

    slot: str  # the GPU's folder in the fleet folder, "00-A100"
    config: str  # the configuration's label, as bench's table names it ("corrtrack bf16 p256 f16")
    precision: str
    points_per_batch: int
    frames_per_batch: int
    status: str
    gpu: str | None = None  # the device's name as torch gives it ("NVIDIA H200", "CPU")
    uuid: str | None = None  # the GPU's UUID ("GPU-..."), None on the CPU
    node: str | None = None  # Ray node id
    node_ip: str | None = None
    accelerator_type: str | None = None  # the Ray accelerator type asked for (None: any GPU, or the CPU)
    device: str | None = None  # the torch device the bench used ("cuda:0", "cpu")
    report: str | None = None  # relative to the index's folder; None when nothing was measured
    message: str = ""
    bench_ms: float | None = None  # Bench.run_config's own time, measured in the actor
    round_trip_ms: float | None = None  # from the driver's submit to the result in hand
    overhead_ms: float | None = None  # round_trip_ms - bench_ms: the fleet's own cost for this configuration
    capture_error: str | None = None  # with --deep: why the capture failed (the timed report is kept)

    @classmethod
    def from_dict(cls, data: Any, path: str) -> FleetEntry:
        f = Fields(data, path)
        status = f.choice("status", STATUSES, STATUS_OK)
        report = f.opt_string("report")
        if report is not None:
            pure = PurePosixPath(report)
            if pure.is_absolute() or ".." in pure.parts or not report:
                raise fail(f.at("report"), "a path inside the fleet folder", report)
        return cls(slot=f.string("slot"), config=f.string("config"), precision=f.string("precision"),
                   points_per_batch=f.integer("points_per_batch", minimum=1),
                   frames_per_batch=f.integer("frames_per_batch", minimum=1), status=status,
                   gpu=f.opt_string("gpu"), uuid=f.opt_string("uuid"), node=f.opt_string("node"),
                   node_ip=f.opt_string("node_ip"), accelerator_type=f.opt_string("accelerator_type"),
                   device=f.opt_string("device"), report=report, message=f.string("message", ""),
                   bench_ms=f.opt_number("bench_ms", minimum=0), round_trip_ms=f.opt_number("round_trip_ms", minimum=0),
                   overhead_ms=f.opt_number("overhead_ms"), capture_error=f.opt_string("capture_error"))

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class FleetGpu:
    """One slot of the fleet: the actor of one GPU (or the CPU), where Ray put it, how it started."""

    slot: str
    status: str  # ok (placed and started), failed (the tracker did not load), lost (never placed, or died)
    accelerator_type: str | None = None  # asked for
    node_accelerator_type: str | None = None  # what the node it landed on declares
    node: str | None = None
    node_ip: str | None = None
    device: str | None = None
    gpu: str | None = None
    uuid: str | None = None
    gpu_ids: tuple[str, ...] = ()  # Ray's GPU ids for the actor (CUDA_VISIBLE_DEVICES on its node)
    startup_ms: float | None = None  # the actor's constructor: CUDA initialised, the tracker loaded
    ready_ms: float | None = None  # from the actor's creation to its first answer (process, imports, placement)
    message: str = ""

    @classmethod
    def from_dict(cls, data: Any, path: str) -> FleetGpu:
        f = Fields(data, path)
        ids = f.raw("gpu_ids") or []
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise fail(f.at("gpu_ids"), "a list of strings", ids)
        return cls(slot=f.string("slot"), status=f.choice("status", STATUSES, STATUS_OK),
                   accelerator_type=f.opt_string("accelerator_type"),
                   node_accelerator_type=f.opt_string("node_accelerator_type"), node=f.opt_string("node"),
                   node_ip=f.opt_string("node_ip"), device=f.opt_string("device"), gpu=f.opt_string("gpu"),
                   uuid=f.opt_string("uuid"), gpu_ids=tuple(ids), startup_ms=f.opt_number("startup_ms", minimum=0),
                   ready_ms=f.opt_number("ready_ms", minimum=0), message=f.string("message", ""))

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "gpu_ids": list(self.gpu_ids)}


@dataclass(frozen=True)
class FleetIndex:
    """A fleet run: its GPUs, one entry per GPU and configuration, and the run's settings."""

    gpus: tuple[FleetGpu, ...]
    entries: tuple[FleetEntry, ...]
    complete: bool = False
    tracker: str = ""
    video: str = ""
    queries: str = ""
    configurations: int = 0  # per GPU
    extra: dict[str, Any] = field(default_factory=dict)  # ray version, address, asked GPUs, timestamps

    @classmethod
    def from_dict(cls, data: Any, path: str = "") -> FleetIndex:
        if not isinstance(data, dict) or data.get("format") != FLEET_FORMAT:
            found = data.get("format") if isinstance(data, dict) else type(data).__name__
            raise ReportError(f"not a fleet index (format {found!r}, expected {FLEET_FORMAT!r})",
                              "give the index.json of a `trackscope fleet --out` folder")
        version = data.get("version")
        if version != FLEET_VERSION:
            raise ReportError(f"fleet index version {version!r} is not one this trackscope reads ({FLEET_VERSION})",
                              "upgrade trackscope" if isinstance(version, int) and version > FLEET_VERSION else None)
        f = Fields(data, path)
        f.raw("format")
        f.raw("version")
        f.raw("overhead")  # derived from the entries (to_dict), not read back
        gpus = tuple(FleetGpu.from_dict(g, p) for p, g in f.items("gpus", MAX_GPUS))
        entries = tuple(FleetEntry.from_dict(e, p) for p, e in f.items("entries", MAX_ENTRIES, required=True))
        return cls(gpus=gpus, entries=entries, complete=f.boolean("complete", False), tracker=f.string("tracker", ""),
                   video=f.string("video", ""), queries=f.string("queries", ""),
                   configurations=f.integer("configurations", 0, minimum=0), extra=f.rest())

    def to_dict(self) -> dict[str, Any]:
        return {"format": FLEET_FORMAT, "version": FLEET_VERSION, "complete": self.complete, "tracker": self.tracker,
                "video": self.video, "queries": self.queries, "configurations": self.configurations,
                "overhead": self.overhead(), "gpus": [g.to_dict() for g in self.gpus],
                "entries": [e.to_dict() for e in self.entries], **self.extra}

    def overhead(self) -> dict[str, Any] | None:
        """The fleet's own cost per configuration over the entries that have it: median, min, max (ms), count."""
        values = sorted(e.overhead_ms for e in self.entries if e.overhead_ms is not None)
        if not values:
            return None
        mid = len(values) // 2
        median = values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2
        return {"median_ms": median, "min_ms": values[0], "max_ms": values[-1], "configurations": len(values),
                "what": "per configuration: submit to result on the driver, minus the bench's own time in the actor"}

    def report_paths(self, index_path: str | Path) -> list[Path]:
        """The reports of every entry that has one, as plain report paths (in the index's order)."""
        return [p for p in (report_path(index_path, e) for e in self.entries) if p is not None]

    def find(self, config: str | None = None, slot: str | None = None, gpu: str | None = None) -> list[FleetEntry]:
        """The entries matching every filter given (config label, slot folder, GPU name or UUID)."""
        return [e for e in self.entries if (config is None or e.config == config) and (slot is None or e.slot == slot)
                and (gpu is None or gpu in (e.gpu, e.uuid))]


def report_path(index_path: str | Path, entry: FleetEntry) -> Path | None:
    """The entry's report as a plain report path (the index's folder joined with ``entry.report``)."""
    if entry.report is None:
        return None
    return Path(index_path).parent / entry.report


def load_index(path: str | Path) -> FleetIndex:
    """The index of a fleet folder (give the folder or its index.json); ReportError naming the file when malformed."""
    from engine.report.files import read_json

    path = Path(path)
    if path.is_dir():
        path = path / INDEX_FILE
    data = read_json(path)
    try:
        return FleetIndex.from_dict(data)
    except ReportError as exc:
        raise ReportError(f"fleet index {path}: {exc.message}", exc.suggestion) from None
