"""One GPU read through NVML (pynvml), degrading per metric instead of raising.

Every query goes through one helper: an NVML error becomes NaN plus a reason for the metrics it
feeds ("not supported on this GPU", "GPU lost", ...). A lost GPU is never queried again. GPM
(Hopper and newer) is differenced against a rolling previous sample at least ``GPM_MIN_INTERVAL_S``
old; a read closer than that reuses the last values, so the sampler never sleeps.

Which GPU: by UUID or PCI bus id when given (``device_uuid`` / ``bus_id``), else by NVML index. NVML numbers
every GPU of the machine in PCI order and ignores ``CUDA_VISIBLE_DEVICES``, so inside a process that sees
one GPU (a Ray worker, ``CUDA_VISIBLE_DEVICES=3``) index 0 is another card: the UUID that CUDA reports for
the process's device names the right one.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from engine.core import flags
from engine.core.flags import env_flag
from engine.telemetry import specs

log = logging.getLogger(__name__)

REASON_NOT_SUPPORTED = "not supported on this GPU"
REASON_GPU_LOST = "GPU lost"
REASON_NO_DRIVER = "no NVIDIA driver"
REASON_NO_GPU = "no GPU"
REASON_NO_PYNVML = "pynvml not installed (pip install nvidia-ml-py)"
REASON_DISABLED = "NVML disabled (TRACKSCOPE_NO_NVML is set)"
REASON_NEEDS_GPM = "needs GPM (Hopper or newer); see memory-controller busy %"
REASON_NO_PERMISSION = "no permission to read it"
REASON_NO_PEAK = "peak bandwidth of this GPU unknown"

GPM_MIN_INTERVAL_S = 0.1  # NVML needs GPM samples at least 100 ms apart
#: how often a GPM sample is taken (its metrics average over this window and are held between): GPM reads cost
#: a tracker on the same GPU ~3 % at 10 Hz on the H200 (CorrTrack bf16 ran 1.064x with the sampler as it was,
#: 1.029x with GPM off: scripts/sampler_cost.py), more than their 0.2 ms of host time says
GPM_SAMPLE_INTERVAL_S = 0.5
#: metrics that change slowly (link state, power limit, temperature) are read at most this often
SLOW_METRICS_INTERVAL_S = 1.0
LEGACY_PCIE_INTERVAL_S = 0.5  # nvmlDeviceGetPcieThroughput blocks ~20 ms per counter: read it sparingly
KIB = 1024.0
MIB = 1024.0 * 1024.0
MILLI = 1e-3

GPU_KEYS = (
    "gpu_busy_pct",
    "mem_busy_pct",
    "mem_used_bytes",
    "mem_total_bytes",
    "sm_clock_mhz",
    "mem_clock_mhz",
    "power_w",
    "power_limit_w",
    "temperature_c",
    "pcie_rx_bytes_per_s",
    "pcie_tx_bytes_per_s",
    "pcie_gen",
    "pcie_width",
    "clock_reasons",
)
GPM_KEYS = ("dram_bw_util_pct", "dram_bw_gbps", "sm_active_pct", "sm_occupancy_pct", "tensor_active_pct")
ALL_GPU_KEYS = GPU_KEYS + GPM_KEYS

# GPM metric constant name -> our key (tensor: ANY_TENSOR_UTIL preferred, HMMA as the fallback).
GPM_METRICS = {
    "NVML_GPM_METRIC_DRAM_BW_UTIL": "dram_bw_util_pct",
    "NVML_GPM_METRIC_SM_UTIL": "sm_active_pct",
    "NVML_GPM_METRIC_SM_OCCUPANCY": "sm_occupancy_pct",
    "NVML_GPM_METRIC_ANY_TENSOR_UTIL": "tensor_active_pct",
    "NVML_GPM_METRIC_HMMA_TENSOR_UTIL": "tensor_active_pct",
    "NVML_GPM_METRIC_PCIE_RX_PER_SEC": "pcie_rx_bytes_per_s",
    "NVML_GPM_METRIC_PCIE_TX_PER_SEC": "pcie_tx_bytes_per_s",
}
GPM_SCALE = {"pcie_rx_bytes_per_s": MIB, "pcie_tx_bytes_per_s": MIB}  # GPM PCIe rates are MiB/s

_PERMANENT = ("NVMLError_NotSupported", "NVMLError_FunctionNotFound", "NVMLError_NoPermission")


def nvml_disabled_by_env() -> bool:
    """True when TRACKSCOPE_NO_NVML is true (engine.core.flags: 1/true/yes/on)."""
    return env_flag(flags.NO_NVML, default=False)


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def normalise_uuid(value: Any) -> str:
    """A GPU UUID as NVML spells it: 'GPU-58e3...', the hex in lower case (CUDA and torch give it without the
    prefix); a MIG instance's 'MIG-...' keeps its prefix."""
    text = _text(value).strip()
    prefix, rest = (text[:4].upper(), text[4:]) if text[:4].upper() in ("GPU-", "MIG-") else ("GPU-", text)
    return prefix + rest.lower()


