#!/usr/bin/env bash
# One GPU call (issues 18 and 19), from the repo root with $OUT set; carry .carry (peer sources) and .whl:
# the field diagnosis (scripts/device_diagnosis.sh, its own deadline), then the peers and CorrTrack benched with
# the interleaved direct reference and a deep capture each (fp32/tf32/bf16), then bench --overhead with and
# without telemetry. Everything ends within TOTAL_S; outputs come back as $OUT/*.log, table.* and two archives.
set -u
source scripts/device_common.sh
{
OUT=$OUT DEADLINE=${DIAG_S:-290} bash scripts/device_diagnosis.sh > "$W/diag_stdout.log" 2>&1; tail -40 "$OUT/diagnosis.log"
step 70 $T bench $V --device cuda --tracker scripts.peers.tapir_plugin:make --precisions fp32,bf16 --points 256 \
  --points-per-batch 256 --warmup 2 --repeat 10 --no-cost --deep --diagnose --out "$W/deep_tapir"
step 60 $T bench $V --device cuda --tracker scripts.peers.cotracker_plugin:make --precisions fp32,bf16 --points 256 \
  --points-per-batch 256 --warmup 2 --repeat 10 --no-cost --deep --diagnose --out "$W/deep_cotracker"
step 40 $T bench $V --device cuda --precisions bf16 --points 256 --points-per-batch 256 --warmup 2 --repeat 10 \
  --no-cost --deep --diagnose --out "$W/deep_corrtrack"
step 50 $T bench $V --device cuda --precisions bf16 --points 256 --points-per-batch 256 --warmup 2 --repeat 30 \
  --overhead --out "$W/overhead"
step 40 $T bench $V --device cuda --precisions bf16 --points 256 --points-per-batch 256 --warmup 2 --repeat 30 \
  --overhead --no-telemetry --out "$W/overhead_timing_only"
step 20 python3 scripts/stage_timer_cost.py --device cuda --runs 1000
} 2>&1 | tee "$OUT/call_b.log"
tar -czf "$OUT/benches.tar.gz" -C "$W" . 2>/dev/null; ls -la "$OUT"
