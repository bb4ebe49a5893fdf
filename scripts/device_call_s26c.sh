#!/usr/bin/env bash
# Session 26, GPU call C (carried: .carry/v3b/ = call B's checkpoint, .ho/, .realclips/): a third v3 piece with
# sprites fixed to the background (resumed from call B's checkpoint, lower peak rate); the whole session at 256 and
# 1024 queries, bf16, v1 and v3 (kept casts now enter through the tracker's stages only: the speed must not move,
# call A read v1 5.07 ms at 256); the piece's weights on heldout-v3 and heldout-v2's texture-poor group (bf16) and
# on the real clips (cycle error, bf16).
set -u
TOTAL_S=${TOTAL_S:-575}
source scripts/device_common.sh
S="--warmup 3 --repeat 20 --no-cost"
{
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader
step 310 env OUT="$W/t" MINUTES=${MINUTES:-4.4} RESUME=.carry/v3b/last.safetensors LR=1.5e-4 WARMUP=50 SEED=9 \
  TRAIN_EXTRA="--anchored-sprite-share 0.5 --texture-poor-share 0.5" bash scripts/device_train_v2.sh
tar -czf "$OUT/v3_anchored_ckpt_c.tar.gz" -C "$W/t" ckpt train.log val.log
for n in 256 1024; do
  step 45 $T bench $V --device cuda --tracker corrtrack --points $n --points-per-batch $n --precisions bf16 $S --out $W/v1_s$n
done
step 45 $T bench $V --device cuda --tracker corrtrack-v3 --points 256 --points-per-batch 256 --precisions bf16 $S --out $W/v3_s256
step 20 python3 -c "from engine.trackers.corrtrack import weights as W; print(W.ship('$W/t/ckpt/last.safetensors', W.V3_WEIGHTS)['sha256'])"
step 40 $T eval .ho/heldout_v3 --device cuda --tracker corrtrack-v3 --precision bf16 --no-baseline --json $W/h3_v3c.json
step 30 $T eval .ho/poor_v2 --device cuda --tracker corrtrack-v3 --precision bf16 --no-baseline --json $W/poor_v2_v3c.json
step 60 $T cycle .realclips/*.mp4 --device cuda --tracker corrtrack-v3 --precision bf16 --json $W/cycle_v3c.json
} > "$W/call_c.log" 2>&1
tar -czf "$OUT/call_c.tar.gz" -C "$W" --exclude=t . 2>/dev/null
grep -E "^###|^validation|^done|^probe|^mean|^corrtrack|rc=" "$W/call_c.log" | cut -c1-220
