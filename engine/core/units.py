"""Units and how numbers are written: the one place for the CLI, the reports' text and the app.

Memory sizes are binary: MiB (2**20 bytes) and GiB (2**30) for a card's memory, a peak allocation, an
RSS; a 141 GiB card is 141 GiB everywhere. Rates are decimal: GB/s (1e9 bytes per second) for bandwidth,
as vendors state it and NVML GPM reports DRAM bandwidth (GPM's PCIe rates come in MiB/s and are converted
where they are read). Times are milliseconds; values under 1 ms keep three significant digits, so a
0.012 ms run is not written "0.0".
"""

from __future__ import annotations

import math
from typing import TypeGuard

MIB = 2**20
GIB = 2**30
GB = 1e9  # decimal: bandwidth (GB/s) only, never a memory size
MISSING = "-"


def _finite(value: float | None) -> TypeGuard[float]:
    return value is not None and isinstance(value, (int, float)) and math.isfinite(value)


def ms_value(ms: float | None, missing: str = MISSING) -> str:
    """A time in ms without its unit: 0.0123 -> "0.0123", 12.34 -> "12.3", 12345.6 -> "12346"."""
    if not _finite(ms):
        return missing
    if abs(ms) < 1:
        return f"{ms:.3g}"
    return f"{ms:.1f}" if abs(ms) < 1e4 else f"{ms:.0f}"


def format_ms(ms: float | None, missing: str = MISSING) -> str:
    """A time with its unit: "0.0123 ms", "12.3 ms"."""
    return f"{ms_value(ms)} ms" if _finite(ms) else missing


def format_bytes(n: float | None, missing: str = MISSING) -> str:
    """A memory size, binary units: "1.50 GiB" from 1 GiB up, "12 MiB" below."""
    if not _finite(n):
        return missing
    return f"{n / GIB:.2f} GiB" if abs(n) >= GIB else f"{n / MIB:.0f} MiB"
