"""Runtime rules on constructed summaries: the allocator, memory, torch.compile, the host side, threads and
the GPU idle breakdown; and the folding that names one problem once."""

from __future__ import annotations

import dataclasses

import pytest

from engine.capture.evidence import CompileFacts, HostFacts, IdleBreakdown, MemoryFacts
from engine.capture.summary import GapRow, RoundTripRow
from tests.rules_cases import (
    H200_BYTES,
    OTHER_SITE,
    SITE,
    GiB,
    MiB,
    above_info,
    by_rule,
    clean_cpu,
    clean_gpu,
    findings,
    planted,
)


def memory(**kw) -> MemoryFacts:
    base = dict(allocations=40, allocated_bytes=200 * MiB, largest_allocation_bytes=20 * MiB,
                peak_allocated_bytes=1 * GiB, peak_reserved_bytes=2 * GiB, capacity_bytes=H200_BYTES)
    base.update(kw)
    return MemoryFacts(**base)


def test_allocator_churn_from_empty_cache_in_a_warm_run():
    churn = memory(mallocs=20, malloc_ms=2.0, frees=20, free_ms=3.0, empty_cache_calls=10, empty_cache_site=SITE)
    top = findings(planted(clean_gpu(), memory=churn))[0]
    assert top["rule"] == "allocator_churn" and top["call_site"] == SITE and top["severity"] == "critical"
    assert top["evidence"]["share"] == pytest.approx((2.0 + 3.0 + 20 * 0.015) / 20, abs=1e-4)
    assert "empty_cache" in top["suggestion"]
    mallocs = memory(mallocs=40, malloc_ms=3.0, malloc_site=SITE)
    top = findings(planted(clean_gpu(), memory=mallocs))[0]
    assert top["rule"] == "allocator_churn" and "expandable_segments" in top["suggestion"]
    assert "allocator_churn" not in by_rule(findings(planted(clean_gpu(), memory=memory())))


def test_large_allocation_per_call_is_about_memory_not_time():
    big = memory(largest_allocation_bytes=40 * GiB, allocated_bytes=41 * GiB, largest_allocation_site=SITE)
    found = findings(planted(clean_gpu(), memory=big))
    f = by_rule(found)["large_allocation"]
    assert found[0] is f and f["call_site"] == SITE and f["evidence"]["share"] == 0.0
    assert f["severity"] == "info" and f["evidence"]["of_capacity"] == pytest.approx(40 * GiB / H200_BYTES, abs=1e-4)
    assert "of the card" in f["title"] and f["evidence"]["site_kernel_ms"] == 0.0
    middling = memory(largest_allocation_bytes=256 * MiB, allocated_bytes=512 * MiB)
    assert "large_allocation" in by_rule(findings(planted(clean_gpu(), memory=middling)))  # from 256 MiB
    assert "large_allocation" not in by_rule(findings(clean_gpu()))  # 20 MiB


def test_large_allocation_says_what_its_function_sweeps_but_stakes_no_time_on_it():
    """The allocating function's kernels (the fill and the passes over the buffer) are context in the title and
    evidence; the share stays 0: the capture cannot tell the part of the buffer a call needs."""
    from engine.capture.evidence import FunctionRow

    big = memory(largest_allocation_bytes=256 * MiB, allocated_bytes=800 * MiB, largest_allocation_site=SITE)
    rows = (FunctionRow("(forward body of T)", "refine_step (tracker/model.py:40)", SITE, "user", 0.0, 0.42, 18,
                        18, 0, 49),
            FunctionRow("(forward body of T)", "score (tracker/model.py:90)", "tracker/model.py:90 score", "user",
                        0.0, 3.0, 5, 5, 0, 9))
    f = by_rule(findings(planted(clean_gpu(), memory=big, functions=rows)))["large_allocation"]
    assert f["evidence"]["site_kernel_ms"] == pytest.approx(0.42) and f["severity"] == "info"
    assert f["evidence"]["share"] == 0.0 and "kernels take 0.42 ms (2.1 % of the run)" in f["title"]


