"""Sync and copy rules on constructed summaries: host_sync (every kind), pageable_copy, repeated_copy,
sync_copy, cpu_round_trip; each fires on its evidence at the user's site, never on trackscope's own."""

from __future__ import annotations

import pytest

from engine.capture.evidence import CopyRow, SyncRow
from engine.capture.summary import RoundTripRow
from tests.rules_cases import (
    OTHER_SITE,
    SITE,
    MiB,
    above_info,
    as_trackscope,
    by_rule,
    clean_cpu,
    clean_gpu,
    findings,
    in_adapter_stage,
    planted,
)


def syncs(kind="item", op="aten::_local_scalar_dense", count=200, wait_ms=2.0, idle_after_ms=3.0, site=SITE):
    return (SyncRow(kind, op, count, wait_ms, idle_after_ms, site=site, layer="user", stage="refine",
                    module="refine.mlp"),)


def test_clean_runs_have_nothing_above_info():
    assert above_info(findings(clean_gpu())) == []
    assert above_info(findings(clean_cpu())) == []


def test_host_sync_names_the_site_the_kind_and_the_time_the_syncs_cost():
    found = findings(planted(clean_gpu(), syncs=syncs()))
    top = found[0]
    assert top["rule"] == "host_sync" and top["call_site"] == SITE and top["module"] == "refine.mlp"
    assert top["evidence"]["syncs"] == 200 and top["evidence"]["kind"] == "item"
    assert top["evidence"]["share"] == 0.25 and top["severity"] == "critical"  # 2 ms waiting + 3 ms idle of 20
    assert "torch.where" in top["suggestion"] and SITE in top["title"]


def test_host_sync_costs_at_least_a_drain_per_sync():
    top = findings(planted(clean_gpu(), syncs=syncs(wait_ms=0.0, idle_after_ms=0.0)))[0]
    assert top["rule"] == "host_sync" and top["evidence"]["share"] == pytest.approx(200 * 0.015 / 20, abs=1e-4)


@pytest.mark.parametrize("kind, op, phrase", [
    ("item", "aten::_local_scalar_dense", "torch.where"),
    ("to_host", "aten::_to_copy", "non_blocking=True"),
    ("nonzero", "aten::nonzero", "masked_fill"),
    ("synchronize", "synchronize", "torch.cuda.Event"),
    ("other", "aten::equal", "keep the value on the GPU"),
])
def test_host_sync_suggestion_fits_the_kind_of_sync(kind, op, phrase):
    top = findings(planted(clean_gpu(), syncs=syncs(kind=kind, op=op)))[0]
    assert top["rule"] == "host_sync" and phrase in top["suggestion"] and op in top["title"]


def test_host_sync_one_finding_per_site():
    two = (*syncs(count=120), *syncs(kind="nonzero", op="aten::nonzero", count=60, wait_ms=1.0,
                                     idle_after_ms=0.5, site=OTHER_SITE))
    sites = [f["call_site"] for f in findings(planted(clean_gpu(), syncs=two)) if f["rule"] == "host_sync"]
    assert sites == [SITE, OTHER_SITE]  # costliest first


def test_host_sync_never_about_trackscope_and_not_without_syncs():
    assert "host_sync" not in by_rule(findings(clean_gpu()))  # its 2 download syncs are trackscope's
    assert above_info(findings(planted(clean_gpu(), syncs=as_trackscope(syncs())))) == []
    assert above_info(findings(planted(clean_gpu(), syncs=in_adapter_stage(syncs(), "download")))) == []
    assert "host_sync" not in by_rule(findings(planted(clean_gpu(), syncs=syncs(count=5))))  # under SYNC_MIN


def pageable(direction="HtoD", nbytes=64 * MiB, ms=8.0, count=4, site=SITE, repeated=0):
    src, dst = ("Pageable", "Device") if direction == "HtoD" else ("Device", "Pageable")
    return (CopyRow("memcpy", direction, src, dst, count, nbytes, ms, api="cudaMemcpyAsync", blocking=count,
                    host_ms=ms, repeated=repeated, sizes=1, site=site, layer="user", stage="refine",
                    module="refine.mlp"),)


def test_pageable_copy_gives_bytes_and_rate_against_the_link():
    top = findings(planted(clean_gpu(), copies=pageable()))[0]
    assert top["rule"] == "pageable_copy" and top["call_site"] == SITE
    ev = top["evidence"]
    assert ev["bytes"] == 64 * MiB and ev["achieved_gbps"] == pytest.approx(64 * MiB / 8e6, abs=1e-3)
    link_ms = 64 * MiB / 25e9 * 1e3
    assert ev["share"] == pytest.approx((8.0 - link_ms) / 20, abs=1e-4) and top["severity"] == "critical"
    assert "pin_memory" in top["suggestion"] and "non_blocking" in top["suggestion"]


def test_pageable_copy_not_for_scalars_pinned_memory_or_trackscope():
    assert "pageable_copy" not in by_rule(findings(clean_gpu()))  # the upload is trackscope's
    small = pageable(nbytes=4 * 8, ms=0.2)  # four scalars: host_sync's business, not bulk data
    assert "pageable_copy" not in by_rule(findings(planted(clean_gpu(), copies=small)))
    pinned = tuple(CopyRow(**{**r.__dict__, "src": "Pinned"}) for r in pageable())
    assert "pageable_copy" not in by_rule(findings(planted(clean_gpu(), copies=pinned)))
    assert above_info(findings(planted(clean_gpu(), copies=as_trackscope(pageable(), "upload")))) == []


