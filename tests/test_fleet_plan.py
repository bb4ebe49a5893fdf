"""The fleet without a cluster: --gpus, slot planning against node tables, the index reader, NVML by UUID,
report sameness, plugin code shipping, and `trackscope fleet` without Ray installed."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pynvml
import pytest

from engine.cli import main
from engine.core.errors import ReportError, UserError
from engine.fleet.index import FLEET_FORMAT, FleetEntry, FleetIndex, load_index, report_path
from engine.fleet.plan import GpuRequest, check_fleet_device, configurations, parse_gpus, plugin_code_paths
from engine.fleet.runner import plan_slots
from engine.fleet.sameness import differences
from engine.telemetry.nvml import NvmlReader, normalise_bus_id, normalise_uuid
from tests.test_telemetry import FakeNvml

REPO = Path(__file__).resolve().parents[1]


def test_parse_gpus():
    assert parse_gpus(None) == [] and parse_gpus("  ") == []
    assert parse_gpus("T4:1, A100:2,T4") == [GpuRequest("T4", 2), GpuRequest("A100", 2)]
    bad_cases = (("T4:x", "not a whole number"), ("T4:0", "at least 1"), ("T 4:1", r"TYPE\[:COUNT\]"), (",", "no GPU"))
    for bad, words in bad_cases:
        with pytest.raises(UserError, match=words):
            parse_gpus(bad)


def test_configurations_follow_bench_order_and_device_is_checked():
    configs = configurations("lk", "auto", ["fp32", "bf16"], [2, 4], [16])
    assert [c.label() for c in configs] == ["lk fp32 p2 f16", "lk bf16 p2 f16", "lk fp32 p4 f16", "lk bf16 p4 f16"]
    assert check_fleet_device("AUTO") == "auto" and check_fleet_device("cuda") == "cuda"
    with pytest.raises(UserError, match="only the GPU Ray gave it"):
        check_fleet_device("cuda:1")


def _node(node_id: str, cpus: float, gpus: int = 0, kind: str | None = None, alive: bool = True) -> dict:
    resources = {"CPU": cpus, "memory": 1e9}
    if gpus:
        resources["GPU"] = float(gpus)
    if kind:
        resources[f"accelerator_type:{kind}"] = 1.0
    return {"NodeID": node_id, "Alive": alive, "Resources": resources}


def test_plan_slots_by_type_every_gpu_and_cpu_only():
    nodes = [_node("head", 4), _node("a", 32, 2, "A100"), _node("t", 8, 1, "T4"), _node("t2", 4, 1, "T4")]
    slots = plan_slots([GpuRequest("A100", 2), GpuRequest("T4", 1)], nodes)
    assert [s.name for s in slots] == ["00-A100", "01-A100", "02-T4"]
    assert [s.accelerator_type for s in slots] == ["A100", "A100", "T4"] and all(s.num_gpus == 1 for s in slots)
    assert slots[0].num_cpus == 16 and slots[2].num_cpus == 4  # the node's CPUs shared among its GPUs, fewest wins
    every = plan_slots([], nodes)
    assert len(every) == 4 and all(s.accelerator_type is None and s.num_gpus == 1 for s in every)
    cpu = plan_slots([], [_node("head", 2)])
    assert [(s.name, s.num_gpus, s.num_cpus) for s in cpu] == [("00-cpu", 0, 2.0)]


def test_plan_slots_refuses_a_missing_type_and_too_many():
    nodes = [_node("head", 1), _node("t", 1, 1, "T4")]
    with pytest.raises(UserError, match=r"no node of the cluster has GPU type 'H100' \(it has T4 x1\)"):
        plan_slots([GpuRequest("H100", 1)], nodes)
    with pytest.raises(UserError, match="has 1 GPU"):
        plan_slots([GpuRequest("T4", 2)], nodes)


def _index_dict() -> dict:
    entry = FleetEntry(slot="00-T4", config="lk fp32 p2 f16", precision="fp32", points_per_batch=2,
                       frames_per_batch=16, status="ok", gpu="Tesla T4", uuid="GPU-1", node="n1",
                       accelerator_type="T4", device="cuda:0", report="00-T4/lk_fp32_p2_f16.json", bench_ms=400.0,
                       round_trip_ms=410.0, overhead_ms=10.0)
    lost = FleetEntry(slot="00-T4", config="lk bf16 p2 f16", precision="bf16", points_per_batch=2,
                      frames_per_batch=16, status="lost", message="its actor died")
    return FleetIndex(gpus=(), entries=(entry, lost), complete=True, tracker="lk", configurations=2).to_dict()


def test_index_round_trip_and_report_paths(tmp_path):
    (tmp_path / "index.json").write_text(json.dumps(_index_dict()))
    index = load_index(tmp_path)
    assert index.complete and [e.status for e in index.entries] == ["ok", "lost"]
    assert index.to_dict() == _index_dict()
    assert index.overhead()["median_ms"] == 10.0 and index.overhead()["configurations"] == 1
    assert json.loads((tmp_path / "index.json").read_text())["overhead"]["median_ms"] == 10.0
    ok = index.find(config="lk fp32 p2 f16", gpu="GPU-1")
    assert len(ok) == 1 and report_path(tmp_path / "index.json", ok[0]) == tmp_path / "00-T4/lk_fp32_p2_f16.json"
    assert report_path(tmp_path / "index.json", index.entries[1]) is None


@pytest.mark.parametrize("change, words", [
    (lambda d: d.update(format="trackscope-bench"), "not a fleet index"),
    (lambda d: d.update(version=7), "version 7"),
    (lambda d: d["entries"][0].update(status="fine"), r"entries\[0\]\.status"),
    (lambda d: d["entries"][0].update(report="../elsewhere.json"), "inside the fleet folder"),
    (lambda d: d["entries"][0].pop("slot"), r"entries\[0\]\.slot is missing"),
    (lambda d: d.update(entries="none"), "entries"),
])
def test_index_malformed_is_a_report_error_naming_the_file(tmp_path, change, words):
    data = _index_dict()
    change(data)
    path = tmp_path / "index.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ReportError, match=words) as info:
        load_index(path)
    assert str(path) in str(info.value)
    assert FLEET_FORMAT in json.dumps(_index_dict())


class TwoGpuNvml(FakeNvml):
    """Two GPUs with their own UUIDs and bus ids; lookups by UUID / bus id optional (old pynvml: a scan)."""

    UUIDS = ("GPU-aaaa-0000", "GPU-bbbb-1111")
    BUS = ("00000000:3B:00.0", "00000000:86:00.0")

    def __init__(self, direct: bool = True, **kw):
        super().__init__(count=2, missing=() if direct else {"nvmlDeviceGetHandleByUUID",
                                                              "nvmlDeviceGetHandleByPciBusId"}, **kw)

    def nvmlDeviceGetUUID(self, handle):
        self._enter("nvmlDeviceGetUUID")
        return self.UUIDS[int(handle[-1])]

    def nvmlDeviceGetPciInfo(self, handle):
        self._enter("nvmlDeviceGetPciInfo")
        from types import SimpleNamespace

        return SimpleNamespace(busId=self.BUS[int(handle[-1])].encode())

    def nvmlDeviceGetHandleByUUID(self, uuid):
        self._enter("nvmlDeviceGetHandleByUUID")
        if uuid not in self.UUIDS:
            raise pynvml.NVMLError_NotFound()
        return f"handle{self.UUIDS.index(uuid)}"

    def nvmlDeviceGetHandleByPciBusId(self, bus):
        self._enter("nvmlDeviceGetHandleByPciBusId")
        if bus not in self.BUS:
            raise pynvml.NVMLError_NotFound()
        return f"handle{self.BUS.index(bus)}"


@pytest.mark.parametrize("direct", [True, False])
def test_nvml_opens_the_gpu_by_uuid_not_by_index(direct):
    fake = TwoGpuNvml(direct=direct)
    reader = NvmlReader(fake, device_index=0, device_uuid="BBBB-1111")  # as torch gives it: no prefix
    reader.open()
    assert reader.handle == "handle1" and reader.matched_by == "uuid" and reader.static["matched_by"] == "uuid"
    assert reader.static["uuid"] == "GPU-bbbb-1111"
    assert (fake.calls["nvmlDeviceGetHandleByUUID"] > 0) == direct


@pytest.mark.parametrize("direct", [True, False])
def test_nvml_opens_the_gpu_by_bus_id(direct):
    reader = NvmlReader(TwoGpuNvml(direct=direct), bus_id="0000:86:00.0" if not direct else "00000000:86:00.0")
    reader.open()
    assert reader.handle == "handle1" and reader.matched_by == "bus id"


def test_nvml_unknown_uuid_falls_back_to_the_index_and_says_so(caplog):
    """A UUID NVML does not list (a MIG instance's, an old driver): NVML's index as before, with the reason kept."""
    reader = NvmlReader(TwoGpuNvml(), device_index=1, device_uuid="GPU-cccc")
    reader.open()
    assert reader.available and reader.handle == "handle1" and reader.matched_by == "index"
    assert reader.static["matched_by"] == "index (no GPU with UUID GPU-cccc among the 2 NVML sees)"
    assert "no GPU with UUID GPU-cccc" in caplog.text
    lost = NvmlReader(TwoGpuNvml(), device_index=5, device_uuid="GPU-cccc")
    lost.open()
    assert set(lost.reasons.values()) == {"no GPU with UUID GPU-cccc among the 2 NVML sees"}


def test_sampler_passes_the_uuid_through():
    from engine.telemetry.sampler import TelemetrySampler

    sampler = TelemetrySampler(nvml=TwoGpuNvml(), device_uuid="GPU-aaaa-0000", capacity=4)
    sampler.sample_once(1.0)
    assert sampler._reader.handle == "handle0"
    sampler.close()


def test_uuid_and_bus_id_spellings():
    assert normalise_uuid("58E3-AA") == "GPU-58e3-aa" and normalise_uuid(b"MIG-Ab") == "MIG-ab"
    assert normalise_bus_id("00000000:3B:00.0") == normalise_bus_id("0000:3b:00.0") == "0000:3b:00.0"


def test_differences_ignore_times_and_samples_only():
    a = {"created": "x", "runs": [{"wall_ms": 1.0, "status": "finished", "stage_ms": {"a": 1}}],
         "telemetry": {"t": [1]}, "totals": {"frames_per_s": 3.0, "num_runs": 2}, "accuracy": {"mean_px": 0.0}}
    b = {"created": "y", "runs": [{"wall_ms": 9.0, "status": "finished", "stage_ms": {"a": 5}}],
         "telemetry": {"t": [1, 2]}, "totals": {"frames_per_s": 1.0, "num_runs": 2}, "accuracy": {"mean_px": 0.0}}
    assert differences(a, b) == []
    b["runs"][0]["status"] = "failed"
    b["accuracy"]["mean_px"] = 0.5
    b["extra"] = 1
    assert differences(a, b) == ["runs[0].status: finished != failed", "accuracy.mean_px: 0.0 != 0.5",
                                 "extra: only in the second"]


def test_plugin_code_paths():
    assert plugin_code_paths("corrtrack") == [] and plugin_code_paths("some-entry-point") == []
    assert plugin_code_paths("engine.trackers.lk:LKTracker") == []
    assert plugin_code_paths("numpy:array") == []  # installed: on every node already
    assert plugin_code_paths("tests.plugins.field.clean:make") == [REPO / "tests"]
    with pytest.raises(UserError, match="no module 'no_such_module_here'"):
        plugin_code_paths("no_such_module_here:make")


def test_fleet_without_ray_says_how_to_install_it(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    assert main(["fleet", "--tracker", "lk"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and 'pip install "trackscope[fleet]"' in err[0] and "needs Ray" in err[0]


def _tiny_input():
    from engine.workflows.bench import BenchInput
    from tests.helpers import moving_square_video

    frames = moving_square_video(8, 32, 1)
    frames.setflags(write=False)  # as Ray's object store hands it over
    queries = np.array([[0, 6, 10], [0, 9, 13]], np.float32)
    return BenchInput(frames, queries, {"name": "square", "num_frames": 8, "width": 32, "height": 32}, None, "test")


@pytest.mark.slow
def test_worker_runs_bench_and_ships_the_deep_trace_to_the_writer(tmp_path):
    """The actor's class without Ray: Bench.run_config per call, the deep capture's trace carried as bytes and
    written beside the report by the fleet writer (the driver may be on another machine)."""
    from engine.fleet.actor import FleetWorker
    from engine.fleet.writer import FleetWriter

    options = {"timing": True, "telemetry": False, "cost": False, "deep": True, "direct": False}
    worker = FleetWorker(_tiny_input(), "lk", "cpu", warmup=0, repeat=1, options=options)
    try:
        facts = worker.describe()
        assert facts["error"] == "" and facts["device"] == "cpu" and facts["node_id"] is None
        assert facts["torch_threads"] >= 1
        result = worker.run("fp32", 2, 16)
        trace_dir = worker.trace_dir
    finally:
        worker.close()
    assert not trace_dir.exists()  # the actor's own folder is gone; the trace travelled in the result
    name = result["report"]["capture"]["trace_file"]
    assert name and set(result["traces"]) == {name} and result["bench_ms"] > 0
    writer = FleetWriter(tmp_path, {"tracker": "lk"}, 1)
    writer.start()
    rel = writer.result("00-cpu", "cpu", result["row"], result["report"], result["traces"])
    assert rel == "00-cpu/lk_fp32_p2_f16.json" and (tmp_path / rel).is_file()
    assert (tmp_path / "00-cpu" / name).read_bytes() == result["traces"][name]
    assert json.loads((tmp_path / "00-cpu" / "bench.json").read_text())["table"][0]["report_file"] == Path(rel).name


def test_worker_with_a_tracker_that_does_not_load_says_why():
    from engine.fleet.actor import FleetWorker

    worker = FleetWorker(_tiny_input(), "no_such_plugin_module:make", "cpu", warmup=0, repeat=1)
    assert "no_such_plugin_module" in worker.describe()["error"]
    assert "no_such_plugin_module" in worker.run("fp32", 2, 16)["error"]
    worker.close()


def test_the_engine_and_the_fleet_modules_import_without_ray():
    """Ray is imported inside the fleet's functions only: the engine, its facade and every verb load without it."""
    import subprocess

    code = ("import sys\n"
            "import engine.api, engine.cli.entry, engine.cli.fleet, engine.fleet.runner, engine.fleet.actor\n"
            "from engine.cli.entry import build_parser\n"
            "build_parser()\n"
            "assert 'ray' not in sys.modules, 'ray imported'\n")
    res = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]