def _sweep(nbytes: int, ms: float = 2.0, count: int = 4, site: str = SITE, layer: str = "user",
           kind: str = "buffer_sweep", length: int = 0):
    from engine.capture.evidence import KernelGroup

    return KernelGroup(kind, count, ms, ("vectorized_elementwise_kernel<FillFunctor>",), nbytes, length, site=site,
                       layer=layer, stage="track", module="(forward body of T)")


def test_large_allocation_stakes_the_kernels_that_sweep_the_whole_buffer_at_its_site():
    """A 1 GiB buffer made every call whose fill and passes over all of it take 2 ms at its site: half of that
    is at stake (sizing it to need), so a warning in a 20 ms run, with the bytes, site, kernels' ms and count."""
    big = memory(largest_allocation_bytes=1 * GiB, allocated_bytes=2 * GiB, largest_allocation_site=SITE)
    s = planted(clean_gpu(), memory=big, kernel_groups=(_sweep(4 * 2 * GiB),))
    found = findings(s)
    f = found[0]
    assert f["rule"] == "large_allocation" and f["severity"] == "warning" and f["call_site"] == SITE
    assert f["evidence"]["share"] == pytest.approx(0.5 * 2.0 / 20.0, abs=1e-4)
    assert f["evidence"]["sweep_ms"] == 2.0 and f["evidence"]["sweep_kernels"] == 4
    assert f"one allocation of 1.00 GiB per call at {SITE}: 4 kernels over all of it" in f["title"]
    assert "take 2.00 ms (10.0 % of the run)" in f["title"] and "estimate" in f["suggestion"]
    # 10 ms of sweeps: critical
    s = planted(clean_gpu(), memory=big, kernel_groups=(_sweep(4 * 2 * GiB, ms=10.0),))
    assert by_rule(findings(s))["large_allocation"]["severity"] == "critical"


def test_large_allocation_counts_only_its_own_sites_whole_buffer_kernels_of_the_users_code():
    big = memory(largest_allocation_bytes=1 * GiB, allocated_bytes=2 * GiB, largest_allocation_site=SITE)

    def stake(*groups) -> tuple[float, str]:
        f = by_rule(findings(planted(clean_gpu(), memory=big, kernel_groups=groups)))["large_allocation"]
        return f["evidence"]["share"], f["severity"]

    assert stake(_sweep(4 * 64 * MiB)) == (0.0, "info")  # passes over a slice of the buffer: not counted
    assert stake(_sweep(4 * 2 * GiB, site=OTHER_SITE)) == (0.0, "info")  # another function's kernels
    assert stake(_sweep(4 * 2 * GiB, layer="trackscope")) == (0.0, "info")  # trackscope's own work
    assert stake(_sweep(4 * 2 * GiB, kind="elementwise_chain", length=4)) == (0.0, "info")  # no sweep group
    assert stake(_sweep(4 * 2 * GiB, ms=0.1)) == (0.0, "info")  # 0.05 ms at stake: under 1 % of the run
    # no site recorded (no Python stack): nothing at stake
    nowhere = memory(largest_allocation_bytes=1 * GiB, allocated_bytes=2 * GiB)
    f = by_rule(findings(planted(clean_gpu(), memory=nowhere, kernel_groups=(_sweep(4 * 2 * GiB),))))
    assert f["large_allocation"]["evidence"]["share"] == 0.0


