#!/usr/bin/env bash
# Session 26, GPU call D2: does entering kept casts through the tracker's stages only (casts.keeping) cost the
# whole session anything? This tree against 8e4ed54 (.old: kept casts open to every caller), alternating, sample,
# 256 and 1024 queries, bf16, with the stage times (call C and D read upload 1.4-3.2 ms at 256 on a noisy machine
# where call A, before the change, read 0.45).
set -u
source scripts/device_common.sh
S="--warmup 3 --repeat 20 --no-cost"
{
for i in 1 2 3; do
  for side in new old; do bench_side $side s256_${side}_$i $V 256 bf16; stages s256_${side}_$i; done
done
for side in new old; do bench_side $side s1024_${side} $V 1024 bf16; stages s1024_${side}; done
} > "$W/call_d2.log" 2>&1
cp "$W/call_d2.log" "$OUT/"
grep -E "^s[0-9]|^corrtrack" "$W/call_d2.log" | cut -c1-230
