"""The one finding type: today's analysis rules, today's capture rules and the findings a file recorded.

A ``Finding`` says what is wrong (``rule``, ``title``), how sure (``severity``), what is at stake (``stake_ms``
and ``share``: the time of each run it explains and its share of the run), the numbers behind it
(``evidence``), what to change (``suggestion``), where (``stage``, ``module``, ``call_site``: the user's
``file:line function``; ``site`` is its ``file:line``), which report it concerns (``label``) and where it
came from (``source``: "analysis", "capture" or "recorded").

The capture rules (engine.capture.rules*) build plain dicts; ``Finding.from_capture`` converts them at the
boundary. ``to_dict`` writes each source's own shape, so what files, the CLI and the app read is unchanged:
an analysis finding's evidence rounded to 4 decimals (as ``engine.analysis.facts`` always wrote it); a capture
finding with ``stage``, ``module`` and ``call_site`` always present (null when unknown); a recorded one exactly
as read (unknown keys kept in ``extra``, keys that were null written null again). ``source`` itself is not
written: where a finding sits (a report's ``recorded_findings``, an analysis) says it.

For the app, which reads findings as dicts in places, a Finding answers ``f["rule"]``, ``f.get("module")``,
``f.keys()``, ``f.items()`` and ``"key" in f`` from its ``to_dict()`` (read-only).
"""

from __future__ import annotations

import math
from collections.abc import ItemsView, KeysView, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from engine.report.fields import Fields, fail, to_json

SOURCES = ("analysis", "capture", "recorded")
SEVERITIES = ("critical", "warning", "info")
#: the optional keys a finding may carry beside the five it always has
_OPTIONAL = ("stage", "module", "call_site", "label", "stake_ms", "share")
#: the keys a capture finding always writes (null when unknown): the shape the app's capture view reads
_CAPTURE_KEYS = ("stage", "module", "call_site")
#: decimals an analysis finding's evidence is written with
EVIDENCE_DECIMALS = 4


def _num(value: Any) -> float | None:
    """An analysis evidence value as JSON: a float rounded to EVIDENCE_DECIMALS, None for junk or non-finite."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return round(v, EVIDENCE_DECIMALS) if math.isfinite(v) else None


@dataclass
class Finding:
    """One diagnosis (see the module docstring). Not frozen: the analysis rules' record never was, and callers
    (the app's tests among them) adjust one in place; the engine itself builds changed ones with ``replace``."""

    rule: str
    severity: str
    title: str
    evidence: dict[str, Any]
    suggestion: str
    stage: str | None = None
    label: str | None = None  # the report it concerns (several reports: a bench sweep)
    stake_ms: float | None = None  # the time of each run it explains (orders findings of one severity)
    module: str | None = None
    call_site: str | None = None  # the user's "file:line function"
    share: float | None = None  # its share of the run (a capture finding's evidence "share")
    source: str = "analysis"  # analysis | capture | recorded
    extra: dict[str, Any] = field(default_factory=dict)  # keys a recorded finding had that this type does not know
    nulls: tuple[str, ...] = field(default=(), compare=False)  # optional keys a file had as null (written back)

    # -- what is at stake, where ------------------------------------------------------------------------
    @property
    def ms_at_stake(self) -> float | None:
        """The time of each run it explains: ``stake_ms``, else the evidence's ``ms_at_stake``."""
        return self.stake_ms if self.stake_ms is not None else self._evidence_number("ms_at_stake")

    @property
    def share_at_stake(self) -> float | None:
        """Its share of the run: ``share``, else the evidence's ``share``."""
        return self.share if self.share is not None else self._evidence_number("share")

    def _evidence_number(self, key: str) -> float | None:
        """The evidence's number under ``key`` (not a bool), else None."""
        value = self.evidence.get(key) if isinstance(self.evidence, Mapping) else None
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    @property
    def site(self) -> str | None:
        """The ``file:line`` of its call site ("tapnet/torch/utils.py:201"), None without one."""
        if not self.call_site:
            return None
        return self.call_site.split(" ", 1)[0]

    @property
    def is_recorded(self) -> bool:
        return self.source == "recorded"

    # -- reading and writing ----------------------------------------------------------------------------
    @classmethod
    def from_dict(cls, data: Any, path: str = "finding", source: str = "recorded") -> Finding:
        """A finding from JSON (a report's recorded finding, a capture rule's dict); ReportError naming the
        bad field. Keys it does not know are kept in ``extra``."""
        if source not in SOURCES:
            raise ValueError(f"source must be one of {SOURCES}, not {source!r}")
        f = Fields(data, path)
        nulls = tuple(k for k in _OPTIONAL if k in f.data and f.data[k] is None)
        return cls(rule=f.string("rule", ""), severity=f.string("severity", "info"), title=f.string("title", ""),
                   evidence=f.opaque_map("evidence") or {}, suggestion=f.string("suggestion", ""),
                   stage=f.opt_string("stage"), label=f.opt_string("label"), stake_ms=f.opt_number("stake_ms"),
                   module=f.opt_string("module"), call_site=f.opt_string("call_site"),
                   share=f.opt_number("share"), source=source, extra=f.rest(), nulls=nulls)

    @classmethod
    def from_capture(cls, data: Mapping[str, Any], label: str | None = None, path: str = "finding") -> Finding:
        """A capture rule's finding dict (engine.capture.finding.finding) as a Finding of source "capture"."""
        if not isinstance(data, Mapping):
            raise fail(path, "a capture finding (an object)", data)
        found = cls.from_dict(to_json(dict(data)), path, source="capture")
        return replace(found, label=label if label is not None else found.label)

    def to_dict(self) -> dict[str, Any]:
        """This source's JSON shape (see the module docstring)."""
        if self.source == "analysis":
            evidence: Any = {k: _num(v) for k, v in self.evidence.items()}
        else:
            evidence = self.evidence
        out: dict[str, Any] = {"rule": self.rule, "severity": self.severity, "title": self.title,
                               "evidence": evidence, "suggestion": self.suggestion}
        always = _CAPTURE_KEYS if self.source == "capture" else ()
        for key in _OPTIONAL:
            value = getattr(self, key)
            if key == "stake_ms" and value is not None and not math.isfinite(value):
                value = None
            if value is not None:
                out[key] = float(value) if key in ("stake_ms", "share") and self.source == "analysis" else value
            elif key in always or key in self.nulls:
                out[key] = None
        return {**out, **self.extra}

    # -- read-only dict access, for readers that take findings as dicts ------------------------------------
    def __getitem__(self, key: str) -> Any:
        return self.to_dict()[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.to_dict().get(key, default)

    def keys(self) -> KeysView[str]:
        return self.to_dict().keys()

    def items(self) -> ItemsView[str, Any]:
        return self.to_dict().items()

    def __contains__(self, key: object) -> bool:
        return key in self.to_dict()


def as_finding(value: Finding | Mapping[str, Any], source: str = "capture", label: str | None = None) -> Finding:
    """A Finding as is; a dict (a capture rule's, or a recorded one) converted."""
    if isinstance(value, Finding):
        return value
    if source == "capture":
        return Finding.from_capture(value, label)
    found = Finding.from_dict(to_json(dict(value)), source=source)
    return replace(found, label=label) if label is not None else found