def test_an_elementwise_chain_that_is_mostly_the_buffers_sweep_is_the_allocations_finding():
    big = memory(largest_allocation_bytes=1 * GiB, allocated_bytes=2 * GiB, largest_allocation_site=SITE)
    chain = _sweep(8 * 2 * GiB, ms=3.0, count=8, kind="elementwise_chain", length=8)
    found = findings(planted(clean_gpu(), memory=big, kernel_groups=(_sweep(4 * 2 * GiB), chain)))
    rules = by_rule(found)
    assert "elementwise_chain" not in rules and found[0]["rule"] == "large_allocation"
    assert rules["large_allocation"]["evidence"]["elementwise_chain_share"] > 0
    # a chain at the site that is mostly other work (sweeps under half its time) stays its own finding
    other = _sweep(8 * 2 * GiB, ms=10.0, count=8, kind="elementwise_chain", length=8)
    rules = by_rule(findings(planted(clean_gpu(), memory=big, kernel_groups=(_sweep(4 * 2 * GiB), other))))
    assert "elementwise_chain" in rules and "large_allocation" in rules


def test_corrtracks_cost_volume_at_256_points_is_under_the_large_allocation_threshold():
    """CorrTrack's correlation volume, N x T x 64 x 64 bf16 at 256 points and 47 frames (~94 MiB), is not a
    large allocation (256 MiB, or a tenth of the card): the negative control gets no large_allocation."""
    from engine.capture.rules_runtime import LARGE_ALLOCATION_BYTES

    volume = 256 * 47 * 64 * 64 * 2
    assert volume < LARGE_ALLOCATION_BYTES
    facts = memory(largest_allocation_bytes=volume, allocated_bytes=4 * volume, largest_allocation_site=SITE)
    found = findings(planted(clean_gpu(), memory=facts, kernel_groups=(_sweep(2 * volume, ms=3.0),)))
    assert "large_allocation" not in by_rule(found)


@pytest.mark.parametrize("used, severity", [(0.97, "warning"), (0.9, "info"), (0.5, None)])
def test_memory_near_capacity_by_margin(used, severity):
    facts = memory(peak_reserved_bytes=int(used * H200_BYTES))
    f = by_rule(findings(planted(clean_gpu(), memory=facts))).get("memory_near_capacity")
    assert (f["severity"] if f else None) == severity


def test_recompiles_in_a_warm_run():
    facts = CompileFacts(regions=2, region_calls=20, recompiles=3, compile_ms=400.0, compile_site=SITE,
                         reasons=("tensor 'x' size mismatch at index 0. expected 256, actual 512",))
    s = planted(clean_gpu(wall_ms=500.0, profiled_wall_ms=500.0), compile=facts)
    found = findings(s)
    top = found[0]
    assert top["rule"] == "recompile" and top["call_site"] == SITE and top["evidence"]["share"] == 0.8
    assert "size mismatch" in top["title"] and "mark_dynamic" in top["suggestion"]
    assert "compile_in_warm_run" not in by_rule(found)  # the recompiles are that compile time
    unmeasured = planted(clean_gpu(wall_ms=500.0, profiled_wall_ms=500.0), compile=CompileFacts(recompiles=2))
    assert findings(unmeasured)[0]["evidence"]["share"] == pytest.approx(2 * 50 / 500)  # the stated floor


def test_recompiles_seen_in_dynamos_counters():
    """No recompiled region in the record, but dynamo compiled a frame in the warm run after the warm-up had:
    the recompile limit hit on every call (recompile_each_call on the CPU)."""
    limit = ("dynamo_run.unimplemented.Dynamo recompile limit exceeded\n  Explanation: Dynamo attempted to "
             "recompile the code object too many times")
    settings = {"dynamo_run.frames.total": "1", "dynamo_total.frames.total": "11", limit: "1"}
    facts = CompileFacts(compile_ms=13.4, compile_site=SITE)
    found = findings(planted(clean_gpu(wall_ms=50.0, profiled_wall_ms=50.0), compile=facts, settings=settings))
    top = found[0]
    assert top["rule"] == "recompile" and top["evidence"]["recompiles"] == 1
    assert top["evidence"]["share"] == pytest.approx(13.4 / 50, abs=1e-4)  # measured, not the 50 ms floor
    assert "Dynamo recompile limit exceeded" in top["title"] and "Explanation" not in top["title"]
    assert "compile_in_warm_run" not in by_rule(found)
    first = {"dynamo_run.frames.total": "1", "dynamo_total.frames.total": "1"}  # the only frame: a first compile
    rules = by_rule(findings(planted(clean_gpu(wall_ms=50.0, profiled_wall_ms=50.0), compile=facts, settings=first)))
    assert "recompile" not in rules and "compile_in_warm_run" in rules


