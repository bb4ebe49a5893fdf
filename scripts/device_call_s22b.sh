#!/usr/bin/env bash
# Session 22, GPU call B (repo root, $OUT set; .old/ carried as for call A): the whole session (`trackscope
# bench`, the bundled sample) with fused.py's kernels and casts.py's kept casts, against the kernels off and the
# code before (.old), alternating; v2 and v3 at HEAD. First the cold start (weights load + first tracker call, a
# fresh process each) with an empty Triton cache, with it filled, and with the kernels off.
set -u
source scripts/device_common.sh
S="--warmup 3 --repeat 20 --no-cost"
export TRITON_CACHE_DIR=$W/triton_cache
B="python3 scripts/corrtrack_bench.py --weights resources/corrtrack.safetensors --modes graphs --precisions bf16 --queries 256 --val-videos 0 --no-profile --repeats 3 --warmup 1"
{
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader
for run in empty_cache filled_cache filled_again; do
  step 40 $B --out $W/cold_$run
done
step 40 env TRACKSCOPE_CORRTRACK_FUSED=0 $B --out $W/cold_off
ls -R $TRITON_CACHE_DIR | head -20
alternate 45 bf16,fp16 new old off new old off
for tr in corrtrack-v2 corrtrack-v3; do
  for n in 256 1024; do
    step 45 $T bench $V --device cuda --tracker $tr --precisions bf16 --points $n --points-per-batch $n $S --out $W/${tr}_$n
  done
done
} 2>&1 | tee "$OUT/call_b.log"
tar -czf "$OUT/call_b.tar.gz" --exclude=triton_cache -C "$W" . 2>/dev/null
ls -la "$OUT"
