#!/usr/bin/env bash
# Issue 18's timing truth on one GPU, in one call (about 8 minutes at most): the peers called directly, in a
# fresh thread per call and through the guard's worker and the bench (scripts/peers/direct.py, with the conv
# and matmul toy nets that test the cuDNN plan-cache cause); `bench` of CorrTrack bf16 and of TAPIR and
# CoTracker3 (tf32, bf16) with their direct references; `bench --overhead` of CorrTrack bf16; the StageTimer's
# host cost per stage (scripts/stage_timer_cost.py: is creating CUDA events per stage worth pooling?).
#
# Usage (device machine, repo root, $OUT set; carry .whl/ (einshape, dm-tree wheels) and .carry/peers):
#   bash scripts/device_truth.sh
# A CPU check of the same steps on a tiny video: TRUTH_DEVICE=cpu TRUTH_VIDEO=tiny.mp4 TRUTH_POINTS=8
#   TRUTH_REPEAT=1 TRUTH_OVERHEAD_REPEAT=2 TRUTH_DIRECT_ARGS="--max-frames 8 --size 64" TRUTH_DEADLINE_S=1800
#   TRUTH_STEP_LIMIT_S=900
# What comes back ($OUT): truth.log (everything printed), direct.json (every sample), bench.tar.gz (the bench
# folders: bench.json and one report per configuration).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
export PYTHONPATH=.:${PYTHONPATH:-}
export PYTHONUNBUFFERED=1
OUT=${OUT:?set OUT to the folder that comes back}
LOG=$OUT/truth.log
WORK=$(mktemp -d)
DEADLINE=$((SECONDS + ${TRUTH_DEADLINE_S:-470}))  # every step ends by then, leaving time to pack the results
T="python3 -m engine.cli"
DEVICE=${TRUTH_DEVICE:-cuda}
V=${TRUTH_VIDEO:-resources/sample.mp4}
POINTS=${TRUTH_POINTS:-256}
REPEAT=${TRUTH_REPEAT:-10}
OVERHEAD_REPEAT=${TRUTH_OVERHEAD_REPEAT:-30}
DIRECT_ARGS=${TRUTH_DIRECT_ARGS:-}
TAPIR=scripts.peers.tapir_plugin:make
COTRACKER=scripts.peers.cotracker_plugin:make
exec > >(tee -a "$LOG") 2>&1

# step LIMIT_S TITLE COMMAND...: the command under timeout, never past the deadline
step() {
  local limit=$1 title=$2
  shift 2
  local left=$((DEADLINE - SECONDS))
  echo
  echo "### $title ($(date -u +%H:%M:%S), $left s left)"
  if [ "$left" -le 5 ]; then
    echo "skipped: past the deadline"
    return
  fi
  [ -n "${TRUTH_STEP_LIMIT_S:-}" ] && limit=$TRUTH_STEP_LIMIT_S  # a slow CPU check
  [ "$limit" -gt "$left" ] && limit=$left
  timeout --kill-after=10 "$limit" "$@"
  echo "rc=$?"
}

step 60 "environment" python3 -c "
import platform, torch, sys; sys.path.insert(0, '/tmp/site')
print('python', platform.python_version(), 'torch', torch.__version__, 'cuda', torch.version.cuda,
      'cudnn', torch.backends.cudnn.version(), 'device', torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'none')
import einshape, tree; print('einshape, dm-tree: importable')"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv,noheader 2>&1 | head -2

step 200 "direct.py: the peers four ways + conv/matmul toys, tf32 and bf16, 256 queries" \
  python3 scripts/peers/direct.py --device "$DEVICE" --video "$V" --points "$POINTS" --warmup 2 --repeat 5 \
  $DIRECT_ARGS --json "$OUT/direct.json"

step 60 "bench CorrTrack bf16, 256 points, with the direct reference" \
  $T bench "$V" --device "$DEVICE" --precisions bf16 --points "$POINTS" --points-per-batch "$POINTS" --warmup 2 --repeat "$REPEAT" --no-cost \
  --out "$WORK/bench_corrtrack"

step 90 "bench TAPIR tf32,bf16, 256 points, with the direct reference" \
  $T bench "$V" --device "$DEVICE" --tracker $TAPIR --precisions tf32,bf16 --points "$POINTS" --points-per-batch "$POINTS" \
  --warmup 2 --repeat "$REPEAT" --no-cost --out "$WORK/bench_tapir"

step 90 "bench CoTracker3 tf32,bf16, 256 points, with the direct reference" \
  $T bench "$V" --device "$DEVICE" --tracker $COTRACKER --precisions tf32,bf16 --points "$POINTS" --points-per-batch "$POINTS" \
  --warmup 2 --repeat "$REPEAT" --no-cost --out "$WORK/bench_cotracker"

step 120 "bench --overhead CorrTrack bf16, 256 points, 3 alternating sets of 30 runs each way" \
  $T bench "$V" --device "$DEVICE" --precisions bf16 --points "$POINTS" --points-per-batch "$POINTS" --warmup 2 --repeat "$OVERHEAD_REPEAT" \
  --overhead --out "$WORK/bench_overhead"

step 45 "StageTimer host cost per stage: disabled, enabled, enabled with pooled events" \
  python3 scripts/stage_timer_cost.py --device "$DEVICE" --runs "${TRUTH_TIMER_RUNS:-2000}"

echo
echo "### packing ($(date -u +%H:%M:%S))"
tar -czf "$OUT/bench.tar.gz" -C "$WORK" . && ls -la "$OUT"