def test_compile_in_a_warm_run_without_recompiles():
    facts = CompileFacts(regions=1, region_calls=1, compile_ms=300.0, autotune_ms=100.0, compile_site=SITE)
    top = findings(planted(clean_gpu(wall_ms=500.0, profiled_wall_ms=500.0), compile=facts))[0]
    assert top["rule"] == "compile_in_warm_run" and top["evidence"]["share"] == 0.8
    assert "recompile" not in by_rule(findings(planted(clean_gpu(), compile=facts)))


def test_graph_breaks():
    facts = CompileFacts(regions=5, region_calls=50, graph_breaks=4, compile_site=SITE)
    top = findings(planted(clean_gpu(), compile=facts))[0]
    assert top["rule"] == "graph_break" and top["call_site"] == SITE
    assert top["evidence"]["share"] == pytest.approx(50 * 4 / 5 * 0.05 / 20, abs=1e-4)  # 40 crossings
    assert "torch._dynamo.explain" in top["suggestion"] and "fullgraph=True" in top["suggestion"]
    assert "graph_break" not in by_rule(findings(planted(clean_gpu(), compile=CompileFacts(regions=1))))


def idle_run(**kw):
    """20 ms with the GPU idle 7 ms inside the tracker's module: 6 ms waiting on the host, 1 ms launch latency."""
    gaps = (GapRow(2.0, 4.0, "refine", "refine.mlp", "host"), GapRow(9.0, 2.0, "refine", "refine.mlp", "host"))
    base = dict(gpu_idle_ms=7.0, kernel_ms=13.0, gpu_busy_ms=13.0, gaps=gaps,
                idle_by_cause_ms={"host": 6.0, "short": 1.0})
    return clean_gpu(**{**base, **kw})


def test_host_bound_python_with_no_torch_op_while_the_gpu_waits():
    s = planted(idle_run(), host=HostFacts(python_ms=8.0, python_site=SITE, num_threads=16, cores=16),
                idle=IdleBreakdown(host_wait_ms=6.0, kernel_wait_ms=1.0))
    found = findings(s)
    top = found[0]
    assert top["rule"] == "host_bound" and top["call_site"] == SITE and top["evidence"]["share"] == 0.3
    assert "gpu_idle_gaps" not in by_rule(found) and top["evidence"]["gpu_idle_also_ms"] > 0  # folded, by cause
    assert "host_bound" not in by_rule(findings(clean_gpu()))
    # the profiler's Python tracer added 4 ms to the run: that much of the Python is its own
    profiled = dataclasses.replace(s, unprofiled_wall_ms=16.0)
    assert by_rule(findings(profiled))["host_bound"]["evidence"]["share"] == 0.1
    assert "host_bound" not in by_rule(findings(dataclasses.replace(s, unprofiled_wall_ms=12.0)))
    # on the CPU the Python self time also holds the torch ops called through operators: not told apart
    assert "host_bound" not in by_rule(findings(planted(clean_cpu(), host=HostFacts(python_ms=30.0))))


def test_gpu_idle_gaps_say_why():
    s = planted(idle_run(), host=HostFacts(python_site=SITE, num_threads=16, cores=16),
                idle=IdleBreakdown(host_wait_ms=6.0, kernel_wait_ms=1.0, sync_ms=0.0, trackscope_ms=0.5))
    top = findings(s)[0]
    assert top["rule"] == "gpu_idle_gaps" and top["module"] == "refine.mlp" and top["severity"] == "critical"
    assert f"6.0 ms host wait (Python in {SITE})" in top["title"] and "1.0 ms launch latency" in top["title"]
    assert top["evidence"]["why_host_wait_ms"] == 6.0
    # a summary without the breakdown: the gap causes say it, less trackscope's own 1 ms (upload and loop)
    title = by_rule(findings(idle_run(idle_by_cause_ms={"host": 5.0, "sync": 2.0})))["gpu_idle_gaps"]["title"]
    assert "4.0 ms host wait, 2.0 ms sync, 1.0 ms trackscope's own" in title


