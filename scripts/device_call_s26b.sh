#!/usr/bin/env bash
# Session 26, GPU call B (carried: .carry/v3a/ = call A's checkpoint, .ho/ = the held-out sets made on the
# development machine, .realclips/): a second v3 piece with sprites fixed to the background (resumed from call A's
# checkpoint; kept casts now only inside the tracker, so its validation curve reads the weights it trains), then
# the result beside v1 on heldout-v3 per precision, on heldout-v2's texture-poor group, and on the real clips
# (cycle error, bf16).
set -u
TOTAL_S=${TOTAL_S:-575}
source scripts/device_common.sh
P=fp32,tf32,bf16,fp16,int8,fp8
{
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader
step 345 env OUT="$W/t" MINUTES=${MINUTES:-4.8} RESUME=.carry/v3a/last.safetensors LR=2e-4 WARMUP=50 SEED=8 \
  TRAIN_EXTRA="--anchored-sprite-share 0.5 --texture-poor-share 0.5" bash scripts/device_train_v2.sh
tar -czf "$OUT/v3_anchored_ckpt_b.tar.gz" -C "$W/t" ckpt train.log val.log
step 20 python3 -c "from engine.trackers.corrtrack import weights as W; print(W.ship('$W/t/ckpt/last.safetensors', W.V3_WEIGHTS)['sha256'])"
step 90 $T eval .ho/heldout_v3 --device cuda --tracker corrtrack-v3 --precisions $P --no-baseline --json $W/h3_v3b.json
step 90 $T eval .ho/heldout_v3 --device cuda --tracker corrtrack --precisions $P --no-baseline --json $W/h3_v1.json
step 30 $T eval .ho/poor_v2 --device cuda --tracker corrtrack-v3 --precision bf16 --no-baseline --json $W/poor_v2_v3b.json
step 80 $T cycle .realclips/*.mp4 --device cuda --tracker corrtrack-v3 --precision bf16 --json $W/cycle_v3b.json
} > "$W/call_b.log" 2>&1
tar -czf "$OUT/call_b.tar.gz" -C "$W" --exclude=t . 2>/dev/null
grep -E "^###|^validation|^done|^probe|^mean|^all|rc=" "$W/call_b.log" | cut -c1-220
