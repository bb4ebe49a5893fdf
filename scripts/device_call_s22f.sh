#!/usr/bin/env bash
# Session 22, GPU call F (repo root, $OUT set; .old/ (e715e21) carried): call E's machine was noisy (the code
# before ran 6.7-9.1 ms at 256 queries there against 6.0-6.2 in call B); the whole session again, bf16, HEAD and
# .old alternating, short.
set -u
source scripts/device_common.sh
S="--warmup 3 --repeat 20 --no-cost"
{
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader
alternate 30 bf16 new old new old
} 2>&1 | tee "$OUT/call_f.log"