def test_cpu_ops_in_a_gpu_run():
    host = HostFacts(cpu_only_ops=300, cpu_only_ms=6.0, cpu_only_names=("aten::arange", "aten::add"),
                     cpu_only_site=SITE, num_threads=16, cores=16)
    top = findings(planted(clean_gpu(), host=host))[0]
    assert top["rule"] == "cpu_ops_in_gpu_run" and top["call_site"] == SITE and top["evidence"]["share"] == 0.15
    assert "aten::arange" in top["title"] and "device=" in top["suggestion"]
    assert "cpu_ops_in_gpu_run" not in by_rule(findings(planted(clean_cpu(), host=host)))  # a CPU run is all CPU
    trip = RoundTripRow("filter", "filter", 8 * MiB, 8 * MiB, 6.0, 3.3, ("aten::fft_r2c",))
    rules = by_rule(findings(planted(clean_gpu(round_trips=(trip,)), host=host)))
    assert "cpu_ops_in_gpu_run" not in rules and "cpu_ops_in_gpu_run_share" in rules["cpu_round_trip"]["evidence"]


def test_cpu_ops_at_stake_is_the_gpu_wait_they_overlap():
    """With the idle breakdown recorded, what CPU ops cost a GPU run is the GPU's wait on the host meanwhile (all
    of them when it waited longer; the same ops on the GPU take microseconds), not a fixed half."""
    import dataclasses

    from engine.capture.evidence import IdleBreakdown

    host = HostFacts(cpu_only_ops=7, cpu_only_ms=4.0, cpu_only_names=("aten::cos",), cpu_only_site=SITE)
    base = planted(clean_gpu(), host=host)
    waited = dataclasses.replace(base, evidence=dataclasses.replace(
        base.evidence, idle=IdleBreakdown(host_wait_ms=3.0, sync_ms=2.0)))
    assert by_rule(findings(waited))["cpu_ops_in_gpu_run"]["evidence"]["share"] == 0.2  # 4 of 20 ms: all of it
    little = dataclasses.replace(base, evidence=dataclasses.replace(base.evidence,
                                                                    idle=IdleBreakdown(host_wait_ms=1.0)))
    assert by_rule(findings(little))["cpu_ops_in_gpu_run"]["evidence"]["share"] == 0.05  # the 1 ms the GPU waited


def test_thread_oversubscription_on_a_cpu_run():
    s = planted(clean_cpu(), host=HostFacts(num_threads=32, interop_threads=32, cores=4))
    top = findings(s)[0]
    assert top["rule"] == "thread_oversubscription" and "set_num_threads(4)" in top["suggestion"]
    assert top["evidence"]["share"] == pytest.approx(0.2 * 80 / 82, abs=1e-4) and top["severity"] == "warning"
    assert "thread_oversubscription" not in by_rule(findings(clean_cpu()))  # 2 threads on 2 cores
    gpu = planted(clean_gpu(), host=HostFacts(num_threads=32, cores=4))  # no CPU op time to lose
    assert "thread_oversubscription" not in by_rule(findings(gpu))


