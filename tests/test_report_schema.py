"""The typed report schema: committed v1 reports load, migrate and round-trip; bad fields raise ReportError."""

from __future__ import annotations

import copy
import json
import math
import time
from pathlib import Path

import numpy as np
import pytest

from engine.analysis.cost import count_session_cost
from engine.core.config import RunConfig
from engine.core.errors import ReportError
from engine.report import fields as report_fields
from engine.report.files import load_bench, load_report, load_reports, read_json, save
from engine.report.migrate import REPORT_VERSION, migrate
from engine.report.recorder import RunRecorder
from engine.report.schema import BenchFile, Report
from engine.run.session import Session
from tests.helpers import ConstantVelocityTracker, moving_square_video

DATA = Path(__file__).parent / "data" / "h200"
REPORT_FILES = sorted(p for p in [*DATA.glob("*.json"), *DATA.glob("planted/*.json")]
                      if json.loads(p.read_text()).get("format") == "trackscope-report")
SAMPLE = DATA / "corrtrack_fp32_p256_sample.json"
FUZZ_SOURCE = DATA / "planted" / "cold_compile_fp32_p1024_f16.json"
FUZZ_SEED = 20261201
#: what each field path gets replaced with; DELETE removes the key
DELETE = object()
WRONG_VALUES = (None, "x", -1, [], {}, True, 1e308, DELETE)
#: v1 top-level keys the migration renames
MIGRATED_KEYS = {"cost": "work", "findings": "recorded_findings"}


def _json_round(data):
    return json.loads(json.dumps(data, allow_nan=False))


@pytest.fixture(scope="module", params=REPORT_FILES, ids=lambda p: p.stem)
def committed(request):
    path = request.param
    return path, json.loads(path.read_text()), load_report(path)


def test_the_committed_reports_are_found():
    assert len(REPORT_FILES) == 14


def test_committed_reports_load_migrate_and_round_trip(committed, tmp_path):
    path, raw, report = committed
    assert raw["version"] == 1 and report.read_version == 1
    written = report.to_dict()
    assert written["version"] == REPORT_VERSION == 2
    assert "cost" not in written and "findings" not in written
    again = Report.from_dict(_json_round(written))
    assert again.to_dict() == written and again == report
    assert again.read_version == 2
    saved = save(report, tmp_path / "r.json")
    assert load_report(saved).to_dict() == written
    assert [r.to_dict() for r in load_reports(saved)] == [written]
    assert list(tmp_path.iterdir()) == [saved]  # no temp file left behind


def test_measurements_survive_migration(committed):
    _, raw, report = committed
    assert len(report.runs) == len(raw["runs"])
    for run, raw_run in zip(report.runs, raw["runs"]):
        assert run.wall_ms == raw_run["wall_ms"] and run.stage_ms == raw_run["stage_ms"]
        assert [b.stage_ms for b in run.batches] == [b["stage_ms"] for b in raw_run["batches"]]
        assert run.config == RunConfig.from_dict(raw_run["config"])
    assert report.stages == tuple(raw["stages"])
    assert report.config == RunConfig.from_dict(raw["config"])
    assert report.tracker.name == raw["tracker"]["name"]
    assert report.tracker.details == {k: v for k, v in raw["tracker"].items() if k not in ("name", "stages")}
    assert report.environment.to_dict()["gpu"]["uuid"] == raw["environment"]["gpu"]["uuid"]  # kept in extra
    geo = report.video.geometry
    assert (geo.source_width, geo.source_height) == (raw["video"]["width"], raw["video"]["height"])
    assert (geo.frame_width, geo.frame_height) == (raw["video"]["frame_width"], raw["video"]["frame_height"])


def test_work_keeps_flops_bytes_ops_and_drops_the_roofline(committed):
    _, raw, report = committed
    stages = raw["cost"]["stages"]
    assert set(report.work) == set(stages)
    for name, work in report.work.items():
        assert (work.flops, work.bytes, work.ops) == (stages[name]["flops"], stages[name]["bytes"],
                                                      stages[name]["ops"])
        assert work.precision == stages[name]["precision"]
        assert set(report.to_dict()["work"][name]) == {"flops", "bytes", "ops", "precision"}


