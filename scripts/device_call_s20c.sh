#!/usr/bin/env bash
# Session 20, GPU call C (repo root, $OUT set): the dynamo precompile route (torch.compile(...).aot_compile, saved
# and loaded with torch.compiler.load_compiled_function: no AOTInductor loader) on the H200: the probe's precompile
# variant, then CorrTrack's second start with --backend precompile (cold build, second start, background switch).
set -u
source scripts/device_common.sh
TOTAL_S=${TOTAL_S:-440}
step 140 env PROBE_VARIANTS=precompile python3 scripts/aoti_load_probe.py > "$OUT/precompile_probe.log" 2>&1
grep -A8 "^| step" "$OUT/precompile_probe.log"
step 290 python3 scripts/compile_second_start_h200.py --backend precompile --points 256 --runs 5 \
  > "$OUT/second_start_precompile.log" 2>&1
tail -40 "$OUT/second_start_precompile.log"
echo "elapsed $SECONDS s"
