#!/usr/bin/env bash
# Session 22, GPU call E (repo root, $OUT set; .old/ (e715e21), .carry/peers, .whl carried): after the one-pass
# normalise and the backbone's upsampling in the autocast dtype. Tracker call and validation accuracy per
# precision; the whole session against the code before (.old), alternating; CoTracker3 and TAPIR at 256 queries
# in the same call (their direct-call times beside CorrTrack's session).
set -u
source scripts/device_common.sh
B="python3 scripts/corrtrack_bench.py --weights resources/corrtrack.safetensors --modes graphs --no-profile"
S="--warmup 3 --repeat 20 --no-cost"
P="--points 256 --points-per-batch 256 --warmup 2 --repeat 10 --no-cost"
{
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader
step 120 $B --out $W/call --precisions bf16 fp16 fp32 int8 fp8 --queries 256 1024 --val-videos 8
alternate 45 bf16,fp16 new old new old
step 90 $T bench $V --device cuda --tracker scripts.peers.cotracker_plugin:make --precisions tf32,bf16 $P --out $W/cotracker
step 90 $T bench $V --device cuda --tracker scripts.peers.tapir_plugin:make --precisions tf32,bf16 $P --out $W/tapir
step 45 $T bench $V --device cuda --tracker corrtrack --precisions tf32,bf16 --points 256 --points-per-batch 256 $S --out $W/s256_last
} 2>&1 | tee "$OUT/call_e.log"
tar -czf "$OUT/call_e.tar.gz" -C "$W" . 2>/dev/null
