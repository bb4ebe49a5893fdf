"""Run reports: built from real session events of a tiny tracker as typed Reports, saved, loaded, validated."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from engine.analysis.accuracy import run_accuracy
from engine.analysis.cost import count_session_cost
from engine.analysis.roofline import report_cost
from engine.core.config import RunConfig
from engine.core.errors import ReportError
from engine.report.files import load_report, load_reports, save
from engine.report.migrate import REPORT_VERSION
from engine.report.recorder import RunRecorder
from engine.report.schema import Report
from engine.run.session import Session
from engine.trackers.base import PreparedVideo, RunContext, Tracker, TrackResult

TINY_CHANNELS = 8


class TinyCorrTracker(Tracker):
    """A tiny correlation tracker: conv features, a global cost volume, soft-argmax. CPU-friendly."""

    name = "tinycorr"
    stages = ("upload", "backbone", "query_features", "cost_volume", "download")

    def __init__(self) -> None:
        gen = torch.Generator().manual_seed(0)
        self.conv1 = torch.randn(TINY_CHANNELS, 3, 3, 3, generator=gen) * 0.3
        self.conv2 = torch.randn(TINY_CHANNELS, TINY_CHANNELS, 3, 3, generator=gen) * 0.3

    def prepare(self, frames: np.ndarray, ctx: RunContext) -> PreparedVideo:
        with ctx.timer.stage("upload"):
            video = torch.from_numpy(frames).to(ctx.device).permute(0, 3, 1, 2).float() / 255.0  # [T, 3, H, W]
        with ctx.timer.stage("backbone"):
            x = F.relu(F.conv2d(video, self.conv1.to(video.device), padding=1))
            feats = F.conv2d(x, self.conv2.to(video.device), padding=1)  # [T, C, H, W]
        return PreparedVideo(frames.shape[0], frames.shape[1], frames.shape[2], {"feats": feats})

    def track(self, prepared: PreparedVideo, queries: np.ndarray, ctx: RunContext) -> TrackResult:
        feats = prepared.data["feats"]
        t_len, _, h, w = feats.shape
        with ctx.timer.stage("query_features"):
            q = torch.as_tensor(queries, device=feats.device)
            qf = feats[q[:, 0].long(), :, q[:, 2].round().long().clamp(0, h - 1),
                       q[:, 1].round().long().clamp(0, w - 1)]  # [N, C]
        with ctx.timer.stage("cost_volume"):
            corr = torch.einsum("nc,tchw->nthw", qf, feats).float().reshape(len(q), t_len, h * w)
            prob = corr.softmax(dim=-1)  # [N, T, H*W]
            ys, xs = torch.meshgrid(torch.arange(h, dtype=torch.float32), torch.arange(w, dtype=torch.float32),
                                    indexing="ij")
            grid = torch.stack([xs.reshape(-1), ys.reshape(-1)], dim=-1).to(feats.device)  # [H*W, 2]
            tracks = prob @ grid  # [N, T, 2]
            visible = prob.amax(dim=-1) > 0.0
        with ctx.timer.stage("download"):
            return TrackResult(tracks.float().cpu().numpy(), visible.cpu().numpy())


def tiny_video(num_frames: int = 6, size: int = 24) -> np.ndarray:
    """Noise texture shifted right one pixel per frame. uint8 [T, H, W, 3]."""
    rng = np.random.default_rng(1)
    base = rng.integers(0, 255, (size, size + num_frames, 3), dtype=np.uint8)
    return np.stack([base[:, num_frames - t: num_frames - t + size] for t in range(num_frames)])


def tiny_queries() -> np.ndarray:
    return np.array([[0, 5, 5], [0, 10, 12], [1, 15, 8], [2, 12, 18]], dtype=np.float32)


def record_runs(precision: str = "fp32", repeats: int = 3, with_cost: bool = True, ground_truth=None,
                reference=None) -> Report:
    """Run the tiny tracker `repeats` times on CPU and build the report (accuracy graded as bench does)."""
    frames, queries = tiny_video(), tiny_queries()
    config = RunConfig(tracker="tinycorr", device="cpu", precision=precision, points_per_batch=3)
    tracker = TinyCorrTracker()
    recorder = RunRecorder()
    for _ in range(repeats):
        for event in Session(frames, queries, config, tracker=tracker).events():
            recorder.add(event)
    work = count_session_cost(frames, queries, config, tracker=tracker) if with_cost else None
    size = recorder.video.geometry.source_size
    accuracy = run_accuracy(recorder.final, size, ground_truth, reference, "fp32" if reference else None)
    return recorder.build(work=work, accuracy=accuracy)


def test_report_round_trip(tmp_path):
    report = record_runs("fp32", repeats=3)
    written = report.to_dict()
    assert written["format"] == "trackscope-report" and written["version"] == REPORT_VERSION == 2
    assert "cost" not in written and "findings" not in written and written["recorded_findings"] == []
    assert report.stages == TinyCorrTracker.stages
    assert len(report.runs) == 3
    assert [len(r.batches) for r in report.runs] == [2, 2, 2]  # 4 points, 3 per batch
    totals = report.totals
    assert totals.num_points == 4 and totals.num_frames == 6
    assert totals.warm_ms_median > 0 and totals.frames_per_s > 0
    assert totals.point_frames_per_s == pytest.approx(4 * totals.frames_per_s)
    assert set(totals.stage_ms) == set(TinyCorrTracker.stages)
    assert report.work["backbone"].flops > 0
    assert report_cost(report).stages["backbone"].bound in ("compute", "memory", "latency")  # derived on load
    coords = np.array(written["tracks"]["tracks"], dtype=float)  # rounded to 0.01 px for replay
    assert coords.shape == (4, 6, 2) and np.allclose(coords, np.round(coords, 2), atol=1e-9)
    path = save(report, tmp_path / "r.json")
    loaded = load_report(path)
    assert loaded == report
    queries, tracks, visible = loaded.tracks_arrays()
    assert queries.shape == (4, 3) and tracks.shape == (4, 6, 2) and visible.shape == (4, 6)
    assert load_reports(path) == [report]


def test_null_track_positions_load_as_nan(good_report):
    data = good_report.to_dict()
    data["tracks"] = {"queries": [[0, 1, 2]], "tracks": [[[1.5, None], [2.0, 3.0]]], "visible": [[1, 0]]}
    queries, tracks, visible = Report.from_dict(data).tracks_arrays()
    assert np.isnan(tracks[0, 0, 1]) and tracks[0, 1, 1] == 3.0 and visible.tolist() == [[True, False]]
    data["tracks"] = {"queries": [[0, 1, 2]], "tracks": [[[1.5]]], "visible": [[1]]}
    with pytest.raises(ReportError, match=r"tracks\.tracks should be \[N, T, 2\]"):
        Report.from_dict(data)


def test_cold_and_warm_runs_are_kept_apart():
    report = record_runs("fp32", repeats=3, with_cost=False)
    colds = [r.cold for r in report.runs]
    # earlier tests in this process may have warmed this config; later runs are never cold
    assert colds[1:] == [False, False]
    assert report.totals.num_warm_runs >= 2
    assert report.totals.warm_ms_median == pytest.approx(float(np.median([r.wall_ms for r in report.warm_runs])))
    assert report.typical_run_ms == report.totals.warm_ms_median
    for run in report.runs:
        assert run.wall_ms == pytest.approx(sum(b.wall_ms for b in run.batches))
        assert run.batches[0].prepared is True


def test_accuracy_against_ground_truth_and_reference():
    frames = tiny_video()
    q = tiny_queries()
    t = np.arange(frames.shape[0], dtype=np.float32)
    gt_tracks = np.stack([q[:, 1:2] + (t[None] - q[:, :1]), np.repeat(q[:, 2:3], len(t), 1)], -1)
    gt = {"tracks": gt_tracks, "visible": np.ones(gt_tracks.shape[:2], bool), "query_t": q[:, 0]}
    report = record_runs("fp32", repeats=1, with_cost=False, ground_truth=gt)
    acc = report.accuracy
    assert acc.vs == "ground truth" and 0.0 <= acc.aj <= 1.0 and 0.0 <= acc.oa <= 1.0
    ref = record_runs("fp32", repeats=1, with_cost=False, reference=report)
    assert ref.accuracy.vs == "fp32"
    assert ref.accuracy.mean_px == pytest.approx(0.0, abs=0.01)  # same tracker, same input
    assert ref.accuracy.visibility_agreement == 1.0


class FakeSampler:
    """A telemetry sampler stand-in: samples before, during and long after the runs."""

    def __init__(self, t: np.ndarray):
        self.t = t

    def snapshot(self, since=None):
        n = len(self.t)
        return {"t": self.t, "gpu_busy_pct": np.full(n, np.nan), "cpu_pct": np.linspace(0, 100, n),
                "cpu_per_core": np.ones((n, 2))}

    def availability(self):
        return {"gpu_busy_pct": "no NVIDIA driver", "cpu_pct": ""}

    def static_info(self):
        return {"name": None}


def test_telemetry_window_is_cut_to_the_runs_and_relative():
    import time

    frames, queries = tiny_video(), tiny_queries()
    recorder = RunRecorder()
    for event in Session(frames, queries, RunConfig(tracker="tinycorr", device="cpu"),
                         tracker=TinyCorrTracker()).events():
        recorder.add(event)
    now = time.perf_counter()
    sampler = FakeSampler(np.array([now - 1000.0, *np.linspace(now - 0.05, now, 5), now + 1000.0]))
    report = recorder.build(telemetry=sampler)
    tel = report.telemetry
    assert tel.t.shape == (5,)  # the far-away samples are cut
    assert all(-1.0 < x < 60.0 for x in tel.t)  # seconds since the first run start
    assert report.to_dict()["telemetry"]["metrics"]["gpu_busy_pct"] == [None] * 5  # NaN -> null
    assert report.telemetry_series("cpu_per_core").shape == (5, 2)
    assert tel.availability["gpu_busy_pct"] == "no NVIDIA driver"
    json.dumps(report.to_dict(), allow_nan=False)


def test_failed_run_is_recorded():
    class Broken(TinyCorrTracker):
        def track(self, prepared, queries, ctx):
            raise ValueError("kaputt")

    recorder = RunRecorder()
    for event in Session(tiny_video(), tiny_queries(), RunConfig(tracker="tinycorr", device="cpu"),
                         tracker=Broken()).events():
        recorder.add(event)
    report = recorder.build()
    run = report.runs[0]
    assert run.status == "failed" and "kaputt" in run.error.message
    assert run.error.kind == "tracker"
    assert report.totals.num_failed_runs == 1 and report.totals.warm_ms_median is None
    assert report.tracks is None


# -- malformed reports ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def good_report():
    return record_runs("fp32", repeats=1, with_cost=False)


@pytest.fixture()
def good_json(good_report):
    return good_report.to_dict()


def _write(tmp_path, text: str):
    path = tmp_path / "bad.json"
    path.write_text(text, encoding="utf-8")
    return path


def test_not_json(tmp_path):
    with pytest.raises(ReportError, match=r"bad\.json is not valid JSON"):
        load_report(_write(tmp_path, "hello, I am a text file"))


def test_truncated_file(tmp_path, good_json):
    text = json.dumps(good_json)
    with pytest.raises(ReportError, match="not valid JSON.*truncated"):
        load_report(_write(tmp_path, text[: len(text) // 2]))


def test_empty_and_missing_file(tmp_path):
    with pytest.raises(ReportError, match="is empty"):
        load_report(_write(tmp_path, ""))
    with pytest.raises(ReportError, match="does not exist"):
        load_report(tmp_path / "nope.json")


def test_wrong_format(tmp_path, good_json):
    with pytest.raises(ReportError, match="format 'something-else'"):
        load_report(_write(tmp_path, json.dumps({**good_json, "format": "something-else"})))
    with pytest.raises(ReportError, match="not a trackscope report"):
        load_report(_write(tmp_path, "[1, 2, 3]"))


def test_future_version(tmp_path, good_json):
    with pytest.raises(ReportError, match="newer trackscope") as info:
        load_report(_write(tmp_path, json.dumps({**good_json, "version": REPORT_VERSION + 1})))
    assert "bad.json" in str(info.value) and info.value.suggestion


@pytest.mark.parametrize("key", ["runs", "totals", "environment", "config", "stages"])
def test_missing_key(tmp_path, good_json, key):
    broken = {k: v for k, v in good_json.items() if k != key}
    with pytest.raises(ReportError, match=f"{key} is missing"):
        load_report(_write(tmp_path, json.dumps(broken)))


def test_wrong_type_and_optional_defaults(good_json):
    with pytest.raises(ReportError, match="runs should be a list"):
        Report.from_dict({**good_json, "runs": {}})
    minimal = {k: good_json[k] for k in ("format", "version", "environment", "config", "stages", "runs",
                                         "totals")}
    filled = Report.from_dict(json.loads(json.dumps(minimal)))
    assert filled.recorded_findings == () and filled.work == {} and filled.tracks is None


def test_bench_file(tmp_path, good_json):
    bench = {"format": "trackscope-bench", "version": 2, "environment": {}, "reports": [good_json, good_json]}
    path = _write(tmp_path, json.dumps(bench))
    assert len(load_reports(path)) == 2
    with pytest.raises(ReportError, match="bench file"):
        load_report(path)


def test_report_opens_without_the_video_or_machine(tmp_path, good_json):
    """Nothing in a report needs files or the machine it was made on: a moved report still loads."""
    other = json.loads(json.dumps(good_json))
    other["environment"]["hostname"] = "elsewhere"
    other["video"]["path"] = "/nonexistent/on/this/machine.mp4"
    save(other, tmp_path / "moved.json")
    assert load_report(tmp_path / "moved.json").video.path.endswith("machine.mp4")


def test_a_recorded_label_names_only_the_settings_the_tracker_uses():
    from engine.core.config import RunConfig
    from engine.report.recorder import RunRecorder
    from engine.run.session import Session
    from tests.helpers import moving_square_video

    queries = np.array([[0, 8.0, 12.0]], np.float32)
    recorder = RunRecorder()
    for event in Session(moving_square_video(4, 32), queries, RunConfig(tracker="lk", points_per_batch=64)).events():
        recorder.add(event)
    assert recorder.build().label == "lk"  # before: 'lk fp32 p64 f16', settings LK never reads
    assert RunConfig(precision="bf16", points_per_batch=64).label() == "corrtrack bf16 p64 f16"
