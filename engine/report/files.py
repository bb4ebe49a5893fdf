"""Report and bench files on disk: read (size-limited, clear errors), load as typed values, save atomically.

Every load goes through the migration chain (engine.report.migrate) and the typed schema
(engine.report.schema); a problem raises ReportError naming the file and the field.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from engine.core.atomic import atomic_open
from engine.core.errors import ReportError
from engine.core.outputs import write_error
from engine.report.fields import to_json
from engine.report.migrate import BENCH_FORMAT, CYCLE_KIND, EVAL_KIND
from engine.report.parts import RecordedFinding
from engine.report.schema import BenchFile, Report

#: a report or bench file larger than this is refused before it is read (bytes)
MAX_FILE_BYTES = 512 * 2**20


def _parse_constant(name: str) -> float:
    """JSON's non-standard NaN/Infinity literals, read as floats (the schema treats them as null)."""
    return float(name.lower().replace("infinity", "inf"))


def read_json(path: str | Path, max_bytes: int = MAX_FILE_BYTES) -> Any:
    """The decoded JSON of a file; ReportError when missing, too large, empty, unreadable or not JSON."""
    path = Path(path)
    try:
        size = path.stat().st_size
        if path.is_dir():
            raise ReportError(f"report {path} is a folder, not a file")
        if size > max_bytes:
            raise ReportError(f"report {path} is {size / 2**20:.0f} MiB, more than the {max_bytes / 2**20:.0f} MiB "
                              "a report may be", "is it a trackscope report?")
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ReportError(f"report {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ReportError(f"report {path} cannot be read: {exc}") from None
    if not text.strip():
        raise ReportError(f"report {path} is empty")
    try:
        return json.loads(text, parse_constant=_parse_constant)
    except json.JSONDecodeError as exc:
        raise ReportError(f"report {path} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}); "
                          "the file may be truncated or not a trackscope report") from None
    except RecursionError:
        raise ReportError(f"report {path} is nested too deeply to be a trackscope report") from None


def _in_file(kind: str, path: str | Path, exc: ReportError) -> ReportError:
    """The error with the file named in front: 'report run.json: runs[3].wall_ms should be ...'."""
    return ReportError(f"{kind} {path}: {exc.message}", exc.suggestion)


def load_report(path: str | Path) -> Report:
    """One run report from a report file."""
    data = read_json(path)
    try:
        return Report.from_dict(data)
    except ReportError as exc:
        raise _in_file("report", path, exc) from None


def load_bench(path: str | Path) -> BenchFile:
    """A bench file (its reports, table, overhead)."""
    data = read_json(path)
    try:
        return BenchFile.from_dict(data)
    except ReportError as exc:
        raise _in_file("bench file", path, exc) from None


def _refuse_accuracy_file(data: Any, path: str | Path) -> None:
    """ReportError saying so when decoded JSON is an accuracy file (eval/cycle --json), not a report."""
    if isinstance(data, dict) and data.get("kind") in (EVAL_KIND, CYCLE_KIND):
        raise ReportError(f"{path} is an accuracy file ({data['kind']}), not a run report or bench file",
                          "add it to the precision trade-offs instead "
                          "(Compare > Trade-offs: add a bench, report or accuracy file)")


def reports_from_data(data: Any, path: str | Path) -> list[Report]:
    """The reports of a file's decoded JSON: the one of a report, or all of a bench file's; errors name ``path``."""
    _refuse_accuracy_file(data, path)
    is_bench = isinstance(data, dict) and data.get("format") == BENCH_FORMAT
    try:
        return list(BenchFile.from_dict(data).reports) if is_bench else [Report.from_dict(data)]
    except ReportError as exc:
        raise _in_file("bench file" if is_bench else "report", path, exc) from None


def load_reports(path: str | Path) -> list[Report]:
    """The reports of a file: the one of a report file, or all of a bench file's."""
    return reports_from_data(read_json(path), path)


def load_any(path: str | Path) -> tuple[list[Report], tuple[RecordedFinding, ...]]:
    """The reports of a report or bench file, and the findings a bench file recorded beside them."""
    data = read_json(path)
    _refuse_accuracy_file(data, path)
    is_bench = isinstance(data, dict) and data.get("format") == BENCH_FORMAT
    try:
        if is_bench:
            bench = BenchFile.from_dict(data)
            return list(bench.reports), bench.recorded_findings
        return [Report.from_dict(data)], ()
    except ReportError as exc:
        raise _in_file("bench file" if is_bench else "report", path, exc) from None


def save(value: Report | BenchFile | dict[str, Any], path: str | Path) -> Path:
    """Write a report or bench file as JSON, atomically (engine.core.atomic: temp file beside it, fsync, rename).

    The file gets the mode a plain ``open()`` gives (0o666 minus the umask, so 0644 by default): a report
    holds the hostname, the GPU and absolute paths of the video and queries (README, "What a report
    holds"). NaN and inf become null. A plain dict is written as given (after the same JSON conversion).
    A write the disk refuses (full, read-only, a size limit) is a UserError naming the file; the previous
    file is left as it was and no temp file remains.
    """
    path = Path(path)
    data = to_json(value.to_dict() if isinstance(value, (Report, BenchFile)) else value)
    text = json.dumps(data, allow_nan=False, separators=(",", ":"))
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
    except OSError as exc:
        raise write_error(path, "bench file" if isinstance(value, BenchFile) else "report", exc) from exc
    return path
