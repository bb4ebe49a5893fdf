"""Runs a fleet on Ray: one actor per GPU slot, every configuration on every slot, results streamed as they finish.

Where: ``--gpus "T4:1,A100:2"`` asks Ray for GPUs of those accelerator types (``accelerator_type:T4`` resources,
checked against the cluster first: a type no node has is a UserError at once, not a wait); no ``--gpus``: one
actor per GPU of the cluster; a cluster without GPUs: one actor on the CPU. No address: Ray started on this
machine (and shut down after), so a laptop needs nothing more than ``pip install "trackscope[fleet]"``.

How: each slot's configurations go one at a time (the next is submitted when the previous comes back), so an
entry's round trip is its own: submit -> result, of which the bench's own time (measured in the actor) is
subtracted to give the fleet's overhead per configuration. ``ray.wait`` over every slot's one outstanding call
streams results back in the order they finish.

A slot whose actor dies (its node went away: ``RayActorError`` / ``ActorDiedError``) has its running and remaining
configurations reported ``lost``, each by name, in the index and on the terminal. They are not rerun elsewhere:
every slot already runs every configuration, so a rerun on another GPU would measure that GPU twice and call
it this one. A slot Ray cannot place within the placement timeout (its GPUs are busy) is ``lost`` the same way.
"""

from __future__ import annotations

import logging
import socket
import statistics
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.core.config import RunConfig
from engine.core.errors import UserError
from engine.fleet.actor import FleetWorker
from engine.fleet.index import (
    STATUS_FAILED,
    STATUS_LOST,
    STATUS_OK,
    STATUS_SKIPPED,
    FleetEntry,
    FleetGpu,
)
from engine.fleet.plan import ACCELERATOR_PREFIX, ACCELERATOR_SLIVER, GpuRequest, plugin_code_paths

log = logging.getLogger(__name__)

INSTALL_HINT = 'pip install "trackscope[fleet]"'
DEFAULT_PLACEMENT_TIMEOUT_S = 120.0  # torch import + CUDA init + the tracker's load, on a slow node, fit in this
CLOSE_TIMEOUT_S = 10.0
#: an index of up to this many entries is rewritten after every result; a larger one at most every
#: INDEX_MIN_INTERVAL_S (each rewrite is the whole file: thousands of GPUs x configurations would be quadratic)
INDEX_ALWAYS_WRITE = 2000
INDEX_MIN_INTERVAL_S = 2.0


def import_ray() -> Any:
    """Ray, or a UserError saying in one line how to install it."""
    try:
        import ray
    except ImportError:
        raise UserError("trackscope fleet needs Ray, which is not installed", INSTALL_HINT) from None
    return ray


@dataclass
class Slot:
    """One actor: its folder name, what it asked Ray for, and how it is doing."""

    name: str
    accelerator_type: str | None
    num_gpus: int
    num_cpus: float
    actor: Any = None
    facts: dict[str, Any] = field(default_factory=dict)
    status: str = STATUS_OK
    message: str = ""
    queue: deque[RunConfig] = field(default_factory=deque)
    node_accelerator_type: str | None = None
    ready_ms: float | None = None

    def gpu(self) -> FleetGpu:
        f = self.facts
        return FleetGpu(slot=self.name, status=self.status, accelerator_type=self.accelerator_type,
                        node_accelerator_type=self.node_accelerator_type, node=f.get("node_id"),
                        node_ip=f.get("node_ip"), device=f.get("device"), gpu=f.get("gpu_name"), uuid=f.get("uuid"),
                        gpu_ids=tuple(f.get("gpu_ids") or ()), startup_ms=f.get("startup_ms"), ready_ms=self.ready_ms,
                        message=self.message)

    def entry(self, config: RunConfig, status: str, **values: Any) -> FleetEntry:
        f = self.facts
        return FleetEntry(slot=self.name, config=config.label(), precision=config.precision,
                          points_per_batch=config.points_per_batch, frames_per_batch=config.frames_per_batch,
                          status=status, gpu=f.get("gpu_name"), uuid=f.get("uuid"), node=f.get("node_id"),
                          node_ip=f.get("node_ip"), accelerator_type=self.accelerator_type, device=f.get("device"),
                          **values)


