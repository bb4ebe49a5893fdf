#!/usr/bin/env bash
# Session 20, GPU call A (repo root, $OUT set): the whole field with the re-planted cudnn_benchmark_off (1-D token
# mixers on aligned channels) and a per-plugin limit recompile_each_call fits in; the cuDNN sweep's
# plant_candidates at the re-plant's own shapes; where AOTInductor's package loader crashes (aoti_load_probe).
set -u
source scripts/device_common.sh
env DEADLINE=330 PLUGIN_LIMIT=110 OUT="$OUT/field" bash scripts/device_diagnosis.sh > "$OUT/field.log" 2>&1
echo "field: $(grep -c . "$OUT/field/table.md" 2>/dev/null) table lines, $SECONDS s"
step 70 python3 scripts/cudnn_sweep.py --family plant_candidates --budget-s 45 --out "$OUT/cudnn_sweep_plant.json" \
  > "$OUT/cudnn_sweep_plant.log"
grep -A40 "sorted by gain" "$OUT/cudnn_sweep_plant.log" | head -24
step 200 python3 scripts/aoti_load_probe.py > "$OUT/aoti_probe.log" 2>&1
grep -A12 "^| step" "$OUT/aoti_probe.log"
echo "=== field table"
cat "$OUT/field/table.md" 2>/dev/null
echo "elapsed $SECONDS s"
