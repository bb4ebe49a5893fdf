#!/usr/bin/env bash
# One device call (~6.5 minutes): a piece of CorrTrack v2 training. Everything worth keeping lands in $OUT:
# ckpt/last.safetensors + ckpt/last.json (weights + manifest, written at every validation), ckpt/train_log.json,
# train.log, and val.log (the validation lines: the v1 set and the hard set, texture-poor + motion blur, 48 frames).
# Piece 1 (warm start from the shipped v1 weights):   bash scripts/device_train_v2.sh
# Later pieces (carry the previous piece's ckpt/ folder, e.g. as .carry/corrtrack_v2/):
#                                                      RESUME=.carry/corrtrack_v2/last.safetensors bash scripts/device_train_v2.sh
# Knobs: MINUTES (6), BATCH (16), FRAMES (48), POINTS (128), LR (3e-4), WARMUP (100), VAL_EVERY (90), SEED (1),
# ECHO (2), INIT (resources/corrtrack.safetensors), TRAIN_EXTRA (more `trackscope train` options).
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=.:${PYTHONPATH:-}
OUT=${OUT:-out/device}
mkdir -p "$OUT/ckpt"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv
python3 -c 'import torch; print("torch", torch.__version__, torch.cuda.get_device_name(0))'
python3 -c 'import skimage; print("scikit-image", skimage.__version__, "(photo textures on)")' \
  || echo "WARNING: no scikit-image: procedural textures only (no photo textures)"
if [ -n "${RESUME:-}" ]; then START=(--resume "$RESUME"); else START=(--init-from "${INIT:-resources/corrtrack.safetensors}" --attention-layers 1); fi
python3 -m engine.cli train --out "$OUT/ckpt" --minutes "${MINUTES:-6}" --batch-size "${BATCH:-16}" \
    --num-frames "${FRAMES:-48}" --num-points "${POINTS:-128}" --lr "${LR:-3e-4}" --warmup-steps "${WARMUP:-100}" \
    --val-every "${VAL_EVERY:-90}" --echo "${ECHO:-2}" --huber-delta 1 --seed "${SEED:-1}" "${START[@]}" \
    ${TRAIN_EXTRA:-} 2>&1 | tee "$OUT/train.log"
rc=$?
grep -E '^(validation|probe|setup|done)' "$OUT/train.log" | tee "$OUT/val.log"
nvidia-smi --query-gpu=memory.used,memory.total --format=csv
exit $rc