def _oversubscribed_gpu(probe: tuple[float, float] | None, cpu_ops: int = 100, cpu_ms: float = 12.0):
    """A GPU run with 64 threads on 16 cores whose CPU ops the GPU waited for; ``probe``: the recorded probe's
    (oversubscribed, fair) ms per op."""
    s = planted(clean_gpu(wall_ms=40.0, profiled_wall_ms=40.0, unprofiled_wall_ms=40.0),
                host=HostFacts(cpu_only_ops=cpu_ops, cpu_only_ms=cpu_ms, cpu_only_names=("aten::exp",),
                               cpu_only_site=SITE, num_threads=64, interop_threads=16, cores=16),
                idle=IdleBreakdown(host_wait_ms=cpu_ms + 1.0))
    if probe is not None:
        settings = {**s.evidence.settings, "thread_probe_ms": str(probe[0]), "thread_probe_fair_ms": str(probe[1])}
        s = dataclasses.replace(s, evidence=dataclasses.replace(s.evidence, settings=settings))
    return s


def test_thread_oversubscription_on_a_gpu_run_charges_the_probed_loss_per_cpu_op_and_names_the_ops_it_slows():
    """On a GPU run each CPU op loses what the probe measured (oversubscribed less fair time of one parallel op);
    when that is most of the ops' time at stake, the CPU ops' finding is the thread count's: one finding at the ops'
    site, its own share (set_num_threads saves that), the ops' share and the second fix carried."""
    found = findings(_oversubscribed_gpu(probe=(0.10, 0.02)))  # 100 ops x 0.08 ms = 8 of the 12 ms
    top = found[0]
    assert top["rule"] == "thread_oversubscription" and top["call_site"] == SITE and top["severity"] == "warning"
    assert top["evidence"]["share"] == pytest.approx(8.0 / 40.0, abs=1e-4) and top["evidence"]["probed"]
    assert top["evidence"]["cpu_ops_in_gpu_run_share"] == pytest.approx(12.0 / 40.0, abs=1e-4)
    assert "cpu_ops_in_gpu_run" not in by_rule(found) and "device=" in top["suggestion"]
    assert "set_num_threads(16)" in top["suggestion"] and "0.1 ms at 64 threads" in top["title"]
    # a small measured loss: the ops are slow on their own; they stay their finding, the threads a second one
    found = findings(_oversubscribed_gpu(probe=(0.03, 0.02)))  # 100 x 0.01 = 1 of 12 ms
    assert found[0]["rule"] == "cpu_ops_in_gpu_run"
    assert by_rule(found)["thread_oversubscription"]["evidence"]["share"] == pytest.approx(1.0 / 40.0, abs=1e-4)


def test_thread_oversubscription_on_a_gpu_run_without_a_probe_takes_the_stated_per_op_floor():
    from engine.capture.rules_runtime import OVERSUBSCRIBED_OP_LOSS_MS

    f = by_rule(findings(_oversubscribed_gpu(probe=None, cpu_ops=40)))["thread_oversubscription"]
    assert f["evidence"]["share"] == pytest.approx(40 * OVERSUBSCRIBED_OP_LOSS_MS / 40.0, abs=1e-4)
    assert not f["evidence"]["probed"]
    # never more than the ops' own time, nor than the GPU waited for them
    waited = _oversubscribed_gpu(probe=(5.0, 0.0), cpu_ops=10, cpu_ms=3.0)
    assert by_rule(findings(waited))["thread_oversubscription"]["evidence"]["share"] == pytest.approx(3.0 / 40.0,
                                                                                                  abs=1e-4)


def test_the_oversubscription_probe_times_one_op_at_both_thread_counts_and_puts_the_count_back():
    import torch

    from engine.capture.threads import PROBE_FAIR_MS, PROBE_MS, oversubscription_probe, probe_penalty_ms

    before = torch.get_num_threads()
    assert oversubscription_probe(2, 2) == {} and oversubscription_probe(4, 0) == {}
    probe = oversubscription_probe(4, 1, repeats=2)
    assert torch.get_num_threads() == before
    assert float(probe[PROBE_MS]) > 0 and float(probe[PROBE_FAIR_MS]) > 0
    assert probe_penalty_ms(probe) == pytest.approx(max(0.0, float(probe[PROBE_MS]) - float(probe[PROBE_FAIR_MS])))
    assert probe_penalty_ms({}) is None and probe_penalty_ms({PROBE_MS: "x", PROBE_FAIR_MS: "1"}) is None


