#!/usr/bin/env bash
# Session 26, GPU call A (repo root, $OUT set; carried: .realclips/ with bear.mp4, .ho/ with the held-out sets made
# on the development machine by `trackscope sample .ho/heldout_v3 --preset heldout-v3`):
# 1. torch's version (the compile backends: precompile needs 2.13, AOTInductor's loader crashed on 2.11);
# 2. a v3 training piece resumed from the shipped v3, with a share of the sprites fixed to the background plane
#    (--anchored-sprite-share 0.4: the camera's motion shows in them), into $OUT/v3_anchored_ckpt.tar.gz;
# 3. the upload stage, now timed on the current stream: stage sums against the warm wall time (sample, bear.mp4);
# 4. the new weights on the held-out set's context group (poorctx) beside the shipped v3, bf16.
set -u
source scripts/device_common.sh
S="--warmup 3 --repeat 20 --no-cost"
B=.realclips/bear.mp4
{
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, 'cuda', torch.version.cuda)"
step 390 env OUT="$W/t" MINUTES=${MINUTES:-5.0} RESUME=resources/corrtrack_v3.safetensors LR=2e-4 WARMUP=50 SEED=7 \
  TRAIN_EXTRA="--anchored-sprite-share 0.4" bash scripts/device_train_v2.sh
tar -czf "$OUT/v3_anchored_ckpt.tar.gz" -C "$W/t" ckpt train.log val.log
for vid in $V $B; do
  n=$(basename $vid .mp4)
  step 45 $T bench $vid --device cuda --tracker corrtrack --points 256 --points-per-batch 256 --precisions bf16 $S --out $W/st_$n
  stages st_$n
done
step 60 $T eval .ho/heldout_v3 --device cuda --tracker corrtrack-v3 --precision bf16 --no-baseline --json $W/h3_v3_old.json
step 20 python3 -c "from engine.trackers.corrtrack import weights as W; print(W.ship('$W/t/ckpt/last.safetensors', W.V3_WEIGHTS)['sha256'])"
step 60 $T eval .ho/heldout_v3 --device cuda --tracker corrtrack-v3 --precision bf16 --no-baseline --json $W/h3_v3_new.json
} > "$W/call_a.log" 2>&1
tar -czf "$OUT/call_a.tar.gz" -C "$W" --exclude=t . 2>/dev/null
grep -E "^###|^torch|^validation|^done|stages|^mean|^corrtrack|rc=" "$W/call_a.log" | cut -c1-220
