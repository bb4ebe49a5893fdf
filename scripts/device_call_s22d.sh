#!/usr/bin/env bash
# Session 22, GPU call D (repo root, $OUT set; .heldout carried as for call C): the held-out set in int8 and fp8
# after the kept-cast fix (inference tensors are cast each call), and a kernel profile of the tracker call at 256
# queries (bf16) with the fused kernels.
set -u
source scripts/device_common.sh
{
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader
for tr in corrtrack-v3 corrtrack; do
  for p in int8 fp8; do
    step 60 $T eval .heldout --device cuda --tracker $tr --precision $p --no-baseline
  done
done
step 45 env PROFILE_ROWS=45 python3 scripts/corrtrack_bench.py --weights resources/corrtrack.safetensors --modes graphs --out $W/prof256 --precisions bf16 int8 --queries 256 --val-videos 0 --repeats 10
cat $W/prof256/profile.txt
} 2>&1 | tee "$OUT/call_d.log"
