#!/usr/bin/env bash
# Session 19, GPU call E (repo root, $OUT set): v1 and v2 per precision in the same call (scripts/corrtrack_bench.py,
# validation set, 256 queries), then AOTInductor's cold build alone under faulthandler (it crashed in call C).
set -u
source scripts/device_common.sh
P="fp32 tf32 fp16 bf16 int8 fp8"
{
step 60 python3 scripts/corrtrack_bench.py --weights resources/corrtrack.safetensors --out "$OUT/v1" --modes graphs \
  --no-profile --queries 256 --repeats 10 --precisions $P
step 60 python3 scripts/corrtrack_bench.py --weights resources/corrtrack_v2.safetensors --out "$OUT/v2" --modes graphs \
  --no-profile --queries 256 --repeats 10 --precisions $P
step 100 env PYTHONFAULTHANDLER=1 python3 scripts/compile_second_start_h200.py --role cold --points 256 --runs 1 \
  --cache-dir "$W/aoti"
} 2>&1 | tee "$OUT/call_e.log"