def test_a_pageable_download_that_is_a_sync_is_named_once_by_the_sync():
    s = planted(clean_gpu(), copies=pageable("DtoH"), syncs=syncs(kind="to_host", op="aten::_to_copy", count=40,
                                                                  wait_ms=8.0, idle_after_ms=1.0))
    rules = by_rule(findings(s))
    assert "pageable_copy" not in rules and rules["host_sync"]["evidence"]["pageable_copy_share"] > 0


def repeated(count=500, nbytes=8):
    return (CopyRow("memcpy", "HtoD", "Pageable", "Device", count, count * nbytes, 0.5, api="cudaMemcpyAsync",
                    blocking=count, host_ms=2.0, repeated=count - 1, sizes=1, site=SITE, layer="user",
                    stage="refine", module="refine.mlp"),)


def test_repeated_copy_of_the_same_sizes_each_call():
    top = findings(planted(clean_gpu(), copies=repeated()))[0]
    assert top["rule"] == "repeated_copy" and top["call_site"] == SITE and top["evidence"]["repeated"] == 499
    assert top["evidence"]["share"] == pytest.approx(499 * 0.015 / 20, abs=1e-4)  # at least a drain each
    assert "buffer" in top["suggestion"]
    assert "repeated_copy" not in by_rule(findings(planted(clean_gpu(), copies=pageable())))  # sizes not repeated
    assert above_info(findings(planted(clean_gpu(), copies=as_trackscope(repeated(), "upload")))) == []


def test_a_large_repeated_pageable_upload_is_named_by_the_repetition():
    rules = by_rule(findings(planted(clean_gpu(), copies=pageable(repeated=3))))
    assert "pageable_copy" not in rules and "pageable_copy_share" in rules["repeated_copy"]["evidence"]


def memsets(api="cudaMemset", blocking=100):
    copy = CopyRow("memset", "", "", "Device", 100, 100 * MiB, 0.5, api=api, blocking=blocking, host_ms=1.5,
                   site=SITE, layer="user", stage="refine", module="refine.mlp")
    sync = SyncRow("blocking_copy", "cudaMemset", 100, 1.5, 2.0, site=SITE, layer="user", stage="refine",
                   module="refine.mlp")
    return (copy,), (sync,)


def test_sync_copy_names_synchronous_memset_calls_and_host_sync_leaves_them():
    copies, sync_rows = memsets()
    found = findings(planted(clean_gpu(), copies=copies, syncs=sync_rows))
    top = found[0]
    assert top["rule"] == "sync_copy" and top["call_site"] == SITE and top["evidence"]["calls"] == 100
    assert top["evidence"]["share"] == pytest.approx((1.5 + 2.0) / 20, abs=1e-4) and top["severity"] == "warning"
    assert "host_sync" not in by_rule(found)  # the same calls, named once
    async_copies, _ = memsets(api="cudaMemsetAsync", blocking=0)
    assert "sync_copy" not in by_rule(findings(planted(clean_gpu(), copies=async_copies)))
    assert above_info(findings(planted(clean_gpu(), copies=as_trackscope(copies)))) == []


def test_cpu_round_trip_in_the_tracker_but_not_in_the_adapter_stages():
    trip = RoundTripRow("filter", "filter", 8 * MiB, 8 * MiB, 4.0, 3.3, ("aten::fft_r2c",))
    s = planted(clean_gpu(round_trips=(trip,)), syncs=syncs(kind="to_host", op="aten::_to_copy", count=1))
    top = findings(s)[0]
    assert top["rule"] == "cpu_round_trip" and top["module"] == "filter" and top["severity"] == "critical"
    download = RoundTripRow("download", "(stage body)", 8 * MiB, 8 * MiB, 4.0, 3.3, ("aten::copy_",))
    assert above_info(findings(clean_gpu(round_trips=(download,)))) == []


def upload_syncs(count=10):
    return syncs(kind="to_host", op="aten::copy_", count=count, wait_ms=count * 0.8, idle_after_ms=0.5)


def test_the_host_waiting_for_uploads_is_named_by_the_upload():
    """A .to(device) of a CPU tensor syncs inside aten::copy_: at a site that only uploads, that wait is the
    upload's (kind "upload"), named by repeated_copy or pageable_copy, never 'copy to the host once'."""
    found = findings(planted(clean_gpu(), copies=pageable(repeated=3), syncs=upload_syncs()))
    top = found[0]
    assert top["rule"] == "repeated_copy" and "host_sync_share" in top["evidence"]
    assert [f["rule"] for f in above_info(found)] == ["repeated_copy"]
    found = findings(planted(clean_gpu(), copies=pageable(), syncs=upload_syncs()))
    assert found[0]["rule"] == "pageable_copy" and "host_sync_share" in found[0]["evidence"]
    assert found[0]["evidence"]["share"] == pytest.approx(8.5 / 20, abs=1e-4)  # the sync's wait, the larger
    alone = by_rule(findings(planted(clean_gpu(), copies=pageable(nbytes=4 * 8, ms=0.2), syncs=upload_syncs())))
    assert alone["host_sync"]["evidence"]["kind"] == "upload" and "pinned" in alone["host_sync"]["suggestion"]
