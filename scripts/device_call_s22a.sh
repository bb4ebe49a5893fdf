#!/usr/bin/env bash
# Session 22, GPU call A (repo root, $OUT set; .old/ = `git archive e715e21 engine scripts pyproject.toml` with
# resources linked in, carried): fused.py's LayerNorm+taps kernel and casts.py's kept parameter casts against
# the code before. Micro-benchmarks (tile variants), the tracker call with the kernels on, off
# (TRACKSCOPE_CORRTRACK_FUSED=0: the kept casts alone) and before (.old), accuracy on the v1 validation set,
# the cold start with an empty and a filled Triton cache, a kernel profile at 1024 queries.
set -u
source scripts/device_common.sh
B="python3 scripts/corrtrack_bench.py --weights resources/corrtrack.safetensors --modes graphs"
export TRITON_CACHE_DIR=$W/triton_cache
{
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'
step 60 python3 scripts/refine_micro.py --queries 1024 --reps 50 --json $W/micro_1024.json
step 40 python3 scripts/refine_micro.py --queries 256 --reps 50 --json $W/micro_256.json
step 110 $B --out $W/fused_cold --precisions bf16 fp16 fp32 --queries 256 1024 --val-videos 8 --no-profile
step 50 $B --out $W/fused_warm_cache --precisions bf16 --queries 256 1024 --val-videos 0 --no-profile
step 110 env TRACKSCOPE_CORRTRACK_FUSED=0 $B --out $W/casts_only --precisions bf16 fp16 fp32 --queries 256 1024 --val-videos 8 --no-profile
step 110 bash -c "cd .old && $B --out $W/before --precisions bf16 fp16 fp32 --queries 256 1024 --val-videos 8 --no-profile"
step 45 $B --out $W/prof --precisions bf16 --queries 1024 --val-videos 0 --repeats 5
cat $W/prof/profile.txt 2>/dev/null | head -60
} 2>&1 | tee "$OUT/call_a.log"
cp $W/micro_*.json "$OUT/" 2>/dev/null
tar -czf "$OUT/call_a.tar.gz" --exclude=triton_cache -C "$W" . 2>/dev/null
ls -la "$OUT"