@dataclass
class FleetSpec:
    """Everything a fleet run needs, decided before Ray is touched (engine.cli.fleet builds it)."""

    data: Any  # engine.workflows.bench.BenchInput, decoded once on the driver
    tracker: str
    device: str
    configs: list[RunConfig]
    warmup: int
    repeat: int
    options: dict[str, bool]  # engine.fleet.actor.BENCH_OPTIONS
    gpus: list[GpuRequest] = field(default_factory=list)
    address: str | None = None
    placement_timeout_s: float = DEFAULT_PLACEMENT_TIMEOUT_S
    out: Path | None = None


@dataclass
class FleetResult:
    gpus: list[FleetGpu]
    entries: list[FleetEntry]
    index_path: Path | None = None

    @property
    def overhead_ms_median(self) -> float | None:
        values = [e.overhead_ms for e in self.entries if e.overhead_ms is not None]
        return statistics.median(values) if values else None


# -- the cluster -------------------------------------------------------------------------------------------------
def _alive_nodes(ray: Any) -> list[dict[str, Any]]:
    return [n for n in ray.nodes() if n.get("Alive")]


def _node_type(resources: dict[str, float]) -> str | None:
    types = [k[len(ACCELERATOR_PREFIX):] for k in resources if k.startswith(ACCELERATOR_PREFIX)]
    return ",".join(sorted(types)) or None


def cluster_gpus(nodes: list[dict[str, Any]]) -> dict[str | None, list[tuple[int, float]]]:
    """Accelerator type (None: a GPU node that declares none) -> [(GPUs, CPUs)] per alive node with GPUs."""
    found: dict[str | None, list[tuple[int, float]]] = {}
    for node in nodes:
        res = node.get("Resources", {})
        gpus = int(res.get("GPU", 0))
        if gpus < 1:
            continue
        types = [k[len(ACCELERATOR_PREFIX):] for k in res if k.startswith(ACCELERATOR_PREFIX)] or [None]
        for t in types:
            found.setdefault(t, []).append((gpus, float(res.get("CPU", 0))))
    return found