def test_v1_findings_become_recorded_findings(committed):
    _, raw, report = committed
    assert [f.to_dict() for f in report.recorded_findings] == raw["findings"]


def test_accessors_match_todays_helpers(committed):
    _, raw, report = committed
    assert report.typical_run_ms == raw["totals"]["warm_ms_median"]
    assert report.stage_ms == raw["totals"]["stage_ms"]
    assert report.short_label() == f"{raw['label']} on {raw['device_name']}"
    assert report.device_name == "NVIDIA H200" and report.capability == (9, 0) and report.is_gpu
    assert len(report.warm_runs) == raw["totals"]["num_warm_runs"]
    assert report.cold_run is report.runs[0] and report.cold_run.cold
    assert len(report.finished_runs) == len(raw["runs"])


def test_tracks_and_telemetry_arrays(committed):
    _, raw, report = committed
    if raw["tracks"] is None:
        assert report.tracks_arrays() is None
    else:
        tracks = np.array(raw["tracks"]["tracks"], dtype=object)  # null where the tracker gave none
        expected = (np.array(raw["tracks"]["queries"], np.float32),
                    np.where(np.equal(tracks, None), np.nan, tracks).astype(np.float32),
                    np.array(raw["tracks"]["visible"], bool))
        for got, want in zip(report.tracks_arrays(), expected):
            assert got.dtype == want.dtype and np.array_equal(got, want, equal_nan=True)
    t = report.telemetry.t
    assert t.dtype == np.float64 and t.shape == (len(raw["telemetry"]["t"]),)
    assert report.telemetry_series("cpu_per_core").shape == (t.size, raw["environment"]["cpu"]["cores"])
    busy = report.telemetry_series("gpu_busy_pct")
    raw_busy = [math.nan if v is None else v for v in raw["telemetry"]["metrics"]["gpu_busy_pct"]]
    assert np.array_equal(busy, np.array(raw_busy), equal_nan=True)
    assert report.telemetry_series("no such metric").size == 0


def test_accuracy_and_tracks_of_the_sample():
    raw = json.loads(SAMPLE.read_text())
    report = load_report(SAMPLE)
    assert report.accuracy.aj == raw["accuracy"]["aj"] and report.accuracy.vs == "ground truth"
    assert report.accuracy.to_dict() == raw["accuracy"]
    assert report.to_dict()["tracks"] == raw["tracks"]  # already at 0.01 px: written back unchanged
    assert report.tracks.queries.shape == (80, 3) and report.tracks.tracks.shape == (80, 47, 2)


