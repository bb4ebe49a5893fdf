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


#: a time ratio under this is written "<0.01" (two decimals would read 0.00, as if it took no time)
RATIO_FLOOR = 0.01
#: ratios within this of 1 read as "the same time"
RATIO_SAME_WITHIN = 0.005


def ratio_of(num: float | None, den: float | None) -> float | None:
    """``num / den``; None when either is missing or ``den`` is not positive (no ratio to show)."""
    if num is None or den is None or den <= 0:
        return None
    return num / den


def ratio_value(ratio: float | None, missing: str = MISSING) -> str:
    """A time ratio without its unit: 2 significant digits under 0.1 ("0.042"), "<0.01" under 0.01, else
    two decimals ("1.53"); never "0.00"."""
    if not _finite(ratio) or ratio <= 0:
        return missing
    if ratio < RATIO_FLOOR:
        return f"<{RATIO_FLOOR:g}"
    return f"{ratio:.2g}" if ratio < 0.1 else f"{ratio:.2f}"


def format_time_ratio(new_ms: float | None, old_ms: float | None, missing: str = MISSING) -> str:
    """How ``new_ms`` compares with ``old_ms``: "0.042x the time (24x faster)", "3.10x the time (3.1x slower)"."""
    if not (_finite(new_ms) and _finite(old_ms)) or new_ms <= 0 or old_ms <= 0:
        return missing
    ratio = new_ms / old_ms
    if abs(ratio - 1.0) < RATIO_SAME_WITHIN:
        return "the same time (1.00x)"
    if ratio < 1.0:
        return f"{ratio_value(ratio)}x the time ({_times(1.0 / ratio)}x faster)"
    return f"{ratio_value(ratio)}x the time ({_times(ratio)}x slower)"


def _times(factor: float) -> str:
    """A factor >= 1: "1.01", "3.1", "24", "840" (no exponent)."""
    return f"{factor:.3g}" if factor < 10 else f"{factor:.0f}"
