"""What every capture rule shares: the finding's shape, its severity, and which evidence is the user's.

A finding is a plain dict (the app and reports read it): ``rule``, ``severity`` ('critical' | 'warning' |
'info'), ``title``, ``evidence`` (numbers; ``share`` is the fraction of the captured run's wall time at
stake, ``ms_at_stake`` that share of the typical unprofiled wall), ``suggestion``, ``stage``, ``module``
and ``call_site`` (the user's ``file:line function``). Severity follows the share: nothing under
``WARNING_SHARE`` is above 'info', so the costliest problem comes out on top.

The rules never blame trackscope's own work on the user: evidence rows whose layer is ``trackscope``,
or that lie in the adapter's stages (upload, download, decode), are left out by :func:`user_rows`.
"""

from __future__ import annotations

from typing import Any, Iterable, TypeVar

from engine.capture.evidence import TRACKSCOPE
from engine.capture.summary import ADAPTER_STAGES, CaptureSummary
from engine.core.units import format_bytes
from engine.telemetry.specs import CPU_DEFAULT_BANDWIDTH_GBPS, lookup

CRITICAL_SHARE = 0.25
WARNING_SHARE = 0.05
REPORT_SHARE = 0.01  # a finding about less than this share of the run is not reported
FIX_GAIN = 0.5  # share of an op's time a precision / tensor-core / layout fix saves, at least
#: DRAM bandwidth when the card is not in engine.telemetry.specs: an A100-40GB's 1555 GB/s rounded down, so a
#: chain reads as memory-bound only when it moves a lot of data for its time on any current datacenter card
DEFAULT_GPU_BANDWIDTH_GBPS = 1500.0
SEVERITY_ORDER = {"critical": 0, "warning": 1, "info": 2}

Row = TypeVar("Row")
Context = dict[str, Any]
Finding = dict[str, Any]


def severity(share: float) -> str:
    if share >= CRITICAL_SHARE:
        return "critical"
    if share >= WARNING_SHARE:
        return "warning"
    return "info"


def finding(rule: str, share: float, title: str, evidence: dict[str, Any], suggestion: str, *,
            typical_wall_ms: float | None, stage: str | None = None, module: str | None = None,
            call_site: str | None = None, most_severe: str = "critical") -> Finding:
    """A finding dict; ``most_severe`` caps the severity where the share is a guess (cuDNN benchmark)."""
    share = max(0.0, min(1.0, share))
    ev = _plain(evidence)
    ev["share"] = round(share, 4)
    if typical_wall_ms:
        ev["ms_at_stake"] = round(share * typical_wall_ms, 3)
    level = severity(share)
    if SEVERITY_ORDER[level] < SEVERITY_ORDER[most_severe]:
        level = most_severe
    return {"rule": rule, "severity": level, "title": title, "evidence": ev, "suggestion": suggestion,
            "stage": stage, "module": module, "call_site": call_site}


def _plain(evidence: dict[str, Any]) -> dict[str, Any]:
    """Evidence as flat scalars for the app's tree and the reports: floats rounded, lists joined with ', ',
    a nested mapping flattened to ``KEY_SUBKEY``."""
    out: dict[str, Any] = {}
    for key, value in evidence.items():
        if isinstance(value, dict):
            out.update(_plain({f"{key}_{k}": v for k, v in value.items()}))
        elif isinstance(value, (list, tuple)):
            out[key] = ", ".join(str(v) for v in value)
        else:
            out[key] = round(value, 4) if isinstance(value, float) else value
    return out


_finding = finding  # the name other modules used before the rules were split


def is_users(layer: str, stage: str) -> bool:
    """True unless the work is trackscope's own (its layer, or the adapter's upload/download/decode)."""
    return layer != TRACKSCOPE and stage not in ADAPTER_STAGES


def user_rows(rows: Iterable[Row]) -> list[Row]:
    """Evidence rows of the tracker's own code: not trackscope's layer, not in the adapter's stages."""
    return [r for r in rows if is_users(getattr(r, "layer", ""), getattr(r, "stage", ""))]


def by_site(rows: Iterable[Row]) -> dict[str | None, list[Row]]:
    """Rows grouped by their call site (None where the capture had no Python stack)."""
    out: dict[str | None, list[Row]] = {}
    for r in rows:
        out.setdefault(getattr(r, "site", None), []).append(r)
    return out


def at(site: str | None) -> str:
    """' at SITE' for a title, or nothing."""
    return f" at {site}" if site else ""


def where(module: str | None, stage: str | None = None) -> str:
    """' (in MODULE)' for a title, or nothing."""
    label = module or stage
    return f" (in {label})" if label else ""


def size(nbytes: float) -> str:
    """A size for a title: bytes or KiB below a MiB, else engine.core.units' binary units."""
    if nbytes < 1024:
        return f"{nbytes:.0f} B"
    if nbytes < 1 << 20:
        return f"{nbytes / 1024:.1f} KiB"
    return format_bytes(nbytes)


def share_of(s: CaptureSummary, ms: float) -> float:
    """``ms`` as a share of the captured run's wall, 0 for a run without one."""
    return ms / s.wall_ms if s.wall_ms else 0.0


def gpu_share_of(s: CaptureSummary, ms: float) -> float:
    """``ms`` of device time (kernels, copies, driver calls) as a share of the run as it runs unprofiled.

    The profiler slows the host side (1.0-3x on the H200; its Python tracer most) but hardly the kernels, so
    device time over the profiled wall understates what it is of a real run (a 0.3 ms transpose in a 7.8 ms
    run read as 1.6 % of the 20 ms profiled one). Host-time evidence stays over the profiled wall.
    """
    run = s.unprofiled_wall_ms if s.unprofiled_wall_ms and s.unprofiled_wall_ms < (s.wall_ms or 0.0) else s.wall_ms
    return min(1.0, ms / run) if run else 0.0


def deflated(s: CaptureSummary, host_ms: float) -> float:
    """Host time measured under the profiler, scaled to the unprofiled run (the profiler inflates host work)."""
    if s.unprofiled_wall_ms and s.wall_ms and s.unprofiled_wall_ms < s.wall_ms:
        return host_ms * s.unprofiled_wall_ms / s.wall_ms
    return host_ms


def device_bandwidth_gbps(s: CaptureSummary, ctx: Context) -> tuple[float, str]:
    """Peak memory bandwidth of the captured device and where the number comes from."""
    if not s.has_gpu:
        return CPU_DEFAULT_BANDWIDTH_GBPS, "CPU default (engine.telemetry.specs)"
    name = ctx.get("device_name") or s.evidence.settings.get("device_name")
    spec = lookup(name) if name else None
    if spec is not None and spec.bandwidth_gbps:
        return spec.bandwidth_gbps, f"{spec.name} datasheet"
    return DEFAULT_GPU_BANDWIDTH_GBPS, "default (card not in the specs table)"


def tracker_wall_ms(s: CaptureSummary) -> float:
    """The run's wall less trackscope's adapter stages (upload, download, decode)."""
    adapter = sum(r.wall_ms for r in s.stages if r.stage in ADAPTER_STAGES)
    return max(0.0, s.wall_ms - adapter)
