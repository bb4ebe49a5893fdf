"""Telemetry sampler with NVML faked at its boundary: supported, unsupported, GPU lost, no driver."""

from __future__ import annotations

import math
import threading
import time
from collections import Counter, namedtuple
from types import SimpleNamespace

import numpy as np
import pynvml
import pytest

from engine.telemetry import nvml as nvml_reader
from engine.telemetry.sampler import METRICS, THREAD_NAME, TelemetrySampler, decode_clock_reasons

H200_PEAK_GBPS = 4800.0
KIB = 1024.0
MIB = 1024.0 * 1024.0


class FakeSample:
    """Stands for an nvmlGpmSample_t: remembers when it was filled."""

    def __init__(self, ident: int):
        self.ident = ident
        self.filled_at: int | None = None


class FakeMetricsGet:
    """Stands for c_nvmlGpmMetricsGet_t."""

    def __init__(self):
        self.version = 0
        self.numMetrics = 0
        self.sample1 = self.sample2 = None
        self.metrics = [SimpleNamespace(metricId=0, nvmlReturn=0, value=0.0) for _ in range(pynvml.NVML_GPM_METRIC_MAX)]


class FakeNvml:
    """The pynvml functions the sampler calls, raising pynvml's own NVMLError subclasses."""

    c_nvmlGpmMetricsGet_t = FakeMetricsGet

    # getters that return a fixed value whatever their arguments (mW, C, bitmasks as pynvml gives them)
    FIXED = {
        "nvmlDeviceGetUUID": "GPU-fake-0",
        "nvmlDeviceGetCudaComputeCapability": (9, 0),
        "nvmlDeviceGetMemoryBusWidth": 6144,
        "nvmlDeviceGetNumGpuCores": 132 * 128,
        "nvmlDeviceGetEnforcedPowerLimit": 700_000,
        "nvmlSystemGetCudaDriverVersion": 12040,
        "nvmlSystemGetDriverVersion": "550.54.15",
        "nvmlDeviceGetMaxPcieLinkGeneration": 5,
        "nvmlDeviceGetMaxPcieLinkWidth": 16,
        "nvmlDeviceGetPowerUsage": 650_000,
        "nvmlDeviceGetTemperature": 55,
        "nvmlDeviceGetCurrPcieLinkGeneration": 4,
        "nvmlDeviceGetCurrPcieLinkWidth": 16,
        "nvmlDeviceGetCurrentClocksEventReasons": 0x4,
        "nvmlDeviceGetCurrentClocksThrottleReasons": 0x24,
    }

    def __init__(
        self,
        name="NVIDIA H200",
        gpm=True,
        unsupported=(),
        init_error=None,
        count=1,
        missing=(),
        gpm_unsupported_metrics=(),
    ):
        self.name = name
        self.gpm = gpm
        self.unsupported = set(unsupported)
        self.init_error = init_error
        self.count = count
        self.missing = set(missing)
        self.calls: Counter[str] = Counter()
        self.lost = False
        self.gpu_util = 0
        self.gpm_unsupported_metrics = set(gpm_unsupported_metrics)
        self.gpm_values = {
            pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL: 89.0,
            pynvml.NVML_GPM_METRIC_SM_UTIL: 60.0,
            pynvml.NVML_GPM_METRIC_SM_OCCUPANCY: 30.0,
            pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL: 94.0,
            pynvml.NVML_GPM_METRIC_HMMA_TENSOR_UTIL: 90.0,
            pynvml.NVML_GPM_METRIC_PCIE_RX_PER_SEC: 100.0,
            pynvml.NVML_GPM_METRIC_PCIE_TX_PER_SEC: 200.0,
        }
        self.gpm_fills = 0
        self.gpm_pairs: list[tuple[int, int]] = []  # (fill index of sample1, of sample2) per metrics call
        self.samples: list[FakeSample] = []

    def __getattr__(self, name):
        if name in FakeNvml.FIXED and name not in self.missing:

            def getter(*_args):
                self._enter(name)
                return FakeNvml.FIXED[name]

            return getter
        if name.startswith(("NVML_", "NVMLError")):  # constants and error classes, as pynvml has them
            return getattr(pynvml, name)
        raise AttributeError(name)

    def __getattribute__(self, name):
        if name.startswith("nvml") and name in object.__getattribute__(self, "missing"):
            raise AttributeError(name)
        return object.__getattribute__(self, name)

    def _enter(self, fn: str) -> None:
        self.calls[fn] += 1
        if self.lost:
            raise pynvml.NVMLError_GpuIsLost()
        if fn in self.unsupported:
            raise pynvml.NVMLError_NotSupported()

    def nvmlInit(self):
        self.calls["nvmlInit"] += 1
        if self.init_error is not None:
            raise self.init_error

    def nvmlShutdown(self):
        self.calls["nvmlShutdown"] += 1

    def nvmlDeviceGetCount(self):
        self._enter("nvmlDeviceGetCount")
        return self.count

    def nvmlDeviceGetHandleByIndex(self, index):
        self._enter("nvmlDeviceGetHandleByIndex")
        return f"handle{index}"

    def nvmlDeviceGetName(self, h):
        self._enter("nvmlDeviceGetName")
        return self.name

    def nvmlDeviceGetMemoryInfo(self, h):
        self._enter("nvmlDeviceGetMemoryInfo")
        return SimpleNamespace(used=2 * 1024**3, total=141 * 1000**3, free=0)

    def nvmlDeviceGetMaxClockInfo(self, h, clock):
        self._enter("nvmlDeviceGetMaxClockInfo")
        return 1980 if clock == pynvml.NVML_CLOCK_SM else 3201

    def nvmlDeviceGetUtilizationRates(self, h):
        self._enter("nvmlDeviceGetUtilizationRates")
        self.gpu_util += 1
        return SimpleNamespace(gpu=self.gpu_util, memory=40)

    def nvmlDeviceGetClockInfo(self, h, clock):
        self._enter("nvmlDeviceGetClockInfo")
        return 1755 if clock == pynvml.NVML_CLOCK_SM else 3201

    def nvmlDeviceGetPcieThroughput(self, h, counter):
        self._enter("nvmlDeviceGetPcieThroughput")
        return 1000 if counter == pynvml.NVML_PCIE_UTIL_RX_BYTES else 3000  # KB/s

    def nvmlGpmQueryDeviceSupport(self, h):
        self._enter("nvmlGpmQueryDeviceSupport")
        return SimpleNamespace(isSupportedDevice=int(self.gpm))

    def nvmlGpmSampleAlloc(self):
        self._enter("nvmlGpmSampleAlloc")
        self.samples.append(FakeSample(len(self.samples)))
        return self.samples[-1]

    def nvmlGpmSampleFree(self, sample):
        self._enter("nvmlGpmSampleFree")

    def nvmlGpmSampleGet(self, h, sample):
        self._enter("nvmlGpmSampleGet")
        sample.filled_at = self.gpm_fills
        self.gpm_fills += 1
        return sample

    def nvmlGpmMetricsGet(self, request):
        self._enter("nvmlGpmMetricsGet")
        assert request.sample1 is not request.sample2
        self.gpm_pairs.append((request.sample1.filled_at, request.sample2.filled_at))
        for metric in request.metrics[: request.numMetrics]:
            if metric.metricId in self.gpm_unsupported_metrics:
                metric.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
            else:
                metric.nvmlReturn = pynvml.NVML_SUCCESS
                metric.value = self.gpm_values[metric.metricId]
        return request


