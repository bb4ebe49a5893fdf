#!/usr/bin/env bash
# Session 23, GPU call B (repo root, $OUT set; .realclips and .hr carried): what call A could not run. Real clips
# per precision (cycle error; LK once, on the CPU), the polish's fine stage off for fp32/bf16, the stage's cost on
# bear.mp4 (854x480) on and off, the 768 px set with the stage off, and v3 on the clips in bf16.
set -u
source scripts/device_common.sh
ALL=fp32,tf32,bf16,fp16,int8,fp8
S="--warmup 3 --repeat 15 --no-cost"
OFF="env TRACKSCOPE_CORRTRACK_FINE_POLISH=0"
CLIPS=".realclips/*.mp4"
{
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader
step 200 $T cycle $CLIPS --device cuda --precisions $ALL --json $OUT/cycle_v1.json
step 60 $OFF $T cycle $CLIPS --device cuda --precisions fp32,bf16 --no-baseline --json $OUT/cycle_v1_nofine.json
for side in nofine fine nofine fine; do
  run="$T bench .realclips/bear.mp4 --device cuda --tracker corrtrack --points 256 --points-per-batch 256 --precisions bf16 $S --out $W/bear_$side"
  if [ $side = fine ]; then step 45 $run; else step 45 $OFF $run; fi
done
step 45 $OFF $T eval .hr/hr_test768 --device cuda --precisions fp32,bf16 --no-baseline --json $OUT/hr768_nofine.json
step 60 $T cycle $CLIPS --device cuda --tracker corrtrack-v3 --precisions bf16 --no-baseline --json $OUT/cycle_v3.json
} 2>&1 | tee "$OUT/call_b.log"
