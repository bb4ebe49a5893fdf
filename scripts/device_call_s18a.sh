#!/usr/bin/env bash
# Session 18, GPU call A (repo root, $OUT set): is the overhead the protocol's (scripts/overhead_protocol.py);
# session/direct of CorrTrack, TAPIR and CoTracker3 with both kinds of block entered alike; deep fp32/bf16
# captures of CorrTrack and CoTracker3 (for `diff`); the field diagnosis (scripts/device_diagnosis.sh).
set -u
source scripts/device_common.sh
PEERS="--points 256 --points-per-batch 256 --warmup 2 --repeat 10 --no-cost"
{
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.limit --format=csv,noheader
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
step 120 python3 scripts/overhead_protocol.py --sets 9 --runs 20
step 70 $T bench $V --device cuda --precisions fp32,bf16 --points 256 --points-per-batch 256 --warmup 2 --repeat 20 \
  --no-cost --deep --diagnose --out "$W/corrtrack"
step 100 $T bench $V --device cuda --tracker scripts.peers.cotracker_plugin:make --precisions fp32,bf16 $PEERS \
  --deep --diagnose --out "$W/cotracker"
step 80 $T bench $V --device cuda --tracker scripts.peers.tapir_plugin:make --precisions tf32,bf16 $PEERS \
  --out "$W/tapir"
} 2>&1 | tee "$OUT/call_a.log"
tar -czf "$OUT/benches.tar.gz" --exclude="*.trace.json*" -C "$W" . 2>/dev/null  # traces apart: the 16 MiB limit
for d in corrtrack cotracker; do (cd "$W" && find $d -name "*.trace.json*" | tar -czf "$OUT/traces_$d.tar.gz" -T -); done
left=$((TOTAL_S - SECONDS - 10))
(( left > 60 )) && DEADLINE=$left OUT="$OUT/field" bash scripts/device_diagnosis.sh > /dev/null 2>&1
ls -la "$OUT" "$OUT/field"
