#!/usr/bin/env bash
# The new CLI paths on a real CUDA device (session 16): the device-memory check (a run that fits, one that
# does not), counting a track report's cost model on the GPU for what-if and roofline, a plugin through the
# guard on CUDA (plain and under the profiler's deep capture), and bench writing each configuration as it goes.
# Usage (device machine, repo root): bash scripts/device_check_session16.sh KEEP (a few files are copied there)
set -u
KEEP=$1
OUT=$(mktemp -d)
export PYTHONPATH=.
T="python3 -m engine.cli"
V=resources/sample.mp4
step() { echo; echo "### $*"; }
step "track CorrTrack fp32 on cuda, 256 grid points"
$T track $V --device cuda --grid 16 --out $OUT/t.npz --report $OUT/track.json; echo "rc=$?"
step "a run the device cannot hold: 160,000 points in one batch"
$T track $V --device cuda --grid 400 --points-per-batch 160000 --out $OUT/big.npz; echo "rc=$?"
ls $OUT/big.npz 2>/dev/null && echo "UNEXPECTED: big.npz written"
step "what-if on the track report, cost counted on cuda"
$T compare $OUT/track.json --what-if "Tesla T4" --count-device cuda; echo "rc=$?"
step "what-if on the track report, cost counted on the CPU"
$T compare $OUT/track.json --what-if "Tesla T4"; echo "rc=$?"
step "diagnose --roofline, counted on cuda"
$T diagnose $OUT/track.json --roofline --count-device cuda | tail -25; echo "rc=$?"
step "plugin (mlp_refine) on cuda through the guard"
$T track $V --device cuda --grid 16 --tracker tests.plugins.mlp_refine:factory --out $OUT/p.npz --report $OUT/plugin.json; echo "rc=$?"
step "plugin deep capture on cuda (guard runs inline under the profiler)"
$T track $V --device cuda --grid 16 --tracker tests.plugins.mlp_refine:factory --deep --out $OUT/pd.npz --report $OUT/plugin_deep.json; echo "rc=$?"
step "plugin that exits, on cuda"
$T track $V --device cuda --grid 4 --tracker tests.plugins.misbehaving:exits --out $OUT/x.npz; echo "rc=$?"
step "bench fp32,bf16 x 256,1024 on cuda, each configuration written as it goes"
$T bench $V --device cuda --precisions fp32,bf16 --points-per-batch 256,1024 --warmup 2 --repeat 10 --out $OUT/bench; echo "rc=$?"
ls $OUT/bench
python3 - "$OUT" <<'PY'
import json, sys
b = json.load(open(f"{sys.argv[1]}/bench/bench.json"))
print("complete:", b.get("complete"), "reports:", len(b.get("reports", [])))
PY

cp $OUT/track.json $OUT/plugin_deep.json $KEEP/ 2>/dev/null
cp $OUT/bench/bench.json $KEEP/bench16.json 2>/dev/null