def _with_ab(s, over_ms: float, fair_ms: float):
    settings = {**s.evidence.settings, "thread_ab_ms": str(over_ms), "thread_ab_fair_ms": str(fair_ms),
                "thread_ab_runs": "3"}
    return dataclasses.replace(s, evidence=dataclasses.replace(s.evidence, settings=settings))


def test_a_measured_run_at_the_core_count_is_what_is_at_stake_over_the_probes_guess():
    """The capture's A/B (the tracker run again at the core count) is the fix's measured gain: it wins over a
    stand-in probe that under-reads the user's ops (as on the H200: 0.055 ms per op against their own 0.19)."""
    s = _with_ab(_oversubscribed_gpu(probe=(0.23, 0.175)), over_ms=26.0, fair_ms=8.0)  # probe: 100 x 0.055 = 5.5
    found = findings(s)
    top = found[0]
    assert top["rule"] == "thread_oversubscription" and top["evidence"]["measured"]
    assert top["evidence"]["share"] == pytest.approx(18.0 / 26.0, abs=1e-4) and top["severity"] == "critical"
    assert "26.0 ms, 8.0 ms at 16 threads (medians of 3 each" in top["title"] and top["call_site"] == SITE
    assert "cpu_ops_in_gpu_run" not in by_rule(found)  # most of the ops' time was the threads': folded in
    # the fair count saved nothing: no finding, whatever the probe guessed
    assert "thread_oversubscription" not in by_rule(findings(_with_ab(_oversubscribed_gpu(probe=(5.0, 0.0)),
                                                                      over_ms=26.0, fair_ms=26.3)))


def test_the_ab_runs_the_tracker_at_both_counts_in_its_own_thread_holds_its_own_setting_and_puts_all_back():
    """The A/B sets the count in this thread and in the plugin's worker, holds a tracker's own
    torch.set_num_threads at the core count during the fair runs, alternates, and restores every thread."""
    import torch

    from engine.capture.threads import AB_FAIR_MS, AB_MS, ab_saving_ms, oversubscription_ab
    from engine.trackers.guard import call_plugin

    before = torch.get_num_threads()
    seen: list[tuple[int, int]] = []

    def run_ms() -> float:
        def plugin_code() -> int:
            torch.set_num_threads(4)  # a tracker that sets its own count in every call
            return torch.get_num_threads()

        in_worker = call_plugin("ab test", "a test run", plugin_code)
        seen.append((torch.get_num_threads(), in_worker))
        return 10.0 if in_worker == 4 else 4.0

    call_plugin("ab test", "start its worker", lambda: None)
    assert oversubscription_ab(run_ms, 4, 4) == {}  # not oversubscribed: nothing run
    result = oversubscription_ab(run_ms, threads=4, cores=1, repeats=2)
    assert seen == [(1, 1), (4, 4)] * 3  # fair, then the run's count, each way's first untimed
    assert float(result[AB_MS]) == 10.0 and float(result[AB_FAIR_MS]) == 4.0
    assert ab_saving_ms(result) == (6.0, 10.0, 4.0) and ab_saving_ms({}) is None
    assert torch.get_num_threads() == before
    assert call_plugin("ab test", "after", torch.get_num_threads) == 4  # the worker as the tracker left it
    torch.set_num_threads(before)


def test_a_clean_run_with_every_kind_of_evidence_at_quiet_levels_stays_info():
    quiet = planted(clean_gpu(), memory=memory(), compile=CompileFacts(regions=1, region_calls=10),
                    host=HostFacts(python_ms=0.05, python_site=SITE, num_threads=16, cores=16),
                    idle=IdleBreakdown(kernel_wait_ms=0.5, trackscope_ms=0.5))
    assert above_info(findings(quiet)) == []
    shares = [f["evidence"]["share"] for f in findings(dataclasses.replace(quiet, wall_ms=20.0))]
    assert shares == sorted(shares, reverse=True)