def last(snap, key):
    return snap[key][-1]


def test_all_supported_with_gpm_fills_buffers_and_computes_gbps():
    fake = FakeNvml()
    sampler = TelemetrySampler(nvml=fake, capacity=50)
    for i in range(4):
        sampler.sample_once(now=10.0 + 0.2 * i)
    snap = sampler.snapshot()
    assert snap["t"].tolist() == pytest.approx([10.0, 10.2, 10.4, 10.6])
    assert last(snap, "gpu_busy_pct") == 4.0 and last(snap, "mem_busy_pct") == 40.0
    assert last(snap, "mem_total_bytes") == 141e9
    assert last(snap, "power_w") == pytest.approx(650.0) and last(snap, "power_limit_w") == pytest.approx(700.0)
    assert last(snap, "clock_reasons") == 4.0
    assert decode_clock_reasons(last(snap, "clock_reasons")) == ["SW power cap"]
    # GPM: nothing for the first sample (no previous one), then differenced values
    assert math.isnan(snap["dram_bw_util_pct"][0])
    assert last(snap, "dram_bw_util_pct") == 89.0
    assert last(snap, "dram_bw_gbps") == pytest.approx(0.89 * H200_PEAK_GBPS)
    assert last(snap, "sm_active_pct") == 60.0 and last(snap, "sm_occupancy_pct") == 30.0
    assert last(snap, "tensor_active_pct") == 94.0  # ANY_TENSOR_UTIL preferred over HMMA
    # PCIe from GPM once it answers (MiB/s -> B/s); the blocking legacy counter is then no longer read
    assert last(snap, "pcie_rx_bytes_per_s") == 100.0 * MIB and last(snap, "pcie_tx_bytes_per_s") == 200.0 * MIB
    legacy_calls = fake.calls["nvmlDeviceGetPcieThroughput"]
    sampler.sample_once(now=11.0)
    assert fake.calls["nvmlDeviceGetPcieThroughput"] == legacy_calls
    assert all(reason == "" for reason in sampler.availability().values())
    assert last(snap, "process_rss_bytes") > 0  # cpu_pct may still be NaN: no clock tick yet
    info = sampler.static_info()
    assert info["name"] == "NVIDIA H200" and info["gpm_supported"] and info["peak_bandwidth_gbps"] == 4800.0
    assert info["tensor_metric"] == "ANY_TENSOR_UTIL" and info["cuda_driver_version"] == "12.4"
    assert info["pcie_max_gen"] == 5 and info["max_sm_clock_mhz"] == 1980
    assert sampler.gpu_available
    assert fake.calls["nvmlInit"] == 1


