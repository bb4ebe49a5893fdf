#!/usr/bin/env bash
# Session 19, GPU call C (repo root, $OUT set): CorrTrack v2's second training piece (resumed from piece 1,
# .carry/corrtrack_v2, with less texture-poor and motion-blur data than piece 1: piece 1 lowered the v1 set's AJ),
# then the compiled second start again (parameters moved outside inference mode, so torch.export can trace them).
set -u
source scripts/device_common.sh
{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
step 330 env OUT="$OUT/v2" MINUTES=${MINUTES:-4.3} SEED=2 LR=2e-4 WARMUP=50 RESUME=.carry/corrtrack_v2/last.safetensors \
  TRAIN_EXTRA="--texture-poor-share 0.15 --texture-poor-sprite-share 0.1 --motion-blur-prob 0.15" \
  bash scripts/device_train_v2.sh
step 250 python3 scripts/compile_second_start_h200.py --points 256,1024 --runs 5
} 2>&1 | tee "$OUT/call_c.log"
rm -f "$OUT/v2/ckpt/"*.tmp 2>/dev/null
ls -la "$OUT" "$OUT/v2/ckpt"
