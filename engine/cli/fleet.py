"""`trackscope fleet`: bench's configurations on every GPU of a Ray cluster (or the types asked for), one folder.

Takes bench's arguments (the same definitions: engine.cli.bench) plus where to run: ``--address`` (a Ray cluster;
none: Ray started on this machine) and ``--gpus "T4:1,A100:1"`` (Ray accelerator types; none: every GPU, or the
CPU where there is none). Prints a line per configuration as it finishes, with the fleet's own overhead.
Exit 0 when every configuration ran (or was skipped as bench skips it), 3 when some failed or were lost (or, with
--deep, their capture failed: bench's exit for that), 2 for bad input (a type no node has included).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

from engine.cli.bench import add_measurement_arguments, add_sweep_arguments, sweep_values
from engine.cli.common import check_output_folder, check_output_path
from engine.core.errors import UserError
from engine.core.outputs import exclusive_folder
from engine.core.units import ms_value

#: exit code when the fleet ran but some configuration failed or was lost (its node died, it was never placed)
FLEET_INCOMPLETE_EXIT = 3


def add_arguments(p: argparse.ArgumentParser) -> None:
    from engine.fleet.runner import DEFAULT_PLACEMENT_TIMEOUT_S

    add_sweep_arguments(p)
    p.add_argument("--out", type=Path, metavar="DIR",
                   help="the fleet folder: index.json and one bench folder per GPU (a report per configuration), "
                        "written as each configuration finishes")
    add_measurement_arguments(p)
    p.add_argument("--address", metavar="ADDR",
                   help="the Ray cluster (HOST:6379, ray://HOST:10001 or 'auto'); default: RAY_ADDRESS, else Ray "
                        "started on this machine for this run")
    p.add_argument("--gpus", metavar="TYPE:N[,...]",
                   help='the GPUs to run on by Ray accelerator type, e.g. "T4:1,A100:2" (default: every GPU of the '
                        "cluster; the CPU when it has none)")
    p.add_argument("--placement-timeout", type=float, default=DEFAULT_PLACEMENT_TIMEOUT_S, metavar="S",
                   help=f"seconds to wait for Ray to place and start each GPU's worker (default "
                        f"{DEFAULT_PLACEMENT_TIMEOUT_S:g})")


def run(args: argparse.Namespace) -> int:
    from engine.fleet.runner import import_ray

    import_ray()  # one line on how to install it, before anything else
    if args.out is None:
        return _fleet(args)
    check_output_folder(args.out, "--out")
    with exclusive_folder(args.out, "--out"):
        return _fleet(args)


def _fleet(args: argparse.Namespace) -> int:
    from engine.fleet.actor import BENCH_OPTIONS
    from engine.fleet.index import INDEX_FILE
    from engine.fleet.plan import check_fleet_device, configurations, parse_gpus
    from engine.fleet.runner import FleetSpec, check_reachable, run_fleet
    from engine.fleet.writer import FleetWriter
    from engine.workflows.bench import load_input

    precisions, points, frames = sweep_values(args)
    device = check_fleet_device(args.device)
    gpus = parse_gpus(args.gpus)
    if args.placement_timeout <= 0:
        raise UserError(f"--placement-timeout must be above 0 s, got {args.placement_timeout:g}")
    if args.out is not None:
        out = check_output_folder(args.out, "--out")
        if out.is_dir():
            check_output_path(out / INDEX_FILE, "--out")
    check_reachable(args.address)  # before decoding the video: a wrong address is one line at once
    data = load_input(args)
    configs = configurations(args.tracker, device, precisions, points, frames)
    options = dict(zip(BENCH_OPTIONS, (not args.no_timing, not args.no_telemetry, not args.no_cost, args.deep,
                                       not args.no_direct)))
    spec = FleetSpec(data=data, tracker=args.tracker, device=device, configs=configs, warmup=args.warmup,
                     repeat=args.repeat, options=options, gpus=gpus, address=args.address,
                     placement_timeout_s=args.placement_timeout, out=args.out)
    writer = None
    if args.out is not None:
        import ray

        settings = {"tracker": args.tracker, "video": str(data.info.get("path")), "queries": data.source,
                    "gpus_asked": [str(g) for g in gpus], "address": args.address, "ray_version": ray.__version__,
                    "warmup": args.warmup, "repeat": args.repeat, "options": options}
        writer = FleetWriter(args.out, settings, len(configs))
        writer.start()
    print(f"trackscope fleet: {args.tracker}, {len(configs)} configuration(s) per GPU, video {data.info.get('path')} "
          f"({data.frames.shape[0]} frames {data.frames.shape[2]}x{data.frames.shape[1]}), {len(data.queries)} "
          f"queries ({data.source}), on {', '.join(map(str, gpus)) or 'every GPU'} of "
          f"{args.address or 'a Ray started here'}", file=sys.stderr)
    progress = _Progress(len(configs))
    try:
        result = run_fleet(spec, progress.event, writer)
    finally:
        progress.close()
    print(format_fleet_table(result.entries, progress.rows))
    overheads = [e.overhead_ms for e in result.entries if e.overhead_ms is not None]
    if overheads:
        print(f"trackscope fleet: fleet overhead per configuration (submit to result, minus the bench's own time): "
              f"median {statistics.median(overheads):.1f} ms, min {min(overheads):.1f}, max {max(overheads):.1f} "
              f"over {len(overheads)}", file=sys.stderr)
    if result.index_path is not None:
        print(f"trackscope fleet: wrote {result.index_path}", file=sys.stderr)
    bad = [e for e in result.entries if e.status in ("failed", "lost") or e.capture_error]
    if bad:
        print(f"trackscope fleet: {len(bad)} of {len(result.entries)} configuration(s) failed, were lost or their "
              f"deep capture failed "
              f"(exit {FLEET_INCOMPLETE_EXIT})", file=sys.stderr)
        return FLEET_INCOMPLETE_EXIT
    return 0


def entry_line(entry: Any, row: dict[str, Any] | None) -> str:
    """One finished configuration as a terminal line: where, what, how it ended, the fleet's overhead."""
    where = f"{entry.slot} {entry.gpu or entry.accelerator_type or ''}".strip()
    parts = [f"{where}: {entry.config}: {entry.status}"]
    if row and row.get("ms_median") is not None:
        parts.append(f"{ms_value(row['ms_median'])} ms/run")
    if entry.bench_ms is not None:
        parts.append(f"bench {entry.bench_ms / 1e3:.1f} s")
    if entry.overhead_ms is not None:
        parts.append(f"fleet overhead {entry.overhead_ms:.1f} ms")
    if entry.message:
        parts.append(entry.message)
    if entry.capture_error:
        parts.append(f"deep capture failed: {entry.capture_error}")
    return ", ".join(parts)