def test_unsupported_metric_is_nan_with_reason_and_not_retried():
    fake = FakeNvml(
        unsupported={"nvmlDeviceGetPowerUsage"}, gpm_unsupported_metrics={pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL}
    )
    sampler = TelemetrySampler(nvml=fake)
    sampler._reader.gpm_interval_s = 0.0  # the 100 ms floor NVML sets, not the sampler's slower pace
    for i in range(3):
        sampler.sample_once(now=0.2 * i)
    snap = sampler.snapshot()
    assert np.isnan(snap["power_w"]).all()
    assert sampler.availability()["power_w"] == "not supported on this GPU"
    assert fake.calls["nvmlDeviceGetPowerUsage"] == 1
    assert snap["temperature_c"].tolist() == [55.0, 55.0, 55.0]
    assert sampler.availability()["temperature_c"] == ""
    assert last(snap, "tensor_active_pct") == 90.0  # HMMA fallback
    assert sampler.static_info()["tensor_metric"] == "HMMA_TENSOR_UTIL"


def test_gpu_without_gpm_uses_legacy_pcie_and_labels_gpm_missing():
    fake = FakeNvml(name="NVIDIA A100-SXM4-80GB", gpm=False)
    sampler = TelemetrySampler(nvml=fake)
    sampler.sample_once(now=1.0)
    snap = sampler.snapshot()
    assert last(snap, "pcie_rx_bytes_per_s") == 1000 * KIB and last(snap, "pcie_tx_bytes_per_s") == 3000 * KIB
    avail = sampler.availability()
    for key in nvml_reader.GPM_KEYS:
        assert np.isnan(snap[key]).all()
        assert "GPM" in avail[key]
    assert sampler.static_info()["peak_bandwidth_gbps"] == 2039.0
    assert fake.calls["nvmlGpmSampleGet"] == 0


def test_unknown_gpu_gets_estimated_peak_bandwidth():
    fake = FakeNvml(name="NVIDIA H200 NVL")
    sampler = TelemetrySampler(nvml=fake)
    info = sampler.static_info()
    assert info["spec_estimated"]
    assert info["peak_bandwidth_gbps"] == pytest.approx(3201e6 * 6144 / 8 * 2 / 1e9)


def test_clock_reasons_fall_back_to_the_older_throttle_call():
    fake = FakeNvml(missing={"nvmlDeviceGetCurrentClocksEventReasons"})
    sampler = TelemetrySampler(nvml=fake)
    sampler.sample_once(now=0.0)
    sampler.sample_once(now=0.2)
    reasons = sampler.snapshot()["clock_reasons"]
    assert reasons.tolist() == [0x24, 0x24]
    assert decode_clock_reasons(reasons[-1]) == ["SW power cap", "SW thermal slowdown"]
    assert sampler.availability()["clock_reasons"] == ""