# -- the fuzz ---------------------------------------------------------------------------------
def _field_paths(value, path=()):
    """Every key path of decoded JSON; of each list only the first and last item."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield (*path, key)
            yield from _field_paths(item, (*path, key))
    elif isinstance(value, list) and value:
        for index in sorted({0, len(value) - 1}):
            yield (*path, index)
            yield from _field_paths(value[index], (*path, index))


def _dotted(path) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else (f".{p}" if i else p) for i, p in enumerate(path))


def _fuzz(data: dict, rng: np.random.Generator) -> int:
    """Replace each field by each wrong value (in place, restored after); from_dict must succeed or raise
    ReportError naming where it looked. Returns the number of cases."""
    pristine = copy.deepcopy(data)
    cases = 0
    paths = list(_field_paths(data))
    rng.shuffle(paths)
    for path in paths:
        parent = data
        for key in path[:-1]:
            parent = parent[key]
        key, original = path[-1], parent[path[-1]]
        for wrong in WRONG_VALUES:
            if wrong is DELETE:
                if isinstance(parent, list):
                    continue
                del parent[key]
            else:
                parent[key] = copy.copy(wrong)
            cases += 1
            try:
                Report.from_dict(data)
            except ReportError as exc:
                names = (str(path[0]), MIGRATED_KEYS.get(path[0], str(path[0])), "format", "version")
                assert any(name in exc.message for name in names), (_dotted(path), exc.message)
            except Exception as exc:  # pragma: no cover - the failure message names the case
                raise AssertionError(f"{_dotted(path)} = {wrong!r}: {type(exc).__name__}: {exc}") from exc
            finally:
                if isinstance(parent, dict):
                    parent.pop(key, None)
                    parent[key] = original
                else:
                    parent[key] = original
    assert data == pristine  # from_dict never modified its input
    return cases


def test_fuzz_every_field_of_a_v1_report():
    data = json.loads(FUZZ_SOURCE.read_text())
    assert _fuzz(data, np.random.default_rng(FUZZ_SEED)) > 2000


def test_fuzz_every_field_of_a_v2_report():
    data = load_report(FUZZ_SOURCE).to_dict()
    assert _fuzz(data, np.random.default_rng(FUZZ_SEED + 1)) > 2000


def test_fuzz_the_tracks_and_telemetry_of_the_sample():
    data = json.loads(SAMPLE.read_text())
    part = {k: data[k] for k in ("format", "version", "environment", "config", "stages", "totals", "runs")}
    part["runs"] = data["runs"][:2]
    part.update(tracks={k: data["tracks"][k][:2] for k in ("queries", "tracks", "visible")},
                telemetry=data["telemetry"], accuracy=data["accuracy"])
    Report.from_dict(part)
    assert _fuzz(part, np.random.default_rng(FUZZ_SEED + 2)) > 1000


# -- errors name the field ----------------------------------------------------------------------
def _sample_with(tmp_path, change) -> Path:
    data = json.loads(FUZZ_SOURCE.read_text())
    change(data)
    path = tmp_path / "run.json"
    path.write_text(json.dumps(data))
    return path


def test_error_names_the_file_and_the_field_path(tmp_path):
    def bad_stage(data):
        data["runs"][3]["batches"][0]["stage_ms"]["features"] = "abc"

    path = _sample_with(tmp_path, bad_stage)
    with pytest.raises(ReportError) as info:
        load_report(path)
    assert info.value.message == (f"report {path}: runs[3].batches[0].stage_ms.features should be a number, "
                                  "found 'abc'")


@pytest.mark.parametrize(("change", "message"), [
    (lambda d: d["runs"][0].__setitem__("wall_ms", True), r"runs\[0\]\.wall_ms should be a number"),
    (lambda d: d["runs"][0].__setitem__("wall_ms", math.nan), r"runs\[0\]\.wall_ms should be a finite number"),
    (lambda d: d.pop("totals"), r"totals is missing"),
    (lambda d: d["config"].__setitem__("precision", "fp7"), r"config is not a valid run configuration"),
    (lambda d: d["config"].__setitem__("points_per_batch", 0), r"config\.points_per_batch should be a whole"),
    (lambda d: d["environment"]["gpu"].__setitem__("compute_capability", [9]), r"compute_capability should be"),
    (lambda d: d["runs"][1].__setitem__("status", "odd"), r"runs\[1\]\.status should be one of"),
    (lambda d: d["telemetry"]["metrics"]["gpu_busy_pct"].pop(), r"metrics\.gpu_busy_pct should be \d+ samples"),
    (lambda d: d["telemetry"]["metrics"]["cpu_pct"].__setitem__(2, False),
     r"telemetry\.metrics\.cpu_pct\[2\] should be a number or null, found False"),
    (lambda d: d["cost"]["stages"]["features"].__setitem__("flops", -1), r"work\.features\.flops should be"),
    (lambda d: d.__setitem__("cost", []), r"cost should be an object or null"),
    (lambda d: d["video"].__setitem__("width", 0), r"video\.geometry\.source_width should be"),
])
def test_bad_fields(tmp_path, change, message):
    with pytest.raises(ReportError, match=message):
        load_report(_sample_with(tmp_path, change))


def test_nan_where_null_is_allowed_reads_as_missing(tmp_path):
    def nan_totals(data):
        data["totals"]["warm_ms_median"] = math.nan
        data["telemetry"]["metrics"]["cpu_pct"][0] = math.inf

    path = tmp_path / "nan.json"
    data = json.loads(FUZZ_SOURCE.read_text())
    nan_totals(data)
    path.write_text(json.dumps(data))  # Python writes NaN/Infinity literals
    report = load_report(path)
    assert report.totals.warm_ms_median is None
    assert report.typical_run_ms == pytest.approx(float(np.median([r.wall_ms for r in report.warm_runs])))
    assert np.isnan(report.telemetry_series("cpu_pct")[0])  # inf stands where null could: read as null
    saved = save(report, tmp_path / "out.json")
    assert "NaN" not in saved.read_text() and "Infinity" not in saved.read_text()


def test_future_version_asks_to_upgrade(tmp_path):
    path = _sample_with(tmp_path, lambda d: d.__setitem__("version", REPORT_VERSION + 1))
    with pytest.raises(ReportError, match="newer trackscope") as info:
        load_report(path)
    assert "upgrade trackscope" in str(info.value)
    with pytest.raises(ReportError, match="no valid version"):
        load_report(_sample_with(tmp_path, lambda d: d.__setitem__("version", "1")))


def test_wrong_format_names_the_right_loader(tmp_path):
    with pytest.raises(ReportError, match="load_reports or load_bench"):
        Report.from_dict({"format": "trackscope-bench", "version": 1})
    with pytest.raises(ReportError, match="not a trackscope report"):
        Report.from_dict([1, 2])


def test_deep_nesting_and_long_lists_are_refused(monkeypatch):
    data = json.loads(FUZZ_SOURCE.read_text())
    deep: dict = {}
    node = deep
    for _ in range(report_fields.MAX_DEPTH + 5):
        node["next"] = {}
        node = node["next"]
    with pytest.raises(ReportError, match="nested deeper than 64 levels"):
        Report.from_dict({**data, "environment": {**data["environment"], "odd": deep}})
    with pytest.raises(ReportError, match=r"runs holds 100001 items, more than the 100000"):
        Report.from_dict({**data, "runs": [data["runs"][0]] * 100_001})
    monkeypatch.setattr(report_fields, "MAX_ARRAY_VALUES", 10)
    with pytest.raises(ReportError, match=r"telemetry\.t holds \d+ values, more than the 10"):
        Report.from_dict(data)


def test_unknown_keys_are_kept(tmp_path):
    data = json.loads(FUZZ_SOURCE.read_text())
    data["future_block"] = {"a": [1, 2]}
    data["runs"][0]["future_field"] = "kept"
    data["totals"]["p99_ms"] = 3.0
    report = Report.from_dict(data)
    written = report.to_dict()
    assert written["future_block"] == {"a": [1, 2]} and written["runs"][0]["future_field"] == "kept"
    assert written["totals"]["p99_ms"] == 3.0 and report.extra == {"future_block": {"a": [1, 2]}}


def test_migrate_leaves_its_input_alone():
    data = json.loads(FUZZ_SOURCE.read_text())
    before = copy.deepcopy(data)
    out = migrate(data)
    assert data == before and out["version"] == 2 and "work" in out and "video" in out
    assert migrate(out) == out


# -- files --------------------------------------------------------------------------------------
def test_read_json_errors(tmp_path):
    with pytest.raises(ReportError, match="does not exist"):
        read_json(tmp_path / "none.json")
    (tmp_path / "empty.json").write_text("  \n")
    with pytest.raises(ReportError, match="is empty"):
        read_json(tmp_path / "empty.json")
    (tmp_path / "text.json").write_text("hello")
    with pytest.raises(ReportError, match="not valid JSON"):
        read_json(tmp_path / "text.json")
    (tmp_path / "cut.json").write_text(FUZZ_SOURCE.read_text()[:5000])
    with pytest.raises(ReportError, match="may be truncated"):
        load_report(tmp_path / "cut.json")
    with pytest.raises(ReportError, match="MiB"):
        read_json(FUZZ_SOURCE, max_bytes=1000)
    with pytest.raises(ReportError, match="folder"):
        read_json(tmp_path)
    (tmp_path / "bin.json").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ReportError, match="cannot be read"):
        read_json(tmp_path / "bin.json")


def test_bench_file(tmp_path):
    raws = [json.loads(p.read_text()) for p in REPORT_FILES[:2]]
    findings = [f for r in raws for f in r["findings"]]
    table = [{"label": r["label"], "ms_median": r["totals"]["warm_ms_median"], "note": ""} for r in raws]
    bench = {"format": "trackscope-bench", "version": 1, "environment": raws[0]["environment"], "reports": raws,
             "table": table, "findings": findings, "overhead": {"ratio": 1.02, "runs_each": 10}}
    path = save(bench, tmp_path / "bench.json")  # as engine.bench.write_outputs wrote it (v1)
    loaded = load_bench(path)
    assert [r.label for r in loaded.reports] == [r["label"] for r in raws]
    assert [dict(row) for row in loaded.table] == table and loaded.overhead == bench["overhead"]
    assert [f.to_dict() for f in loaded.recorded_findings] == findings
    assert [r.to_dict() for r in load_reports(path)] == [r.to_dict() for r in loaded.reports]
    again = BenchFile.from_dict(_json_round(loaded.to_dict()))
    assert again.to_dict() == loaded.to_dict() and again.to_dict()["version"] == 2
    with pytest.raises(ReportError, match=rf"bench file {path}: reports\[1\]\.runs is missing"):
        del bench["reports"][1]["runs"]
        load_bench(save(bench, path))
    with pytest.raises(ReportError, match="load_report"):
        load_bench(REPORT_FILES[0])


# -- a report made today ------------------------------------------------------------------------
class FakeSampler:
    """A telemetry sampler stand-in: 30 samples from its creation to the snapshot."""

    def __init__(self) -> None:
        self.t0 = time.perf_counter()

    def snapshot(self, since=None):
        t = np.linspace(self.t0, time.perf_counter(), 30)
        return {"t": t, "gpu_busy_pct": np.full(30, np.nan), "cpu_pct": np.linspace(0, 100, 30),
                "cpu_per_core": np.ones((30, 2))}

    def availability(self):
        return {"gpu_busy_pct": "no NVIDIA driver", "cpu_pct": ""}

    def static_info(self):
        return {"name": None}


def _record_today(repeats: int = 3, fail: bool = False) -> Report:
    frames = moving_square_video(num_frames=6, size=24)
    queries = np.array([[0, 5, 10], [1, 6, 11], [2, 7.5, 12.25]], np.float32)
    config = RunConfig(tracker="constvel", device="cpu", points_per_batch=2)
    tracker = ConstantVelocityTracker(fail_on_batch=1 if fail else None, exc=ValueError("kaputt"))
    recorder, sampler = RunRecorder(label="today"), FakeSampler()
    for _ in range(repeats):
        for event in Session(frames, queries, config, tracker=tracker).events():
            recorder.add(event)
    costs = None if fail else count_session_cost(frames, queries, config, tracker=ConstantVelocityTracker())
    return recorder.build(telemetry=sampler, work=costs)


def test_a_report_recorded_today_loads(tmp_path):
    built = _record_today()
    raw = _json_round(report_fields.to_json(built.to_dict()))
    assert raw["version"] == REPORT_VERSION == 2 and "cost" not in raw and "findings" not in raw
    report = Report.from_dict(raw)
    assert report == built
    assert report.label == "today" and report.device_name == "CPU" and not report.is_gpu
    assert report.capability is None and report.short_label() == "today on CPU"
    assert report.typical_run_ms == raw["totals"]["warm_ms_median"] and report.stage_ms == raw["totals"]["stage_ms"]
    assert report.video.geometry.source_width == 24 and not report.video.geometry.is_scaled
    assert report.work and set(report.work) == set(raw["work"])
    assert report.telemetry_series("cpu_per_core").shape == (report.telemetry.t.size, 2)
    assert report.telemetry.t.size > 0
    assert np.isnan(report.telemetry_series("gpu_busy_pct")).all()
    assert report.telemetry.availability["gpu_busy_pct"] == "no NVIDIA driver"
    queries, tracks, visible = report.tracks_arrays()
    assert tracks.shape == (3, 6, 2) and visible.all() and queries[2, 1] == np.float32(7.5)
    path = save(report, tmp_path / "today.json")
    assert load_report(path) == report


def test_a_failed_run_recorded_today_loads():
    report = Report.from_dict(_record_today(repeats=1, fail=True).to_dict())
    run = report.runs[0]
    assert run.status == "failed" and "kaputt" in run.error.message and run.error.kind == "tracker"
    assert report.finished_runs == () and report.typical_run_ms is None and report.tracks is None
    assert report.stage_ms == {}
