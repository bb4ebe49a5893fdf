#!/usr/bin/env bash
# Session 21, GPU call B (repo root, $OUT set; .mid/ = `git archive 4416b81 engine scripts pyproject.toml` with
# resources linked in, carried): CorrTrack v3 training piece 1 (warm start from v2, the track attention at zero
# output), then the polish's box-matrix window sums and the init head's logsumexp (HEAD) against 4416b81,
# tracker call and whole session, and the new v3 net's speed (graph capture of the track attention).
set -u
source scripts/device_common.sh
B="python3 scripts/corrtrack_bench.py --modes graphs"
S="--warmup 3 --repeat 15 --no-cost"
{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
step 330 env OUT="$OUT/t" MINUTES=${MINUTES:-4.5} INIT=resources/corrtrack_v2.safetensors \
  TRAIN_EXTRA="--track-attention-layers 1" bash scripts/device_train_v2.sh
tar -czf "$OUT/v3_ckpt.tar.gz" -C "$OUT/t" ckpt && rm -rf "$OUT/t/ckpt"
for side in new mid; do
  d=.; [ $side = mid ] && d=.mid
  step 60 bash -c "cd $d && $B --weights resources/corrtrack.safetensors --out $W/call_$side --precisions bf16 fp16 --queries 256 1024 --val-videos 8 --no-profile"
done
for n in 256 1024; do
  step 40 $T bench $V --device cuda --tracker corrtrack --precisions bf16,fp16 --points $n --points-per-batch $n $S --out $W/s${n}_new
done
mkdir -p $W/v3 && tar -xzf "$OUT/v3_ckpt.tar.gz" -C $W/v3
step 50 $B --weights $W/v3/ckpt/last.safetensors --out $W/v3_bench --precisions bf16 --queries 256 1024 --val-videos 8 --no-profile
step 40 $B --weights resources/corrtrack.safetensors --out $W/prof_new --precisions bf16 --queries 1024 --val-videos 0 --repeats 5
cat $W/prof_new/profile.txt 2>/dev/null
} 2>&1 | tee "$OUT/call_b.log"
tar -czf "$OUT/call_b.tar.gz" -C "$W" --exclude=v3 . 2>/dev/null
ls -la "$OUT" "$OUT/t"
