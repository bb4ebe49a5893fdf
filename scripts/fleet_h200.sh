#!/usr/bin/env bash
# One GPU call (issue 21), from the repo root with $OUT set: a one-node `trackscope fleet` (Ray started here) of
# CorrTrack and the clean field plugin at fp32 and bf16 into $OUT/fleet, then `trackscope bench` of the same
# configurations into $OUT/bench, then a comparison of each pair of reports (content, without times, samples and
# timestamps), the fleet's overhead per configuration, and whether each report's telemetry read the GPU the actor
# ran on (its UUID). Ray comes from an unpacked wheel on PYTHONPATH: nothing is installed here. Within 560 s.
set -u
export PYTHONPATH=.:${PYTHONPATH:-} PYTHONUNBUFFERED=1
OUT=${OUT:?set OUT to the folder that comes back}
mkdir -p "$OUT"  # tee opens its log before the first fleet run makes the folder
T="python3 -m engine.cli"
V=resources/sample.mp4
# FLEET_SWEEP / FLEET_TRACKERS / FLEET_VIDEO override these for a quick run elsewhere (a CPU check of the script)
read -ra SWEEP <<< "${FLEET_SWEEP:---precisions fp32,bf16 --points 256 --points-per-batch 256 --warmup 2 --repeat 10}"
read -ra TRACKERS <<< "${FLEET_TRACKERS:-corrtrack tests.plugins.field.clean:make}"
V=${FLEET_VIDEO:-$V}
# the first tracker's fleet asks for its GPU by Ray accelerator type (the typed placement path), the second takes
# every GPU of the node; FLEET_FIRST_GPUS= (empty) for a machine without one
FIRST_GPUS=${FLEET_FIRST_GPUS-H200:1}
{
python3 -c "import ray, torch; print('ray', ray.__version__, '| torch', torch.__version__, '| cuda',
torch.cuda.is_available(), torch.cuda.device_count())"
nvidia-smi --query-gpu=index,name,uuid,pci.bus_id --format=csv,noheader 2>/dev/null
python3 -c "from ray._private.accelerators.nvidia_gpu import NvidiaGPUAcceleratorManager as M
print('Ray accelerator type here:', M.get_current_node_accelerator_type())" 2>&1 | tail -1
for tracker in "${TRACKERS[@]}"; do
  name=$(printf %s "$tracker" | tr -c 'A-Za-z0-9' _)
  echo; echo "### fleet $tracker"
  where=(); [ -n "$FIRST_GPUS" ] && [ "$tracker" = "${TRACKERS[0]}" ] && where=(--gpus "$FIRST_GPUS")
  timeout -k 5 150 $T fleet "$V" --tracker "$tracker" "${SWEEP[@]}" "${where[@]}" --out "$OUT/fleet/$name"
  echo "rc=$?"
  echo; echo "### bench $tracker"
  timeout -k 5 120 $T bench "$V" --tracker "$tracker" "${SWEEP[@]}" --out "$OUT/bench/$name"; echo "rc=$?"
done
echo; echo "### fleet vs bench"
python3 - "$OUT" <<'EOF'
import json, math, sys
from pathlib import Path

from engine.fleet.index import load_index, report_path
from engine.fleet.sameness import differences

out = Path(sys.argv[1])
same = True
for folder in sorted((out / "fleet").glob("*/index.json")):
    index = load_index(folder)
    print(f"{folder.parent.name}: complete={index.complete}, {len(index.entries)} entries")
    for gpu in index.gpus:
        print(f"  slot {gpu.slot}: {gpu.status} {gpu.gpu} {gpu.uuid} node {gpu.node_ip} type {gpu.node_accelerator_type} "
              f"device {gpu.device} gpu_ids {list(gpu.gpu_ids)} ready in {(gpu.ready_ms or 0) / 1e3:.1f} s "
              f"(its constructor {(gpu.startup_ms or 0) / 1e3:.1f} s)")
    for e in index.entries:
        line = (f"  {e.config:40s} {e.status:6s} bench {(e.bench_ms or 0) / 1e3:7.2f} s, round trip "
                f"{(e.round_trip_ms or 0) / 1e3:7.2f} s, fleet overhead {e.overhead_ms if e.overhead_ms is not None else float('nan'):.1f} ms")
        path = report_path(folder, e)
        if path is None:
            print(line, "| no report:", e.message); same = False; continue
        fleet = json.loads(path.read_text())
        bench_path = out / "bench" / folder.parent.name / path.name
        if not bench_path.exists():
            print(line, "| no bench report at", bench_path); same = False; continue
        bench = json.loads(bench_path.read_text())
        diff = differences(fleet, bench)
        same &= not diff
        fm, bm = fleet["totals"].get("warm_ms_median"), bench["totals"].get("warm_ms_median")
        print(line, f"| warm median fleet {fm:.2f} ms vs bench {bm:.2f} ms | content", "SAME" if not diff else "DIFFERS")
        for d in diff[:10]:
            print("      ", d)
        metrics = (fleet.get("telemetry") or {}).get("metrics", {})
        busy = [v for v in metrics.get("gpu_busy_pct", []) if isinstance(v, (int, float)) and not math.isnan(v)]
        env = fleet.get("environment", {}).get("gpu") or {}
        follows = bool(e.uuid) and str(env.get("uuid", "")).lower() == e.uuid.lower()
        same &= follows or not e.uuid  # a CPU run (a check of the script elsewhere) has no GPU to follow
        matched = ((fleet.get("telemetry") or {}).get("static") or {}).get("matched_by")
        print(f"      telemetry: {len(busy)} GPU-busy samples, max {max(busy) if busy else float('nan'):.0f} %; "
              f"NVML handle by {matched}; NVML read "
              f"{env.get('name')} {env.get('uuid')}, the actor's CUDA device is {e.uuid}: "
              f"{'the same GPU' if follows else 'no GPU' if not e.uuid else 'NOT THE SAME GPU'}")
print("ALL SAME" if same else "SOME DIFFER (see above)")
EOF
} 2>&1 | grep -v '^USDT' | tee "$OUT/fleet_h200.log"
