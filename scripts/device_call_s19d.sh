#!/usr/bin/env bash
# Session 19, GPU call D (repo root, $OUT set): v2 (training piece 2's weights) per precision on the validation
# set (scripts/corrtrack_bench.py: speed of the tracker call at 256 queries, AJ per precision), then the
# second start through the dynamo backend (the keyed-folder fix; AOTInductor's build crashed in call C).
set -u
source scripts/device_common.sh
{
step 160 python3 scripts/corrtrack_bench.py --weights resources/corrtrack_v2.safetensors --out "$OUT/v2" --modes graphs \
  --no-profile --queries 256 --repeats 10
step 250 python3 scripts/compile_second_start_h200.py --points 256 --runs 5 --backend dynamo
} 2>&1 | tee "$OUT/call_d.log"
ls -la "$OUT"
