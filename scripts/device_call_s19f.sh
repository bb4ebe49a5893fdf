#!/usr/bin/env bash
# Session 19, GPU call F (repo root, $OUT set): the whole field (24 planted plugins and the two controls) with the
# session's final rules, in one process, under a deadline (the table is written whatever happens).
set -u
source scripts/device_common.sh
env DEADLINE=${DEADLINE:-160} PLUGIN_LIMIT=40 OUT="$OUT/field" bash scripts/device_diagnosis.sh > "$OUT/call_f.log" 2>&1
cat "$OUT/field/table.md" 2>/dev/null
