"""The fleet's worker: one long-lived Ray actor per GPU, running bench configurations with ``Bench`` itself.

The actor is built once per GPU: torch imported, CUDA initialised, the tracker loaded (its weights read once,
its graphs compiled once) and the telemetry sampler opened on the GPU Ray gave it (by UUID: engine.telemetry.nvml).
Then ``run`` is called once per configuration, in order; it is ``Bench.run_config``, the code ``trackscope bench``
runs, so a fleet report is a bench report. The frames come once, through Ray's object store.

This module is a plain class: ``engine.fleet.runner`` makes it a Ray actor (``ray.remote``) with the GPU and
accelerator-type resources of its slot. Nothing here raises into Ray: a tracker that fails to load or a
configuration that fails comes back as an ``error`` string, so the driver can say which and go on.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import time
from pathlib import Path
from typing import Any

#: bench settings a fleet passes through to every actor's Bench (the bench CLI's flags)
BENCH_OPTIONS = ("timing", "telemetry", "cost", "deep", "direct")


def _error_text(exc: BaseException) -> str:
    return str(exc) if getattr(exc, "message", None) else f"{type(exc).__name__}: {exc}"


class FleetWorker:
    """One GPU (or the CPU): a Bench over the shared input, kept for every configuration of the fleet."""

    def __init__(self, data: Any, tracker: str, device: str, warmup: int, repeat: int,
                 options: dict[str, bool] | None = None):
        started = time.perf_counter()
        self.warmup = warmup
        self.repeat = repeat
        self.error = ""
        self.bench: Any = None
        self.facts: dict[str, Any] = {"pid": os.getpid(), "host": socket.gethostname(),
                                      "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}
        self.facts.update(_ray_facts())
        options = dict(options or {})
        self.trace_dir = Path(tempfile.mkdtemp(prefix="trackscope-fleet-")) if options.get("deep") else None
        try:
            from engine.workflows.bench import Bench

            self.facts["torch_threads"] = _threads_as_a_plain_process()
            data = _writable(data)
            self.bench = Bench(data, tracker, device, log=lambda _text: None, trace_dir=self.trace_dir,
                               **{k: bool(v) for k, v in options.items() if k in BENCH_OPTIONS})
            self.facts.update(_device_facts(self.bench.device))
            if self.bench.sampler is not None:  # as Bench.sweep does: one sampler across every configuration
                self.bench.sampler.start()
        except (Exception, SystemExit) as exc:  # the driver reports it per configuration and goes on
            self.error = _error_text(exc)
        self.facts["startup_ms"] = (time.perf_counter() - started) * 1e3

    def describe(self) -> dict[str, Any]:
        """Where this actor runs and what it uses: node, GPU ids, device, GPU name and UUID; ``error`` when the
        tracker could not be loaded."""
        return {**self.facts, "error": self.error}

    def run(self, precision: str, points_per_batch: int, frames_per_batch: int) -> dict[str, Any]:
        """One configuration through ``Bench.run_config``: the row, the report (JSON-ready, as ``save`` writes it),
        the deep capture's trace bytes, and the bench's own time (ms), measured here."""
        from engine.core.config import RunConfig
        from engine.report.fields import to_json

        if self.bench is None:
            return {"error": self.error or "the bench did not start"}
        bench = self.bench
        t0 = time.perf_counter()
        reports_before = len(bench.reports)
        try:  # the config exactly as Bench.sweep builds it
            config = RunConfig(tracker=bench.tracker_name, device=bench.device_arg, precision=precision,
                               points_per_batch=points_per_batch, frames_per_batch=frames_per_batch)
            self._check_memory(config)
            row = bench.run_config(config, self.warmup, self.repeat)
            bench.rows.append(row)
        except (Exception, SystemExit) as exc:
            return {"error": _error_text(exc), "bench_ms": (time.perf_counter() - t0) * 1e3}
        bench_ms = (time.perf_counter() - t0) * 1e3
        report = bench.reports[-1] if len(bench.reports) > reports_before else None
        traces: dict[str, bytes] = {}
        if report is not None and isinstance(report.capture, dict) and report.capture.get("trace_file"):
            traces = self._take_trace(str(report.capture["trace_file"]))
        return {"row": row.to_dict(), "report": to_json(report.to_dict()) if report is not None else None,
                "traces": traces, "bench_ms": bench_ms}

    def _check_memory(self, config: Any) -> None:
        """The bench CLI's check before any run (a CUDA device only), made per configuration on this GPU (GPUs of
        a fleet differ in memory): a configuration that cannot fit is refused with the batch sizes that would."""
        from engine.run.device_memory import check_run_device_memory

        bench = self.bench
        num_frames, height, width = bench.data.frames.shape[:3]
        check_run_device_memory(bench.tracker, bench.device, str(bench.data.info.get("path")), num_frames=num_frames,
                                width=width, height=height, num_queries=len(bench.data.queries),
                                points_per_batch=config.points_per_batch, frames_per_batch=config.frames_per_batch,
                                precision=config.precision)

    def _take_trace(self, name: str) -> dict[str, bytes]:
        """The trace file the capture wrote into this actor's folder, read and removed (it travels to the driver,
        which may be on another machine)."""
        if self.trace_dir is None or Path(name).name != name:
            return {}
        path = self.trace_dir / name
        try:
            data = path.read_bytes()
            path.unlink()
        except OSError:
            return {}
        return {name: data}

    def close(self) -> None:
        """Stop the sampler and drop the trace folder (the driver kills the actor after this)."""
        if self.bench is not None:
            self.bench.close()
        if self.trace_dir is not None:
            shutil.rmtree(self.trace_dir, ignore_errors=True)


def _threads_as_a_plain_process() -> int:
    """Give torch the threads a plain process on this node would have (its physical cores), capped at the CPUs
    Ray gave this actor; Ray sets OMP_NUM_THREADS to the actor's CPU count, which counts logical CPUs, so a
    report's ``torch_threads`` (and the CPU-side speed) would otherwise differ from a bench run on the node.
    Outside a Ray worker torch is left as it is."""
    import torch

    try:
        import ray

        cpus = ray.get_runtime_context().get_assigned_resources().get("CPU") if ray.is_initialized() else None
    except Exception:  # noqa: BLE001 - Ray missing or not a worker
        cpus = None
    if not cpus:
        return torch.get_num_threads()
    try:
        import psutil

        physical = psutil.cpu_count(logical=False) or os.cpu_count() or 1
    except ImportError:
        physical = os.cpu_count() or 1
    threads = max(1, min(int(physical), int(cpus)))
    torch.set_num_threads(threads)
    return threads


def _writable(data: Any) -> Any:
    """The bench input with its arrays copied out of Ray's object store (zero-copy arrays there are read-only;
    bench's own are not, and a tracker may write into what it is given)."""
    import dataclasses

    import numpy as np

    truth = data.ground_truth
    if truth is not None:
        truth = {k: np.array(v) for k, v in truth.items()}
    return dataclasses.replace(data, frames=np.array(data.frames), queries=np.array(data.queries), ground_truth=truth)


def _ray_facts() -> dict[str, Any]:
    """The node and the accelerator ids Ray gave this process (empty outside Ray)."""
    try:
        import ray

        if not ray.is_initialized():  # a plain process: asking would start Ray
            raise RuntimeError("not in a Ray worker")
        context = ray.get_runtime_context()
        return {"node_id": context.get_node_id(), "node_ip": ray.util.get_node_ip_address(),
                "gpu_ids": [str(g) for g in ray.get_gpu_ids()]}
    except Exception:  # noqa: BLE001 - outside a Ray worker (tests call the class directly)
        return {"node_id": None, "node_ip": None, "gpu_ids": []}


def _device_facts(device: Any) -> dict[str, Any]:
    """The device the bench actually runs on: 'cuda:0' or 'cpu', the GPU's name and UUID (None on the CPU)."""
    from engine.core.devices import cuda_uuid, device_name

    return {"device": str(device), "gpu_name": device_name(device), "uuid": cuda_uuid(device)}
