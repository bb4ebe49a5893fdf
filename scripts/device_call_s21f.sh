#!/usr/bin/env bash
# Session 21, GPU call F (repo root, $OUT set): v3 (piece 1) per precision on the v1 validation set (8 videos) beside
# v1, tracker call speed at 256 queries: the trade-off table's rows for the shipped v3.
set -u
source scripts/device_common.sh
{
for w in corrtrack_v3 corrtrack; do
  step 55 python3 scripts/corrtrack_bench.py --modes graphs --weights resources/$w.safetensors --out $W/$w \
    --precisions fp32 tf32 fp16 bf16 int8 fp8 --queries 256 --val-videos 8 --repeats 10 --no-profile
done
} 2>&1 | tee "$OUT/call_f.log"
