#!/usr/bin/env bash
# Session 18, GPU call C (repo root, $OUT set): deep captures of CoTracker3 (fp32, bf16) and TAPIR (bf16) with the
# line marks of engine/capture/lines.py: the kernel time named below each peer's top-level forward.
set -u
source scripts/device_common.sh
PEERS="--points 256 --points-per-batch 256 --warmup 2 --repeat 6 --no-cost --deep --diagnose"
{
step 130 $T bench $V --device cuda --tracker scripts.peers.cotracker_plugin:make --precisions fp32,bf16 $PEERS \
  --out "$W/cotracker"
step 110 $T bench $V --device cuda --tracker scripts.peers.tapir_plugin:make --precisions fp32,bf16 $PEERS \
  --out "$W/tapir"
} 2>&1 | tee "$OUT/call_c.log"
tar -czf "$OUT/benches.tar.gz" --exclude="*.trace.json*" -C "$W" . 2>/dev/null
(cd "$W" && find cotracker -name "*bf16*.trace.json*" | tar -czf "$OUT/trace_cotracker_bf16.tar.gz" -T -)
ls -la "$OUT"