def test_gpu_lost_mid_run_stops_querying_and_never_raises():
    fake = FakeNvml()
    sampler = TelemetrySampler(nvml=fake)
    sampler.sample_once(now=0.0)
    sampler.sample_once(now=0.2)
    fake.lost = True
    sampler.sample_once(now=0.4)
    calls_after_loss = sum(fake.calls.values())
    for i in range(3):
        sampler.sample_once(now=0.6 + 0.2 * i)
    assert sum(fake.calls.values()) == calls_after_loss
    snap = sampler.snapshot()
    assert snap["gpu_busy_pct"][1] == 2.0
    assert np.isnan(snap["gpu_busy_pct"][2:]).all() and np.isnan(snap["dram_bw_gbps"][2:]).all()
    assert not np.isnan(snap["process_rss_bytes"]).any()
    avail = sampler.availability()
    assert all(avail[k] == "GPU lost" for k in nvml_reader.ALL_GPU_KEYS)
    assert avail["cpu_pct"] == ""
    assert not sampler.gpu_available
    sampler.close()  # must not touch the lost GPU
    assert sum(fake.calls.values()) == calls_after_loss + 1  # only nvmlShutdown


@pytest.mark.parametrize("error", [pynvml.NVMLError_LibraryNotFound, pynvml.NVMLError_DriverNotLoaded])
def test_no_driver_gives_psutil_only_with_reasons(error):
    fake = FakeNvml(init_error=error())
    sampler = TelemetrySampler(nvml=fake)
    sampler.sample_once(now=0.0)
    sampler.sample_once(now=0.1)
    snap = sampler.snapshot()
    avail = sampler.availability()
    for key, spec in METRICS.items():
        if spec.source == "psutil":
            assert avail[key] == ""
            if key != "cpu_pct":  # cpu_pct needs a kernel clock tick between readings
                assert not np.isnan(snap[key]).any()
        else:
            assert avail[key] == "no NVIDIA driver" and np.isnan(snap[key]).all()
    assert snap["cpu_per_core"].shape == (2, sampler.static_info()["cpu_cores"])
    assert not sampler.gpu_available and sampler.static_info()["name"] is None
    assert sampler.static_info()["gpu_reason"] == "no NVIDIA driver"
    assert fake.calls["nvmlInit"] == 1


def test_no_gpu_and_nvml_disabled(monkeypatch):
    sampler = TelemetrySampler(nvml=FakeNvml(count=0))
    assert sampler.availability()["gpu_busy_pct"] == "no GPU"
    sampler = TelemetrySampler(nvml=FakeNvml(count=1), device_index=3)
    assert sampler.availability()["gpu_busy_pct"].startswith("no GPU at index 3")
    monkeypatch.setenv("TRACKSCOPE_NO_NVML", "1")
    sampler = TelemetrySampler()
    sampler.sample_once()
    assert "TRACKSCOPE_NO_NVML" in sampler.availability()["sm_clock_mhz"]


def test_gpm_samples_closer_than_100ms_reuse_previous_values():
    fake = FakeNvml()
    sampler = TelemetrySampler(nvml=fake)
    sampler._reader.gpm_interval_s = 0.0  # the 100 ms floor NVML sets, not the sampler's slower pace
    dram = pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL
    sampler.sample_once(now=0.00)  # first GPM sample (fill 0), no values yet
    sampler.sample_once(now=0.05)  # 50 ms: too close, nothing new
    assert fake.calls["nvmlGpmSampleGet"] == 1 and fake.gpm_pairs == []
    sampler.sample_once(now=0.12)  # 120 ms after fill 0: new fill 1, differenced (0, 1)
    assert fake.gpm_pairs == [(0, 1)]
    fake.gpm_values[dram] = 10.0
    sampler.sample_once(now=0.15)  # 30 ms after fill 1: reuse 89 %
    sampler.sample_once(now=0.21)  # 90 ms after fill 1: still reuse
    assert fake.calls["nvmlGpmSampleGet"] == 2
    sampler.sample_once(now=0.23)  # 110 ms after fill 1: new fill 2, differenced (1, 2)
    assert fake.gpm_pairs == [(0, 1), (1, 2)]
    snap = sampler.snapshot()
    dram_pct = snap["dram_bw_util_pct"]
    assert np.isnan(dram_pct[:2]).all()
    assert dram_pct[2:].tolist() == [89.0, 89.0, 89.0, 10.0]
    assert snap["dram_bw_gbps"][-1] == pytest.approx(0.10 * H200_PEAK_GBPS)
    # two sample buffers, alternating
    assert len(fake.samples) == 2


