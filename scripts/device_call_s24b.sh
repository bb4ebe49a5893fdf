#!/usr/bin/env bash
# Session 24, GPU call B (as call A, whose 256-query files and log did not come back: more than 8 files): the
# sample at 256 queries, this tree against the code before (.old = c0c08f3), alternating three times, with
# CoTracker3 in the same call; the real clips' sessions before and after; the device-memory data again. Every
# result goes into one tar file.
set -u
source scripts/device_common.sh
S="--warmup 3 --repeat 20 --no-cost"
mkdir -p $W/mem
{
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader
for i in 1 2 3; do
  for side in new old; do bench_side $side s256_${side}_$i $V 256 bf16; done
done
step 60 $T bench $V --device cuda --tracker scripts.peers.cotracker_plugin:make --precisions bf16,tf32 --points 256 --points-per-batch 256 --warmup 2 --repeat 12 --no-cost --out $W/cotracker_256
bench_side new s256_new_4 $V 256 bf16,tf32
for side in new old; do bench_side $side bear_${side} .realclips/bear.mp4 256 bf16; done
for side in new old; do bench_side $side apple1024_${side} .realclips/apple.mp4 1024 bf16; done
step 200 python3 scripts/device_memory.py --out $W/mem
} 2>&1 > "$W/call_b.log"
tar -czf "$OUT/call_b.tar.gz" -C "$W" --exclude='*.npz' . 2>/dev/null
ls -la "$OUT"; tail -c 3000 "$W/call_b.log"
