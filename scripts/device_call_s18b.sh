#!/usr/bin/env bash
# Session 18, GPU call B (repo root, $OUT set): the fleet on one H200 against bench (scripts/fleet_h200.sh; Ray from
# a carried, unpacked wheel: .ray/ray312.tar.gz), the peers' session/direct with the finer block pairs, the field's
# re-planted plugins with the controls, CorrTrack's compile cache (scripts/compile_cache_h200.py; replaced in session 19
# by scripts/compile_second_start_h200.py, which measures the same and the second start alone).
set -u
source scripts/device_common.sh
mkdir -p /tmp/ray && tar -xzf .ray/ray312.tar.gz -C /tmp/ray && export PYTHONPATH=/tmp/ray:$PYTHONPATH
PEERS="--points 256 --points-per-batch 256 --warmup 2 --repeat 12 --no-cost"
{
nvidia-smi --query-gpu=name,driver_version,uuid,pci.bus_id --format=csv,noheader
step 200 env OUT="$W/fleet" FLEET_SWEEP="--precisions fp32,bf16 --points 256 --points-per-batch 256 --warmup 2 --repeat 6" \
  bash scripts/fleet_h200.sh
step 70 $T bench $V --device cuda --tracker scripts.peers.cotracker_plugin:make --precisions fp32,bf16 $PEERS \
  --out "$W/cotracker"
step 80 $T bench $V --device cuda --tracker scripts.peers.tapir_plugin:make --precisions tf32,bf16 $PEERS \
  --out "$W/tapir"
step 90 env DEADLINE=85 OUT="$W/field" bash scripts/device_diagnosis.sh allocator_churn thread_oversubscription \
  cpu_ops_in_gpu_run host_python_loop clean
cat "$W/field/table.md" 2>/dev/null
step 160 python3 scripts/compile_cache_h200.py --points 256,1024
} 2>&1 | tee "$OUT/call_b.log"
tar -czf "$OUT/fleet.tar.gz" -C "$W" fleet 2>/dev/null
tar -czf "$OUT/benches.tar.gz" -C "$W" cotracker tapir field 2>/dev/null
ls -la "$OUT"
