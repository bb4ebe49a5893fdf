#!/usr/bin/env bash
# Session 25, GPU call C: the side-stream upload with its stage timed on the current stream (the wait the run pays
# for): bear.mp4 and the sample at 256 queries, bf16, this tree against 48e5573 (.old), with the stage times; the
# tracks of this tree against 48e5573's (sample and bear.mp4, fp32, 16x16 grid). Every result goes into one tar file.
set -u
source scripts/device_common.sh
S="--warmup 3 --repeat 20 --no-cost"
B=.realclips/bear.mp4
{
for i in 1 2; do
  for side in new old; do bench_side $side bear_${side}_$i $B 256 bf16; stages bear_${side}_$i; done
  for side in new old; do bench_side $side s256_${side}_$i $V 256 bf16; stages s256_${side}_$i; done
done
for vid in $V $B; do
  n=$(basename $vid .mp4)
  step 40 $T track $vid --grid 16 --device cuda --precision fp32 --out $W/${n}_new.npz
  step 40 bash -c "cd .old && $T track $vid --grid 16 --device cuda --precision fp32 --out $W/${n}_old.npz"
  step 20 python3 -c "
import numpy as np; a, b = np.load('$W/${n}_new.npz'), np.load('$W/${n}_old.npz')
print('$n this tree vs 48e5573, fp32: max |dx|', float(np.abs(a['tracks'] - b['tracks']).max()),
      'px; visibility differs at', int((a['visible'] != b['visible']).sum()), 'of', a['visible'].size)"
done
} 2>&1 > "$W/call_c.log"
tar -czf "$OUT/call_c.tar.gz" -C "$W" --exclude='*.npz' . 2>/dev/null
grep -E "^###|^corrtrack|stages|max" "$W/call_c.log" | cut -c1-200
