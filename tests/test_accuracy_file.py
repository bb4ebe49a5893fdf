"""Accuracy files (engine.report.accuracy_file) and the trade-off's accuracy model
(engine.analysis.tradeoff_accuracy) on constructed data: the schema's round trip, every malformed file refused
with a ReportError naming the file, and the matching of entries to run rows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.analysis.tradeoff import UNTRAINED_MARK, TradeoffTable
from engine.analysis.tradeoff_accuracy import TradeoffAccuracy, load_tradeoff_file
from engine.core.config import PRECISION_UNUSED
from engine.core.errors import ReportError
from engine.report.accuracy_file import (
    ACCURACY_FILE_VERSION,
    CYCLE_KIND,
    EVAL_KIND,
    AccuracyEntry,
    AccuracyFile,
    CycleSummary,
    CycleVideo,
    EvalScores,
    EvalVideo,
    load_accuracy_file,
    save_accuracy_file,
)
from engine.report.files import load_any, load_reports, save
from tests.test_tradeoff import report


def eval_file(*entries: tuple[str, str, float], untrained: bool = False) -> AccuracyFile:
    """A held-out accuracy file of two videos; entries (tracker, precision, aj)."""
    made = []
    for tracker, precision, aj in entries:
        videos = (EvalVideo("a", EvalScores(aj + 0.01, 0.8, 0.9, 4), 8, 12.5),
                  EvalVideo("b", EvalScores(aj - 0.01, 0.7, None, 4), 8, None))
        made.append(AccuracyEntry(tracker, precision, EvalScores(aj, 0.75, 0.9, 8), videos, untrained=untrained))
    return AccuracyFile(kind=EVAL_KIND, machine="NVIDIA H200", device="cuda:0", tracker="corrtrack",
                        source_name="heldout", videos=("a", "b"), entries=tuple(made),
                        settings={"precisions": ["fp32", "bf16"], "query_mode": "first"},
                        weights_sha256="ab" * 32, baseline="lk")


def cycle_file(*entries: tuple[str, str, float]) -> AccuracyFile:
    """A cycle-error file of one clip; entries (tracker, precision, median px)."""
    made = []
    for tracker, precision, median in entries:
        shared = (None, None, None) if tracker == "lk" else (7, median, 0.2)
        summary = CycleSummary(9, 8, median, 2 * median, 0.5, *shared)
        made.append(AccuracyEntry(tracker, precision, summary, (CycleVideo("clip.mp4", 48, summary, 30.0),)))
    return AccuracyFile(kind=CYCLE_KIND, machine="CPU", device="cpu", tracker="corrtrack", source_name="clip.mp4",
                        videos=("clip.mp4",), entries=tuple(made), settings={"grid": 3}, baseline="lk",
                        extra={"grid": 3, "results": [{"tracker": "lk", "points": 9}]})


def test_both_kinds_round_trip_through_json(tmp_path):
    for made in (eval_file(("corrtrack", "fp32", 0.7), ("lk", PRECISION_UNUSED, 0.6)),
                 cycle_file(("corrtrack", "bf16", 1.5), ("lk", PRECISION_UNUSED, 0.3))):
        path = save_accuracy_file(made, tmp_path / f"{made.kind}.json")
        data = json.loads(path.read_text())
        assert data["kind"] == made.kind and data["version"] == ACCURACY_FILE_VERSION
        assert load_accuracy_file(path) == made
        assert not [p for p in tmp_path.iterdir() if ".tmp" in p.name]  # written through a temp file, renamed
    cycle = load_accuracy_file(tmp_path / f"{CYCLE_KIND}.json")
    assert cycle.extra["results"][0]["points"] == 9  # the older cycle --json layout stays beside the entries
    assert cycle.entries[0].summary.kept_share == pytest.approx(8 / 9)


def _write(tmp_path: Path, data, name: str = "acc.json") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def _good() -> dict:
    return eval_file(("corrtrack", "fp32", 0.7)).to_dict()


def _without(data: dict, *keys) -> dict:
    """``data`` without the key at the path ``keys``."""
    inner = data
    for key in keys[:-1]:
        inner = inner[key]
    del inner[keys[-1]]
    return data


@pytest.mark.parametrize("make, message", [
    (lambda: "{\"kind\": ", "not valid JSON"),
    (lambda: "", "is empty"),
    (lambda: [1, 2], "a JSON object expected"),
    (lambda: {**_good(), "kind": "trackscope-bench"}, "kind 'trackscope-bench' is not an accuracy file"),
    (lambda: _without(_good(), "kind"), "no kind field"),
    (lambda: {"format": "trackscope-report", "version": 2}, "a run report or bench file"),
    (lambda: {"grid": 3, "frames": 48, "config": {}, "results": []}, "before its files had one"),
    (lambda: {**_good(), "version": ACCURACY_FILE_VERSION + 1}, "newer trackscope"),
    (lambda: {**_good(), "version": "1"}, "version should be a whole number"),
    (lambda: {**_good(), "version": True}, "version should be a whole number"),
    (lambda: _without(_good(), "version"), "version is missing"),
    (lambda: _without(_good(), "machine"), "machine is missing"),
    (lambda: _without(_good(), "entries"), "entries is missing"),
    (lambda: _without(_good(), "settings"), "settings is missing"),
    (lambda: _without(_good(), "source", "name"), "source.name is missing"),
    (lambda: _without(_good(), "entries", 0, "mean"), r"entries\[0\].mean is missing"),
    (lambda: _without(_good(), "entries", 0, "videos", 1, "num_points"), r"entries\[0\].videos\[1\].num_points"),
    (lambda: {**_good(), "entries": {"a": 1}}, "entries should be a list"),
])
def test_a_malformed_file_is_a_report_error_naming_the_file_and_field(tmp_path, make, message):
    path = _write(tmp_path, make())
    with pytest.raises(ReportError, match=message) as caught:
        load_accuracy_file(path)
    assert str(path) in caught.value.message


def test_wrong_values_inside_entries_are_named(tmp_path):
    data = _good()
    data["entries"][0]["precision"] = "fp64"
    with pytest.raises(ReportError, match=r"entries\[0\].precision should be one of"):
        load_accuracy_file(_write(tmp_path, data))
    data = _good()
    data["entries"][0]["mean"]["aj"] = "high"
    with pytest.raises(ReportError, match=r"entries\[0\].mean.aj should be a number"):
        load_accuracy_file(_write(tmp_path, data))
    cycle = cycle_file(("corrtrack", "fp32", 1.0)).to_dict()
    cycle["entries"][0]["overall"]["kept"] = 10  # more than its 9 points
    with pytest.raises(ReportError, match=r"entries\[0\].overall.kept should be at most points"):
        load_accuracy_file(_write(tmp_path, cycle))
    with pytest.raises(ReportError, match="does not exist"):
        load_accuracy_file(tmp_path / "none.json")


def test_a_report_load_refuses_an_accuracy_file_and_says_where_it_goes(tmp_path):
    path = save_accuracy_file(eval_file(("corrtrack", "fp32", 0.7)), tmp_path / "acc.json")
    for load in (load_any, load_reports):
        with pytest.raises(ReportError, match="is an accuracy file") as caught:
            load(path)
        assert "trade-offs" in (caught.value.suggestion or "")


def test_the_tradeoff_file_loader_reads_either_kind_of_file(tmp_path):
    acc = save_accuracy_file(cycle_file(("corrtrack", "fp32", 1.0)), tmp_path / "cycle.json")
    assert isinstance(load_tradeoff_file(acc), AccuracyFile)
    bench = save({"format": "trackscope-bench", "version": 1, "environment": {}, "reports": [report("fp32")]},
                 tmp_path / "bench.json")
    found = load_tradeoff_file(bench)
    assert isinstance(found, list) and len(found) == 1
    with pytest.raises(ReportError, match="junk.json"):
        load_tradeoff_file(_write(tmp_path, "{not json", "junk.json"))


def test_entries_match_rows_of_the_same_tracker_and_precision_and_the_rest_stand_alone():
    table = TradeoffTable()
    table.add_many([report("fp32", 30.0), report("bf16", 15.0), report("bf16", 14.0, video="other.mp4")])
    acc = TradeoffAccuracy()
    assert acc.add(eval_file(("corrtrack", "fp32", 0.70), ("corrtrack", "bf16", 0.69), ("corrtrack", "int8", 0.6),
                             ("lk", PRECISION_UNUSED, 0.5)), "held.json") == 4
    acc.add(cycle_file(("corrtrack", "bf16", 1.25), ("lk", PRECISION_UNUSED, 0.3)), "cycle.json")
    rows = list(table.rows.values())
    held, cycle = acc.of(rows[1].tracker, rows[1].precision)
    assert held is not None and held.aj == pytest.approx(0.69) and held.source.num_videos == 2
    assert cycle is not None and cycle.median_px == 1.25 and cycle.kept_text == "8/9" and cycle.baseline == "lk"
    assert acc.of("corrtrack", "fp32")[1] is None  # no cycle figure for fp32
    alone = acc.unmatched((r.tracker, r.precision) for r in rows)
    assert [(a.tracker, a.precision) for a in alone] == [("corrtrack", "int8"), ("lk", PRECISION_UNUSED)]
    assert alone[1].cycle is not None and alone[1].cycle.baseline is None  # LK is the baseline, not compared
    assert alone[1].machine == "NVIDIA H200 / CPU"
    assert [s.text for s in acc.sources(EVAL_KIND)] == ["held-out set heldout (2 videos, NVIDIA H200; held.json)"]
    assert acc.sources(CYCLE_KIND)[0].text.startswith("1 real clip: clip.mp4 (CPU")
    acc.add(eval_file(("corrtrack", "bf16", 0.5)), "later.json")  # a later file replaces that entry
    later = acc.of("corrtrack", "bf16")[0]
    assert later is not None and later.aj == 0.5 and later.source.path == "later.json"
    acc.clear()
    assert len(acc) == 0 and acc.unmatched([]) == []


def test_an_untrained_entry_matches_only_untrained_rows():
    acc = TradeoffAccuracy()
    acc.add(eval_file(("corrtrack", "fp32", 0.1), untrained=True), "u.json")
    assert acc.of("corrtrack", "fp32") == (None, None)
    assert acc.of("corrtrack" + UNTRAINED_MARK, "fp32")[0] is not None
