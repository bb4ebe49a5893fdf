#!/usr/bin/env bash
# The GPU measurement call (issues 3 and 4), run from the repo root on the lent GPU machine:
#   OUT=/some/dir bash scripts/device_measure.sh
# Telemetry under test loads, CorrTrack bench sweeps (256 and 1024 points), the instrumentation
# overhead ratio, the planted pathological trackers with their diagnosis, and a compare. Everything
# lands in $OUT/measure.tar.gz (reports, logs) plus $OUT/summary.log.
set -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out/measure}
mkdir -p "$OUT"
W=$(mktemp -d)
DEADLINE=${DEADLINE:-330}   # seconds: steps that would start later are skipped, so the archive always lands
ts() { if (( SECONDS > DEADLINE )); then echo "skipped (deadline): $*"; return 0; fi
       timeout "${STEP_TIMEOUT:-90}" python3 -m engine.cli "$@"; }
log() { echo; echo "=== $* ==="; }
{
log environment
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu,pcie.link.gen.current,pcie.link.width.current --format=csv
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name(0))'

log "telemetry under a copy load, a bf16 matmul load and a tiny-kernel loop"
timeout 120 python3 scripts/telemetry_loads.py "$W/telemetry_loads.json" --seconds 3

log "CorrTrack, 256 queries, all precisions"
ts bench --tracker corrtrack --device cuda --precisions fp32,tf32,fp16,bf16 --points 256 \
   --points-per-batch 256 --warmup 3 --repeat 10 --diagnose --out "$W/corr_256"

log "CorrTrack, 1024 queries, all precisions"
ts bench --tracker corrtrack --device cuda --precisions fp32,tf32,fp16,bf16 --points 1024 \
   --points-per-batch 1024 --warmup 3 --repeat 10 --diagnose --out "$W/corr_1024"

log "instrumentation overhead (timing + telemetry on vs off), CorrTrack bf16, 256 queries"
ts bench --tracker corrtrack --device cuda --precisions bf16 --points 256 --points-per-batch 256 \
   --overhead --repeat 30 --no-cost --out "$W/overhead"

log "cold start: a fresh process loads the weights and runs once"
for p in bf16 fp32; do
  echo "cold process, $p (wall time includes python + torch imports):"
  time timeout 60 python3 -m engine.cli track resources/sample.mp4 --grid 16 --precision $p --device cuda \
     --out "$W/cold_$p.npz"
done

log "planted problems"
for t in host_sync tf32_off tiny_kernels cold_compile; do
  ts bench --tracker tests.plugins.pathological:$t --device cuda --precisions fp32 --points 1024 \
     --points-per-batch 128,1024 --warmup 1 --repeat 5 --diagnose --out "$W/planted_$t"
done
ts bench --tracker tests.plugins.pathological:quadratic_points --device cuda --precisions fp32 --points 2048 \
   --points-per-batch 256,2048 --warmup 1 --repeat 5 --diagnose --out "$W/planted_quadratic_points"

log "CorrTrack, sample video and its ground-truth queries, all precisions"
ts bench --tracker corrtrack --device cuda --precisions fp32,tf32,fp16,bf16 --warmup 3 --repeat 10 \
   --diagnose --out "$W/corr_sample"

log "CorrTrack tracker call alone (scripts/corrtrack_bench.py): speed per precision x queries, cold, validation AJ per precision"
if (( SECONDS <= DEADLINE )); then
  timeout 150 python3 scripts/corrtrack_bench.py --weights resources/corrtrack.safetensors --out "$W/corrtrack_bench" \
     --modes graphs --no-profile
  echo "--- the same without the NCC polish (speed only) ---"
  TRACKSCOPE_CORRTRACK_POLISH=0 timeout 60 python3 scripts/corrtrack_bench.py --weights resources/corrtrack.safetensors \
     --out "$W/corrtrack_bench_nopolish" --modes graphs --no-profile --val-videos 0 --precisions fp32 bf16
fi

log "compare fp32 vs bf16 (256 queries)"
A=$(ls "$W"/corr_256/*fp32*.json | head -1); B=$(ls "$W"/corr_256/*bf16*.json | head -1)
ts compare "$A" "$B"
ts compare "$B" --what-if "Tesla T4"
} 2>&1 | tee "$W/summary.log"
cp "$W/summary.log" "$OUT/summary.log"
tar -czf "$OUT/measure.tar.gz" -C "$W" .
ls -la "$OUT"