def test_ring_buffer_wraps_in_order():
    sampler = TelemetrySampler(nvml=FakeNvml(gpm=False), capacity=5)
    for i in range(12):
        sampler.sample_once(now=float(i))
    snap = sampler.snapshot()
    assert snap["t"].tolist() == [7.0, 8.0, 9.0, 10.0, 11.0]
    assert snap["gpu_busy_pct"].tolist() == [8.0, 9.0, 10.0, 11.0, 12.0]  # the fake counts its calls
    assert snap["cpu_per_core"].shape[0] == 5
    assert sampler.snapshot(since=9.0)["t"].tolist() == [10.0, 11.0]
    snap["t"][0] = -1.0  # a copy, not a view
    assert sampler.snapshot()["t"][0] == 7.0


def test_cpu_busy_from_fake_psutil_times():
    Times = namedtuple("Times", "user nice system idle iowait guest")
    readings = iter(
        [[Times(0, 0, 0, 0, 0, 0), Times(0, 0, 0, 0, 0, 0)], [Times(3, 0, 1, 4, 2, 3), Times(1, 0, 0, 9, 0, 0)]]
    )

    class FakeProcess:
        def oneshot(self):
            return threading.Lock()  # any context manager

        def memory_info(self):
            return SimpleNamespace(rss=123)

        def cpu_percent(self, interval):
            return 42.0

    fake_psutil = SimpleNamespace(cpu_times=lambda percpu: next(readings), Process=FakeProcess)
    sampler = TelemetrySampler(nvml=FakeNvml(init_error=pynvml.NVMLError_DriverNotLoaded()), psutil_mod=fake_psutil)
    sampler.sample_once(now=0.0)
    snap = sampler.snapshot()
    # core 0: busy 4 of 10 s (guest excluded); core 1: busy 1 of 10 s; all: 5 of 20
    assert snap["cpu_per_core"][0].tolist() == pytest.approx([40.0, 10.0])
    assert snap["cpu_pct"][0] == pytest.approx(25.0)
    assert snap["process_rss_bytes"][0] == 123.0 and snap["process_cpu_pct"][0] == 42.0


def test_a_sampler_bug_is_recorded_not_raised():
    fake = FakeNvml()
    fake.nvmlDeviceGetUtilizationRates = lambda h: SimpleNamespace(gpu="not a number", memory=1)
    sampler = TelemetrySampler(nvml=fake)
    sampler.sample_once(now=0.0)
    assert "GPU read failed" in sampler.last_error
    assert len(sampler.snapshot()["t"]) == 1


def test_decode_clock_reasons():
    assert decode_clock_reasons(0) == []
    assert decode_clock_reasons(float("nan")) == []
    assert decode_clock_reasons(0x1 | 0x40 | 0x100) == ["GPU idle", "HW thermal slowdown", "display clock setting"]
    assert decode_clock_reasons(0x4 | 0x1000) == ["SW power cap", "other (0x1000)"]


