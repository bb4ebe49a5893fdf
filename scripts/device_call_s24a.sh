#!/usr/bin/env bash
# Session 24, GPU call A (repo root, $OUT set; carried: .old (the tree at c0c08f3, the code before: engine,
# scripts, resources), .carry/peers (CoTracker3's sources), .realclips (real videos, not committed)):
# the chunked upload and the one-copy download against the code before, alternating, on the sample at 256 and
# 1024 queries and on a real clip (where the polish's fine stage runs, now searched in chunks of frames);
# CoTracker3 (random weights, plugin) in the same call at both sizes; the device-memory data again (the fine
# stage and the chunked upload), and the compiled second start where this torch has precompile.
set -u
source scripts/device_common.sh
S="--warmup 3 --repeat 20 --no-cost"
bench() {  # bench SIDE NAME VIDEO N PRECISIONS (device_common.sh)
  bench_side "$@"
  cp "$W/$2/bench.json" "$OUT/bench_$2.json" 2>/dev/null
}
{
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
for i in 1 2; do
  for side in new old; do
    for n in 256 1024; do bench $side s${n}_${side}_$i $V $n bf16; done
  done
done
for n in 256 1024; do
  step 60 $T bench $V --device cuda --tracker scripts.peers.cotracker_plugin:make --precisions bf16,tf32 --points $n --points-per-batch $n --warmup 2 --repeat 12 --no-cost --out $W/cotracker_$n
  cp "$W/cotracker_$n/bench.json" "$OUT/bench_cotracker_$n.json" 2>/dev/null
  bench new s${n}_new_3 $V $n bf16,tf32
done
for side in new old; do bench $side bear_${side} .realclips/bear.mp4 256 bf16; done
for side in new old; do bench $side apple1024_${side} .realclips/apple.mp4 1024 bf16; done
step 45 $T cycle .realclips/bear.mp4 .realclips/apple.mp4 --device cuda --precisions bf16 --no-baseline --json $OUT/cycle_bf16.json
step 180 python3 scripts/device_memory.py --out $OUT
if python3 -c "import sys; from engine.trackers.compile_packages import available_precompile as a; sys.exit(0 if a() else 1)"; then
  step 200 python3 scripts/compile_second_start_h200.py --backend precompile --points 256
else
  echo "this torch has no precompile: compiled second start not measured"
fi
} 2>&1 | tee "$OUT/call_a.log"
