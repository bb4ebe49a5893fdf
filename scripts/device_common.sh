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
# alternate LIMIT_S PRECISIONS SIDE...: CorrTrack's whole session (`trackscope bench`, the sample, timing args $S) at
# 256 and 1024 points for each side in turn, into $W/s<points>_<side>_<i>: new = this tree, old = .old/ (the code
# before, carried), off = this tree with the fused kernels off (the first precision only).
alternate() {
  local limit=$1 precisions=$2 i=0 side n; shift 2
  for side in "$@"; do
    i=$((i + 1))
    for n in 256 1024; do
      local run="$T bench $V --device cuda --tracker corrtrack --points $n --points-per-batch $n $S --out $W/s${n}_${side}_$i"
      case $side in
        new) step "$limit" $run --precisions "$precisions" ;;
        old) step "$limit" bash -c "cd .old && $run --precisions $precisions" ;;
        off) step "$limit" env TRACKSCOPE_CORRTRACK_FUSED=0 $run --precisions "${precisions%%,*}" ;;
      esac
    done
  done
}
# bench_side SIDE NAME VIDEO N PRECISIONS: CorrTrack's whole session (`trackscope bench`, timing args $S) into
# $W/NAME, from this tree (SIDE new) or from .old/ (SIDE old: the code before, carried; paths are .old's own).
bench_side() {
  local side=$1 name=$2 video=$3 n=$4 prec=$5
  local run="$T bench $video --device cuda --tracker corrtrack --points $n --points-per-batch $n --precisions $prec $S"
  if [ "$side" = old ]; then step 45 bash -c "cd .old && $run --out $W/$name"
  else step 45 $run --out $W/$name; fi
}
# stages NAME: each run report under $W/NAME (a bench --out folder): the stage times, their sum, the warm median and
# minimum (the upload stage sits on the current stream since 8e4ed54, so the stages add up to the run)
stages() { python3 -c "
import json, glob
for f in sorted(glob.glob('$W/$1/*.json')):
    if not f.endswith('bench.json'):
        t = json.load(open(f))['totals']; s = t['stage_ms']
        print('$1 stages', {k: round(v, 3) for k, v in s.items()}, 'sum', round(sum(s.values()), 3),
              'warm median', round(t['warm_ms_median'], 3), 'min', round(t['warm_ms_min'], 3))
"; }
