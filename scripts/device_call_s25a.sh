#!/usr/bin/env bash
# Session 25, GPU call A: where the upload's time goes (scripts/upload_micro.py); this tree (frames uploaded on a
# side stream, the fine stage in a CUDA graph) against the code before (.old = 48e5573), alternating, on the
# sample at 256 and 1024 queries and on bear.mp4 (854x480: the fine stage runs), with CoTracker3 in the same call;
# the fine stage's graph checked against eager on bear.mp4; the device-memory data again (the fine stage's graph
# keeps its pool). Every result goes into one tar file.
set -u
source scripts/device_common.sh
S="--warmup 3 --repeat 20 --no-cost"
B=.realclips/bear.mp4
mkdir -p $W/mem
{
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader
python3 -c "import torch; print('torch', torch.__version__)"
step 60 python3 scripts/upload_micro.py --frames 16 47
for i in 1 2 3; do
  for side in new old; do bench_side $side s256_${side}_$i $V 256 bf16; done
done
step 60 $T bench $V --device cuda --tracker scripts.peers.cotracker_plugin:make --precisions bf16 --points 256 --points-per-batch 256 --warmup 2 --repeat 12 --no-cost --out $W/cotracker_256
for i in 1 2; do
  for side in new old; do bench_side $side s1024_${side}_$i $V 1024 bf16; done
done
for i in 1 2; do
  for side in new old; do bench_side $side bear_${side}_$i $B 256 bf16; done
done
step 40 $T track $B --grid 16 --device cuda --precision fp32 --out $W/bear_graphs.npz
step 40 env TRACKSCOPE_NO_CUDA_GRAPHS=1 $T track $B --grid 16 --device cuda --precision fp32 --out $W/bear_eager.npz
step 20 python3 -c "
import numpy as np; a, b = np.load('$W/bear_graphs.npz'), np.load('$W/bear_eager.npz')
print('fine stage graph vs eager, bear.mp4 fp32: max |dx|', float(np.abs(a['tracks'] - b['tracks']).max()),
      'px; visibility differs at', int((a['visible'] != b['visible']).sum()), 'of', a['visible'].size)"
step 220 python3 scripts/device_memory.py --out $W/mem
} 2>&1 > "$W/call_a.log"
tar -czf "$OUT/call_a.tar.gz" -C "$W" --exclude='*.npz' . 2>/dev/null
ls -la "$OUT"; tail -c 5000 "$W/call_a.log"