def test_an_address_nobody_answers_is_refused_at_once():
    import socket

    from engine.fleet.runner import check_reachable

    with socket.socket() as s:  # a port that was free a moment ago: nothing listens there now
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for address in (f"127.0.0.1:{port}", f"ray://127.0.0.1:{port}"):
        with pytest.raises(UserError, match=f"cannot reach Ray at {address}"):
            check_reachable(address, timeout_s=2)
    with pytest.raises(UserError, match="not HOST:PORT"):
        check_reachable("somewhere")
    check_reachable(None)
    check_reachable("auto")


def test_worker_refuses_a_configuration_that_cannot_fit_on_its_gpu(monkeypatch):
    """The bench CLI's memory check, made per configuration on the actor's own GPU: a refusal is that entry's error."""
    from engine.fleet.actor import FleetWorker
    from engine.run import device_memory

    def refuse(*_args, points_per_batch, **_kw):
        if points_per_batch > 2:
            raise UserError(f"{points_per_batch} points per batch do not fit", "use --points-per-batch 2")

    monkeypatch.setattr(device_memory, "check_run_device_memory", refuse)
    options = {"timing": True, "telemetry": False, "cost": False, "deep": False, "direct": False}
    worker = FleetWorker(_tiny_input(), "lk", "cpu", warmup=0, repeat=1, options=options)
    try:
        assert worker.run("fp32", 4, 16)["error"] == "4 points per batch do not fit (use --points-per-batch 2)"
        assert worker.run("fp32", 2, 16)["report"]["label"] == "lk fp32 p2 f16"
    finally:
        worker.close()
