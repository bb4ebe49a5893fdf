"""Writes a fleet folder as results arrive: each GPU's folder through bench's own ``BenchWriter``, then the index.

Each slot's folder is what ``trackscope bench --out`` writes (a report per configuration, ``bench.json``), by the
same writer, from the reports the actor built with ``Bench``; ``index.json`` is rewritten after every result
(``"complete": false`` until the run ends), atomically, so Ctrl-C or a crash keeps what finished.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from engine.core.atomic import atomic_open
from engine.core.errors import UserError
from engine.fleet.index import INDEX_FILE, FleetEntry, FleetGpu, FleetIndex
from engine.report.files import save
from engine.report.schema import Report
from engine.workflows.bench import BenchWriter, Row


def row_from_dict(data: dict[str, Any]) -> Row:
    """A bench Row back from ``Row.to_dict()`` (its extra keys back into ``extra``)."""
    names = {f.name for f in dataclasses.fields(Row)} - {"extra"}
    return Row(**{k: v for k, v in data.items() if k in names},
               extra={k: v for k, v in data.items() if k not in names})


@dataclass
class _SlotSweep:
    """What BenchWriter reads of a Bench: the rows and reports of one slot so far, and its device."""

    device: Any
    rows: list[Row] = field(default_factory=list)
    reports: list[Report] = field(default_factory=list)


class FleetWriter:
    """``out/index.json`` and ``out/<slot>/`` (a bench folder per GPU), written as results come in."""

    def __init__(self, out: Path, settings: dict[str, Any], configurations: int):
        self.out = Path(out)
        self.settings = settings
        self.configurations = configurations
        self.path = self.out / INDEX_FILE
        self._writers: dict[str, BenchWriter] = {}
        self._sweeps: dict[str, _SlotSweep] = {}
        self.started = datetime.now(timezone.utc).isoformat(timespec="seconds")

    def start(self) -> None:
        try:
            self.out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UserError(f"--out {self.out}: cannot make the folder: {exc.strerror or exc}") from None

    def result(self, slot: str, device: str | None, row: dict[str, Any] | None, report: dict[str, Any] | None,
               traces: dict[str, bytes] | None = None) -> str | None:
        """Write one configuration of ``slot`` (its report and the slot's bench.json); -> the report's path relative
        to the fleet folder, None when the configuration has no report (skipped or failed)."""
        if row is None:
            return None
        sweep = self._sweeps.get(slot)
        if sweep is None:
            sweep = self._sweeps[slot] = _SlotSweep(device=device or "cpu")
            self._writers[slot] = BenchWriter(self.out / slot, sweep, planned=self.configurations)  # type: ignore[arg-type]
            self._writers[slot].start()
        parsed = row_from_dict(row)
        sweep.rows.append(parsed)
        if report is not None:
            sweep.reports.append(Report.from_dict(report, f"{slot}/{parsed.label}"))
        for name, data in (traces or {}).items():  # the deep capture's trace, beside the report as bench puts it
            with atomic_open(self.out / slot / Path(name).name, "wb") as fh:
                fh.write(data)
        writer = self._writers[slot]
        if sweep.reports:
            writer.row_done(parsed)
        return f"{slot}/{parsed.report_file}" if parsed.report_file else None

    def index(self, gpus: list[FleetGpu], entries: list[FleetEntry], complete: bool) -> FleetIndex:
        return FleetIndex(gpus=tuple(gpus), entries=tuple(entries), complete=complete,
                          tracker=str(self.settings.get("tracker", "")), video=str(self.settings.get("video", "")),
                          queries=str(self.settings.get("queries", "")), configurations=self.configurations,
                          extra={"started": self.started, **{k: v for k, v in self.settings.items()
                                                             if k not in ("tracker", "video", "queries")}})

    def write_index(self, gpus: list[FleetGpu], entries: list[FleetEntry], complete: bool) -> Path:
        data = self.index(gpus, entries, complete).to_dict()
        if complete:
            data["finished"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
        return save(data, self.path)

    def finish(self, gpus: list[FleetGpu], entries: list[FleetEntry], complete: bool = True) -> Path:
        """Each slot's bench.json marked complete (or not) and the index."""
        for slot, writer in self._writers.items():
            if self._sweeps[slot].reports:
                writer.finish(None, complete=complete)
        return self.write_index(gpus, entries, complete)
