#!/usr/bin/env bash
# Session 23, GPU call A (repo root, $OUT set; .realclips, .heldout and .hr carried): CorrTrack with the polish's
# As run (call A): the three fine_off steps failed (timeout cannot run a shell function) and the cycle stopped at
# its LK baseline on cuda (fixed: the baseline runs on the CPU); call B (device_call_s23b.sh) ran them again.
# fine stage (video resolution) on real clips per precision (cycle error, LK once) and with the stage off; the
# held-out set per precision as an accuracy file for the trade-off tab (256x256 videos: the stage does not run);
# a 768 px synthetic set with ground truth, the stage on and off; the stage's cost in a whole session on a real
# clip (bear.mp4, 854x480) and the sample's session (unchanged code path) as a check.
set -u
source scripts/device_common.sh
ALL=fp32,tf32,bf16,fp16,int8,fp8
S="--warmup 3 --repeat 15 --no-cost"
fine_off() { env TRACKSCOPE_CORRTRACK_FINE_POLISH=0 "$@"; }
{
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader
python3 -c "import torch; print('torch', torch.__version__)"
step 150 $T cycle .realclips/*.mp4 --device cuda --precisions $ALL --json $OUT/cycle_v1.json
step 60 fine_off $T cycle .realclips/*.mp4 --device cuda --precisions fp32,bf16 --no-baseline --json $OUT/cycle_v1_nofine.json
for side in fine nofine; do
  run="$T bench .realclips/bear.mp4 --device cuda --tracker corrtrack --points 256 --points-per-batch 256 --precisions bf16 $S --out $W/bear_$side"
  if [ $side = fine ]; then step 45 $run; else step 45 fine_off $run; fi
  cp $W/bear_$side/bench.json $OUT/bench_bear_$side.json 2>/dev/null
done
step 60 $T eval .hr/hr_test768 --device cuda --precisions fp32,bf16 --no-baseline --json $OUT/hr768_fine.json
step 45 fine_off $T eval .hr/hr_test768 --device cuda --precisions fp32,bf16 --no-baseline --json $OUT/hr768_nofine.json
step 150 $T eval .heldout --device cuda --precisions $ALL --no-baseline --json $OUT/heldout_v1.json
for n in 256 1024; do
  step 40 $T bench $V --device cuda --tracker corrtrack --points $n --points-per-batch $n --precisions bf16 $S --out $W/s$n
done
} 2>&1 | tee "$OUT/call_a.log"
