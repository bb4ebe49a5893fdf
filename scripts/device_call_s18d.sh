#!/usr/bin/env bash
# Session 18, GPU call D (repo root, $OUT set): the re-planted thread_oversubscription plugin with the capture's
# A/B at the core count (and the controls); CoTracker3 bf16's session/direct over 10 block pairs.
set -u
source scripts/device_common.sh
{
step 80 env DEADLINE=75 OUT="$W/field" bash scripts/device_diagnosis.sh thread_oversubscription clean
cat "$W/field/table.md" 2>/dev/null
step 60 $T bench $V --device cuda --tracker scripts.peers.cotracker_plugin:make --precisions bf16 --points 256 \
  --points-per-batch 256 --warmup 2 --repeat 30 --no-cost --out "$W/cotracker"
} 2>&1 | tee "$OUT/call_d.log"
tar -czf "$OUT/benches.tar.gz" -C "$W" cotracker field 2>/dev/null
ls -la "$OUT"
