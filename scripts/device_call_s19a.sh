#!/usr/bin/env bash
# Session 19, GPU call A (repo root, $OUT set): CorrTrack v2's first training piece (warm start from v1,
# scripts/device_train_v2.sh), then the wider cuDNN benchmark sweep (scripts/cudnn_sweep.py) and the field's
# large_alloc_per_call and cudnn_benchmark_off plugins with the controls under the measured rules.
set -u
source scripts/device_common.sh
{
nvidia-smi --query-gpu=name,driver_version,uuid --format=csv,noheader
step 400 env OUT="$OUT/v2" MINUTES=${MINUTES:-5.3} bash scripts/device_train_v2.sh
step 75 python3 scripts/cudnn_sweep.py --out "$OUT/cudnn_sweep.json"
step 100 env DEADLINE=95 OUT="$W/field" bash scripts/device_diagnosis.sh large_alloc_per_call cudnn_benchmark_off clean
cat "$W/field/table.md" 2>/dev/null
} 2>&1 | tee "$OUT/call_a.log"
rm -f "$OUT/v2/ckpt/"*.tmp 2>/dev/null
tar -czf "$OUT/field.tar.gz" -C "$W" field 2>/dev/null
ls -la "$OUT" "$OUT/v2" "$OUT/v2/ckpt"
