#!/usr/bin/env bash
# Session 21, GPU call E (repo root, $OUT set): v3 with the key bias carried as head channels
# (support.key_bias_attention, no attention mask): tracker call and kernel profile at 1024 queries, whole session.
set -u
source scripts/device_common.sh
S="--warmup 3 --repeat 20 --no-cost"
{
step 60 python3 scripts/corrtrack_bench.py --modes graphs --weights resources/corrtrack_v3.safetensors --out $W/v3 \
  --precisions bf16 --queries 1024 256 --val-videos 0
cat $W/v3/profile.txt 2>/dev/null
for n in 256 1024; do
  step 40 $T bench $V --device cuda --tracker corrtrack-v3 --precisions bf16 --points $n --points-per-batch $n $S --out $W/v3s${n}
done
} 2>&1 | tee "$OUT/call_e.log"
