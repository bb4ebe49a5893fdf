#!/usr/bin/env bash
# Session 19, GPU call B (repo root, $OUT set): CorrTrack's compiled second start (AOTInductor packages,
# scripts/compile_second_start_h200.py), the re-planted cudnn_benchmark_off and large_alloc_per_call with the
# controls, v1 against v2 (training piece 1's weights; speed does not depend on them) through the whole session.
set -u
source scripts/device_common.sh
S="--points-per-batch 256,1024 --warmup 3 --repeat 15 --no-cost"
{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
step 100 env DEADLINE=95 OUT="$W/field" bash scripts/device_diagnosis.sh cudnn_benchmark_off large_alloc_per_call clean
cat "$W/field/table.md" 2>/dev/null
step 70 $T bench $V --device cuda --tracker corrtrack --precisions bf16,fp16 --points 1024 $S --out "$W/v1"
step 70 $T bench $V --device cuda --tracker corrtrack-v2 --precisions bf16,fp16 --points 1024 $S --out "$W/v2"
step 245 python3 scripts/compile_second_start_h200.py --points 256,1024 --runs 5
} 2>&1 | tee "$OUT/call_b.log"
tar -czf "$OUT/benches.tar.gz" -C "$W" field v1 v2 2>/dev/null
ls -la "$OUT"
