# Sourced by the scripts/device_call_*.sh GPU calls (repo root, $OUT set): the carried wheels on the path, the
# repo importable, a work folder W, and step LIMIT_S CMD...: one command under timeout, skipped past TOTAL_S.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  2>/dev/null && export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
export PYTHONPATH=.:${PYTHONPATH:-} PYTHONUNBUFFERED=1
OUT=${OUT:?set OUT to the folder that comes back}
TOTAL_S=${TOTAL_S:-560}
W=$(mktemp -d)
T="python3 -m engine.cli"
V=resources/sample.mp4
step() { local limit=$1; shift; local left=$((TOTAL_S - SECONDS - 15)); echo; echo "### $* ($left s left)";
         (( left < 10 )) && { echo skipped; return; }; (( limit > left )) && limit=$left;
         timeout -k 5 "$limit" "$@" 2>&1 | grep -v '^USDT'; echo "rc=${PIPESTATUS[0]}"; }
