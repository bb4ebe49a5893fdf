#!/usr/bin/env bash
# Session 21, GPU call A (repo root, $OUT set; .old/ = `git archive fbb76b6 engine scripts pyproject.toml` with
# resources linked in, carried): CorrTrack's tracker call and whole session before (.old) and after the
# fewer-passes change (4416b81), alternating, same weights; a kernel profile of each at 1024 queries, bf16.
set -u
source scripts/device_common.sh
B="python3 scripts/corrtrack_bench.py --weights resources/corrtrack.safetensors --modes graphs"
S="--warmup 3 --repeat 15 --no-cost"
{
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
python3 -c 'import torch; print("torch", torch.__version__)'
for side in new old; do
  d=.; [ $side = old ] && d=.old
  step 100 bash -c "cd $d && $B --out $W/call_$side --precisions bf16 fp16 fp32 --queries 256 1024 --val-videos 8 --no-profile"
  step 45 bash -c "cd $d && $B --out $W/prof_$side --precisions bf16 --queries 1024 --val-videos 0 --repeats 5"
  cat $W/prof_$side/profile.txt 2>/dev/null
done
alternate 50 bf16,fp16 new old new old
step 50 $T bench $V --device cuda --tracker corrtrack-v2 --precisions bf16 --points 1024 --points-per-batch 1024 $S --out $W/s1024_v2_new
} 2>&1 | tee "$OUT/call_a.log"
tar -czf "$OUT/call_a.tar.gz" -C "$W" . 2>/dev/null
ls -la "$OUT"
