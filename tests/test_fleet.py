"""`trackscope fleet` on a real local Ray cluster with simulated GPU nodes of two types (no GPU: the actors run on
the CPU, placed by Ray on the node with the asked accelerator-type resource).

One module-scoped cluster: a head (no GPU) and two worker nodes, ``num_gpus=1`` with ``accelerator_type:T4`` and
``accelerator_type:A100``; GCS health checks fast, so a node that dies is noticed within a second or two.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402

from engine.cli import main  # noqa: E402
from engine.core.errors import UserError  # noqa: E402
from engine.fleet.actor import BENCH_OPTIONS  # noqa: E402
from engine.fleet.index import load_index, report_path  # noqa: E402
from engine.fleet.plan import GpuRequest, configurations  # noqa: E402
from engine.fleet.runner import FleetRun, FleetSpec  # noqa: E402
from engine.fleet.sameness import differences  # noqa: E402
from engine.fleet.writer import FleetWriter  # noqa: E402
from engine.report.files import load_report  # noqa: E402
from engine.workflows.bench import BenchInput  # noqa: E402
from tests.helpers import moving_square_video  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
FRAMES, SIZE = 8, 32
#: a worker node declares the threads torch uses here: its actor then gets them (Ray sets OMP_NUM_THREADS to the
#: actor's CPUs), as a real node's GPU would, so its reports match a bench run in this process
NODE_ARGS = {"num_cpus": torch.get_num_threads(), "object_store_memory": 80 * 2**20}
FAST_HEALTH = {"health_check_initial_delay_ms": 0, "health_check_period_ms": 300, "health_check_failure_threshold": 2,
               "health_check_timeout_ms": 300}
QUICK = dict(zip(BENCH_OPTIONS, (True, True, False, False, False)))  # timing, telemetry; no cost, deep, direct


@pytest.fixture(scope="module")
def cluster():
    cluster = Cluster(initialize_head=True, head_node_args={**NODE_ARGS, "num_cpus": 1, "include_dashboard": False,
                                                            "_system_config": FAST_HEALTH})
    nodes = {kind: cluster.add_node(num_gpus=1, resources={f"accelerator_type:{kind}": 1}, **NODE_ARGS)
             for kind in ("T4", "A100")}
    ray.init(address=cluster.address, logging_level="warning", log_to_driver=False)
    cluster.nodes_by_type = nodes
    try:
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()


@pytest.fixture(scope="module")
def data() -> BenchInput:
    frames = moving_square_video(FRAMES, SIZE, 1)
    queries = np.array([[0, 6, 10], [0, 9, 13], [0, 7, 12], [0, 10, 11]], np.float32)
    return BenchInput(frames, queries, {"name": "square", "num_frames": FRAMES, "width": SIZE, "height": SIZE},
                      None, "test")


@pytest.fixture(scope="module")
def video(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("fleet_video") / "square.avi"
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), 10, (SIZE, SIZE))
    for frame in moving_square_video(FRAMES, SIZE, 1):
        writer.write(cv2.cvtColor(frame, cv2.COLOR_RGB2BGR))
    writer.release()
    return path


def _spec(data, tracker, precisions, points, gpus, **kw) -> FleetSpec:
    return FleetSpec(data=data, tracker=tracker, device="auto",
                     configs=configurations(tracker, "auto", precisions, points, [16]), warmup=0, repeat=1,
                     options=kw.pop("options", QUICK), gpus=gpus, **kw)


class Recorder:
    """The events of a run, and the index on disk as each entry arrived (to see that results stream)."""

    def __init__(self, out: Path | None = None, when_entry=None):
        self.events: list[tuple[str, object]] = []
        self.on_disk: list[int] = []
        self.out = out
        self.when_entry = when_entry

    def __call__(self, kind, payload):
        self.events.append((kind, payload))
        if kind == "entry":
            if self.out is not None:
                self.on_disk.append(len(load_index(self.out).entries))
            if self.when_entry is not None:
                self.when_entry(payload[0])


def _node_id(cluster, kind: str) -> str:
    return cluster.nodes_by_type[kind].node_id


@pytest.mark.slow
def test_lk_and_corrtrack_land_on_the_asked_types_and_stream(cluster, data, tmp_path):
    for tracker, precisions, points in (("lk", ["fp32", "bf16"], [2, 4]), ("corrtrack", ["fp32"], [4])):
        out = tmp_path / tracker
        writer = FleetWriter(out, {"tracker": tracker}, len(precisions) * len(points))
        writer.start()
        record = Recorder(out)
        result = FleetRun(ray, _spec(data, tracker, precisions, points, [GpuRequest("T4", 1), GpuRequest("A100", 1)]),
                          record, writer).run()
        per_slot = len(precisions) * len(points)
        assert len(result.entries) == 2 * per_slot and all(e.status == "ok" for e in result.entries)
        assert record.on_disk == list(range(1, 2 * per_slot + 1))  # the index grew with every result
        assert [k for k, _ in record.events].count("placed") == 2
        index = load_index(out)
        assert index.complete and len(index.entries) == 2 * per_slot
        assert index.overhead()["configurations"] == 2 * per_slot  # stated in the index, every entry counted
        for gpu in index.gpus:  # placed on the node of the asked type, run on the CPU (no CUDA there)
            assert gpu.node == _node_id(cluster, gpu.accelerator_type)
            assert gpu.node_accelerator_type == gpu.accelerator_type
            assert gpu.device == "cpu" and gpu.gpu == "CPU" and gpu.gpu_ids == ("0",)
        for entry in index.entries:
            assert entry.node == _node_id(cluster, entry.accelerator_type) and entry.device == "cpu"
            assert entry.bench_ms > 0 and entry.round_trip_ms >= entry.bench_ms
            assert entry.overhead_ms == pytest.approx(entry.round_trip_ms - entry.bench_ms)
            report = load_report(report_path(out / "index.json", entry))
            assert report.label == entry.config and report.config.precision == entry.precision
        slots = {e.slot for e in index.entries}
        for slot in slots:  # each GPU's folder is a bench folder: its bench.json lists the slot's reports
            bench = json.loads((out / slot / "bench.json").read_text())
            assert bench["format"] == "trackscope-bench" and bench["complete"] is True
            assert [r["label"] for r in bench["reports"]] == [c.label() for c in configurations(
                tracker, "auto", precisions, points, [16])]


@pytest.mark.slow
def test_fleet_reports_are_bench_reports(cluster, video, tmp_path, capsys):
    """`trackscope fleet` through the CLI on the cluster vs `trackscope bench` here: the same reports in content."""
    common = [str(video), "--tracker", "lk", "--precisions", "fp32,bf16", "--points-per-batch", "2", "--points", "3",
              "--warmup", "1", "--repeat", "2"]
    # bench in a process of its own, as a user runs it: this one may have run LK already (warm, so no cold run)
    bench_run = subprocess.run([sys.executable, "-m", "engine.cli", "bench", *common, "--out", str(tmp_path / "bench")],
                               cwd=REPO, capture_output=True, text=True, timeout=300)
    assert bench_run.returncode == 0, bench_run.stderr[-2000:]
    assert main(["fleet", *common, "--gpus", "A100:1", "--out", str(tmp_path / "fleet")]) == 0
    captured = capsys.readouterr()
    assert "fleet overhead per configuration" in captured.err and "00-A100 CPU: lk bf16 p2 f16: ok" in captured.err
    index = load_index(tmp_path / "fleet")
    assert [e.config for e in index.entries] == ["lk fp32 p2 f16", "lk bf16 p2 f16"]
    for entry in index.entries:
        fleet = json.loads(report_path(tmp_path / "fleet" / "index.json", entry).read_text())
        bench = json.loads((tmp_path / "bench" / Path(entry.report).name).read_text())
        assert differences(fleet, bench) == []
        assert fleet["runs"] and fleet["accuracy"] == bench["accuracy"]


def test_a_type_no_node_has_is_refused_at_once(cluster, data):
    with pytest.raises(UserError, match=r"no node of the cluster has GPU type 'H100' \(it has .*T4 x1"):
        FleetRun(ray, _spec(data, "lk", ["fp32"], [2], [GpuRequest("H100", 1)])).run()
    with pytest.raises(UserError, match="the cluster has 1 GPU"):
        FleetRun(ray, _spec(data, "lk", ["fp32"], [2], [GpuRequest("T4", 2)])).run()


@ray.remote(num_gpus=1, num_cpus=0)
class _Hog:
    def ready(self) -> bool:
        return True


def test_a_gpu_that_stays_busy_is_lost_after_the_placement_timeout(cluster, data, tmp_path):
    hog = _Hog.options(resources={"accelerator_type:T4": 0.001}).remote()
    ray.get(hog.ready.remote())  # the T4 node's one GPU is taken
    try:
        writer = FleetWriter(tmp_path, {"tracker": "lk"}, 2)
        result = FleetRun(ray, _spec(data, "lk", ["fp32"], [2, 4], [GpuRequest("T4", 1)], placement_timeout_s=2.0),
                          None, writer).run()
    finally:
        ray.kill(hog)
    assert [(e.config, e.status) for e in result.entries] == [("lk fp32 p2 f16", "lost"), ("lk fp32 p4 f16", "lost")]
    assert "did not place it within 2 s" in result.entries[0].message
    assert load_index(tmp_path).gpus[0].status == "lost"


@pytest.mark.slow
def test_a_node_that_dies_mid_run_has_its_configurations_reported_lost(cluster, data, tmp_path):
    doomed = cluster.add_node(num_gpus=1, resources={"accelerator_type:V100": 1}, **NODE_ARGS)
    killed = []

    def kill_after_first(entry):
        if entry.accelerator_type == "V100" and not killed:
            killed.append(entry.config)
            # the machine goes away: its raylet and everything on it, the actor's worker process included (a
            # worker outliving its raylet by a moment would still answer calls that come straight to it)
            cluster.remove_node(doomed, allow_graceful=False)
            pid = next(p.facts["pid"] for k, p in record.events if k == "placed" and p.accelerator_type == "V100")
            os.kill(pid, signal.SIGKILL)

    record = Recorder(when_entry=kill_after_first)
    writer = FleetWriter(tmp_path, {"tracker": "lk"}, 3)
    result = FleetRun(ray, _spec(data, "lk", ["fp32"], [1, 2, 3], [GpuRequest("V100", 1), GpuRequest("T4", 1)]),
                      record, writer).run()
    status = {(e.accelerator_type, e.config): e.status for e in result.entries}
    assert len(status) == 6  # none silently missing
    assert status[("V100", "lk fp32 p1 f16")] == "ok" and killed == ["lk fp32 p1 f16"]
    assert status[("V100", "lk fp32 p2 f16")] == status[("V100", "lk fp32 p3 f16")] == "lost"
    assert all(status[("T4", f"lk fp32 p{n} f16")] == "ok" for n in (1, 2, 3))
    lost = [e for e in result.entries if e.status == "lost"]
    assert all("died" in e.message and e.report is None for e in lost)
    index = load_index(tmp_path)
    assert index.complete and {g.accelerator_type: g.status for g in index.gpus} == {"V100": "lost", "T4": "ok"}


PLUGIN = textwrap.dedent('''
    import torch

    def make():
        def track(frames, queries):  # every query stays where it was asked, visible
            t = frames.shape[0]
            return queries[:, None, 1:].expand(-1, t, -1).clone(), torch.ones(len(queries), t, dtype=torch.bool)
        return track
''')


@pytest.mark.slow
def test_cli_ships_a_local_plugin_to_the_workers(cluster, video, tmp_path, monkeypatch, capsys):
    """A plugin only the driver can import (a file in a folder no worker has on its path) travels through the
    job's runtime_env; the CLI connects with --address (and disconnects after)."""
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "fleet_only_here.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(plugins))
    ray.shutdown()  # the CLI makes its own connection, with the plugin in the job's runtime_env
    try:
        code = main(["fleet", str(video), "--tracker", "fleet_only_here:make", "--precisions", "fp32",
                     "--points-per-batch", "4", "--points", "2", "--warmup", "0", "--repeat", "1", "--no-cost",
                     "--address", cluster.address, "--gpus", "T4:1", "--out", str(tmp_path / "fleet")])
    finally:
        if not ray.is_initialized():
            ray.init(address=cluster.address, logging_level="warning", log_to_driver=False)
    assert code == 0, capsys.readouterr().err
    entry = load_index(tmp_path / "fleet").entries[0]
    assert entry.status == "ok" and entry.accelerator_type == "T4"
    report = load_report(report_path(tmp_path / "fleet" / "index.json", entry))
    assert report.label == "fleet_only_here:make fp32 p4 f16" and report.runs[0].status == "finished"
