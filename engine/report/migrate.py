"""Report format versions and the migration chain every load goes through (v1 -> v2 -> ...).

v1 (what trackscope wrote until the typed schema): the roofline analysis in ``cost`` (per stage flops,
bytes and ops next to achieved TFLOP/s, roofline ms, percent of roofline, the device's peak table),
today's diagnosis in ``findings``, and the video's sizes as ``video.width/height`` (source) and
``video.frame_width/frame_height`` (decoded; missing means the source size).

v2: measurements only. ``work`` holds each stage's counted flops, bytes, ops (and the precision its
FLOPs ran at): the roofline is derived at load time from work + stage ms + the GPU spec. The findings
a writer froze into the file are ``recorded_findings`` (shown as recorded, never as today's diagnosis).
The video's sizes are ``video.geometry`` {source_width, source_height, frame_width, frame_height}.
Optional parts added since (``direct``: a bench's direct-call reference) are absent from older v2 files and
read as None: no version step is needed for a part a file may lack.

Migrations take decoded JSON and return new JSON (the input is not modified). They tolerate
malformed parts (leaving them for the schema to name), and raise ReportError only for what they
cannot carry over.
"""

from __future__ import annotations

from typing import Any, Callable

from engine.core.errors import ReportError
from engine.report.fields import describe

REPORT_FORMAT = "trackscope-report"
BENCH_FORMAT = "trackscope-bench"
#: the kinds of accuracy files (engine.report.accuracy_file: eval/cycle --json), named here so that a report load
#: can say that it met one
EVAL_KIND = "trackscope-eval"
CYCLE_KIND = "trackscope-cycle"
#: the version this code writes, and the newest it reads
REPORT_VERSION = 2
#: the keys of v1's per-stage cost entries that are measurements (the rest is analysis, dropped)
WORK_KEYS = ("flops", "bytes", "ops", "precision")
#: v1 video keys that become v2's video.geometry
_V1_GEOMETRY = {"width": "source_width", "height": "source_height", "frame_width": "frame_width",
                "frame_height": "frame_height"}


def file_version(data: dict[str, Any], where: str = "the report") -> int:
    """The version of a decoded report or bench file; ReportError when missing, invalid or too new."""
    version = data.get("version")
    if isinstance(version, float) and version.is_integer():
        version = int(version)
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ReportError(f"{where} has no valid version number (found {describe(version)})")
    if version > REPORT_VERSION:
        raise ReportError(f"{where} is version {version}, written by a newer trackscope; this one reads up to "
                          f"version {REPORT_VERSION}", "upgrade trackscope to open it")
    return version


def _v1_to_v2_report(data: dict[str, Any]) -> dict[str, Any]:
    out = dict(data)
    out["version"] = 2
    cost = out.pop("cost", None)
    if "work" not in out:
        out["work"] = _work_from_cost(cost)
    if "findings" in out:
        out["recorded_findings"] = out.pop("findings")
    video = out.get("video")
    if isinstance(video, dict) and "geometry" not in video:
        video = dict(video)
        geometry = {new: video.pop(old) for old, new in _V1_GEOMETRY.items() if old in video}
        if geometry:
            video["geometry"] = geometry
        out["video"] = video
    return out


def _work_from_cost(cost: Any) -> Any:
    """v1 cost.stages[*] -> {stage: {flops, bytes, ops, precision}}; entries that are not objects pass as-is."""
    if cost is None:
        return {}
    if not isinstance(cost, dict):
        raise ReportError(f"cost should be an object or null, found {describe(cost)}")
    stages = cost.get("stages")
    if stages is None:
        return {}
    if not isinstance(stages, dict):
        raise ReportError(f"cost.stages should be an object, found {describe(stages)}")
    return {name: {k: entry[k] for k in WORK_KEYS if k in entry} if isinstance(entry, dict) else entry
            for name, entry in stages.items()}


def _v1_to_v2_bench(data: dict[str, Any]) -> dict[str, Any]:
    out = dict(data)
    out["version"] = 2
    if "findings" in out:
        out["recorded_findings"] = out.pop("findings")
    reports = out.get("reports")
    if isinstance(reports, list):  # the reports inside carry their own version
        out["reports"] = [migrate(r) if isinstance(r, dict) else r for r in reports]
    return out


#: (from version, to version, report step, bench step)
_STEPS: list[tuple[int, int, Callable[[dict], dict], Callable[[dict], dict]]] = [
    (1, 2, _v1_to_v2_report, _v1_to_v2_bench),
]


def migrate(data: Any, where: str = "the report") -> Any:
    """Decoded report or bench JSON brought to REPORT_VERSION (non-objects and unknown formats untouched)."""
    if not isinstance(data, dict) or data.get("format") not in (REPORT_FORMAT, BENCH_FORMAT):
        return data
    version = file_version(data, where)
    is_bench = data["format"] == BENCH_FORMAT
    for start, end, report_step, bench_step in _STEPS:
        if version == start:
            data = bench_step(data) if is_bench else report_step(data)
            version = end
    return data