def normalise_bus_id(value: Any) -> str:
    """A PCI bus id compared loosely: lower case, the domain as 4 digits ('00000000:3B:00.0' -> '0000:3b:00.0')."""
    text = _text(value).strip().lower()
    domain, sep, rest = text.partition(":")
    return f"{domain[-4:].rjust(4, '0')}:{rest}" if sep and rest.count(":") == 1 else text


class NvmlReader:
    """Reads one GPU; ``reasons[key]`` is '' while a metric is available, else why not."""

    def __init__(self, nvml: Any, device_index: int = 0, device_uuid: str | None = None, bus_id: str | None = None):
        self.nvml = nvml
        self.device_index = device_index
        self.device_uuid = normalise_uuid(device_uuid) if device_uuid else None
        self.bus_id = bus_id or None
        self.matched_by = ""  # "uuid", "bus id" or "index": how the handle was found
        self.not_matched = ""  # why the UUID / bus id asked for was not used
        self.reasons: dict[str, str] = dict.fromkeys(ALL_GPU_KEYS, "")
        self.static: dict[str, Any] = {}
        self.handle: Any = None
        self.lost = False
        self.opened = False
        self._disabled: dict[str, str] = {}  # function name -> why it is no longer called
        self._peak_bandwidth_gbps = math.nan
        self._gpm_ids: list[tuple[int, str, str]] = []  # (metric id, constant name, key)
        self._gpm_samples: list[Any] = []
        self._gpm_prev: int | None = None
        self._gpm_prev_t = -math.inf
        self._gpm_values: dict[str, float] = {}
        self._pcie_from_gpm = False
        self._pcie_legacy_t = -math.inf
        self.gpm_interval_s = GPM_SAMPLE_INTERVAL_S  # seconds between GPM samples (never under GPM_MIN_INTERVAL_S)
        self._slow: dict[str, float] = {}  # the slow metrics as last read (SLOW_METRICS_INTERVAL_S)
        self._slow_t = -math.inf
        self._pcie_legacy: tuple[float, float] = (math.nan, math.nan)

    # -- setup -------------------------------------------------------------------------------------
    @property
    def available(self) -> bool:
        return self.handle is not None and not self.lost

    def _fail_all(self, reason: str) -> None:
        self.handle = None
        self.reasons = dict.fromkeys(ALL_GPU_KEYS, reason)

    def _is(self, error: BaseException, *names: str) -> bool:
        classes = tuple(c for c in (getattr(self.nvml, n, None) for n in names) if isinstance(c, type))
        return bool(classes) and isinstance(error, classes)

    def open(self) -> None:
        """Initialise NVML once and read the static facts; on failure every GPU metric gets the reason."""
        if self.opened:
            return
        self.opened = True
        if self.nvml is None:
            self._fail_all(REASON_DISABLED if nvml_disabled_by_env() else REASON_NO_PYNVML)
            return
        try:
            self.nvml.nvmlInit()
        except Exception as e:  # noqa: BLE001 - any init failure degrades to psutil-only
            if self._is(e, "NVMLError_LibraryNotFound", "NVMLError_DriverNotLoaded"):
                self._fail_all(REASON_NO_DRIVER)
            else:
                self._fail_all(f"NVML init failed: {_text(e)}")
            return
        count = self._query((), "nvmlDeviceGetCount")
        if not count:
            self._fail_all(REASON_NO_GPU)
            return
        if self.device_uuid or self.bus_id:
            self.handle = self._handle_by_identity(int(count))
        if self.handle is None and (self.device_uuid or self.bus_id):
            # not among NVML's GPUs (a MIG instance's UUID, an old driver): NVML's index, as before, and why
            wanted = f"UUID {self.device_uuid}" if self.device_uuid else f"PCI bus id {self.bus_id}"
            log.warning("telemetry: no GPU with %s among the %d NVML sees; reading GPU %d by index", wanted, count,
                        self.device_index)
            self.not_matched = f"no GPU with {wanted} among the {count} NVML sees"
        if self.handle is None:
            if self.device_index >= count:
                self._fail_all(self.not_matched or f"no GPU at index {self.device_index} ({count} found)")
                return
            self.handle = self._query((), "nvmlDeviceGetHandleByIndex", self.device_index)
            self.matched_by = "index"
        if self.handle is None:
            self._fail_all(REASON_NO_GPU)
            return
        self._read_static()
        self.static["matched_by"] = self.matched_by + (f" ({self.not_matched})" if self.not_matched else "")
        self._open_gpm()

    def _handle_by_identity(self, count: int) -> Any:
        """The handle of the GPU named by UUID (or bus id): NVML's direct lookup, else a scan of every handle."""
        if self.device_uuid:
            handle = self._query((), "nvmlDeviceGetHandleByUUID", self.device_uuid)
            if handle is None:
                handle = self._scan(count, "nvmlDeviceGetUUID", lambda v: normalise_uuid(v) == self.device_uuid)
            if handle is not None:
                self.matched_by = "uuid"
                return handle
        if self.bus_id:
            wanted = normalise_bus_id(self.bus_id)
            handle = self._query((), "nvmlDeviceGetHandleByPciBusId", self.bus_id)
            if handle is None:
                handle = self._scan(count, "nvmlDeviceGetPciInfo",
                                    lambda v: normalise_bus_id(getattr(v, "busId", None) or "") == wanted)
            if handle is not None:
                self.matched_by = "bus id"
                return handle
        return None

    def _scan(self, count: int, fn_name: str, matches: Any) -> Any:
        for index in range(count):
            handle = self._query((), "nvmlDeviceGetHandleByIndex", index)
            value = self._query((), fn_name, handle) if handle is not None else None
            if value is not None and matches(value):
                self.device_index = index
                return handle
        return None

    def _read_static(self) -> None:
        n, h = self.nvml, self.handle
        name = self._query((), "nvmlDeviceGetName", h)
        cc = self._query((), "nvmlDeviceGetCudaComputeCapability", h)
        mem = self._query((), "nvmlDeviceGetMemoryInfo", h)
        max_sm = self._query((), "nvmlDeviceGetMaxClockInfo", h, getattr(n, "NVML_CLOCK_SM", 1))
        max_mem = self._query((), "nvmlDeviceGetMaxClockInfo", h, getattr(n, "NVML_CLOCK_MEM", 2))
        bus = self._query((), "nvmlDeviceGetMemoryBusWidth", h)
        cores = self._query((), "nvmlDeviceGetNumGpuCores", h)
        limit = self._query((), "nvmlDeviceGetEnforcedPowerLimit", h)
        cuda = self._query((), "nvmlSystemGetCudaDriverVersion")
        cc = tuple(int(v) for v in cc) if cc else None
        name = _text(name) if name is not None else None
        spec = specs.lookup(name)
        if spec is None and name is not None:
            per_sm = specs.fp32_cores_per_sm(cc) if cc else None
            sms = int(cores) // per_sm if cores and per_sm else None
            spec = specs.spec_from_nvml(name, sms, max_sm, max_mem, bus, cc, getattr(mem, "total", None))
        self._peak_bandwidth_gbps = spec.bandwidth_gbps if spec and spec.bandwidth_gbps else math.nan
        uuid = self._query((), "nvmlDeviceGetUUID", h)
        driver = self._query((), "nvmlSystemGetDriverVersion")
        self.static = {
            "name": name,
            "uuid": _text(uuid) if uuid is not None else None,
            "compute_capability": list(cc) if cc else None,
            "memory_total_bytes": float(mem.total) if mem is not None else None,
            "max_sm_clock_mhz": max_sm,
            "max_mem_clock_mhz": max_mem,
            "memory_bus_width_bits": bus,
            "power_limit_w": limit * MILLI if limit is not None else None,
            "pcie_max_gen": self._query((), "nvmlDeviceGetMaxPcieLinkGeneration", h),
            "pcie_max_width": self._query((), "nvmlDeviceGetMaxPcieLinkWidth", h),
            "peak_bandwidth_gbps": spec.bandwidth_gbps if spec else None,
            "spec_name": spec.name if spec else None,
            "spec_estimated": bool(spec and spec.estimated),
            "driver": _text(driver) if driver is not None else None,
            "cuda_driver_version": f"{cuda // 1000}.{cuda % 1000 // 10}" if cuda else None,
        }

    def _open_gpm(self) -> None:
        n = self.nvml
        support = self._query((), "nvmlGpmQueryDeviceSupport", self.handle)
        supported = bool(getattr(support, "isSupportedDevice", 0))
        if supported:
            self._gpm_ids = [(getattr(n, c), c, k) for c, k in GPM_METRICS.items() if hasattr(n, c)]
            self._gpm_samples = [self._query((), "nvmlGpmSampleAlloc") for _ in range(2)]
            supported = all(s is not None for s in self._gpm_samples) and bool(self._gpm_ids)
        self.static["gpm_supported"] = supported
        self.static["tensor_metric"] = None
        if not supported:
            for key in GPM_KEYS:
                self.reasons[key] = REASON_NEEDS_GPM
        elif math.isnan(self._peak_bandwidth_gbps):
            self.reasons["dram_bw_gbps"] = REASON_NO_PEAK

    # -- the query helper --------------------------------------------------------------------------
    def _query(self, keys: tuple[str, ...], fn_name: str, *args: Any) -> Any:
        """Call ``nvml.fn_name(*args)``; on error return None and set the reason on ``keys``."""
        if self.lost:
            return None
        if fn_name in self._disabled:
            self._set_reason(keys, self._disabled[fn_name])
            return None
        fn = getattr(self.nvml, fn_name, None)
        if fn is None:
            self._disabled[fn_name] = f"{fn_name} missing from this pynvml; upgrade nvidia-ml-py"
            self._set_reason(keys, self._disabled[fn_name])
            return None
        try:
            result = fn(*args)
        except Exception as e:  # noqa: BLE001 - NVML must never raise into the sampler
            if self._is(e, "NVMLError_GpuIsLost"):
                self.lost = True
                self.reasons = dict.fromkeys(ALL_GPU_KEYS, REASON_GPU_LOST)
            elif self._is(e, *_PERMANENT):
                reason = REASON_NO_PERMISSION if self._is(e, "NVMLError_NoPermission") else REASON_NOT_SUPPORTED
                self._disabled[fn_name] = reason
                self._set_reason(keys, reason)
            else:
                self._set_reason(keys, f"NVML error: {_text(e) or type(e).__name__}")
            return None
        self._set_reason(keys, "")
        return result

    def _query_first(self, keys: tuple[str, ...], fn_names: tuple[str, ...], *args: Any) -> Any:
        """The first of ``fn_names`` that answers (newer name first, older as the fallback)."""
        for fn_name in fn_names:
            result = self._query(keys, fn_name, *args)
            if result is not None or self.lost:
                return result
        return None

    def _set_reason(self, keys: tuple[str, ...], reason: str) -> None:
        if not self.lost:
            for key in keys:
                self.reasons[key] = reason

    # -- one read ----------------------------------------------------------------------------------
    def read(self, now: float, out: dict[str, float]) -> None:
        """Fill ``out`` with the GPU metrics at time ``now`` (seconds); NaN where not available."""
        if not self.opened:
            self.open()
        if not self.available:
            return
        n, h = self.nvml, self.handle
        util = self._query(("gpu_busy_pct", "mem_busy_pct"), "nvmlDeviceGetUtilizationRates", h)
        if util is not None:
            out["gpu_busy_pct"], out["mem_busy_pct"] = float(util.gpu), float(util.memory)
        mem = self._query(("mem_used_bytes", "mem_total_bytes"), "nvmlDeviceGetMemoryInfo", h)
        if mem is not None:
            out["mem_used_bytes"], out["mem_total_bytes"] = float(mem.used), float(mem.total)
        self._put(
            out,
            "sm_clock_mhz",
            self._query(("sm_clock_mhz",), "nvmlDeviceGetClockInfo", h, getattr(n, "NVML_CLOCK_SM", 1)),
        )
        self._put(
            out,
            "mem_clock_mhz",
            self._query(("mem_clock_mhz",), "nvmlDeviceGetClockInfo", h, getattr(n, "NVML_CLOCK_MEM", 2)),
        )
        self._put(out, "power_w", self._query(("power_w",), "nvmlDeviceGetPowerUsage", h), MILLI)
        if now - self._slow_t >= SLOW_METRICS_INTERVAL_S or not self._slow:
            slow: dict[str, float] = {}
            self._put(slow, "power_limit_w",
                      self._query(("power_limit_w",), "nvmlDeviceGetEnforcedPowerLimit", h), MILLI)
            self._put(slow, "temperature_c", self._query(("temperature_c",), "nvmlDeviceGetTemperature", h,
                                                          getattr(n, "NVML_TEMPERATURE_GPU", 0)))
            self._put(slow, "pcie_gen", self._query(("pcie_gen",), "nvmlDeviceGetCurrPcieLinkGeneration", h))
            self._put(slow, "pcie_width", self._query(("pcie_width",), "nvmlDeviceGetCurrPcieLinkWidth", h))
            self._slow, self._slow_t = slow, now
        out.update(self._slow)
        self._put(
            out,
            "clock_reasons",
            self._query_first(
                ("clock_reasons",),
                ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"),
                h,
            ),
        )
        if self._gpm_ids and not self.lost:
            self._read_gpm(now, out)
        if not self._pcie_from_gpm and not self.lost:
            self._read_pcie_legacy(now, out)

    @staticmethod
    def _put(out: dict[str, float], key: str, value: Any, scale: float = 1.0) -> None:
        if value is not None:
            out[key] = float(value) * scale

    def _read_pcie_legacy(self, now: float, out: dict[str, float]) -> None:
        if now - self._pcie_legacy_t >= LEGACY_PCIE_INTERVAL_S:
            n, h = self.nvml, self.handle
            rx = self._query(
                ("pcie_rx_bytes_per_s",), "nvmlDeviceGetPcieThroughput", h, getattr(n, "NVML_PCIE_UTIL_RX_BYTES", 1)
            )
            tx = self._query(
                ("pcie_tx_bytes_per_s",), "nvmlDeviceGetPcieThroughput", h, getattr(n, "NVML_PCIE_UTIL_TX_BYTES", 0)
            )
            self._pcie_legacy = (rx * KIB if rx is not None else math.nan, tx * KIB if tx is not None else math.nan)
            self._pcie_legacy_t = now
        out["pcie_rx_bytes_per_s"], out["pcie_tx_bytes_per_s"] = self._pcie_legacy

    def _read_gpm(self, now: float, out: dict[str, float]) -> None:
        """Difference a new GPM sample against the previous one when it is >= 100 ms old; else reuse."""
        if self._gpm_prev is None or now - self._gpm_prev_t >= max(GPM_MIN_INTERVAL_S, self.gpm_interval_s):
            cur = 0 if self._gpm_prev is None else 1 - self._gpm_prev
            got = self._query(GPM_KEYS, "nvmlGpmSampleGet", self.handle, self._gpm_samples[cur])
            if got is None:  # GPM off for good when unsupported; restart the pair after a transient error
                if "nvmlGpmSampleGet" in self._disabled:
                    self._gpm_ids = []
                self._gpm_prev, self._gpm_values, self._pcie_from_gpm = None, {}, False
                return
            if self._gpm_prev is not None:
                self._gpm_values = self._gpm_metrics(self._gpm_samples[self._gpm_prev], self._gpm_samples[cur])
            self._gpm_prev, self._gpm_prev_t = cur, now
        out.update(self._gpm_values)

    def _gpm_metrics(self, sample1: Any, sample2: Any) -> dict[str, float]:
        n = self.nvml
        request = n.c_nvmlGpmMetricsGet_t()
        request.version = getattr(n, "NVML_GPM_METRICS_GET_VERSION", 1)
        request.numMetrics = len(self._gpm_ids)
        request.sample1, request.sample2 = sample1, sample2
        for i, (metric_id, _, _) in enumerate(self._gpm_ids):
            request.metrics[i].metricId = metric_id
        if self._query(GPM_KEYS, "nvmlGpmMetricsGet", request) is None:
            return {}
        values: dict[str, float] = {}
        failed: list[int] = []
        for i, (_, const, key) in enumerate(self._gpm_ids):
            metric = request.metrics[i]
            if metric.nvmlReturn != getattr(n, "NVML_SUCCESS", 0):
                failed.append(i)
            elif key not in values:  # the tensor fallback only fills what the preferred metric left
                values[key] = float(metric.value) * GPM_SCALE.get(key, 1.0)
                if key == "tensor_active_pct":
                    self.static["tensor_metric"] = const.replace("NVML_GPM_METRIC_", "")
        self._prune_gpm(failed, values)
        for key in GPM_KEYS:
            if key not in values:
                self.reasons[key] = REASON_NOT_SUPPORTED
        if "dram_bw_util_pct" in values:
            values["dram_bw_gbps"] = values["dram_bw_util_pct"] / 100.0 * self._peak_bandwidth_gbps
            self.reasons["dram_bw_gbps"] = "" if not math.isnan(self._peak_bandwidth_gbps) else REASON_NO_PEAK
        return values

    def _prune_gpm(self, failed: list[int], values: dict[str, float]) -> None:
        """Drop metrics that failed, and the HMMA fallback once ANY_TENSOR_UTIL answers."""
        keep = []
        for i, entry in enumerate(self._gpm_ids):
            if i in failed:
                continue
            any_tensor = self.static.get("tensor_metric") == "ANY_TENSOR_UTIL"
            if entry[1] == "NVML_GPM_METRIC_HMMA_TENSOR_UTIL" and any_tensor:
                continue
            keep.append(entry)
        self._gpm_ids = keep
        self._pcie_from_gpm = "pcie_rx_bytes_per_s" in values and "pcie_tx_bytes_per_s" in values

    def close(self) -> None:
        """Free GPM samples and shut NVML down (its init is reference-counted)."""
        if not self.opened or self.handle is None:
            return
        if not self.lost:
            for sample in self._gpm_samples:
                if sample is not None:
                    self._query((), "nvmlGpmSampleFree", sample)
        try:
            self.nvml.nvmlShutdown()
        except Exception:  # noqa: BLE001 - shutting down must not raise either
            pass
        self.handle = None
        self.opened = False
