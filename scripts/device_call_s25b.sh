#!/usr/bin/env bash
# Session 25, GPU call B: which change of call A bought bear.mp4's time. bear.mp4 (854x480, 82 frames), 256 queries,
# bf16, alternating: "new" = the tree as it was run (91b01cc with the side-stream upload taken out again: the fine
# stage's graph alone), .old2 = 91b01cc (the graph and the side-stream upload), .old = 48e5573 (neither); and the
# sample at 256 queries the same way. Every result goes into one tar file. (Run today, "new" is the committed tree,
# which has both: check out 91b01cc's tracker.py with the upload of 48e5573 to repeat it.)
set -u
source scripts/device_common.sh
S="--warmup 3 --repeat 20 --no-cost"
B=.realclips/bear.mp4
side2() { local run="$T bench $2 --device cuda --tracker corrtrack --points 256 --points-per-batch 256 --precisions bf16 $S"
          step 45 bash -c "cd .old2 && $run --out $W/$1"; }
{
for i in 1 2 3; do
  bench_side new bear_new_$i $B 256 bf16; side2 bear_both_$i $B; bench_side old bear_old_$i $B 256 bf16
done
for i in 1 2; do
  bench_side new s256_new_$i $V 256 bf16; side2 s256_both_$i $V; bench_side old s256_old_$i $V 256 bf16
done
} 2>&1 > "$W/call_b.log"
tar -czf "$OUT/call_b.tar.gz" -C "$W" --exclude='*.npz' . 2>/dev/null
grep -E "^###|^corrtrack" "$W/call_b.log" | cut -c1-160
