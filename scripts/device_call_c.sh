#!/usr/bin/env bash
# The session's third GPU call, from the repo root with $OUT set; carry .carry and .whl. The field diagnosis
# again (every plugin, the changed evidence), TAPIR's deep bench (fp32, bf16), the sampler's cost per NVML call
# and per variant, and the what-if of a cold-only `track --report` onto a T4.
set -u
source scripts/device_common.sh
{
OUT=$OUT DEADLINE=${DIAG_S:-285} bash scripts/device_diagnosis.sh > "$W/diag_stdout.log" 2>&1; tail -32 "$OUT/table.md"
step 130 $T bench $V --device cuda --tracker scripts.peers.tapir_plugin:make --precisions fp32,bf16 --points 256 \
  --points-per-batch 256 --warmup 2 --repeat 10 --no-cost --deep --diagnose --out "$W/deep_tapir"
step 90 python3 scripts/sampler_cost.py --repeat 20
step 40 $T track $V --device cuda --precision fp32 --grid 16 --out "$W/t.npz" --report "$W/track_fp32.json"
step 40 $T compare "$W/track_fp32.json" --what-if "Tesla T4"
} 2>&1 | tee "$OUT/call_c.log"
tar -czf "$OUT/benches.tar.gz" -C "$W" . 2>/dev/null; ls -la "$OUT"