def _cpus_per_gpu(nodes: list[tuple[int, float]]) -> float:
    """CPUs an actor asks beside its GPU: the node's CPUs shared evenly among its GPUs (the fewest of these nodes),
    so a GPU's bench gets the host threads bench would get on a node of its own; at least 1 where a node has any."""
    shares = [cpus // gpus for gpus, cpus in nodes if gpus]
    share = min(shares) if shares else 0.0
    return float(max(1.0, share)) if any(cpus >= 1 for _, cpus in nodes) else 0.0


def _describe_types(found: dict[str | None, list[tuple[int, float]]]) -> str:
    parts = [f"{t or 'untyped'} x{sum(g for g, _ in nodes)}" for t, nodes in found.items()]
    return ", ".join(parts) if parts else "no GPUs"


def plan_slots(requests: list[GpuRequest], nodes: list[dict[str, Any]]) -> list[Slot]:
    """The actors to start, checked against the alive nodes: UserError at once for a type no node has, or for
    more GPUs of a type than the cluster holds."""
    found = cluster_gpus(nodes)
    slots: list[Slot] = []
    if requests:
        for req in requests:
            have = found.get(req.type, [])
            total = sum(g for g, _ in have)
            if not have:
                raise UserError(f"--gpus {req}: no node of the cluster has GPU type {req.type!r} (it has "
                                f"{_describe_types(found)})", "ask for a type the cluster has (`ray status` lists "
                                "them), or leave out --gpus to use every GPU")
            if total < req.count:
                raise UserError(f"--gpus {req}: the cluster has {total} GPU(s) of type {req.type!r}",
                                f"ask for at most {req.type}:{total}")
            cpus = _cpus_per_gpu(have)
            slots += [Slot("", req.type, 1, cpus) for _ in range(req.count)]
    else:
        every = [n for t, ns in found.items() for n in ns]
        total = sum(int(n.get("Resources", {}).get("GPU", 0)) for n in nodes)
        if total:
            slots = [Slot("", None, 1, _cpus_per_gpu(every)) for _ in range(total)]
        else:  # no GPU anywhere: the CPU of the largest node (bench on the CPU uses every core)
            cpus = max((float(n.get("Resources", {}).get("CPU", 0)) for n in nodes), default=0.0)
            slots = [Slot("", None, 0, max(1.0, cpus))]
    for i, slot in enumerate(slots):
        slot.name = f"{i:02d}-{slot.accelerator_type or ('gpu' if slot.num_gpus else 'cpu')}"
    return slots


def runtime_env_for(tracker: str) -> dict[str, Any] | None:
    """The plugin's local code for every worker (``py_modules``); None when the tracker needs none. Ray takes
    local paths only for the whole job (``ray.init(runtime_env=...)``): it zips them once into the cluster's
    store and every worker of the job imports them from there."""
    paths = plugin_code_paths(tracker)
    return {"py_modules": [str(p) for p in paths]} if paths else None


# -- the run -----------------------------------------------------------------------------------------------------
#: (kind, payload): "planned" (the slots), "placed"/"failed"/"lost" (a Slot), "entry" ((FleetEntry, bench row))
Event = Callable[[str, Any], None]


class FleetRun:
    """One fleet run on a connected Ray (``run_fleet`` connects and disconnects around it)."""

    def __init__(self, ray: Any, spec: FleetSpec, on_event: Event | None = None, writer: Any = None):
        self.ray = ray
        self.spec = spec
        self.on_event = on_event or (lambda kind, payload: None)
        self.writer = writer
        self.slots: list[Slot] = []
        self.entries: list[FleetEntry] = []
        self._index_written = -float("inf")

    def run(self) -> FleetResult:
        ray, spec = self.ray, self.spec
        nodes = _alive_nodes(ray)
        self.slots = plan_slots(spec.gpus, nodes)
        self.on_event("planned", self.slots)
        node_types = {n.get("NodeID"): _node_type(n.get("Resources", {})) for n in nodes}
        data_ref = ray.put(spec.data)  # the frames once, to every actor through the object store
        worker_class = ray.remote(max_restarts=0, max_task_retries=0)(FleetWorker)
        try:
            self._start(worker_class, data_ref, node_types)
            self._stream()
        except BaseException:
            self._save(complete=False)
            raise
        finally:
            self._close()
        return FleetResult([s.gpu() for s in self.slots], self.entries, self._save(complete=True))

    def _start(self, worker_class: Any, data_ref: Any, node_types: dict[Any, str | None]) -> None:
        """Create every actor, wait (up to the placement timeout) for each to be placed and to load the tracker."""
        spec = self.spec
        pending: dict[Any, Slot] = {}
        created = time.perf_counter()
        for slot in self.slots:
            options: dict[str, Any] = {"num_gpus": slot.num_gpus, "num_cpus": slot.num_cpus}
            if slot.accelerator_type:
                options["resources"] = {ACCELERATOR_PREFIX + slot.accelerator_type: ACCELERATOR_SLIVER}
            slot.actor = worker_class.options(**options).remote(data_ref, spec.tracker, spec.device, spec.warmup,
                                                                 spec.repeat, spec.options)
            slot.queue = deque(spec.configs)
            pending[slot.actor.describe.remote()] = slot
        deadline = time.monotonic() + spec.placement_timeout_s
        while pending:
            left = deadline - time.monotonic()
            done, _ = self.ray.wait(list(pending), num_returns=1, timeout=max(0.0, left))
            if not done:
                break
            slot = pending.pop(done[0])
            slot.ready_ms = (time.perf_counter() - created) * 1e3
            try:
                slot.facts = self.ray.get(done[0])
            except Exception as exc:  # noqa: BLE001 - the actor died while starting (its node, a crash)
                self._slot_lost(slot, f"its actor died while starting: {_ray_error_text(exc)}")
                continue
            slot.node_accelerator_type = node_types.get(slot.facts.get("node_id"))
            if slot.facts.get("error"):
                self._slot_failed(slot, slot.facts["error"])
            else:
                self.on_event("placed", slot)
        for slot in pending.values():
            self._slot_lost(slot, f"Ray did not place it within {spec.placement_timeout_s:g} s (are the GPUs "
                                  "of this type busy with other work?)")
        started = [s for s in self.slots if s.status == STATUS_OK]
        if not started:
            failed = next((s for s in self.slots if s.status == STATUS_FAILED), None)
            if failed is not None:  # e.g. the tracker does not load anywhere: one clear line, exit 2
                raise UserError(f"no GPU could start the bench: {failed.message}")

    def _slot_failed(self, slot: Slot, message: str) -> None:
        slot.status, slot.message = STATUS_FAILED, message
        self._kill(slot)
        self.on_event("failed", slot)
        for config in self._drain(slot):
            self._add(slot.entry(config, STATUS_FAILED, message=message))

    def _slot_lost(self, slot: Slot, message: str, running: RunConfig | None = None) -> None:
        slot.status, slot.message = STATUS_LOST, message
        self._kill(slot)
        self.on_event("lost", slot)
        for config in ([running] if running is not None else []) + self._drain(slot):
            self._add(slot.entry(config, STATUS_LOST, message=message))

    @staticmethod
    def _drain(slot: Slot) -> list[RunConfig]:
        left = list(slot.queue)
        slot.queue.clear()
        return left

    def _stream(self) -> None:
        """One outstanding configuration per slot; each result is written and announced as it arrives."""
        pending: dict[Any, tuple[Slot, RunConfig, float]] = {}

        def submit(slot: Slot) -> None:
            if slot.status != STATUS_OK or not slot.queue:
                return
            config = slot.queue.popleft()
            ref = slot.actor.run.remote(config.precision, config.points_per_batch, config.frames_per_batch)
            pending[ref] = (slot, config, time.perf_counter())

        for slot in self.slots:
            submit(slot)
        while pending:
            done, _ = self.ray.wait(list(pending), num_returns=1)
            slot, config, submitted = pending.pop(done[0])
            try:
                result = self.ray.get(done[0])
            except Exception as exc:  # noqa: BLE001 - RayActorError (its node died), a lost object, a crash
                if self._is_actor_death(exc):
                    self._slot_lost(slot, f"its actor died: {_ray_error_text(exc)}", running=config)
                else:
                    self._add(slot.entry(config, STATUS_FAILED, message=_ray_error_text(exc)))
                    submit(slot)
                continue
            round_trip_ms = (time.perf_counter() - submitted) * 1e3
            self._result(slot, config, result, round_trip_ms)
            submit(slot)

    def _is_actor_death(self, exc: BaseException) -> bool:
        exceptions = self.ray.exceptions
        death = tuple(c for c in (getattr(exceptions, n, None) for n in
                                  ("RayActorError", "ActorDiedError", "ActorUnavailableError", "WorkerCrashedError",
                                   "NodeDiedError", "OwnerDiedError")) if isinstance(c, type))
        return isinstance(exc, death)

    def _result(self, slot: Slot, config: RunConfig, result: dict[str, Any], round_trip_ms: float) -> None:
        bench_ms = result.get("bench_ms")
        overhead = round_trip_ms - bench_ms if bench_ms is not None else None
        timing = {"bench_ms": bench_ms, "round_trip_ms": round_trip_ms, "overhead_ms": overhead}
        if result.get("error"):
            self._add(slot.entry(config, STATUS_FAILED, message=result["error"], **timing))
            return
        row = result.get("row") or {}
        note = str(row.get("note", ""))
        report_rel = None
        if self.writer is not None:
            report_rel = self.writer.result(slot.name, slot.facts.get("device"), row, result.get("report"),
                                            result.get("traces"))
        if result.get("report") is not None:
            status = STATUS_OK
        elif note.startswith("skipped"):
            status = STATUS_SKIPPED
        else:
            status = STATUS_FAILED
        capture = (result.get("report") or {}).get("capture")
        capture_error = str(capture["error"]) if isinstance(capture, dict) and capture.get("error") else None
        self._add(slot.entry(config, status, report=report_rel, message=note, capture_error=capture_error, **timing),
                  row=row)

    def _add(self, entry: FleetEntry, row: dict[str, Any] | None = None) -> None:
        self.entries.append(entry)
        now = time.monotonic()
        if len(self.entries) <= INDEX_ALWAYS_WRITE or now - self._index_written >= INDEX_MIN_INTERVAL_S:
            self._save(complete=False)
            self._index_written = now
        self.on_event("entry", (entry, row))

    def _save(self, complete: bool) -> Path | None:
        if self.writer is None:
            return None
        gpus = [s.gpu() for s in self.slots]
        return self.writer.finish(gpus, self.entries, complete) if complete else \
            self.writer.write_index(gpus, self.entries, complete)

    def _kill(self, slot: Slot) -> None:
        if slot.actor is not None:
            try:
                self.ray.kill(slot.actor, no_restart=True)
            except Exception:  # noqa: BLE001 - already dead
                pass
            slot.actor = None

    def _close(self) -> None:
        """Close every live actor's bench (sampler, trace folder), then end the actors."""
        live = [s for s in self.slots if s.actor is not None]
        refs = [s.actor.close.remote() for s in live]
        if refs:
            try:
                self.ray.wait(refs, num_returns=len(refs), timeout=CLOSE_TIMEOUT_S)
            except Exception:  # noqa: BLE001 - a dead actor's close: nothing to close
                pass
        for slot in live:
            self._kill(slot)


def _ray_error_text(exc: BaseException) -> str:
    """The first line of a Ray error (its full text carries tracebacks and node dumps)."""
    text = str(exc).strip().splitlines()
    return next((line.strip() for line in text if line.strip()), type(exc).__name__)[:300]


REACH_TIMEOUT_S = 5.0  # a cluster address that does not answer a TCP connect within this is refused


def check_reachable(address: str | None, timeout_s: float = REACH_TIMEOUT_S) -> None:
    """A HOST:PORT (or ray://HOST:PORT) address that accepts no TCP connection is a UserError within ``timeout_s``:
    Ray itself retries its GCS connection for minutes. 'auto', 'local' and None are left to Ray."""
    if not address or address in ("auto", "local"):
        return
    hostport = address.split("://", 1)[1] if "://" in address else address
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isdigit():
        raise UserError(f"--address {address!r} is not HOST:PORT", "e.g. --address 10.0.0.1:6379 or ray://10.0.0.1:10001")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            pass
    except OSError as exc:
        raise UserError(f"cannot reach Ray at {address}: {exc.strerror or exc}", "is the cluster up (`ray status` on "
                        "its head)? leave out --address to run on this machine") from None


def run_fleet(spec: FleetSpec, on_event: Event | None = None, writer: Any = None) -> FleetResult:
    """Connect to Ray (``spec.address``, or a Ray started here), run the fleet, disconnect (a Ray started here is
    shut down; a connection made by the caller is kept)."""
    ray = import_ray()
    started_here = not ray.is_initialized()
    runtime_env = runtime_env_for(spec.tracker)
    if started_here:
        check_reachable(spec.address)
        try:
            ray.init(address=spec.address, include_dashboard=False, logging_level="warning",
                     configure_logging=True, log_to_driver=True, runtime_env=runtime_env)
        except (ConnectionError, ValueError, RuntimeError) as exc:
            where = spec.address or "this machine"
            raise UserError(f"cannot start or reach Ray at {where}: {_ray_error_text(exc)}",
                            "check --address (ray://HOST:10001 or HOST:6379), or leave it out to run here") from None
    elif runtime_env:  # the caller's connection: its job's runtime_env must hold the plugin already
        log.info("Ray was connected by the caller: the plugin's code (%s) must be importable on every node "
                 "(ray.init(runtime_env=%r))", ", ".join(runtime_env["py_modules"]), runtime_env)
    try:
        return FleetRun(ray, spec, on_event, writer).run()
    finally:
        if started_here:
            ray.shutdown()
