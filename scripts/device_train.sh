#!/usr/bin/env bash
# One device call: train CorrTrack for $MINUTES (resuming from $RESUME when set), then benchmark the
# result. Everything worth keeping lands in $OUT (weights + manifest, logs, bench JSON, kernel profile).
# Usage on the device machine:  MINUTES=6.5 RESUME=.carry/corrtrack/last.safetensors bash scripts/device_train.sh
# Other knobs: BATCH, LR, WARMUP, VAL_EVERY, TRAIN_EXTRA (more train options), BENCH=0 (skip the bench).
set -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out/device}
mkdir -p "$OUT/ckpt"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv
python3 -c 'import torch; print("torch", torch.__version__, torch.cuda.get_device_name(0))'
python3 -m engine.cli train --out "$OUT/ckpt" --minutes "${MINUTES:-6.5}" --batch-size "${BATCH:-16}" \
    --lr "${LR:-1e-3}" --warmup-steps "${WARMUP:-200}" --val-every "${VAL_EVERY:-60}" \
    ${RESUME:+--resume "$RESUME"} ${TRAIN_EXTRA:-} 2>&1 | tee "$OUT/train.log" || exit 1
[ "${BENCH:-1}" = 1 ] || exit 0   # BENCH=0: training only
python3 scripts/corrtrack_bench.py --weights "$OUT/ckpt/last.safetensors" --out "$OUT" ${BENCH_EXTRA:-} 2>&1 \
    | tee "$OUT/bench.log"
