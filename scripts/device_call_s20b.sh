#!/usr/bin/env bash
# Session 20, GPU call B (repo root, $OUT set): the AOTInductor loader probe's variants (constants kept out of the
# library, weights as inputs, a CPU package) after call A found the default package crashing in a fresh process.
set -u
source scripts/device_common.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
step 300 python3 scripts/aoti_load_probe.py > "$OUT/aoti_probe.log" 2>&1
grep -A14 "^| step" "$OUT/aoti_probe.log"
python3 - "$OUT/aoti_probe.log" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    if line.startswith('{"role'):
        row = json.loads(line)
        if row.get("rc") not in (0, None):
            print("---", row["role"], row["rc"]); print(row.get("stderr_before", "")[-700:]); print(row.get("stderr_tail", "")[:500])
PY
echo "elapsed $SECONDS s"
