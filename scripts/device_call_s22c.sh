#!/usr/bin/env bash
# Session 22, GPU call C (repo root, $OUT set; carried: .carry/peers (tapnet/torch, cotracker sources), .whl (their
# pure-Python deps for the device's python), .heldout (`trackscope sample heldout_v2 --preset heldout-v2`)):
# CorrTrack beside TAPIR and CoTracker3 (random weights, plugins) through `trackscope bench` in one call (each
# row's direct-call time too), then the held-out set per precision for corrtrack-v3 and corrtrack on the GPU.
set -u
source scripts/device_common.sh
P="--warmup 2 --repeat 8 --no-cost"
{
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader
for n in 256 1024; do
  step 45 $T bench $V --device cuda --tracker corrtrack --precisions tf32,bf16 --points $n --points-per-batch $n --warmup 3 --repeat 20 --no-cost --out $W/corrtrack_$n
  step 90 $T bench $V --device cuda --tracker scripts.peers.cotracker_plugin:make --precisions tf32,bf16 --points $n --points-per-batch $n $P --out $W/cotracker_$n
  step 90 $T bench $V --device cuda --tracker scripts.peers.tapir_plugin:make --precisions tf32,bf16 --points $n --points-per-batch $n $P --out $W/tapir_$n
done
for tr in corrtrack-v3 corrtrack; do
  for p in bf16 fp32 tf32 fp16 int8 fp8; do
    step 60 $T eval .heldout --device cuda --tracker $tr --precision $p --no-baseline
  done
done
} 2>&1 | tee "$OUT/call_c.log"
tar -czf "$OUT/call_c.tar.gz" -C "$W" . 2>/dev/null
ls -la "$OUT"
