#!/usr/bin/env bash
# Session 21, GPU call C (repo root, $OUT set): micro-benchmarks of the refinement's pieces
# (scripts/refine_micro.py), then the control for v3 piece 1: v2 trained the same way from the same weights
# (seed, data, learning rate, warm-up, 1175 steps = v3 piece 1's count), without the track attention.
set -u
source scripts/device_common.sh
{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
step 90 python3 scripts/refine_micro.py --json "$OUT/refine_micro.json"
step 120 python3 scripts/refine_micro.py --queries 256 --json "$OUT/refine_micro_256.json"
step 400 env OUT="$OUT/t" MINUTES=4.5 INIT=resources/corrtrack_v2.safetensors TRAIN_EXTRA="--steps 1175" \
  bash scripts/device_train_v2.sh
tar -czf "$OUT/v2_control_ckpt.tar.gz" -C "$OUT/t" ckpt && rm -rf "$OUT/t/ckpt"
} 2>&1 | tee "$OUT/call_c.log"
ls -la "$OUT" "$OUT/t"
