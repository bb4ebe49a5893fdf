"""Live telemetry: a sampler thread filling preallocated ring buffers from NVML (+GPM) and psutil.

The sampler never raises into its callers: a missing driver, no GPU, a lost GPU or an unsupported
metric leaves NaN in that metric's buffer and a reason in ``availability()``. CPU and process figures
come from psutil whether or not there is a GPU. Timestamps are ``time.perf_counter()`` seconds, the
clock of session events. ``sample_once(now)`` is one step of the loop, callable without the thread.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np

from engine.telemetry import nvml as nvml_reader

log = logging.getLogger(__name__)

DEFAULT_RATE_HZ = 10.0
DEFAULT_CAPACITY = 6000  # 10 minutes at 10 Hz
THREAD_NAME = "trackscope-telemetry"
REASON_NO_PSUTIL = "psutil not installed"


@dataclass(frozen=True)
class MetricSpec:
    """How a metric is shown: label, unit, and where it comes from (nvml, gpm, psutil)."""

    label: str
    unit: str
    source: str


METRICS: dict[str, MetricSpec] = {
    "gpu_busy_pct": MetricSpec("GPU busy (a kernel ran)", "%", "nvml"),
    "mem_busy_pct": MetricSpec("memory-controller busy", "%", "nvml"),
    "mem_used_bytes": MetricSpec("memory used", "B", "nvml"),
    "mem_total_bytes": MetricSpec("memory total", "B", "nvml"),
    "sm_clock_mhz": MetricSpec("SM clock", "MHz", "nvml"),
    "mem_clock_mhz": MetricSpec("memory clock", "MHz", "nvml"),
    "power_w": MetricSpec("power", "W", "nvml"),
    "power_limit_w": MetricSpec("power limit", "W", "nvml"),
    "temperature_c": MetricSpec("temperature", "°C", "nvml"),
    "pcie_rx_bytes_per_s": MetricSpec("PCIe to GPU", "B/s", "nvml"),
    "pcie_tx_bytes_per_s": MetricSpec("PCIe from GPU", "B/s", "nvml"),
    "pcie_gen": MetricSpec("PCIe link generation", "", "nvml"),
    "pcie_width": MetricSpec("PCIe link width", "lanes", "nvml"),
    "clock_reasons": MetricSpec("clock-limit reasons", "bitmask", "nvml"),
    "dram_bw_util_pct": MetricSpec("DRAM bandwidth used", "%", "gpm"),
    "dram_bw_gbps": MetricSpec("DRAM bandwidth", "GB/s", "gpm"),
    "sm_active_pct": MetricSpec("SM active", "%", "gpm"),
    "sm_occupancy_pct": MetricSpec("SM occupancy", "%", "gpm"),
    "tensor_active_pct": MetricSpec("tensor active", "%", "gpm"),
    "cpu_pct": MetricSpec("CPU (all cores)", "%", "psutil"),
    "process_rss_bytes": MetricSpec("process memory (RSS)", "B", "psutil"),
    "process_cpu_pct": MetricSpec("process CPU (100 = one core)", "%", "psutil"),
}
PSUTIL_KEYS = ("cpu_pct", "process_rss_bytes", "process_cpu_pct")
PER_CORE_KEY = "cpu_per_core"

# NVML clock event (throttle) reason bits; the same values under both of NVML's names.
CLOCK_REASONS: dict[int, str] = {
    0x1: "GPU idle",
    0x2: "applications clocks setting",
    0x4: "SW power cap",
    0x8: "HW slowdown",
    0x10: "sync boost",
    0x20: "SW thermal slowdown",
    0x40: "HW thermal slowdown",
    0x80: "HW power brake slowdown",
    0x100: "display clock setting",
}


def clock_reason_mask(*names: str) -> int:
    """The bitmask of the named reasons (names as in CLOCK_REASONS); an unknown name raises KeyError."""
    bit_of = {name: bit for bit, name in CLOCK_REASONS.items()}
    return sum(bit_of[n] for n in names)


def decode_clock_reasons(mask: float | int | None) -> list[str]:
    """Names of the set clock-limit reason bits; [] for 0, NaN or None."""
    if mask is None or (isinstance(mask, float) and math.isnan(mask)):
        return []
    bits = int(mask)
    names = [name for bit, name in CLOCK_REASONS.items() if bits & bit]
    unknown = bits & ~sum(CLOCK_REASONS)
    if unknown:
        names.append(f"other (0x{unknown:x})")
    return names


class RingBuffers:
    """Fixed-capacity float64 buffers, one per key, plus a [capacity, cores] per-core CPU buffer."""

    def __init__(self, keys: tuple[str, ...], capacity: int, cores: int):
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self.cores = cores
        self.count = 0  # samples ever written
        self.t = np.full(capacity, np.nan)
        self.values = {k: np.full(capacity, np.nan) for k in keys}
        self.per_core = np.full((capacity, cores), np.nan)  # [capacity, cores]

    def append(self, t: float, values: dict[str, float], per_core: np.ndarray | None) -> None:
        """Write one sample over the oldest; keys missing from ``values`` become NaN."""
        i = self.count % self.capacity
        self.t[i] = t
        for key, buf in self.values.items():
            buf[i] = values.get(key, np.nan)
        row = self.per_core[i]
        row[:] = np.nan
        if per_core is not None:
            n = min(len(per_core), self.cores)
            row[:n] = per_core[:n]
        self.count += 1

    def _order(self) -> np.ndarray:
        n = min(self.count, self.capacity)
        start = self.count % self.capacity if self.count > self.capacity else 0
        return (start + np.arange(n)) % self.capacity

    def snapshot(self, since: float | None = None) -> dict[str, np.ndarray]:
        """Copies in time order; with ``since``, only samples with t > since."""
        order = self._order()
        if since is not None:
            order = order[self.t[order] > since]
        out = {"t": self.t[order]}
        for key, buf in self.values.items():
            out[key] = buf[order]
        out[PER_CORE_KEY] = self.per_core[order]
        return out


def _import_pynvml() -> Any:
    try:
        import pynvml
    except ImportError:
        return None
    return pynvml


def _import_psutil() -> Any:
    try:
        import psutil
    except ImportError:
        return None
    return psutil


class _CpuTimes:
    """CPU busy % per core from successive psutil.cpu_times(percpu=True) readings (own state)."""

    IDLE_FIELDS = ("idle", "iowait")
    EXCLUDED_FIELDS = ("guest", "guest_nice")  # already counted in user/nice on Linux

    def __init__(self, psutil_mod: Any):
        self.psutil = psutil_mod
        self.last = self._read()
        self.values: tuple[float, np.ndarray] = (math.nan, np.full(len(self.last), np.nan))

    def _read(self) -> np.ndarray:
        """[cores, 2] rows of (busy seconds, total seconds)."""
        rows = []
        for times in self.psutil.cpu_times(percpu=True):
            fields = times._asdict()
            total = sum(v for k, v in fields.items() if k not in self.EXCLUDED_FIELDS)
            idle = sum(fields.get(k, 0.0) for k in self.IDLE_FIELDS)
            rows.append((total - idle, total))
        return np.asarray(rows, dtype=np.float64).reshape(-1, 2)

    def sample(self) -> tuple[float, np.ndarray]:
        """(all-core busy %, per-core busy % [cores]) since the previous reading.

        When the kernel counters have not advanced yet (samples closer than a clock tick), the last
        values are repeated and the older reading is kept, so the next window is long enough.
        """
        now = self._read()
        if now.shape != self.last.shape:
            self.last = now
            self.values = (math.nan, np.full(len(now), np.nan))
            return self.values
        delta = now - self.last
        if (delta[:, 1] <= 0).any():
            return self.values
        self.last = now
        per_core = np.clip(100.0 * delta[:, 0] / delta[:, 1], 0.0, 100.0)
        overall = float(np.clip(100.0 * delta[:, 0].sum() / delta[:, 1].sum(), 0.0, 100.0))
        self.values = (overall, per_core)
        return self.values


class _SamplerThread(threading.Thread):
    """Calls ``sampler.sample_once()`` every period until ``stop_event`` is set."""

    def __init__(self, sampler: TelemetrySampler, period_s: float, stop_event: threading.Event):
        super().__init__(name=THREAD_NAME, daemon=True)
        self._sampler = sampler
        self._period_s = period_s
        self._stop_event = stop_event

    def run(self) -> None:
        next_t = time.perf_counter()
        while not self._stop_event.is_set():
            self._sampler.sample_once()
            next_t += self._period_s
            delay = next_t - time.perf_counter()
            if delay < 0:  # fell behind: restart the schedule rather than burst
                next_t, delay = time.perf_counter(), 0.0
            if self._stop_event.wait(delay):
                break


class TelemetrySampler:
    """Samples one GPU (NVML, GPM) and the host (psutil) into ring buffers on a background thread."""

    def __init__(
        self,
        device_index: int = 0,
        rate_hz: float = DEFAULT_RATE_HZ,
        capacity: int = DEFAULT_CAPACITY,
        nvml: Any = None,
        psutil_mod: Any = None,
        device_uuid: str | None = None,
        bus_id: str | None = None,
    ):
        """``device_uuid`` / ``bus_id``: the GPU by identity rather than NVML index (engine.telemetry.nvml)."""
        if rate_hz <= 0:
            raise ValueError(f"rate_hz must be > 0, got {rate_hz}")
        self.rate_hz = float(rate_hz)
        if nvml is None and not nvml_reader.nvml_disabled_by_env():
            nvml = _import_pynvml()
        self._reader = nvml_reader.NvmlReader(nvml, device_index, device_uuid=device_uuid, bus_id=bus_id)
        self._psutil = psutil_mod if psutil_mod is not None else _import_psutil()
        self._psutil_reason = "" if self._psutil is not None else REASON_NO_PSUTIL
        self._cpu: _CpuTimes | None = None
        self._process: Any = None
        cores = 1
        if self._psutil is not None:
            try:
                self._cpu = _CpuTimes(self._psutil)
                cores = max(1, len(self._cpu.last))
                self._process = self._psutil.Process()
                self._process.cpu_percent(None)  # primes the process CPU counter
            except Exception as e:  # noqa: BLE001 - psutil trouble degrades to NaN
                self._psutil_reason = f"psutil error: {e}"
        self._buffers = RingBuffers(tuple(METRICS), capacity, cores)
        self._lock = threading.Lock()
        self._open_lock = threading.Lock()
        self._opened = False
        self._stop_event = threading.Event()
        self._thread: _SamplerThread | None = None
        self._sample_cost_s: deque[float] = deque(maxlen=capacity)  # seconds per sample, newest kept
        self.last_error = ""

    # -- lifecycle ---------------------------------------------------------------------------------
    def start(self) -> None:
        """Start the sampler thread (no-op while it runs)."""
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop_event = threading.Event()
        self._thread = _SamplerThread(self, 1.0 / self.rate_hz, self._stop_event)
        self._thread.start()

    def stop(self, timeout: float = 2.0) -> None:
        """Stop the thread and wait for it (no-op when not running)."""
        thread = self._thread
        self._stop_event.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
        self._thread = None

    def close(self) -> None:
        """Stop, then release NVML."""
        self.stop()
        with self._open_lock:
            self._reader.close()
            self._opened = False

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def __enter__(self) -> TelemetrySampler:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- sampling ----------------------------------------------------------------------------------
    def _ensure_open(self) -> None:
        if not self._opened:
            with self._open_lock:
                if not self._reader.opened:
                    self._reader.open()
                self._opened = True

    def sample_once(self, now: float | None = None) -> None:
        """Take one sample at ``now`` (perf_counter seconds; injectable for tests); never raises."""
        started = time.perf_counter()
        if now is None:
            now = started
        values: dict[str, float] = {}
        per_core = None
        try:
            self._ensure_open()
            self._reader.read(now, values)
        except Exception as e:  # noqa: BLE001 - a sampler bug must not kill the caller
            error = f"GPU read failed: {type(e).__name__}: {e}"
            if error != self.last_error:  # once per new failure, not once per sample
                log.warning("telemetry degraded: %s", error)
            self.last_error = error
        if self._cpu is not None:
            try:
                values["cpu_pct"], per_core = self._cpu.sample()
                with self._process.oneshot():
                    values["process_rss_bytes"] = float(self._process.memory_info().rss)
                    values["process_cpu_pct"] = float(self._process.cpu_percent(None))
            except Exception as e:  # noqa: BLE001
                self._psutil_reason = f"psutil error: {e}"
        with self._lock:
            self._buffers.append(now, values, per_core)
            self._sample_cost_s.append(time.perf_counter() - started)

    # -- reading -----------------------------------------------------------------------------------
    def snapshot(self, since: float | None = None) -> dict[str, np.ndarray]:
        """Copies of the buffers in time order ("t" and every METRICS key; "cpu_per_core" [S, cores])."""
        with self._lock:
            return self._buffers.snapshot(since)

    def availability(self) -> dict[str, str]:
        """Metric -> '' when available, else the reason it is not."""
        self._ensure_open()
        out: dict[str, str] = {}
        reasons = dict(self._reader.reasons)
        for key, spec in METRICS.items():
            out[key] = self._psutil_reason if spec.source == "psutil" else reasons.get(key, "")
        out[PER_CORE_KEY] = self._psutil_reason
        return out

    @property
    def gpu_available(self) -> bool:
        """True while an NVIDIA GPU is being read (opens NVML if not yet done)."""
        self._ensure_open()
        return self._reader.available

    def static_info(self) -> dict[str, Any]:
        """Facts that do not change during a run (GPU name, limits, peak bandwidth, CPU)."""
        self._ensure_open()
        info: dict[str, Any] = dict.fromkeys(
            (
                "name",
                "uuid",
                "memory_total_bytes",
                "max_sm_clock_mhz",
                "max_mem_clock_mhz",
                "power_limit_w",
                "pcie_max_gen",
                "pcie_max_width",
                "peak_bandwidth_gbps",
                "driver",
                "cuda_driver_version",
            )
        )
        info["gpm_supported"] = False
        info.update(self._reader.static)
        info["gpu_available"] = self._reader.available
        info["gpu_reason"] = "" if self._reader.available else self._reader.reasons.get("gpu_busy_pct", "")
        info["cpu_cores"] = self._buffers.cores
        info["rate_hz"] = self.rate_hz
        return info

    def sample_cost(self) -> dict[str, float]:
        """Seconds one sample took: median, mean and max over the kept samples (count too)."""
        with self._lock:
            costs = np.asarray(self._sample_cost_s)
        if costs.size == 0:
            return {"count": 0, "median_s": math.nan, "mean_s": math.nan, "max_s": math.nan}
        return {
            "count": int(costs.size),
            "median_s": float(np.median(costs)),
            "mean_s": float(costs.mean()),
            "max_s": float(costs.max()),
        }
