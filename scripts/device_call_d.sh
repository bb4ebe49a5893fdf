#!/usr/bin/env bash
# The session's last GPU call: the instrumentation overhead and CorrTrack's session/direct with the slower GPM
# pace, and CoTracker3's deep bench again (the function-level share below its forward).
set -u
export PYTHONPATH=.:${PYTHONPATH:-} PYTHONUNBUFFERED=1
OUT=${OUT:?}
W=$(mktemp -d)
T="python3 -m engine.cli"
V=resources/sample.mp4
{
for i in 1 2; do
timeout 70 $T bench $V --device cuda --precisions bf16 --points 256 --points-per-batch 256 --warmup 2 --repeat 30 \
  --overhead --out "$W/overhead_$i" 2>&1 | grep -E "overhead|ratio"
done
timeout 60 $T bench $V --device cuda --precisions bf16,fp32 --points 256 --points-per-batch 256 --warmup 2 --repeat 20 \
  --no-cost --out "$W/corrtrack" 2>&1 | grep -v USDT | tail -6
timeout 100 $T bench $V --device cuda --tracker scripts.peers.cotracker_plugin:make --precisions fp32,bf16 --points 256 \
  --points-per-batch 256 --warmup 2 --repeat 10 --no-cost --deep --diagnose --out "$W/deep_cotracker" 2>&1 \
  | grep -E "kernel time named|vs direct|p256 f16 \||deep capture \("
} 2>&1 | tee "$OUT/call_d.log"
tar -czf "$OUT/benches.tar.gz" -C "$W" . 2>/dev/null; ls -la "$OUT"
