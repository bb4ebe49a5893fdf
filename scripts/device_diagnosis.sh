#!/usr/bin/env bash
# The field diagnosis on the lent GPU (issue 19), from the repo root:
#   OUT=/some/dir bash scripts/device_diagnosis.sh [NAME ...]
# Environment, then scripts/diagnose_field.py over every field plugin of tests/plugins/field (or the NAMEs)
# plus CorrTrack bf16 as a second negative control, in one process; a plugin that the run did not reach
# before it stopped (a hang, a crash) is tried again in its own subprocess while time is left. Comes back
# as at most 4 files: $OUT/diagnosis.log, $OUT/table.md, $OUT/table.json and $OUT/diagnosis.tar.gz (the
# per-plugin reports). On the CPU, for a check: DEVICE=cpu VIDEO=tiny.mp4 GRID=4 OUT=/tmp/d bash ... NAME
set -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out/diagnosis}
DEVICE=${DEVICE:-cuda}
VIDEO=${VIDEO:-resources/sample.mp4}
GRID=${GRID:-16}                   # 16 x 16 = 256 grid queries
DEADLINE=${DEADLINE:-420}          # seconds for the whole call; the archive is made whatever happens
PLUGIN_LIMIT=${PLUGIN_LIMIT:-90}   # seconds per plugin
TAR_MARGIN=20                      # seconds kept for the archive
mkdir -p "$OUT"
W=$(mktemp -d)
D="$W/diagnosis"
left() { echo $(( DEADLINE - SECONDS - TAR_MARGIN )); }
log() { echo; echo "=== $* ==="; }
{
log environment
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu,memory.used,memory.total --format=csv \
  || echo "nvidia-smi: not available"
python3 -c 'import os, torch; print("torch", torch.__version__, "cuda", torch.version.cuda,
  torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no CUDA device", "cores", os.cpu_count())'
git log -1 --format='commit %h %s' 2>/dev/null || true

log "field plugins and CorrTrack, one process (deep bench + diagnosis each)"
timeout -k 10 "$(left)" python3 scripts/diagnose_field.py --out "$D" --device "$DEVICE" --video "$VIDEO" --grid "$GRID" \
  --time-limit-s "$PLUGIN_LIMIT" --controls "$@"
rc=$?
if (( rc != 0 )); then
  echo "diagnose_field.py stopped with $rc; the plugins it did not finish, each in its own process:"
  if (( $(left) > 30 )); then
    timeout -k 10 "$(left)" python3 scripts/diagnose_field.py --out "$D" --device "$DEVICE" --video "$VIDEO" \
      --grid "$GRID" --time-limit-s "$PLUGIN_LIMIT" --controls --resume --isolate "$@"
  else
    echo "skipped (deadline)"
  fi
fi
log "elapsed ${SECONDS} s"
} 2>&1 | grep --line-buffered -v '^USDT' | tee "$OUT/diagnosis.log"
cp "$D/table.md" "$D/table.json" "$OUT/" 2>/dev/null || echo "no table written" | tee -a "$OUT/diagnosis.log"
tar -czf "$OUT/diagnosis.tar.gz" -C "$W" diagnosis 2>/dev/null || echo "nothing to archive" >> "$OUT/diagnosis.log"
ls -la "$OUT"
