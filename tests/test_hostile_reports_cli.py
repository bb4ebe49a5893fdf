"""A fuzz over the CLI verbs that read reports: diagnose, compare, compare --what-if, on mangled files.

In-process, fixed seed: every case must exit 0 or 2, and never print a traceback.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest

from engine.cli.entry import main
from engine.report.files import save
from engine.report.schema import BenchFile, Report

DATA = Path(__file__).parent / "data" / "h200"
SOURCES = (DATA / "corrtrack_fp32_p256_sample.json", DATA / "deep" / "deep_nested.json",
           DATA / "planted" / "host_sync_fp32_p128_f16.json")
SEED = 20261201
CASES = 200
DELETE = object()
WRONG_VALUES = (None, "x", -1, 0, [], {}, True, 1e308, -1e308, "NaN", [None], {"x": 1}, DELETE)
GPU = "Tesla T4"


def _paths(value, path=()):
    """Every key path of decoded JSON; of each list its first and last item."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield (*path, key)
            yield from _paths(item, (*path, key))
    elif isinstance(value, list) and value:
        for index in sorted({0, len(value) - 1}):
            yield (*path, index)
            yield from _paths(value[index], (*path, index))


def _mangle(data, rng: np.random.Generator):
    """A copy with 1-3 fields replaced by wrong values (or removed)."""
    data = copy.deepcopy(data)
    for _ in range(int(rng.integers(1, 4))):
        paths = list(_paths(data))
        if not paths:
            break
        path = paths[int(rng.integers(len(paths)))]
        parent = data
        for key in path[:-1]:
            parent = parent[key]
        wrong = WRONG_VALUES[int(rng.integers(len(WRONG_VALUES)))]
        if wrong is DELETE and isinstance(parent, dict):
            del parent[path[-1]]
        else:
            parent[path[-1]] = copy.deepcopy(wrong if wrong is not DELETE else None)
    return data


def _bytes_case(text: str, rng: np.random.Generator) -> bytes:
    """The file cut short, with bytes flipped, or with garbage in front."""
    raw = text.encode()
    kind = int(rng.integers(3))
    if kind == 0:
        return raw[: int(rng.integers(len(raw)))]
    if kind == 1:
        out = bytearray(raw)
        for i in rng.integers(0, len(out), size=8):
            out[int(i)] = int(rng.integers(256))
        return bytes(out)
    return bytes(rng.integers(0, 256, size=64, dtype=np.uint8)) + raw


@pytest.fixture(scope="module")
def sources():
    texts = [p.read_text() for p in SOURCES]
    bench = BenchFile(reports=tuple(Report.from_dict(json.loads(t)) for t in texts[:2]))
    return [json.loads(t) for t in texts] + [bench.to_dict()]


@pytest.mark.slow
def test_report_reading_verbs_exit_0_or_2_without_tracebacks(sources, tmp_path, capsys):
    rng = np.random.default_rng(SEED)
    good = tmp_path / "good.json"
    save(sources[0], good)
    codes: dict[int, int] = {}
    bad_cases = []
    for case in range(CASES):
        data = sources[int(rng.integers(len(sources)))]
        path = tmp_path / f"case{case}.json"
        if rng.random() < 0.2:
            path.write_bytes(_bytes_case(json.dumps(data), rng))
        else:
            path.write_text(json.dumps(_mangle(data, rng), allow_nan=True))
        pick = "#1" if data.get("format") == "trackscope-bench" and rng.random() < 0.5 else ""
        verb = int(rng.integers(4))
        argv = (["diagnose", str(path)], ["diagnose", str(path), "--json"],
                ["compare", str(good), str(path) + pick], ["compare", str(path) + pick, "--what-if", GPU])[verb]
        code = main(argv)
        err = capsys.readouterr().err
        codes[code] = codes.get(code, 0) + 1
        if code not in (0, 2) or "Traceback" in err:
            bad_cases.append((case, argv[0], code, err[-400:]))
        path.unlink()
    assert not bad_cases, bad_cases[:3]
    assert codes.get(2, 0) > CASES // 10 and codes.get(0, 0) > CASES // 10  # both kinds of case happen
