"""What must match between a fleet report and ``trackscope bench``'s report of the same configuration on the same
machine: everything but the measured times, the telemetry samples, timestamps and process memory.

``differences(a, b)`` lists the paths where two report dicts differ outside those; [] means identical in content.
Used by the fleet's tests and by ``scripts/fleet_h200.sh`` (no Ray here).
"""

from __future__ import annotations

from typing import Any

#: keys whose values are measurements of time, samples or the process, never equal between two runs
VOLATILE_KEYS = frozenset({"created", "telemetry", "t", "start_s", "peak_rss_bytes", "trace_bytes",
                           "capture_seconds", "samples_ms", "session_vs_direct", "vs_direct", "speedup"})
#: key endings of the same kind: ms times, rates per second, seconds
VOLATILE_SUFFIXES = ("_ms", "_per_s", "_seconds", "_s_median")


def volatile(key: str) -> bool:
    """Whether a report key holds a measured time, rate or sample (left out of the comparison)."""
    return key in VOLATILE_KEYS or key.endswith(VOLATILE_SUFFIXES) or key.startswith("ms_") or "_ms_" in key


def content(value: Any) -> Any:
    """``value`` with every volatile key removed, recursively."""
    if isinstance(value, dict):
        return {k: content(v) for k, v in value.items() if not volatile(str(k))}
    if isinstance(value, list):
        return [content(v) for v in value]
    return value


def differences(a: Any, b: Any, path: str = "", limit: int = 50) -> list[str]:
    """Paths where ``a`` and ``b`` differ in content ('runs[2].status: finished != failed'), at most ``limit``."""
    out: list[str] = []
    _diff(content(a), content(b), path, out, limit)
    return out


def _diff(a: Any, b: Any, path: str, out: list[str], limit: int) -> None:
    if len(out) >= limit:
        return
    if isinstance(a, dict) and isinstance(b, dict):
        for key in list(a) + [k for k in b if k not in a]:
            where = f"{path}.{key}" if path else str(key)
            if key not in a or key not in b:
                out.append(f"{where}: only in {'the second' if key not in a else 'the first'}")
            else:
                _diff(a[key], b[key], where, out, limit)
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            out.append(f"{path}: {len(a)} items != {len(b)}")
            return
        for i, (x, y) in enumerate(zip(a, b)):
            _diff(x, y, f"{path}[{i}]", out, limit)
    elif a != b:
        out.append(f"{path}: {str(a)[:60]} != {str(b)[:60]}")
