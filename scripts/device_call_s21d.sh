#!/usr/bin/env bash
# Session 21, GPU call D (repo root, $OUT set): the whole session at HEAD (v1, bf16/fp16, 256 and 1024 points),
# v3 (piece 1's weights, resources/corrtrack_v3.safetensors) with contiguous attention heads: tracker call,
# kernel profile at 1024 queries, and the whole session.
set -u
source scripts/device_common.sh
S="--warmup 3 --repeat 20 --no-cost"
{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for n in 256 1024; do
  step 45 $T bench $V --device cuda --tracker corrtrack --precisions bf16,fp16 --points $n --points-per-batch $n $S --out $W/s${n}
done
step 60 python3 scripts/corrtrack_bench.py --modes graphs --weights resources/corrtrack_v3.safetensors --out $W/v3 \
  --precisions bf16 --queries 1024 256 --val-videos 0
cat $W/v3/profile.txt 2>/dev/null
for n in 256 1024; do
  step 45 $T bench $V --device cuda --tracker corrtrack-v3 --precisions bf16 --points $n --points-per-batch $n $S --out $W/v3s${n}
done
for n in 256 1024; do
  step 45 $T bench $V --device cuda --tracker corrtrack --precisions bf16 --points $n --points-per-batch $n $S --out $W/r${n}
done
} 2>&1 | tee "$OUT/call_d.log"
tar -czf "$OUT/call_d.tar.gz" -C "$W" . 2>/dev/null