def test_real_thread_starts_samples_and_stops():
    fake = FakeNvml(gpm=False)
    sampler = TelemetrySampler(nvml=fake, rate_hz=200.0)
    with sampler:
        sampler.start()  # idempotent
        names = [t.name for t in threading.enumerate()]
        assert names.count(THREAD_NAME) == 1
        deadline = time.perf_counter() + 20.0  # a bound on waiting, not a measurement: 3 samples take 15 ms
        while time.perf_counter() < deadline:
            snap = sampler.snapshot()
            if len(snap["t"]) >= 3 and not np.isnan(snap["cpu_pct"][-1]):
                break
            time.sleep(0.01)
    assert not sampler.running
    assert THREAD_NAME not in [t.name for t in threading.enumerate()]
    snap = sampler.snapshot()
    n = len(snap["t"])
    assert n >= 3
    assert 0.0 <= snap["cpu_pct"][-1] <= 100.0 and not np.isnan(snap["cpu_per_core"][-1]).any()
    assert np.all(np.diff(sampler.snapshot()["t"]) > 0)
    sampler.stop()  # idempotent
    assert THREAD_NAME not in [t.name for t in threading.enumerate()]  # no thread left that could add a sample
    assert len(sampler.snapshot()["t"]) == n
    assert sampler.sample_cost()["count"] == n


def test_metric_unsupported_at_open_keeps_its_reason_while_sampling():
    fake = FakeNvml(unsupported={"nvmlDeviceGetMemoryInfo"})
    sampler = TelemetrySampler(nvml=fake)
    sampler.static_info()  # the first call is the static read
    sampler.sample_once(now=0.0)
    assert sampler.availability()["mem_used_bytes"] == "not supported on this GPU"
    assert np.isnan(sampler.snapshot()["mem_used_bytes"]).all()
    assert fake.calls["nvmlDeviceGetMemoryInfo"] == 1


def test_gpm_transient_error_restarts_the_pair_and_unsupported_turns_it_off():
    fake = FakeNvml()
    sampler = TelemetrySampler(nvml=fake)
    sampler._reader.gpm_interval_s = 0.0  # the 100 ms floor NVML sets, not the sampler's slower pace
    sampler.sample_once(now=0.0)
    sampler.sample_once(now=0.2)
    assert sampler.snapshot()["sm_active_pct"][-1] == 60.0
    real_get = fake.nvmlGpmSampleGet
    fake.nvmlGpmSampleGet = lambda h, s: (_ for _ in ()).throw(pynvml.NVMLError_Unknown())
    sampler.sample_once(now=0.4)  # transient: NaN, reason, pair restarted
    assert np.isnan(sampler.snapshot()["sm_active_pct"][-1])
    assert sampler.availability()["sm_active_pct"].startswith("NVML error")
    fake.nvmlGpmSampleGet = real_get
    sampler.sample_once(now=0.6)  # new first sample of a pair: still NaN
    sampler.sample_once(now=0.8)
    assert sampler.snapshot()["sm_active_pct"][-1] == 60.0 and sampler.availability()["sm_active_pct"] == ""
    fake.unsupported.add("nvmlGpmSampleGet")
    sampler.sample_once(now=1.0)
    calls = fake.calls["nvmlGpmSampleGet"]
    sampler.sample_once(now=1.6)
    snap = sampler.snapshot()
    assert fake.calls["nvmlGpmSampleGet"] == calls  # off for good
    assert sampler.availability()["dram_bw_gbps"] == "not supported on this GPU"
    assert snap["pcie_rx_bytes_per_s"][-1] == 1000 * KIB  # back to the legacy PCIe counter


def test_gpm_and_slow_metrics_are_read_less_often_than_the_rest():
    """GPM every GPM_SAMPLE_INTERVAL_S and link/limit/temperature every SLOW_METRICS_INTERVAL_S, held between: a
    GPM read at 10 Hz cost CorrTrack ~3 % on the H200 (scripts/sampler_cost.py)."""
    from engine.telemetry.nvml import GPM_SAMPLE_INTERVAL_S, SLOW_METRICS_INTERVAL_S

    fake = FakeNvml()
    sampler = TelemetrySampler(nvml=fake)
    ticks = [0.1 * i for i in range(21)]  # 2 s at 10 Hz
    for t in ticks:
        sampler.sample_once(now=t)
    assert fake.calls["nvmlDeviceGetUtilizationRates"] == len(ticks)
    assert fake.calls["nvmlGpmSampleGet"] == int(ticks[-1] / GPM_SAMPLE_INTERVAL_S + 1e-9) + 1
    assert fake.calls["nvmlDeviceGetTemperature"] == int(ticks[-1] / SLOW_METRICS_INTERVAL_S + 1e-9) + 1
    snap = sampler.snapshot()
    assert snap["temperature_c"].tolist() == [55.0] * len(ticks)  # held between reads, never NaN