class _Progress:
    """A bar over every (GPU, configuration) and a line per event, written above the bar."""

    def __init__(self, per_slot: int):
        self.per_slot = per_slot
        self.bar: Any = None
        self.done = 0
        self.rows: dict[tuple[str, str], dict[str, Any]] = {}

    def _write(self, text: str) -> None:
        from tqdm import tqdm

        tqdm.write(f"trackscope fleet: {text}", file=sys.stderr)

    def event(self, kind: str, payload: Any) -> None:
        from engine.cli.progress import LiveBar

        if kind == "planned":
            self.bar = LiveBar(len(payload) * self.per_slot, "fleet", "config")
        elif kind == "placed":
            f = payload.facts
            self._write(f"{payload.name} started on node {f.get('node_ip') or '?'} ({f.get('device')}, "
                        f"{f.get('gpu_name')}{', ' + f['uuid'] if f.get('uuid') else ''}; node type "
                        f"{payload.node_accelerator_type or '-'}), ready in {(payload.ready_ms or 0) / 1e3:.1f} s")
        elif kind in ("lost", "failed"):
            self._write(f"{payload.name} {kind}: {payload.message}")
        elif kind == "entry":
            entry, row = payload
            if row:
                self.rows[(entry.slot, entry.config)] = row
            self.done += 1
            self._write(entry_line(entry, row))
            if self.bar is not None:
                self.bar.update_to(self.done)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


FLEET_COLUMNS = ("gpu", "config", "status", "ms/run", "vs direct", "bench s", "fleet overhead", "report")


def format_fleet_table(entries: list[Any], rows: dict[tuple[str, str], dict[str, Any]]) -> str:
    """Every entry as an aligned text table: slot and GPU, configuration, status, ms/run, the fleet's overhead."""
    from engine.workflows.bench import vs_direct_text

    cells = [list(FLEET_COLUMNS)]
    for e in sorted(entries, key=lambda e: e.slot):  # stable: bench order within each slot
        row = rows.get((e.slot, e.config), {})
        ms = row.get("ms_median")
        cells.append([f"{e.slot} {e.gpu or ''}".strip(), e.config, e.status, ms_value(ms) if ms is not None else "-",
                      vs_direct_text(row.get("vs_direct")),
                      f"{e.bench_ms / 1e3:.1f}" if e.bench_ms is not None else "-",
                      f"{e.overhead_ms:.1f} ms" if e.overhead_ms is not None else "-",
                      e.report or (e.message[:60] if e.message else "-")])
    widths = [max(len(r[i]) for r in cells) for i in range(len(FLEET_COLUMNS))]
    lines = [" | ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    return "\n".join(lines)
